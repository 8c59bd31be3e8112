//! The virtual-time front-end behind `uet-emu sim`.
//!
//! Every host is the provider's own sans-IO engine ([`uet::Engine`], the
//! code inside `libuet-fi.so`), the switch model sits between them, and one
//! discrete-event clock drives both: the model's next delivery, each
//! engine's next timer and each flow's start time. Nothing runs on the wall
//! clock, so a run is a function of the scenario and its seed, and it is a
//! valid measurement on any machine however busy, at any emulated rate.
//!
//! What it leaves out is what the relay runs (`uet-emu run`) exist for: the
//! provider's socket path, the libfabric API and host scheduling. Hosts
//! here answer in zero time, like ideal NICs; a relay run adds real hosts.
//! Both write the same results, tables and plots.
//!
//! Each flow sends a deterministic byte pattern and the receiver checks
//! every byte it is handed, so a run also fails on corrupted or misplaced
//! data.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use uet::engine::TraceEvent;
use uet::{
    CompletionKind, CompletionLevel, Config, Engine, MsgBuffer, Payload, ProbeFlags, RecvOp, SendOp,
};

use crate::ideal::payload_efficiency;
use crate::model::Packet;
use crate::relay::{port_reports, PairBytes, RelayCounters, RelayReport, RelaySettings};
use crate::runner::{
    each_variant, flow_results, summarise, write_outputs, FlowTimes, VariantResult, VariantSetup,
};
use crate::scenario::{FlowSpec, Scenario, Variant};

#[derive(Clone, Debug)]
pub struct SimOptions {
    pub out: PathBuf,
    /// Only this variant (all when None).
    pub variant: Option<String>,
    /// Host i is named 127.0.0.(first_host + i) (and on into 127.0.1.0),
    /// as in relay runs; nothing binds these addresses.
    pub first_host: u8,
    /// Print a progress line this often (wall clock); None: quiet.
    pub progress: Option<Duration>,
}

/// Every host's endpoint port; entropy k leaves from port + k, as the
/// provider's entropy sockets sit on consecutive ports.
const HOST_PORT: u16 = uet::wire::UET_UDP_PORT;

/// Environment variables that configure the provider's sockets, not its
/// engine: meaningless without sockets.
const SOCKET_ONLY: &[&str] = &[
    "FI_UET_SRC_ADDR",
    "FI_UET_FABRIC",
    "FI_UET_TRACE",
    "FI_UET_PORT",
];

/// Smallest retransmission timeout given to the hosts, us (the provider's
/// own lower bound): virtual-time hosts are never scheduled late, so the
/// fabric alone sets the timeout (see `runner::host_defaults`).
const SIM_RTO_FLOOR_US: u64 = 10;

/// Most consecutive steps at one virtual time before the run is declared
/// stuck (an engine that keeps asking to be woken now).
const MAX_STEPS_AT_ONE_TIME: u32 = 100_000;

/// Every variant (or the chosen one) of `scenario`; like
/// [`crate::runner::run_all`], a failed variant is listed with its reason.
#[allow(clippy::type_complexity)]
pub fn sim_all(
    scenario: &Scenario,
    opts: &SimOptions,
) -> Result<(Vec<VariantResult>, Vec<(String, String)>), String> {
    each_variant(
        scenario,
        opts.variant.as_deref(),
        " (virtual time)",
        |v, flows| sim_variant(scenario, v, flows, opts),
    )
}

