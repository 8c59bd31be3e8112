//! The connection-matrix runner: one scenario end to end through the relay.
//!
//! For each variant: start the relay in-process, one `uet_matrix` process
//! per host (bound to its own loopback address, `FI_UET_FABRIC` pointing at
//! the relay), coordinate their start through files, collect per-flow start
//! and completion times, compute the ideal from the topology, and write
//! `results.json` (raw times, relay report), `flows.csv` and a summary.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::ideal::{ideal, payload_efficiency};
use crate::model::Fabric;
use crate::relay::{Relay, RelayReport, RelaySettings};
use crate::scenario::{FlowSpec, Pattern, Scenario, Variant};

#[derive(Clone, Debug)]
pub struct RunOptions {
    pub out: PathBuf,
    /// Only this variant (all when None).
    pub variant: Option<String>,
    /// The uet_matrix program.
    pub matrix: PathBuf,
    /// FI_PROVIDER_PATH for the hosts (None: inherit).
    pub provider_path: Option<PathBuf>,
    /// Host i binds 127.0.0.(first_host + i), carrying on into
    /// 127.0.1.0 and up ([`RelaySettings::loopback_hosts`]).
    pub first_host: u8,
    /// Scheduling-lag limit of the relay's verdict.
    pub max_lag_us: u64,
    /// Run the relay thread at SCHED_FIFO priority (see RelaySettings).
    pub realtime: bool,
    /// Slow the whole scenario down this many times (1 = as written): see
    /// [`slowed`].
    pub slowdown: f64,
}

/// `scenario` with time stretched `k` times: link rates divided by `k`,
/// link delays, start times, link-event times, the reroute delay, the
/// sampling period and the timeout multiplied by `k`. Every BDP, buffer
/// and window in bytes stays the same, so the congestion dynamics are
/// those of the written scenario at 1/k of the packet rate: for a machine
/// too busy to run the hosts at the written rate.
pub fn slowed(scenario: &Scenario, k: f64) -> Scenario {
    let mut s = scenario.clone();
    if !(k.is_finite() && k > 0.0) || k == 1.0 {
        return s;
    }
    let t = &mut s.fabric.topology;
    t.link_gbps /= k;
    t.link_delay_ns = (t.link_delay_ns as f64 * k).round() as u64;
    for e in &mut s.fabric.events {
        e.at_us *= k;
    }
    let sw = &mut s.fabric.switch;
    sw.reroute_us = sw.reroute_us.map(|us| us * k);
    sw.sample_ns = (sw.sample_ns as f64 * k).round().max(1.0) as u64;
    s.timeout_s *= k;
    for f in &mut s.flows {
        f.start_us *= k;
    }
    for p in &mut s.patterns {
        match p {
            Pattern::Incast {
                start_us,
                start_spread_us,
                ..
            }
            | Pattern::Permutation {
                start_us,
                start_spread_us,
                ..
            } => {
                *start_us *= k;
                *start_spread_us *= k;
            }
            Pattern::AllToAll { start_us, .. } => *start_us *= k,
        }
    }
    s
}

