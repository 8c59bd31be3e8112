//! NSCC in closed loop against a discrete-event model of one bottleneck
//! port, in virtual time (no wall clock, seeded, deterministic).
//!
//! Model: each sender has its own NIC at line rate and a propagation delay
//! to the switch; the switch egress port towards the receiver serves a FIFO
//! data queue of one BDP at line rate, marks ECN at dequeue with RED
//! (kmin 20 %, kmax 80 % of the buffer) and trims a packet that does not fit
//! (the header reaches the receiver at control priority; the receiver NACKs it
//! as a last-hop trim). The receiver ACKs every packet at once; ACKs and NACKs
//! return over an uncongested path.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use uet::cms::{AckFeedback, CcConfig, CcStats, CongestionControl, RttSample};

const GBPS: f64 = 100.0;
const BYTES_PER_NS: f64 = GBPS / 8.0;
const MTU: u64 = 4096;
const MSS: u64 = 4032;
const HOST_TO_SWITCH_NS: u64 = 2_500;
const SWITCH_TO_HOST_NS: u64 = 2_500;
const ACK_RETURN_NS: u64 = 6_000;
const SER_NS: u64 = (MTU as f64 / BYTES_PER_NS) as u64;
/// Unloaded RTT of a full packet: two serialisations and the propagation.
const BASE_RTT_NS: u64 = 2 * SER_NS + HOST_TO_SWITCH_NS + SWITCH_TO_HOST_NS + ACK_RETURN_NS;
const BUFFER: u64 = 150_000;
const KMIN: f64 = 0.2 * BUFFER as f64;
const KMAX: f64 = 0.8 * BUFFER as f64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Pkt {
    flow: usize,
    sent_at: u64,
    times_sent: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    TrySend(usize),
    ArriveSwitch(Pkt),
    PortFree,
    Ack(Pkt, bool),
    Nack(Pkt),
}

struct Flow {
    cc: CongestionControl,
    /// Packets never sent yet.
    unsent: u64,
    /// Packets NACKed and not yet resent.
    retx: u64,
    in_flight: u64,
    acked_pkts: u64,
    total_pkts: u64,
    nic_free: u64,
    send_pending: bool,
    finish: Option<u64>,
    /// Payload bytes acknowledged inside the measurement window.
    window_bytes: u64,
}

struct Sim {
    now: u64,
    seq: u64,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    flows: Vec<Flow>,
    queue: VecDeque<Pkt>,
    queue_bytes: u64,
    port_busy: bool,
    rng: SmallRng,
    measure: (u64, u64),
    /// Bytes the port sent inside the measurement window.
    port_bytes: u64,
    /// Sum of queueing delay seen at dequeue, and the count (window only).
    qdelay_sum: f64,
    qdelay_n: u64,
    trims: u64,
    last_trim: u64,
    marks: u64,
    /// Largest queue seen at or after `measure.0`.
    max_queue_in_window: u64,
    trims_in_window: u64,
}

impl Sim {
    fn new(cfg: CcConfig, flows: &[(u64, u64)], measure: (u64, u64), seed: u64) -> Sim {
        let cfg = Arc::new(cfg);
        let mut sim = Sim {
            now: 0,
            seq: 0,
            events: BinaryHeap::new(),
            flows: flows
                .iter()
                .map(|&(_, pkts)| Flow {
                    cc: CongestionControl::new(&cfg),
                    unsent: pkts,
                    retx: 0,
                    in_flight: 0,
                    acked_pkts: 0,
                    total_pkts: pkts,
                    nic_free: 0,
                    send_pending: true,
                    finish: None,
                    window_bytes: 0,
                })
                .collect(),
            queue: VecDeque::new(),
            queue_bytes: 0,
            port_busy: false,
            rng: SmallRng::seed_from_u64(seed),
            measure,
            port_bytes: 0,
            qdelay_sum: 0.0,
            qdelay_n: 0,
            trims: 0,
            last_trim: 0,
            marks: 0,
            max_queue_in_window: 0,
            trims_in_window: 0,
        };
        for (i, f) in flows.iter().enumerate() {
            sim.at(f.0, Ev::TrySend(i));
        }
        sim
    }