/// The engine configuration of every host: defaults, then each `FI_UET_*`
/// of the environment the relay run would give the host processes.
pub fn engine_config(env: &BTreeMap<String, String>, mtu: usize) -> Result<Config, String> {
    let mut config = Config {
        mtu,
        ..Config::default()
    };
    for (k, v) in env {
        let Some(name) = k.strip_prefix("FI_UET_") else {
            continue;
        };
        if SOCKET_ONLY.contains(&k.as_str()) {
            continue;
        }
        config
            .set_text(&name.to_ascii_lowercase(), v)
            .map_err(|e| e.to_string())?;
    }
    // Fault injection lives in the provider's socket layer, which virtual
    // time does not run: refused rather than silently left out.
    for (name, per_mille) in [
        ("FI_UET_FAULT_DROP", config.fault_drop),
        ("FI_UET_FAULT_DUP", config.fault_dup),
        ("FI_UET_FAULT_REORDER", config.fault_reorder),
        ("FI_UET_FAULT_TRIM", config.fault_trim),
        ("FI_UET_FAULT_ECN", config.fault_ecn),
    ] {
        if per_mille != 0 {
            return Err(format!(
                "{name}: fault injection happens in the provider's socket layer, which \
                 virtual time does not run (use uet-emu run, or a [[fabric.events]] \
                 loss for losses in the fabric)"
            ));
        }
    }
    if config.mtu == 0 {
        config.mtu = mtu;
    }
    Ok(config)
}

/// Length of the pattern table's period. A prime: a shift by any power of
/// two still misaligns.
const PATTERN_LEN: usize = 65_521;

/// The byte at `offset` of flow `id`'s message: a table of pseudo-random
/// bytes read at a per-flow offset, so a byte placed at the wrong offset or
/// in the wrong flow's buffer shows.
fn pattern() -> &'static [u8] {
    static TABLE: OnceLock<Vec<u8>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        (0..2 * PATTERN_LEN)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    })
}

fn pattern_start(id: usize, offset: usize) -> usize {
    (offset + id.wrapping_mul(7919)) % PATTERN_LEN
}

/// Visit flow `id`'s pattern bytes `offset..offset + len` in pieces.
fn for_pattern(id: usize, offset: usize, len: usize, mut f: impl FnMut(usize, &[u8])) {
    let table = pattern();
    let half = table.len() / 2;
    let mut done = 0;
    while done < len {
        let at = pattern_start(id, offset + done);
        let n = (len - done).min(half);
        f(done, &table[at..at + n]);
        done += n;
    }
}

/// A sender's message: the flow's pattern, generated on demand.
struct PatternSource {
    id: usize,
    len: usize,
}

impl MsgBuffer for PatternSource {
    fn len(&self) -> usize {
        self.len
    }
    fn read_at(&self, offset: usize, out: &mut [u8]) {
        for_pattern(self.id, offset, out.len(), |at, piece| {
            out[at..at + piece.len()].copy_from_slice(piece)
        });
    }
    fn write_at(&mut self, _offset: usize, _data: &[u8]) {}
}

/// A receiver's buffer that keeps nothing and counts the bytes that differ
/// from the flow's pattern.
struct PatternCheck {
    id: usize,
    len: usize,
    wrong: Arc<AtomicU64>,
}

impl MsgBuffer for PatternCheck {
    fn len(&self) -> usize {
        self.len
    }
    fn read_at(&self, _offset: usize, out: &mut [u8]) {
        out.fill(0);
    }
    fn write_at(&mut self, offset: usize, data: &[u8]) {
        let mut wrong = 0;
        for_pattern(self.id, offset, data.len(), |at, piece| {
            wrong += data[at..at + piece.len()]
                .iter()
                .zip(piece)
                .filter(|(a, b)| a != b)
                .count() as u64;
        });
        if wrong > 0 {
            self.wrong.fetch_add(wrong, Ordering::Relaxed);
        }
    }
}

struct Host {
    engine: Engine,
    addr: SocketAddr,
    /// Sockets in the provider's entropy pool.
    sockets: u16,
    trace: Option<BufWriter<File>>,
}

/// Where a flow stands.
#[derive(Clone, Copy, Debug, Default)]
struct FlowState {
    posted: bool,
    /// Dependencies not yet completed as seen from the flow's source host.
    waiting: usize,
}