#[derive(Clone, Debug, Serialize)]
pub struct FlowResult {
    pub id: usize,
    pub src: usize,
    pub dst: usize,
    pub bytes: u64,
    /// ns after the common start (`go`): the sender posted the message,
    /// the sender saw its completion, the receiver saw the whole message.
    pub start_ns: u64,
    pub send_done_ns: u64,
    pub recv_done_ns: u64,
    pub fct_ns: u64,
    pub ideal_fct_ns: f64,
    pub inflation: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub flows: usize,
    pub fct_p50_ns: u64,
    pub fct_p99_ns: u64,
    pub fct_max_ns: u64,
    pub ideal_max_ns: f64,
    /// Slowest flow over the slowest ideal.
    pub tail_inflation: f64,
    pub mean_inflation: f64,
    /// Slowest over fastest FCT.
    pub spread: f64,
    /// Jain's index of per-flow throughput (bytes / FCT).
    pub jain: f64,
    /// Last completion after the common start, measured and ideal.
    pub makespan_ns: u64,
    pub ideal_makespan_ns: f64,
    pub marks: u64,
    pub trims: u64,
    pub drops: u64,
    pub retransmits: u64,
    pub kept_up: bool,
    pub crossed_relay: bool,
    /// Latest a flow without dependencies was posted after its start time
    /// (host scheduling).
    pub start_lag_ns: u64,
    /// 1-minute load average when the run ended (the machine is shared).
    pub load_average: f64,
    /// Largest per-host mean run-queue wait per wake-up, ns.
    pub host_wait_ns: u64,
    /// Largest share of the run a host spent runnable but not running.
    pub host_wait_share: f64,
    /// `host_wait_ns` over the fabric's base RTT.
    pub host_delay_rtt: f64,
    /// Every host's run-queue wait was within the limit.
    pub hosts_kept_up: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct VariantResult {
    pub scenario: String,
    pub variant: String,
    /// `relay` (real provider processes through the UDP relay) or
    /// `virtual` (the provider's engine in the model's virtual time).
    pub front_end: String,
    pub env: BTreeMap<String, String>,
    pub trimming: bool,
    pub mtu: usize,
    pub payload_efficiency: f64,
    pub go_realtime_ns: u64,
    /// Host i is 127.0.0.(first_host + i), carrying on into 127.0.1.0 and
    /// up ([`RelaySettings::loopback_hosts`]).
    pub first_host: u8,
    pub summary: Summary,
    pub flows: Vec<FlowResult>,
    pub relay: RelayReport,
    /// Scheduling of each host process during the run.
    pub hosts_sched: Vec<HostSched>,
    /// What the run could not measure, said plainly.
    pub notes: Vec<String>,
}

/// What the hosts' NSCC must know of the emulated fabric, unless the
/// scenario sets it: the host link rate and the base RTT (left to
/// measurement, the provider would take its first sample, inflated by host
/// scheduling, as the base RTT, and 100 Gb/s as the rate, so its window
/// would never bind) and whether switches trim.
///
/// The smallest retransmission timeout covers the slowest RTT the fabric
/// can produce without losing anything, twice: base RTT plus a full switch
/// buffer plus the sender's whole window waiting in its own NIC queue
/// (the window is 1.5 BDP, at least 16 packets, under NSCC; FI_UET_WINDOW
/// packets under `none`). Below that, the first window of an incast times
/// out while still queued, is resent whole, and the duplicates queue in
/// turn: a retransmission storm that measures the timer, not the fabric.
///
/// `rto_floor_us` bounds that timeout from below: real host processes
/// (relay runs) are scheduled late now and then, virtual-time hosts never.
pub fn host_defaults(
    fabric: &Fabric,
    env: &BTreeMap<String, String>,
    rto_floor_us: u64,
) -> Vec<(String, String)> {
    let cfg = &fabric.config;
    let mbps = (cfg.topology.link_gbps * 1000.0).round().max(1.0) as u64;
    let base_rtt_ns = fabric.max_base_rtt_ns();
    let base_rtt_us = base_rtt_ns.div_ceil(1000).max(1);
    let packet = (cfg.switch.mtu + crate::config::FRAME_OVERHEAD) as u64;
    let fixed_window = env.get("FI_UET_CC").is_some_and(|c| c == "none");
    let window_bytes = if fixed_window {
        let packets = env
            .get("FI_UET_WINDOW")
            .and_then(|w| w.parse::<u64>().ok())
            .unwrap_or(256);
        packets * packet
    } else {
        (fabric.bdp_bytes() * 3 / 2).max(16 * packet)
    };
    let queued_bytes = fabric.data_buffer_bytes() + window_bytes;
    let queued_ns = (queued_bytes as f64 * 8.0 / cfg.topology.link_gbps.max(1e-3)) as u64;
    let rto_min_us = (2 * (base_rtt_ns + queued_ns))
        .div_ceil(1000)
        .max(rto_floor_us);
    let mut env = vec![
        ("FI_UET_BASE_RTT_US".to_string(), base_rtt_us.to_string()),
        ("FI_UET_RTO_MIN_US".to_string(), rto_min_us.to_string()),
        // The no-CC baseline keeps a full fixed window per sender: in a
        // 15:1 incast one packet can be trimmed dozens of times in a row,
        // and past FI_UET_MAX_RETRIES sends the provider declares the peer
        // unreachable and the run fails instead of measuring the baseline.
        (
            "FI_UET_MAX_RETRIES".to_string(),
            if fixed_window { "1000" } else { "30" }.to_string(),
        ),
        (
            "FI_UET_NSCC_TRIMMING".to_string(),
            if cfg.switch.trimming { "1" } else { "0" }.to_string(),
        ),
        // Relay hosts outnumber the cores: one that polls while it waits
        // takes the CPU from hosts with packets to handle. (Virtual-time
        // hosts have no blocking waits; their engines ignore it.)
        ("FI_UET_WAIT_SPIN_US".to_string(), "0".to_string()),
    ];
    if mbps.is_multiple_of(1000) {
        env.push(("FI_UET_LINK_GBPS".to_string(), (mbps / 1000).to_string()));
    } else {
        env.push(("FI_UET_LINK_MBPS".to_string(), mbps.to_string()));
    }
    env
}

/// Smallest retransmission timeout given to relay hosts, us: a host process
/// descheduled for a millisecond must not look like a lost packet.
const RELAY_RTO_FLOOR_US: u64 = 1000;

/// Hosts kept up when none waited for a CPU, on average per wake-up, more
/// than this share of the fabric's base RTT. Each wait delays the host's
/// ACKs and sends by that much, which its peers measure as RTT the fabric
/// did not add; 2% of the base RTT is under 3% of NSCC's target queueing
/// delay (0.75 base RTT), small against what NSCC reacts to. (The share of
/// the run spent waiting is reported too, but it counts every wake-up of a
/// host that wakes often, whatever each wait costs against the RTT.)
const HOST_DELAY_LIMIT: f64 = 0.02;

fn load_average() -> f64 {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(0.0)
}

fn realtime_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_nanos() as u64
}

fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn kill_all(children: &mut [Child]) {
    for c in children.iter_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Run every (or the chosen) variant of `scenario`.
pub fn run(scenario: &Scenario, opts: &RunOptions) -> Result<Vec<VariantResult>, String> {
    let (out, failed) = run_all(scenario, opts)?;
    if let Some((name, why)) = failed.first() {
        return Err(format!("{name}: {why}"));
    }
    Ok(out)
}

/// Every (or the chosen) variant of `scenario`; a variant that fails (a
/// host died or timed out) is listed with its reason and the others still
/// run. Err only when the scenario itself is unusable or no variant matched.
#[allow(clippy::type_complexity)]
pub fn run_all(
    scenario: &Scenario,
    opts: &RunOptions,
) -> Result<(Vec<VariantResult>, Vec<(String, String)>), String> {
    let scenario = &slowed(scenario, opts.slowdown);
    each_variant(scenario, opts.variant.as_deref(), "", |v, flows| {
        run_variant(scenario, v, flows, opts)
    })
}

/// Run `one` for every variant of `scenario` (or only the one named
/// `only`), announcing each with `label`: the results, and the variants
/// that failed with their reasons. Err when the flows do not expand or no
/// variant matched.
#[allow(clippy::type_complexity)]
pub(crate) fn each_variant(
    scenario: &Scenario,
    only: Option<&str>,
    label: &str,
    mut one: impl FnMut(&Variant, &[FlowSpec]) -> Result<VariantResult, String>,
) -> Result<(Vec<VariantResult>, Vec<(String, String)>), String> {
    let flows = scenario.expand().map_err(|e| e.to_string())?;
    scenario.timeout().map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut failed = Vec::new();
    for v in scenario.runs() {
        if only.is_some_and(|n| n != v.name) {
            continue;
        }
        note!("== {} / {}{label}", scenario.name, v.name);
        match one(&v, &flows) {
            Ok(r) => out.push(r),
            Err(e) => {
                note!("uet-emu: {} / {} FAILED: {e}", scenario.name, v.name);
                failed.push((v.name.clone(), e));
            }
        }
    }
    if out.is_empty() && failed.is_empty() {
        return Err("no variant matched".into());
    }
    Ok((out, failed))
}

/// The hosts' packet size (UET bytes): `FI_UET_MTU` when it names one,
/// else ("auto": unset or 0) the fabric's `switch.mtu`, the size a UET
/// fabric carries. Checked against the provider's own limits, so a value
/// the hosts would refuse fails here with the provider's reason.
pub fn host_mtu(env: &BTreeMap<String, String>, switch_mtu: usize) -> Result<usize, String> {
    match explicit_mtu(env)? {
        0 => {
            let mut c = uet::Config::default();
            c.set_text("mtu", &switch_mtu.to_string())
                .map_err(|e| format!("[fabric.switch] mtu = {switch_mtu} as the hosts' {e}"))?;
            Ok(c.mtu)
        }
        mtu => Ok(mtu),
    }
}

/// `FI_UET_MTU` as the provider reads it; 0 when unset or "auto" (0).
fn explicit_mtu(env: &BTreeMap<String, String>) -> Result<usize, String> {
    let mut c = uet::Config::default();
    if let Some(m) = env.get("FI_UET_MTU") {
        c.set_text("mtu", m).map_err(|e| e.to_string())?;
    }
    Ok(c.mtu)
}

/// What one variant runs on, for either front-end: the fabric with the
/// variant's trimming and the hosts' packet size, and the hosts'
/// environment (scenario, variant, then [`host_defaults`]).
pub(crate) struct VariantSetup {
    pub fabric: Fabric,
    pub env: BTreeMap<String, String>,
    pub mtu: usize,
    pub trimming: bool,
}

impl VariantSetup {
    /// `rto_floor_us`: see [`host_defaults`].
    pub fn new(
        scenario: &Scenario,
        v: &Variant,
        rto_floor_us: u64,
    ) -> Result<VariantSetup, String> {
        let mut fabric_cfg = scenario.fabric.clone();
        if let Some(t) = v.trimming {
            fabric_cfg.switch.trimming = t;
        }
        let mut env = scenario.env.clone();
        env.extend(v.env.clone());
        let mtu = host_mtu(&env, fabric_cfg.switch.mtu)?;
        // Hosts are told the size the fabric was built for: left to its own
        // "auto" (unset or 0), the provider picks 65000 bytes on loopback,
        // and every such packet would be trimmed in a 4 KiB fabric.
        if explicit_mtu(&env)? == 0 {
            env.insert("FI_UET_MTU".into(), mtu.to_string());
        }
        fabric_cfg.switch.mtu = mtu;
        let trimming = fabric_cfg.switch.trimming;
        let fabric = Fabric::new(fabric_cfg).map_err(|e| e.to_string())?;
        for (k, v) in host_defaults(&fabric, &env.clone(), rto_floor_us) {
            env.entry(k).or_insert(v);
        }
        Ok(VariantSetup {
            fabric,
            env,
            mtu,
            trimming,
        })
    }
}

fn run_variant(
    scenario: &Scenario,
    v: &Variant,
    flows: &[FlowSpec],
    opts: &RunOptions,
) -> Result<VariantResult, String> {
    let VariantSetup {
        fabric,
        env,
        mtu,
        trimming,
    } = VariantSetup::new(scenario, v, RELAY_RTO_FLOOR_US)?;
    let n = fabric.hosts.len();
    let hosts = RelaySettings::loopback_hosts(n, opts.first_host).map_err(|e| e.to_string())?;
    let mut relay = Relay::bind(
        fabric,
        RelaySettings {
            listen: "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?,
            hosts: hosts.clone(),
            max_lag_ns: opts.max_lag_us.saturating_mul(1000),
            sockbuf: 16 << 20,
            realtime: opts.realtime,
        },
    )
    .map_err(|e| e.to_string())?;
    let relay_addr = relay.local_addr().map_err(|e| e.to_string())?;
    // Link events count from the hosts' common start, not the relay's.
    relay.fabric_mut().hold_link_events();
    let origin = AtomicU64::new(0);

    let dir = opts.out.join(&v.name);
    let work = dir.join("work");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let mut text = String::new();
    for (i, f) in flows.iter().enumerate() {
        let _ = write!(
            text,
            "{i} {} {} {} {} {}",
            f.src,
            f.dst,
            f.bytes,
            (f.start_us * 1000.0) as u64,
            f.after.len()
        );
        for a in &f.after {
            let _ = write!(text, " {a}");
        }
        text.push('\n');
    }
    let flows_file = work.join("flows.txt");
    fs::write(&flows_file, text).map_err(|e| e.to_string())?;

    let stop = AtomicBool::new(false);
    let timeout = scenario
        .timeout()
        .map_err(|e| e.to_string())?
        .max(Duration::from_secs(1));
    let outcome: Result<(u64, Vec<HostSched>), String> = std::thread::scope(|s| {
        let relay_thread = s.spawn(|| relay.run_from(&stop, &origin));
        let result = drive_hosts(
            n,
            &hosts,
            relay_addr,
            &env,
            &flows_file,
            &work,
            opts,
            timeout,
            &origin,
        );
        stop.store(true, Ordering::Relaxed);
        let _ = relay_thread.join();
        result
    });
    let (go, hosts_sched) = outcome?;
    let report = relay.report();

    // Collect the hosts' results.
    let mut start = vec![None; flows.len()];
    let mut send_done = vec![None; flows.len()];
    let mut recv_done = vec![None; flows.len()];
    for h in 0..n {
        let path = work.join(format!("result.{h}"));
        let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        for line in text.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            let num = |i: usize| w.get(i).and_then(|x| x.parse::<u64>().ok());
            match w.first().copied() {
                Some("send") => {
                    if let (Some(id), Some(a), Some(b)) = (num(1), num(2), num(3)) {
                        if let Some(slot) = start.get_mut(id as usize) {
                            *slot = Some(a.saturating_sub(go));
                            send_done[id as usize] = Some(b.saturating_sub(go));
                        }
                    }
                }
                Some("recv") => {
                    if let (Some(id), Some(b)) = (num(1), num(2)) {
                        if let Some(slot) = recv_done.get_mut(id as usize) {
                            *slot = Some(b.saturating_sub(go));
                        }
                    }
                }
                _ => {}
            }
        }
    }
    let (results, ideal_flows, start_lag_ns) = flow_results(
        flows,
        relay.fabric(),
        mtu,
        &FlowTimes {
            start,
            send_done,
            recv_done,
        },
    )?;
    let mut summary = summarise(&results, &ideal_flows, &report);
    summary.start_lag_ns = start_lag_ns;
    summary.load_average = load_average();
    summary.host_wait_ns = hosts_sched
        .iter()
        .map(|h| h.mean_wait_ns)
        .max()
        .unwrap_or(0);
    summary.host_wait_share = hosts_sched
        .iter()
        .map(|h| h.wait_ns as f64 / h.elapsed_ns.max(1) as f64)
        .fold(0.0, f64::max);
    summary.host_delay_rtt = summary.host_wait_ns as f64 / report.base_rtt_ns.max(1) as f64;
    summary.hosts_kept_up = summary.host_delay_rtt <= HOST_DELAY_LIMIT;
    let mut notes = Vec::new();
    if !summary.crossed_relay {
        notes.push(
            "no datagram crossed the relay: the provider does not use FI_UET_FABRIC \
             (build with relay support); the times are of direct loopback traffic"
                .into(),
        );
    }
    if !report.kept_up {
        notes.push(format!(
            "THE RELAY DID NOT KEEP UP; the numbers are not valid: {}",
            report.problems.join("; ")
        ));
    }
    if !summary.hosts_kept_up {
        notes.push(format!(
            "THE HOSTS DID NOT KEEP UP; the numbers are not valid: a host process waited \
             {:.0} us for a CPU per wake-up on average, {:.1}% of the {:.0} us base RTT \
             (limit {:.0}%; it spent {:.0}% of the run waiting; load average {:.1}): its \
             ACKs and sends left late (slow the scenario down: --slowdown, EMU_SLOWDOWN)",
            summary.host_wait_ns as f64 / 1e3,
            summary.host_delay_rtt * 100.0,
            report.base_rtt_ns as f64 / 1e3,
            HOST_DELAY_LIMIT * 100.0,
            summary.host_wait_share * 100.0,
            summary.load_average
        ));
    }
    if start_lag_ns > 5 * report.base_rtt_ns.max(1_000_000) {
        notes.push(format!(
            "a host posted its flow {:.1} ms after its start time: the machine was busy \
             (load average {:.1}); the ideal counts from the actual starts",
            start_lag_ns as f64 / 1e6,
            summary.load_average
        ));
    }
    let result = VariantResult {
        scenario: scenario.name.clone(),
        variant: v.name.clone(),
        front_end: "relay".into(),
        env,
        trimming,
        mtu,
        payload_efficiency: payload_efficiency(mtu),
        go_realtime_ns: go,
        first_host: opts.first_host,
        summary,
        flows: results,
        relay: report,
        hosts_sched,
        notes,
    };
    write_outputs(&dir, &result)?;
    Ok(result)
}

