//! The runner end to end through the relay, with `emu-fake-host` standing
//! in for the provider's `uet_matrix` hosts.

use std::path::PathBuf;

use emu_net::runner::{run, run_all, table, RunOptions};
use emu_net::scenario::Scenario;

const SCENARIO: &str = r#"
name = "fake-incast"
timeout_s = 30

[fabric]
seed = 3
[fabric.topology]
kind = "single"
hosts = 4
link_gbps = 1.0
link_delay_ns = 10000
[fabric.switch]
buffer_bytes = 20000

[[patterns]]
kind = "incast"
dst = 3
senders = 3
bytes = 200000

[[flows]]
src = 3
dst = 0
bytes = 50000
after = [0]

[[variants]]
name = "trim"
trimming = true
"#;

#[test]
fn incast_scenario_runs_through_the_relay() {
    let scenario = Scenario::from_toml(SCENARIO).unwrap();
    let out = std::env::temp_dir().join(format!("emu-runner-test-{}", std::process::id()));
    let opts = RunOptions {
        out: out.clone(),
        variant: None,
        matrix: PathBuf::from(env!("CARGO_BIN_EXE_emu-fake-host")),
        provider_path: None,
        first_host: 70,
        max_lag_us: 100,
        realtime: false,
        slowdown: 1.0,
    };
    let results = run(&scenario, &opts).unwrap();
    assert_eq!(results.len(), 1);
    let r = &results[0];
    assert!(r.summary.crossed_relay);
    assert_eq!(r.flows.len(), 4);
    for f in &r.flows {
        assert!(f.recv_done_ns > f.start_ns, "{f:?}");
        assert!(f.ideal_fct_ns > 0.0);
    }
    // The reply waits for flow 0 to reach host 3.
    assert!(r.flows[3].start_ns >= r.flows[0].recv_done_ns);
    // Every trim the summary reports shows in the port counters. (Whether
    // the 3:1 burst trims at all depends on how the hosts' packets interleave
    // in real time; the switch model's unit tests cover trimming itself.)
    let port_trims: u64 = r.relay.ports.iter().map(|p| p.counters.trims).sum();
    assert_eq!(port_trims, r.summary.trims);
    assert!(out.join("trim/results.json").exists());
    assert!(out.join("trim/flows.csv").exists());
    assert!(table(&results).contains("trim"));
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn out_of_range_timeouts_are_errors_not_panics() {
    for timeout in ["1e20", "inf", "nan"] {
        let text = SCENARIO.replace("timeout_s = 30", &format!("timeout_s = {timeout}"));
        let scenario = Scenario::from_toml(&text).unwrap();
        let opts = RunOptions {
            out: std::env::temp_dir().join(format!("emu-runner-timeout-{}", std::process::id())),
            variant: None,
            matrix: PathBuf::from("/nonexistent/uet_matrix"),
            provider_path: None,
            first_host: 71,
            max_lag_us: 100,
            realtime: false,
            slowdown: 1.0,
        };
        let e = run_all(&scenario, &opts).err().unwrap();
        assert!(e.contains("timeout_s"), "{timeout}: {e}");
    }
}