fn sim_variant(
    scenario: &Scenario,
    v: &Variant,
    flows: &[FlowSpec],
    opts: &SimOptions,
) -> Result<VariantResult, String> {
    let VariantSetup {
        mut fabric,
        env,
        mtu,
        trimming,
    } = VariantSetup::new(scenario, v, SIM_RTO_FLOOR_US)?;
    let n = fabric.hosts.len();
    if let Some(f) = flows.iter().find(|f| f.src >= n || f.dst >= n) {
        return Err(format!("a flow names host {} of {n}", f.src.max(f.dst)));
    }
    let config = engine_config(&env, mtu)?;
    let ips = RelaySettings::loopback_hosts(n, opts.first_host).map_err(|e| e.to_string())?;
    let host_of: HashMap<IpAddr, usize> = ips.iter().enumerate().map(|(i, a)| (*a, i)).collect();
    let dir = opts.out.join(&v.name);
    let work = dir.join("work");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let seed = fabric.config.seed;
    let mut hosts: Vec<Host> = ips
        .iter()
        .enumerate()
        .map(|(h, ip)| {
            let addr = SocketAddr::new(*ip, HOST_PORT);
            let mut engine = Engine::new(
                &config,
                addr,
                seed.wrapping_mul(0x9E37_79B9).wrapping_add(h as u64),
            );
            engine.enable_trace();
            let trace = File::create(work.join(format!("trace.{h}.csv")))
                .ok()
                .map(BufWriter::new)
                .and_then(|mut w| {
                    writeln!(w, "{},wall_ns", TraceEvent::CSV_HEADER).ok()?;
                    Some(w)
                });
            Host {
                engine,
                addr,
                sockets: config.entropies.max(1),
                trace,
            }
        })
        .collect();

    // Pre-post every receive, as the matrix program does before the start.
    let wrong: Vec<Arc<AtomicU64>> = flows.iter().map(|_| Arc::default()).collect();
    for (id, f) in flows.iter().enumerate() {
        let op = RecvOp {
            src: Some(hosts[f.src].addr),
            tagged: true,
            tag: id as u64,
            ignore: 0,
            buffer: Box::new(PatternCheck {
                id,
                len: f.bytes as usize,
                wrong: wrong[id].clone(),
            }),
            context: id as u64,
            signal: true,
            probe: ProbeFlags::default(),
        };
        hosts[f.dst]
            .engine
            .post_recv(0, op)
            .map_err(|e| format!("posting the receive of flow {id}: {e}"))?;
    }

    // Link events count from the common start, virtual time 0.
    fabric.hold_link_events();
    fabric.schedule_link_events(0);

    let mut state: Vec<FlowState> = flows
        .iter()
        .map(|f| FlowState {
            posted: false,
            waiting: f.after.len(),
        })
        .collect();
    // Flows that wait for flow j, per j.
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); flows.len()];
    for (i, f) in flows.iter().enumerate() {
        for &j in &f.after {
            if j >= flows.len() {
                return Err(format!("flow {i} waits for flow {j}, which does not exist"));
            }
            dependents[j].push(i);
        }
    }
    let start_ns: Vec<u64> = flows
        .iter()
        .map(|f| (f.start_us.max(0.0) * 1000.0).round() as u64)
        .collect();
    let mut times = FlowTimes {
        start: vec![None; flows.len()],
        send_done: vec![None; flows.len()],
        recv_done: vec![None; flows.len()],
    };
    let mut remaining = 2 * flows.len();
    let limit_ns = scenario
        .timeout()
        .map_err(|e| e.to_string())?
        .max(Duration::from_millis(1))
        .as_nanos() as u64;
    let mut pairs = PairBytes::default();
    let mut counters = RelayCounters::default();
    let mut buf = vec![0u8; 65_536];
    let mut events = Vec::new();
    let mut now = 0u64;
    let mut steps_at_now = 0u32;
    let wall = Instant::now();
    let mut last_progress = Instant::now();

    while remaining > 0 {
        for d in fabric.advance(now) {
            counters.delivered += 1;
            if let Some(&src) = host_of.get(&d.packet.src.ip()) {
                pairs.record(src, &d, fabric.config.switch.sample_ns);
            }
            let p = &d.packet;
            hosts[d.host]
                .engine
                .handle_datagram(d.time, p.src, p.tos, &p.data);
        }
        for h in hosts.iter_mut() {
            if h.engine.next_timeout().is_some_and(|t| t <= now) {
                h.engine.handle_timeout(now);
            }
        }
        // Post, take completions and transmit until nothing changes at
        // this instant: a completion can release a dependent flow.
        loop {
            let mut busy = false;
            for (i, f) in flows.iter().enumerate() {
                let st = &mut state[i];
                if st.posted || st.waiting > 0 || start_ns[i] > now {
                    continue;
                }
                let op = SendOp {
                    dest: hosts[f.dst].addr,
                    payload: Payload::Borrowed(Box::new(PatternSource {
                        id: i,
                        len: f.bytes as usize,
                    })),
                    tag: Some(i as u64),
                    cq_data: None,
                    context: i as u64,
                    level: CompletionLevel::Transmit,
                    signal: true,
                };
                match hosts[f.src].engine.post_send(now, op) {
                    Ok(()) => {
                        st.posted = true;
                        times.start[i] = Some(now);
                        busy = true;
                    }
                    // The send queue is full: try again at the next event.
                    Err(uet::Error::Again) => {}
                    Err(e) => return Err(format!("posting flow {i}: {e}")),
                }
            }
            for (hi, h) in hosts.iter_mut().enumerate() {
                while let Some(c) = h.engine.poll_completion() {
                    busy = true;
                    let id = c.context as usize;
                    if let Some(e) = &c.error {
                        return Err(format!(
                            "host {hi}: flow {id} completed with an error at {:.3} ms: {e:?}",
                            now as f64 / 1e6
                        ));
                    }
                    let slot = match c.kind {
                        CompletionKind::Send => &mut times.send_done,
                        CompletionKind::Recv => &mut times.recv_done,
                        _ => continue,
                    };
                    let Some(t) = slot.get_mut(id) else { continue };
                    if t.is_none() {
                        *t = Some(now);
                        remaining -= 1;
                        for &k in &dependents[id] {
                            // Only the source host of k sees this completion
                            // (the scenario guarantees it is an end of id).
                            if flows[k].src == hi {
                                state[k].waiting = state[k].waiting.saturating_sub(1);
                            }
                        }
                    }
                }
                while let Some(t) = h.engine.poll_transmit(now, &mut buf) {
                    busy = true;
                    let Some(&dst_host) = host_of.get(&t.dest.ip()) else {
                        counters.unknown_destination += 1;
                        continue;
                    };
                    let port = HOST_PORT.wrapping_add(t.entropy % h.sockets);
                    let packet = Packet {
                        src: SocketAddr::new(h.addr.ip(), port),
                        dst: t.dest,
                        dst_host,
                        tos: uet::wire::ip::tos(0, t.ecn),
                        data: buf[..t.len].to_vec(),
                        tag: 0,
                    };
                    counters.received += 1;
                    fabric.send(now, hi, packet);
                }
            }
            if !busy {
                break;
            }
        }
        for h in hosts.iter_mut() {
            h.engine.take_trace(&mut events);
            if let Some(w) = h.trace.as_mut() {
                for e in events.iter() {
                    let _ = writeln!(w, "{},{}", e.csv(), e.now);
                }
            }
            events.clear();
        }
        if remaining == 0 {
            break;
        }
        let next = [
            fabric.next_event_time(),
            hosts.iter().filter_map(|h| h.engine.next_timeout()).min(),
            // A flow due now and not posted was refused (queue full):
            // retry a microsecond later.
            (0..flows.len())
                .filter(|&i| !state[i].posted && state[i].waiting == 0)
                .map(|i| {
                    if start_ns[i] > now {
                        start_ns[i]
                    } else {
                        now + 1000
                    }
                })
                .min(),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else {
            return Err(format!(
                "stalled at {:.3} ms of virtual time: nothing left to happen with {} \
                 completions outstanding",
                now as f64 / 1e6,
                remaining
            ));
        };
        if next <= now {
            steps_at_now += 1;
            if steps_at_now > MAX_STEPS_AT_ONE_TIME {
                return Err(format!(
                    "stuck at {:.3} ms of virtual time: an engine keeps asking to run now",
                    now as f64 / 1e6
                ));
            }
        } else {
            steps_at_now = 0;
            now = next;
        }
        if now > limit_ns {
            return Err(format!(
                "timed out after {:.1} s of virtual time with {} completions outstanding",
                scenario.timeout_s, remaining
            ));
        }
        if let Some(every) = opts.progress {
            if last_progress.elapsed() >= every {
                last_progress = Instant::now();
                note!(
                    "   {:.3} ms virtual after {:.1} s: {}/{} completions, {} packets sent",
                    now as f64 / 1e6,
                    wall.elapsed().as_secs_f64(),
                    2 * flows.len() - remaining,
                    2 * flows.len(),
                    counters.received
                );
            }
        }
    }
    for h in hosts.iter_mut() {
        if let Some(w) = h.trace.as_mut() {
            let _ = w.flush();
        }
    }
    fabric.finish();

    let corrupted: Vec<String> = wrong
        .iter()
        .enumerate()
        .filter(|(_, w)| w.load(Ordering::Relaxed) > 0)
        .map(|(i, w)| format!("flow {i}: {} bytes", w.load(Ordering::Relaxed)))
        .collect();
    if !corrupted.is_empty() {
        return Err(format!(
            "DATA CORRUPTED: bytes differ from what was sent ({})",
            corrupted.join(", ")
        ));
    }

    let (results, ideal_flows, start_lag_ns) = flow_results(flows, &fabric, mtu, &times)?;
    let report = RelayReport {
        kept_up: true,
        epoch_realtime_ns: 0,
        problems: Vec::new(),
        duration_ns: now,
        lag_p50_ns: 0,
        lag_p99_ns: 0,
        ingress_lag_p99_ns: 0,
        relay: counters,
        fabric: fabric.totals().clone(),
        base_rtt_ns: fabric.max_base_rtt_ns(),
        bdp_bytes: fabric.bdp_bytes(),
        sample_ns: fabric.config.switch.sample_ns,
        ports: port_reports(&fabric),
        pairs: pairs.series(),
    };
    let mut summary = summarise(&results, &ideal_flows, &report);
    summary.start_lag_ns = start_lag_ns;
    let stats: Vec<uet::engine::Stats> = hosts.iter().map(|h| h.engine.stats()).collect();
    let timeouts: u64 = stats.iter().map(|s| s.timeouts).sum();
    let notes = vec![format!(
        "virtual time: every host is the provider's engine answering in zero time (no \
         sockets, libfabric or scheduling); {:.1} ms simulated in {:.2} s; {} timeouts",
        now as f64 / 1e6,
        wall.elapsed().as_secs_f64(),
        timeouts
    )];
    let result = VariantResult {
        scenario: scenario.name.clone(),
        variant: v.name.clone(),
        front_end: "virtual".into(),
        env,
        trimming,
        mtu,
        payload_efficiency: payload_efficiency(mtu),
        go_realtime_ns: 0,
        first_host: opts.first_host,
        summary,
        flows: results,
        relay: report,
        hosts_sched: Vec::new(),
        notes,
    };
    write_outputs(&dir, &result)?;
    Ok(result)
}