/// When each flow started and completed, ns after the common start, as
/// the hosts recorded them (`None`: no record).
pub(crate) struct FlowTimes {
    pub start: Vec<Option<u64>>,
    pub send_done: Vec<Option<u64>>,
    pub recv_done: Vec<Option<u64>>,
}

/// Per-flow results against the ideal of the flows as they really started,
/// and the latest a flow without dependencies was posted after its start
/// time. Err when a flow has no complete record.
pub(crate) fn flow_results(
    flows: &[FlowSpec],
    fabric: &Fabric,
    mtu: usize,
    times: &FlowTimes,
) -> Result<(Vec<FlowResult>, Vec<crate::ideal::IdealFlow>, u64), String> {
    let (start, send_done, recv_done) = (&times.start, &times.send_done, &times.recv_done);
    let mut started = Vec::with_capacity(flows.len());
    for (i, s) in start.iter().enumerate() {
        started.push(s.ok_or_else(|| format!("flow {i} has no complete record"))?);
    }
    // The ideal of the flows as they really started: a host that posts
    // late (scheduling) or a dependency that completes late moves the
    // flow's start, and the FCT is measured from that start.
    let as_started: Vec<FlowSpec> = flows
        .iter()
        .zip(&started)
        .map(|(f, &a)| FlowSpec {
            start_us: a as f64 / 1000.0,
            after: Vec::new(),
            ..f.clone()
        })
        .collect();
    let ideal_flows = ideal(fabric, &as_started, mtu);
    let start_lag_ns = flows
        .iter()
        .zip(&started)
        .filter(|(f, _)| f.after.is_empty())
        .map(|(f, &a)| a.saturating_sub((f.start_us * 1000.0) as u64))
        .max()
        .unwrap_or(0);
    let mut results = Vec::new();
    for (i, f) in flows.iter().enumerate() {
        let (Some(a), Some(sd), Some(rd)) = (start[i], send_done[i], recv_done[i]) else {
            return Err(format!("flow {i} has no complete record"));
        };
        let fct = rd.saturating_sub(a);
        let id = ideal_flows[i].fct_ns;
        results.push(FlowResult {
            id: i,
            src: f.src,
            dst: f.dst,
            bytes: f.bytes,
            start_ns: a,
            send_done_ns: sd,
            recv_done_ns: rd,
            fct_ns: fct,
            ideal_fct_ns: id,
            inflation: fct as f64 / id,
        });
    }
    Ok((results, ideal_flows, start_lag_ns))
}

