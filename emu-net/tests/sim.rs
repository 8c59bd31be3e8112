//! The virtual-time front-end: the provider's engine on every host, the
//! switch model between them.

use emu_net::runner::{table, VariantResult};
use emu_net::scenario::Scenario;
use emu_net::sim::{sim_all, SimOptions};

const INCAST: &str = r#"
name = "virtual-incast"
timeout_s = 5

[fabric]
seed = 3
[fabric.topology]
kind = "single"
hosts = 5
link_gbps = 10.0
link_delay_ns = 2000
[fabric.switch]
buffer_bytes = 40000

[env]
FI_UET_MTU = "4096"

[[patterns]]
kind = "incast"
dst = 4
senders = 4
bytes = 1048576

[[flows]]
src = 4
dst = 0
bytes = 65536
after = [0]

[[variants]]
name = "nscc-trim"
env = { FI_UET_CC = "nscc" }
trimming = true

[[variants]]
name = "none-trim"
env = { FI_UET_CC = "none" }
trimming = true

[[variants]]
name = "nscc-drop"
env = { FI_UET_CC = "nscc" }
trimming = false
"#;

fn out_dir(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("emu-sim-{name}-{}", std::process::id()))
}

fn sim(text: &str, name: &str) -> (Vec<VariantResult>, Vec<(String, String)>) {
    let scenario = Scenario::from_toml(text).unwrap();
    let out = out_dir(name);
    let r = sim_all(
        &scenario,
        &SimOptions {
            out: out.clone(),
            variant: None,
            first_host: 2,
            progress: None,
        },
    )
    .unwrap();
    let _ = std::fs::remove_dir_all(&out);
    r
}

fn variant<'a>(rs: &'a [VariantResult], name: &str) -> &'a VariantResult {
    rs.iter().find(|r| r.variant == name).unwrap()
}

#[test]
fn incast_completes_in_virtual_time_with_every_byte_checked() {
    let (rs, failed) = sim(INCAST, "incast");
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(rs.len(), 3);
    for r in &rs {
        assert_eq!(r.front_end, "virtual");
        assert_eq!(r.flows.len(), 5);
        for f in &r.flows {
            assert!(f.recv_done_ns > f.start_ns, "{} {f:?}", r.variant);
            // No flow beats its 10 Gb/s link (an unfair share can beat
            // the fair-share ideal, the line rate cannot be beaten).
            assert!(
                f.fct_ns as f64 >= f.bytes as f64 * 8.0 / 10.0,
                "{} {f:?}",
                r.variant
            );
        }
        // The reply waits for flow 0 to complete at its receiver.
        assert!(r.flows[4].start_ns >= r.flows[0].recv_done_ns);
        let port_trims: u64 = r.relay.ports.iter().map(|p| p.counters.trims).sum();
        assert_eq!(port_trims, r.summary.trims);
    }
    // A 4:1 burst into a 40 KB buffer overflows it: with trimming the
    // switch trims, without it drops, and the transport recovers either way.
    let trim = variant(&rs, "none-trim");
    assert!(trim.summary.trims > 0 && trim.summary.drops == 0);
    let drop = variant(&rs, "nscc-drop");
    assert_eq!(drop.summary.trims, 0);
    // NSCC holds the senders back: fewer trims than the fixed window.
    assert!(variant(&rs, "nscc-trim").summary.trims < trim.summary.trims);
    assert!(table(&rs).contains("virt"));
}

#[test]
fn same_seed_same_result() {
    let a = sim(INCAST, "det-a").0;
    let b = sim(INCAST, "det-b").0;
    for (x, y) in a.iter().zip(&b) {
        let times = |r: &VariantResult| -> Vec<(u64, u64, u64)> {
            r.flows
                .iter()
                .map(|f| (f.start_ns, f.send_done_ns, f.recv_done_ns))
                .collect()
        };
        assert_eq!(times(x), times(y), "{}", x.variant);
        assert_eq!(x.summary.marks, y.summary.marks);
        assert_eq!(x.summary.trims, y.summary.trims);
    }
}