    fn at(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, ev)));
    }

    fn in_window(&self) -> bool {
        self.now >= self.measure.0 && self.now < self.measure.1
    }

    fn run(&mut self, until: u64) {
        while let Some(Reverse((t, _, ev))) = self.events.pop() {
            if t > until {
                break;
            }
            self.now = t;
            match ev {
                Ev::TrySend(i) => self.try_send(i),
                Ev::ArriveSwitch(p) => self.arrive(p),
                Ev::PortFree => self.port_free(),
                Ev::Ack(p, ecn) => self.ack(p, ecn),
                Ev::Nack(p) => self.nack(p),
            }
        }
    }

    fn wake(&mut self, i: usize) {
        if !self.flows[i].send_pending {
            self.flows[i].send_pending = true;
            let t = self.now.max(self.flows[i].nic_free);
            self.at(t, Ev::TrySend(i));
        }
    }

    fn try_send(&mut self, i: usize) {
        let now = self.now;
        let f = &mut self.flows[i];
        f.send_pending = false;
        if now < f.nic_free {
            let t = f.nic_free;
            f.send_pending = true;
            self.at(t, Ev::TrySend(i));
            return;
        }
        if f.retx + f.unsent == 0 {
            return;
        }
        if !f.cc.can_send(f.in_flight, MTU) {
            // As the engine does: the window holds data back.
            f.cc.on_window_limited();
            return; // an ACK or NACK wakes us
        }
        let times_sent = if f.retx > 0 {
            f.retx -= 1;
            2
        } else {
            f.unsent -= 1;
            1
        };
        f.in_flight += MTU;
        f.nic_free = now + SER_NS;
        let pkt = Pkt {
            flow: i,
            sent_at: now,
            times_sent,
        };
        let next = f.nic_free;
        f.send_pending = true;
        self.at(now + SER_NS + HOST_TO_SWITCH_NS, Ev::ArriveSwitch(pkt));
        self.at(next, Ev::TrySend(i));
    }

    fn arrive(&mut self, p: Pkt) {
        if self.queue_bytes + MTU > BUFFER {
            // Trimmed: the header overtakes the queue and is NACKed at once.
            self.trims += 1;
            self.last_trim = self.now;
            self.trims_in_window += self.in_window() as u64;
            self.at(self.now + SWITCH_TO_HOST_NS + ACK_RETURN_NS, Ev::Nack(p));
            return;
        }
        self.queue.push_back(p);
        self.queue_bytes += MTU;
        if self.in_window() {
            self.max_queue_in_window = self.max_queue_in_window.max(self.queue_bytes);
        }
        if !self.port_busy {
            self.port_free();
        }
    }

    fn port_free(&mut self) {
        let Some(p) = self.queue.pop_front() else {
            self.port_busy = false;
            return;
        };
        // Mark at dequeue on the occupancy the packet saw at the head.
        let q = self.queue_bytes as f64;
        let ecn = q >= KMAX || (q > KMIN && self.rng.gen::<f64>() < (q - KMIN) / (KMAX - KMIN));
        self.marks += ecn as u64;
        self.queue_bytes -= MTU;
        if self.in_window() {
            self.port_bytes += MTU;
            self.qdelay_sum += q / BYTES_PER_NS;
            self.qdelay_n += 1;
        }
        self.port_busy = true;
        self.at(self.now + SER_NS, Ev::PortFree);
        self.at(
            self.now + SER_NS + SWITCH_TO_HOST_NS + ACK_RETURN_NS,
            Ev::Ack(p, ecn),
        );
    }

    fn ack(&mut self, p: Pkt, ecn: bool) {
        let now = self.now;
        let in_window = self.in_window();
        let f = &mut self.flows[p.flow];
        f.in_flight -= MTU;
        f.acked_pkts += 1;
        if in_window {
            f.window_bytes += MSS;
        }
        let rtt = RttSample::validate(now - p.sent_at, p.times_sent, p.times_sent > 1);
        f.cc.on_ack(
            now,
            &AckFeedback {
                newly_acked_bytes: MTU,
                in_flight_bytes: f.in_flight,
                ecn,
                rtt: Some(rtt),
            },
        );
        if f.acked_pkts == f.total_pkts {
            f.finish = Some(now);
        }
        self.wake(p.flow);
    }

    fn nack(&mut self, p: Pkt) {
        let now = self.now;
        let f = &mut self.flows[p.flow];
        f.in_flight -= MTU;
        f.retx += 1;
        f.cc.on_nack(now, MTU, true, f.in_flight);
        self.wake(p.flow);
    }

    fn utilisation(&self) -> f64 {
        self.port_bytes as f64 / (BYTES_PER_NS * (self.measure.1 - self.measure.0) as f64)
    }

    fn avg_qdelay(&self) -> f64 {
        self.qdelay_sum / self.qdelay_n.max(1) as f64
    }

    fn stats(&self) -> Vec<CcStats> {
        self.flows.iter().map(|f| f.cc.stats()).collect()
    }
}

fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let s2: f64 = x.iter().map(|v| v * v).sum();
    s * s / (x.len() as f64 * s2)
}

fn nscc(seed_base_rtt: bool) -> CcConfig {
    CcConfig {
        base_rtt_ns: if seed_base_rtt { BASE_RTT_NS } else { 0 },
        ..CcConfig::nscc(GBPS, MTU as u32, MSS as u32)
    }
}

const MS: u64 = 1_000_000;
const ENDLESS: u64 = u64::MAX / 2;