/// Niceness of the host processes. A host descheduled for milliseconds
/// (the machine is shared: builds compete for the cores) turns into RTT
/// samples and ACKs milliseconds late, i.e. congestion that the fabric did
/// not have. When the relay runs at SCHED_FIFO priority (root), hosts run
/// at a raised priority (-10): they sleep between packets, and the relay
/// still preempts them. Otherwise they run below normal (5) so the relay,
/// at normal priority then, keeps the clock.
fn host_niceness(opts: &RunOptions) -> i32 {
    use std::os::unix::fs::MetadataExt;
    let root = fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if opts.realtime && root {
        -10
    } else {
        5
    }
}

#[allow(clippy::too_many_arguments)]
fn drive_hosts(
    n: usize,
    hosts: &[std::net::IpAddr],
    relay_addr: std::net::SocketAddr,
    env: &BTreeMap<String, String>,
    flows_file: &Path,
    work: &Path,
    opts: &RunOptions,
    timeout: Duration,
    origin: &AtomicU64,
) -> Result<(u64, Vec<HostSched>), String> {
    let mut children = Vec::new();
    for (h, ip) in hosts.iter().enumerate().take(n) {
        let log =
            fs::File::create(work.join(format!("host.{h}.log"))).map_err(|e| e.to_string())?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new("nice");
        cmd.args(["-n", &host_niceness(opts).to_string()])
            .arg(&opts.matrix)
            .args(["--host", &h.to_string(), "--hosts", &n.to_string()])
            .arg("--flows")
            .arg(flows_file)
            .arg("--dir")
            .arg(work)
            .args(["--timeout", &timeout.as_secs().to_string()])
            .env("FI_PROVIDER", "uet")
            .env("FI_UET_SRC_ADDR", ip.to_string())
            .env("FI_UET_FABRIC", relay_addr.to_string())
            // Per-ACK congestion-control events, for the cwnd plot.
            .env("FI_UET_TRACE", work.join(format!("trace.{h}.csv")))
            .envs(env)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        if let Some(p) = &opts.provider_path {
            cmd.env("FI_PROVIDER_PATH", p);
        }
        match cmd.spawn() {
            Ok(c) => children.push(c),
            Err(e) => {
                kill_all(&mut children);
                return Err(format!("cannot start {}: {e}", opts.matrix.display()));
            }
        }
    }
    let t0 = Instant::now();
    let wait_files = |name: &str, children: &mut Vec<Child>| -> Result<(), String> {
        loop {
            if (0..n).all(|h| work.join(format!("{name}.{h}")).exists()) {
                return Ok(());
            }
            for (h, c) in children.iter_mut().enumerate() {
                if let Ok(Some(st)) = c.try_wait() {
                    if !work.join(format!("{name}.{h}")).exists() {
                        let log = fs::read_to_string(work.join(format!("host.{h}.log")))
                            .unwrap_or_default();
                        return Err(format!("host {h} exited ({st}) before {name}: {log}"));
                    }
                }
            }
            if t0.elapsed() > timeout {
                return Err(format!("timed out waiting for {name} files"));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    if let Err(e) = wait_files("ready", &mut children) {
        kill_all(&mut children);
        return Err(e);
    }
    let go = realtime_ns() + 50_000_000;
    origin.store(go, Ordering::Release);
    let written = fs::write(work.join("go.tmp"), format!("{go}\n"))
        .and_then(|_| fs::rename(work.join("go.tmp"), work.join("go")));
    if let Err(e) = written {
        kill_all(&mut children);
        return Err(e.to_string());
    }
    let sched_before: Vec<Option<SchedStat>> =
        children.iter().map(|c| SchedStat::of(c.id())).collect();
    let t_go = Instant::now();
    let done = wait_files("result", &mut children);
    let elapsed = t_go.elapsed().as_nanos() as u64;
    let hosts_sched: Vec<HostSched> = children
        .iter()
        .zip(&sched_before)
        .map(|(c, before)| match (before, SchedStat::of(c.id())) {
            (Some(a), Some(b)) => HostSched::between(a, &b, elapsed),
            _ => HostSched::default(),
        })
        .collect();
    let _ = fs::write(work.join("stop"), "1\n");
    let t1 = Instant::now();
    for c in children.iter_mut() {
        loop {
            match c.try_wait() {
                Ok(Some(_)) => break,
                _ if t1.elapsed() > Duration::from_secs(5) => {
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                _ => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
    done?;
    for h in 0..n {
        let text = fs::read_to_string(work.join(format!("result.{h}"))).unwrap_or_default();
        if !text.contains("status ok") {
            let log = fs::read_to_string(work.join(format!("host.{h}.log"))).unwrap_or_default();
            return Err(format!("host {h} failed: {log}"));
        }
    }
    Ok((go, hosts_sched))
}

/// A process's scheduler statistics (`/proc/PID/schedstat`): time on a
/// CPU, time runnable but waiting for one, and how many times it ran.
#[derive(Clone, Copy, Debug, Default)]
struct SchedStat {
    run_ns: u64,
    wait_ns: u64,
    slices: u64,
}

impl SchedStat {
    fn of(pid: u32) -> Option<SchedStat> {
        let text = fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
        let mut it = text.split_whitespace().map(|x| x.parse::<u64>().ok());
        Some(SchedStat {
            run_ns: it.next()??,
            wait_ns: it.next()??,
            slices: it.next()??,
        })
    }
}

/// How one host process was scheduled from the common start to its last
/// completion: a host waiting for a CPU answers late, which its peers see
/// as RTT the fabric did not add.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct HostSched {
    /// CPU time used, ns.
    pub run_ns: u64,
    /// Time runnable but not running (run-queue wait), ns.
    pub wait_ns: u64,
    /// Times it was scheduled in.
    pub slices: u64,
    /// Run-queue wait per time scheduled in, ns.
    pub mean_wait_ns: u64,
    /// Wall time of the measurement, ns.
    pub elapsed_ns: u64,
}

impl HostSched {
    fn between(a: &SchedStat, b: &SchedStat, elapsed_ns: u64) -> HostSched {
        let slices = b.slices.saturating_sub(a.slices);
        let wait_ns = b.wait_ns.saturating_sub(a.wait_ns);
        HostSched {
            run_ns: b.run_ns.saturating_sub(a.run_ns),
            wait_ns,
            slices,
            mean_wait_ns: wait_ns / slices.max(1),
            elapsed_ns,
        }
    }
}

pub(crate) fn summarise(
    flows: &[FlowResult],
    ideal: &[crate::ideal::IdealFlow],
    report: &RelayReport,
) -> Summary {
    let mut fct: Vec<u64> = flows.iter().map(|f| f.fct_ns).collect();
    fct.sort_unstable();
    let thr: Vec<f64> = flows
        .iter()
        .map(|f| f.bytes as f64 / f.fct_ns.max(1) as f64)
        .collect();
    let sum: f64 = thr.iter().sum();
    let sq: f64 = thr.iter().map(|x| x * x).sum();
    let ideal_max = ideal.iter().map(|i| i.fct_ns).fold(0.0, f64::max);
    let max = fct.last().copied().unwrap_or(0);
    let min = fct.first().copied().unwrap_or(0).max(1);
    Summary {
        flows: flows.len(),
        fct_p50_ns: quantile(&fct, 0.5),
        fct_p99_ns: quantile(&fct, 0.99),
        fct_max_ns: max,
        ideal_max_ns: ideal_max,
        tail_inflation: max as f64 / ideal_max,
        mean_inflation: flows.iter().map(|f| f.inflation).sum::<f64>() / flows.len() as f64,
        spread: max as f64 / min as f64,
        jain: if sq > 0.0 {
            sum * sum / (thr.len() as f64 * sq)
        } else {
            0.0
        },
        makespan_ns: flows.iter().map(|f| f.recv_done_ns).max().unwrap_or(0),
        ideal_makespan_ns: ideal
            .iter()
            .map(|i| i.finish_ns + (i.fct_ns - (i.finish_ns - i.start_ns)))
            .fold(0.0, f64::max),
        marks: report.fabric.marks,
        trims: report.fabric.trims,
        drops: report.fabric.drops,
        retransmits: report.fabric.retransmissions,
        kept_up: report.kept_up,
        crossed_relay: report.relay.received > 0,
        start_lag_ns: 0,
        load_average: 0.0,
        host_wait_ns: 0,
        host_wait_share: 0.0,
        host_delay_rtt: 0.0,
        hosts_kept_up: true,
    }
}

pub(crate) fn write_outputs(dir: &Path, r: &VariantResult) -> Result<(), String> {
    let json = serde_json::to_string_pretty(r).map_err(|e| e.to_string())?;
    fs::write(dir.join("results.json"), json).map_err(|e| e.to_string())?;
    let mut csv = String::from(
        "id,src,dst,bytes,start_ns,send_done_ns,recv_done_ns,fct_ns,ideal_fct_ns,inflation\n",
    );
    for f in &r.flows {
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{},{},{:.0},{:.4}",
            f.id,
            f.src,
            f.dst,
            f.bytes,
            f.start_ns,
            f.send_done_ns,
            f.recv_done_ns,
            f.fct_ns,
            f.ideal_fct_ns,
            f.inflation
        );
    }
    fs::write(dir.join("flows.csv"), csv).map_err(|e| e.to_string())?;
    let mut ports = String::from(
        "port,gbps,buffer_bytes,tx_packets,tx_bytes,marks,trims,drops_full,drops_down,drops_loss,max_queue_bytes\n",
    );
    for p in &r.relay.ports {
        let c = &p.counters;
        let _ = writeln!(
            ports,
            "{},{},{},{},{},{},{},{},{},{},{}",
            p.name,
            p.gbps,
            p.buffer_bytes,
            c.tx_packets,
            c.tx_bytes,
            c.marks,
            c.trims,
            c.drops_full,
            c.drops_down,
            c.drops_loss,
            c.max_queue_bytes
        );
    }
    fs::write(dir.join("ports.csv"), ports).map_err(|e| e.to_string())?;
    Ok(())
}

fn size_label(b: u64) -> String {
    if b >= 1 << 20 && b.trailing_zeros() >= 20 {
        format!("{}MiB", b >> 20)
    } else if b >= 1 << 10 && b.trailing_zeros() >= 10 {
        format!("{}KiB", b >> 10)
    } else {
        format!("{b}B")
    }
}

/// The comparison table of a scenario's variants.
pub fn table(results: &[VariantResult]) -> String {
    let mut s = String::new();
    let ms = |ns: f64| ns / 1e6;
    let _ = writeln!(
        s,
        "{:<22} {:>5} {:>9} {:>9} {:>9} {:>6} {:>6} {:>6} {:>5} {:>7} {:>7} {:>6} {:>6} {:>6} {:>5} {:>6} {:>6}",
        "variant",
        "flows",
        "fct_p50",
        "fct_max",
        "ideal",
        "tail",
        "mean",
        "spread",
        "jain",
        "marks",
        "trims",
        "drops",
        "retx",
        "valid",
        "late",
        "hlag",
        "load"
    );
    let _ = writeln!(
        s,
        "{:<22} {:>5} {:>9} {:>9} {:>9} {:>6} {:>6} {:>6} {:>5} {:>7} {:>7} {:>6} {:>6} {:>6} {:>5} {:>6} {:>6}",
        "", "", "ms", "ms", "ms", "x", "x", "x", "", "", "", "", "", "", "ms", "%rtt", ""
    );
    for r in results {
        let m = &r.summary;
        let valid = if r.front_end == "virtual" {
            "virt"
        } else if !m.crossed_relay {
            "NO-RLY"
        } else if !m.kept_up {
            "NO"
        } else if !m.hosts_kept_up {
            "NO-HST"
        } else {
            "yes"
        };
        let _ = writeln!(
            s,
            "{:<22} {:>5} {:>9.3} {:>9.3} {:>9.3} {:>6.2} {:>6.2} {:>6.2} {:>5.3} {:>7} {:>7} {:>6} {:>6} {:>6} {:>5.1} {:>6.1} {:>6.2}",
            r.variant,
            m.flows,
            ms(m.fct_p50_ns as f64),
            ms(m.fct_max_ns as f64),
            ms(m.ideal_max_ns),
            m.tail_inflation,
            m.mean_inflation,
            m.spread,
            m.jain,
            m.marks,
            m.trims,
            m.drops,
            m.retransmits,
            valid,
            ms(m.start_lag_ns as f64),
            m.host_delay_rtt * 100.0,
            m.load_average
        );
    }
    // Per flow size, when a scenario mixes sizes (targets are stated per
    // size: e.g. incasts of at least 1 MiB within 1.1x of ideal).
    for r in results {
        let mut sizes: Vec<u64> = r.flows.iter().map(|f| f.bytes).collect();
        sizes.sort_unstable();
        sizes.dedup();
        if sizes.len() < 2 {
            continue;
        }
        for b in sizes {
            let fl: Vec<&FlowResult> = r.flows.iter().filter(|f| f.bytes == b).collect();
            let fct_max = fl.iter().map(|f| f.fct_ns).max().unwrap_or(0);
            let ideal_max = fl.iter().map(|f| f.ideal_fct_ns).fold(0.0, f64::max);
            let mean = fl.iter().map(|f| f.inflation).sum::<f64>() / fl.len() as f64;
            let _ = writeln!(
                s,
                "  {:<20} {:>5} {:>9} {:>9.3} {:>9.3} {:>6.2} {:>6.2}",
                format!("{} {}", r.variant, size_label(b)),
                fl.len(),
                "",
                ms(fct_max as f64),
                ms(ideal_max),
                fct_max as f64 / ideal_max,
                mean
            );
        }
    }
    for r in results {
        for n in &r.notes {
            let _ = writeln!(s, "  [{}] {}", r.variant, n);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ideal::IdealFlow;

    fn flow(id: usize, bytes: u64, fct: u64, ideal: f64) -> FlowResult {
        FlowResult {
            id,
            src: id,
            dst: 9,
            bytes,
            start_ns: 0,
            send_done_ns: fct,
            recv_done_ns: fct,
            fct_ns: fct,
            ideal_fct_ns: ideal,
            inflation: fct as f64 / ideal,
        }
    }

    #[test]
    fn summary_statistics() {
        let flows = vec![flow(0, 1000, 100, 100.0), flow(1, 1000, 200, 100.0)];
        let ideal = vec![
            IdealFlow {
                start_ns: 0.0,
                finish_ns: 90.0,
                fct_ns: 100.0,
            };
            2
        ];
        let report_fabric = crate::model::FabricTotals {
            trims: 3,
            ..Default::default()
        };
        let fabric = Fabric::new(Default::default()).unwrap();
        let relay = Relay::bind(
            fabric,
            RelaySettings {
                listen: "127.0.0.1:0".parse().unwrap(),
                hosts: RelaySettings::loopback_hosts(2, 60).unwrap(),
                max_lag_ns: 1,
                sockbuf: 1 << 16,
                realtime: false,
            },
        )
        .unwrap();
        let mut report = relay.report();
        report.fabric = report_fabric;
        let s = summarise(&flows, &ideal, &report);
        assert_eq!(s.fct_max_ns, 200);
        assert_eq!(s.fct_p50_ns, 100);
        assert_eq!(s.tail_inflation, 2.0);
        assert_eq!(s.mean_inflation, 1.5);
        assert_eq!(s.spread, 2.0);
        // Throughputs 10 and 5 bytes/ns: (15^2) / (2 * 125) = 0.9.
        assert!((s.jain - 0.9).abs() < 1e-12);
        assert_eq!(s.ideal_makespan_ns, 100.0);
        assert_eq!(s.trims, 3);
        assert!(!s.crossed_relay);
    }

    /// The variant's fabric and hosts' environment for a scenario with
    /// `switch.mtu` = 9000 and `FI_UET_MTU` = `mtu` (None: unset).
    fn mtu_setup(mtu: Option<&str>) -> Result<VariantSetup, String> {
        let mut scenario = Scenario::default();
        scenario.fabric.switch.mtu = 9000;
        if let Some(m) = mtu {
            scenario.env.insert("FI_UET_MTU".into(), m.into());
        }
        VariantSetup::new(&scenario, &Variant::default(), RELAY_RTO_FLOOR_US)
    }

    #[test]
    fn hosts_send_the_packets_the_fabric_is_built_for() {
        // Unset or "0" (auto): the fabric's size, told to the hosts, whose
        // own auto would be 65000 bytes on loopback.
        for auto in [None, Some("0")] {
            let s = mtu_setup(auto).unwrap();
            assert_eq!(
                (s.mtu, s.fabric.config.switch.mtu),
                (9000, 9000),
                "{auto:?}"
            );
            assert_eq!(s.env["FI_UET_MTU"], "9000", "{auto:?}");
        }
        // A size of its own: the fabric follows it, the value stays.
        let s = mtu_setup(Some("8192")).unwrap();
        assert_eq!((s.mtu, s.fabric.config.switch.mtu), (8192, 8192));
        assert_eq!(s.env["FI_UET_MTU"], "8192");
        // One the provider refuses fails here, naming it.
        for bad in ["100", "70000", "big"] {
            let e = mtu_setup(Some(bad)).err().unwrap();
            assert!(e.contains("FI_UET_MTU"), "{bad}: {e}");
        }
    }

    #[test]
    fn slowing_down_stretches_time_and_keeps_bytes() {
        let text = r#"
name = "s"
timeout_s = 10
[fabric.topology]
kind = "leaf-spine"
leaves = 2
spines = 2
hosts_per_leaf = 2
link_gbps = 1.0
link_delay_ns = 25000
[fabric.switch]
reroute_us = 1000.0
[[fabric.events]]
at_us = 100.0
link = ["leaf0", "spine1"]
action = "down"
[[patterns]]
kind = "permutation"
shift = 2
bytes = 65536
start_us = 10.0
"#;
        let s = Scenario::from_toml(text).unwrap();
        let k = slowed(&s, 4.0);
        assert_eq!(k.fabric.topology.link_gbps, 0.25);
        assert_eq!(k.fabric.topology.link_delay_ns, 100_000);
        assert_eq!(k.fabric.events[0].at_us, 400.0);
        assert_eq!(k.fabric.switch.reroute_us, Some(4000.0));
        assert_eq!(k.timeout_s, 40.0);
        assert!(k.expand().unwrap().iter().all(|f| f.start_us == 40.0));
        // A start spread stretches with the rest: the same draws, K times
        // as far apart.
        let spread = Scenario::from_toml(
            &text.replace("start_us = 10.0", "start_us = 10.0\nstart_spread_us = 50.0"),
        )
        .unwrap();
        let starts =
            |s: &Scenario| -> Vec<f64> { s.expand().unwrap().iter().map(|f| f.start_us).collect() };
        let stretched: Vec<f64> = starts(&spread).iter().map(|t| t * 4.0).collect();
        let got = starts(&slowed(&spread, 4.0));
        assert!(
            got.iter()
                .zip(&stretched)
                .all(|(a, b)| (a - b).abs() < 1e-6),
            "{got:?} {stretched:?}"
        );
        let (a, b) = (
            Fabric::new(s.fabric.clone()).unwrap(),
            Fabric::new(k.fabric.clone()).unwrap(),
        );
        assert!(b.max_base_rtt_ns().abs_diff(4 * a.max_base_rtt_ns()) <= 8);
        assert!(a.data_buffer_bytes().abs_diff(b.data_buffer_bytes()) <= 2);
        assert_eq!(slowed(&s, 1.0).fabric.topology.link_gbps, 1.0);
    }

    #[test]
    fn quantiles_and_labels() {
        let v = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        assert_eq!(quantile(&v, 0.5), 5);
        assert_eq!(quantile(&v, 0.99), 10);
        assert_eq!(quantile(&[], 0.5), 0);
        assert_eq!(size_label(65536), "64KiB");
        assert_eq!(size_label(16 << 20), "16MiB");
        assert_eq!(size_label(1000), "1000B");
    }
}