#[test]
fn leaf_spine_with_a_failed_link_completes() {
    let text = r#"
name = "virtual-failure"
timeout_s = 5
[fabric]
seed = 5
[fabric.topology]
kind = "leaf-spine"
leaves = 2
spines = 2
hosts_per_leaf = 2
link_gbps = 10.0
link_delay_ns = 1000
[fabric.switch]
reroute_us = 200.0
[[fabric.events]]
at_us = 100.0
link = ["leaf0", "spine1"]
action = "down"
[env]
FI_UET_MTU = "4096"
[[patterns]]
kind = "permutation"
shift = 2
bytes = 524288
[[variants]]
name = "reps"
env = { FI_UET_LB = "reps" }
"#;
    let (rs, failed) = sim(text, "failure");
    assert!(failed.is_empty(), "{failed:?}");
    let r = &rs[0];
    assert_eq!(r.flows.len(), 4);
    // Packets were lost to the failed link before routing converged, and
    // every flow still completed.
    let down: u64 = r.relay.ports.iter().map(|p| p.counters.drops_down).sum();
    assert!(down > 0, "no packet met the failed link");
}

#[test]
fn bad_provider_settings_fail_the_variant_with_the_reason() {
    let text = INCAST.replace(
        "FI_UET_MTU = \"4096\"",
        "FI_UET_MTU = \"4096\"\nFI_UET_WINDOW = \"lots\"",
    );
    let (rs, failed) = sim(&text, "bad");
    assert!(rs.is_empty());
    assert_eq!(failed.len(), 3);
    assert!(failed[0].1.contains("FI_UET_WINDOW"), "{failed:?}");
}

#[test]
fn socket_fault_injection_is_refused_not_ignored() {
    for fault in ["DROP", "DUP", "REORDER", "TRIM", "ECN"] {
        let name = format!("FI_UET_FAULT_{fault}");
        let text = INCAST.replace(
            "FI_UET_MTU = \"4096\"",
            &format!("FI_UET_MTU = \"4096\"\n{name} = \"10\""),
        );
        let (rs, failed) = sim(&text, &format!("fault-{fault}"));
        assert!(rs.is_empty(), "{name}");
        assert!(failed[0].1.contains(&name), "{failed:?}");
    }
    // The seed and the delay alone inject nothing.
    let text = INCAST.replace(
        "FI_UET_MTU = \"4096\"",
        "FI_UET_MTU = \"4096\"\nFI_UET_FAULT_SEED = \"5\"",
    );
    assert!(sim(&text, "fault-seed").1.is_empty());
}

/// A fabric of 300 hosts: hosts past the 254th address of 127.0.0.x get
/// addresses of their own (127.0.1.x), so each flow reaches its host.
#[test]
fn hosts_past_the_last_octet_each_get_their_flows() {
    let text = r#"
name = "virtual-300"
timeout_s = 0.05
[fabric.topology]
kind = "single"
hosts = 300
link_gbps = 10.0
link_delay_ns = 1000
[env]
FI_UET_MTU = "4096"
[[flows]]
src = 0
dst = 253
bytes = 65536
[[flows]]
src = 1
dst = 299
bytes = 65536
[[flows]]
src = 299
dst = 254
bytes = 65536
"#;
    let (rs, failed) = sim(text, "h300");
    assert!(failed.is_empty(), "{failed:?}");
    let flows = &rs[0].flows;
    assert_eq!(flows.len(), 3);
    assert!(flows.iter().all(|f| f.recv_done_ns > f.start_ns));
}

