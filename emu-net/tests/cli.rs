//! `uet-emu` on the command line: bad values are errors, not panics.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Exit code and standard error of `uet-emu args`; None as the code when
/// it was still running after a minute (a relay that took a bad value for
/// "run until killed") and had to be killed.
fn uet_emu(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_uet-emu"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    (code, err)
}

#[test]
fn relay_refuses_a_duration_it_cannot_sleep() {
    let config = std::env::temp_dir().join(format!("emu-cli-fabric-{}.toml", std::process::id()));
    std::fs::write(&config, "[topology]\nhosts = 2\n").unwrap();
    let config = config.to_string_lossy().into_owned();
    for d in ["inf", "1e20", "NaN", "-1", "soon"] {
        let (code, err) = uet_emu(&[
            "relay",
            "--config",
            &config,
            "--listen",
            "127.0.0.1:0",
            "--duration",
            d,
        ]);
        assert_eq!(code, Some(1), "{d}: {err}");
        assert!(err.contains("--duration"), "{d}: {err}");
    }
    let (code, err) = uet_emu(&[
        "relay",
        "--config",
        &config,
        "--listen",
        "127.0.0.1:0",
        "--first-host",
        "300",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--first-host"), "{err}");
    let _ = std::fs::remove_file(&config);
}
