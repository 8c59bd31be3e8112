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

/// `sim --slowdown K` stretches the scenario as `run` does (rates / K,
/// delays x K), so virtual time can be compared with a stretched relay
/// run; a bad factor or first host is an error, for both, before anything
/// is written.
#[test]
fn sim_stretches_a_scenario_like_run() {
    let scenario = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fabtests/scenarios/smoke.toml"
    );
    // The ideal completion time of flow 0 (a flow that waits for none).
    let ideal_fct = |k: &str| -> f64 {
        let dir = std::env::temp_dir().join(format!("emu-cli-sim-{}-{k}", std::process::id()));
        let out = dir.to_string_lossy().into_owned();
        let (code, err) = uet_emu(&["sim", scenario, "--out", &out, "--quiet", "--slowdown", k]);
        assert_eq!(code, Some(0), "{k}: {err}");
        let text = std::fs::read_to_string(dir.join("default/results.json")).unwrap();
        let r: serde_json::Value = serde_json::from_str(&text).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        r["flows"][0]["ideal_fct_ns"].as_f64().unwrap()
    };
    let ratio = ideal_fct("4") / ideal_fct("1");
    assert!((ratio - 4.0).abs() < 0.01, "{ratio}");
    // Refused before anything is written.
    let unused = std::env::temp_dir().join(format!("emu-cli-sim-{}-bad", std::process::id()));
    let out = unused.to_string_lossy();
    for (command, option, bad) in [
        ("sim", "--slowdown", "0.5"),
        ("sim", "--slowdown", "inf"),
        ("sim", "--slowdown", "fast"),
        ("sim", "--first-host", "300"),
        ("run", "--slowdown", "0.5"),
        ("run", "--first-host", "300"),
    ] {
        let (code, err) = uet_emu(&[command, scenario, "--out", &out, option, bad]);
        assert_eq!(code, Some(1), "{command} {option} {bad}: {err}");
        assert!(err.contains(option), "{command} {option} {bad}: {err}");
        assert!(!unused.exists(), "{command} {option} {bad}");
    }
}

/// A reader that stops reading (`uet-emu sim ... 2>&1 | head -1`) costs
/// the rest of the printed table and progress, not the run: it still
/// succeeds and writes its results.
#[test]
fn a_closed_output_pipe_still_leaves_the_results() {
    let scenario = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fabtests/scenarios/smoke.toml"
    );
    let dir = std::env::temp_dir().join(format!("emu-cli-pipe-{}", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_uet-emu"))
        .args(["sim", scenario, "--out", &dir.to_string_lossy()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    drop(child.stderr.take());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(dir.join("table.txt").exists());
    assert!(dir.join("default/results.json").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