#[test]
fn one_flow_fills_the_link() {
    // Start from one packet and a measured base RTT: the flow must find
    // both the RTT and the rate.
    let cfg = CcConfig {
        initial_cwnd: MTU as u32,
        ..nscc(false)
    };
    let mut sim = Sim::new(cfg, &[(0, ENDLESS)], (MS, 4 * MS), 1);
    sim.run(4 * MS);
    let util = sim.utilisation();
    let st = sim.stats()[0];
    eprintln!(
        "one flow: util {util:.3} qdelay {:.0} ns stats {st:?}",
        sim.avg_qdelay()
    );
    assert!(util >= 0.9, "utilisation {util}");
    // The measured base RTT is the unloaded one (min-tracking).
    assert!(
        st.base_rtt_ns >= BASE_RTT_NS && st.base_rtt_ns < BASE_RTT_NS + SER_NS,
        "{}",
        st.base_rtt_ns
    );
}

#[test]
fn eight_flows_share_fairly_near_the_target() {
    let sim = eight_flows(nscc(true));
    let shares: Vec<f64> = sim.flows.iter().map(|f| f.window_bytes as f64).collect();
    let j = jain(&shares);
    let util = sim.utilisation();
    let qd = sim.avg_qdelay();
    let target = sim.stats()[0].target_qdelay_ns as f64;
    eprintln!(
        "8 flows: jain {j:.4} util {util:.3} qdelay {qd:.0} ns target {target} trims {} marks {}",
        sim.trims, sim.marks
    );
    for s in sim.stats() {
        eprintln!("  {s:?}");
    }
    assert!(j >= 0.95, "Jain {j} shares {shares:?}");
    assert!(util >= 0.9, "utilisation {util}");
    assert!(
        qd > 0.25 * target && qd < 1.5 * target,
        "queueing delay {qd} ns vs target {target}"
    );
}

fn eight_flows(cfg: CcConfig) -> Sim {
    let flows: Vec<(u64, u64)> = (0..8).map(|i| (i * 100_000, ENDLESS)).collect();
    let mut sim = Sim::new(cfg, &flows, (4 * MS, 10 * MS), 2);
    sim.run(10 * MS);
    sim
}

#[test]
fn paper_variant_also_shares_fairly() {
    let sim = eight_flows(CcConfig {
        paper: uet::cms::PaperFeatures::ALL,
        ..nscc(true)
    });
    let shares: Vec<f64> = sim.flows.iter().map(|f| f.window_bytes as f64).collect();
    let (j, util, qd) = (jain(&shares), sim.utilisation(), sim.avg_qdelay());
    let target = sim.stats()[0].target_qdelay_ns as f64;
    eprintln!("paper, 8 flows: jain {j:.4} util {util:.3} qdelay {qd:.0} target {target}");
    assert_eq!(target, 0.5 * BASE_RTT_NS as f64);
    assert!(j >= 0.95, "Jain {j}");
    assert!(util >= 0.9, "utilisation {util}");
}

#[test]
fn without_congestion_control_the_queue_stays_full() {
    let sim = eight_flows(CcConfig {
        algorithm: uet::cms::CcAlgorithm::None,
        fixed_window: 64 * MTU as u32,
        ..nscc(true)
    });
    let qd = sim.avg_qdelay();
    let full = 0.8 * BUFFER as f64 / BYTES_PER_NS;
    eprintln!("none, 8 flows: qdelay {qd:.0} trims {}", sim.trims);
    assert!(qd > full, "queueing delay {qd}");
    assert!(sim.trims_in_window > 1000);
}

#[test]
fn incast_16_to_1_quick_adapts_and_recovers() {
    let pkts = (2 << 20) / MSS + 1;
    let flows: Vec<(u64, u64)> = (0..16).map(|_| (0, pkts)).collect();
    // Measure the queue from 10 base RTTs on: QuickAdapt must have pulled
    // the windows down to the fair share by then.
    let settled = 10 * BASE_RTT_NS;
    let mut sim = Sim::new(nscc(true), &flows, (settled, 100 * MS), 3);
    sim.run(100 * MS);
    let stats = sim.stats();
    let qa: u64 = stats.iter().map(|s| s.quick_adapt_events).sum();
    let finish = sim
        .flows
        .iter()
        .map(|f| f.finish.unwrap_or(u64::MAX))
        .max()
        .unwrap_or(u64::MAX);
    let ideal = (16 * pkts * MTU) as f64 / BYTES_PER_NS + BASE_RTT_NS as f64;
    eprintln!(
        "incast: qa {qa} trims {} last trim {} max queue after settling {} trims after settling {} finish {finish} ideal {ideal:.0} ratio {:.3}",
        sim.trims,
        sim.last_trim,
        sim.max_queue_in_window,
        sim.trims_in_window,
        finish as f64 / ideal
    );
    for s in &stats {
        eprintln!("  {s:?}");
    }
    assert!(qa >= 8, "QuickAdapt fired {qa} times");
    // Once settled, trims are rare (the first window overdrives the port 16x).
    assert!(
        sim.trims_in_window * 100 < 16 * pkts,
        "{} trims after settling",
        sim.trims_in_window
    );
    assert!(
        sim.flows.iter().all(|f| f.finish.is_some()),
        "all flows finish"
    );
    assert_eq!(sim.queue_bytes, 0, "queue drained");
    assert!(
        (finish as f64) < 1.1 * ideal,
        "incast took {finish} ns, ideal {ideal:.0}"
    );
}