/// Every shipped scenario, every variant, in virtual time: each completes,
/// each byte arrives intact (the receivers check), and the table holds a
/// line per variant.
#[test]
fn every_shipped_scenario_runs_in_virtual_time() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fabtests/scenarios");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    names.sort();
    assert!(names.len() >= 8, "{names:?}");
    for path in names {
        let text = std::fs::read_to_string(&path).unwrap();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let scenario = Scenario::from_toml(&text).unwrap();
        let (rs, failed) = sim(&text, &stem);
        assert!(failed.is_empty(), "{stem}: {failed:?}");
        assert_eq!(rs.len(), scenario.runs().len(), "{stem}");
        let t = table(&rs);
        for r in &rs {
            assert!(t.contains(&r.variant), "{stem}");
            assert!(
                r.flows.iter().all(|f| f.recv_done_ns > f.start_ns),
                "{stem}"
            );
        }
    }
}

/// An incast of `senders` flows of `bytes` each over 1 Gb/s links with
/// 1 ms delays and 8 KiB packets (a scaled fabtests/scenarios incast),
/// one NSCC variant with trimming on or off.
fn deep_incast(name: &str, senders: u32, bytes: u64, variant: &str, trimming: bool) -> String {
    format!(
        r#"
name = "{name}"
timeout_s = 5

[fabric]
seed = 1
[fabric.topology]
kind = "single"
hosts = {hosts}
link_gbps = 1.0
link_delay_ns = 1000000

[env]
FI_UET_MTU = "8192"

[[patterns]]
kind = "incast"
dst = {senders}
senders = {senders}
bytes = {bytes}

[[variants]]
name = "{variant}"
env = {{ FI_UET_CC = "nscc" }}
trimming = {trimming}
"#,
        hosts = senders + 1
    )
}

/// An 8:1 incast of 128-packet flows whose first windows (1.5 BDP each)
/// overflow a one-BDP switch buffer many times over, as in
/// fabtests/scenarios/incast8.toml.
fn deep_trim_incast() -> String {
    deep_incast("virtual-deep-incast", 8, 1048576, "nscc-trim", true)
}

#[test]
fn nscc_incast_resends_only_what_was_trimmed_and_rarely_twice() {
    let (rs, failed) = sim(&deep_trim_incast(), "deep-incast");
    assert!(failed.is_empty(), "{failed:?}");
    let r = variant(&rs, "nscc-trim");
    let s = &r.summary;
    assert_eq!(s.drops, 0);
    // Every resend answers a NACK: no timer expired on a packet that had
    // arrived but lay beyond the SACK bitmap behind a hole at the
    // cumulative PSN, and none went out while its NACK was the only news.
    assert_eq!(s.retransmits, s.trims, "{:?}", r.notes);
    // The first windows alone overflow the buffer by about 8 * 1.5 - 2 =
    // 10 BDP (some 630 of the 1024 packets); after that each NACK takes
    // its packet off the sender's window, so its resend waits for room
    // instead of going straight back into the full queue. Resends sent
    // regardless of the window were trimmed over 3 times per packet.
    let packets = 8 * 1048576u64.div_ceil(8192 - 56);
    assert!(
        s.trims < 2 * packets,
        "{} trims for {packets} packets",
        s.trims
    );
    assert!(s.tail_inflation < 1.1, "tail {}", s.tail_inflation);
}

/// A 15:1 incast without trimming into a five-BDP buffer (the default
/// without trimming), as in fabtests/scenarios/incast15.toml: queueing
/// delays of several base RTTs, so senders fall silent long enough to
/// probe while their data is still queued.
fn deep_drop_incast() -> String {
    deep_incast("virtual-deep-drop-incast", 15, 2097152, "nscc-drop", false)
}

#[test]
fn nscc_incast_without_trimming_resends_only_what_was_dropped() {
    let (rs, failed) = sim(&deep_drop_incast(), "deep-drop-incast");
    assert!(failed.is_empty(), "{failed:?}");
    let r = variant(&rs, "nscc-drop");
    let s = &r.summary;
    assert!(s.drops > 0);
    // A probe's prompt answer (control packets overtake queued data) no
    // longer declares packets still waiting in the queue lost: every
    // resend replaces a dropped packet instead of taking the bottleneck's
    // time twice.
    assert!(s.retransmits <= s.drops + s.drops / 20, "{s:?}");
    assert!(s.tail_inflation < 1.1, "tail {}", s.tail_inflation);
}
