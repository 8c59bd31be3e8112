//! Congestion management: the NSCC window controller, a fixed-window baseline
//! and the per-packet load balancers (entropy selection).
//!
//! Everything here is sans-IO and deterministic: time is an argument (`now`,
//! nanoseconds from any fixed origin), randomness comes from a seed, and no
//! function reads a clock or touches a socket. Windows and byte counts include
//! headers. The algorithms and every constant follow `spec/NSCC.md`; where the
//! papers and the reference simulator differ, the simulator is the default and
//! the paper forms are selectable ([`PaperFeatures`], `FI_UET_NSCC_VARIANT`).
//!
//! Parameters: `FI_UET_CC` (nscc|none), `FI_UET_LINK_GBPS`,
//! `FI_UET_BASE_RTT_US` (0 = measure), `FI_UET_NSCC_VARIANT`,
//! `FI_UET_NSCC_TARGET_PCT`, `FI_UET_NSCC_TRIMMING`,
//! `FI_UET_NSCC_FAST_INCREASE_MTUS`, `FI_UET_NSCC_QA_IDLE_RESTART`,
//! `FI_UET_LB`, `FI_UET_ENTROPIES` (see [`crate::config::PARAMS`]).
//!
//! Tests: `cargo test -p uet --lib cms` (every mechanism, with expected
//! numbers from the formulas, and every load balancer's feedback rules) and
//! `cargo test -p uet --release --test cms_closed_loop` (NSCC against a
//! discrete-event bottleneck queue: line rate, 8-flow fairness, 16:1 incast).
//!
//! # What the engine holds
//!
//! * One [`CcConfig`] per endpoint, built once with
//!   [`CcConfig::from_config`] and shared by all peers through an `Arc`.
//! * Per peer PDC (sender side): one [`CongestionControl`] (NSCC or the
//!   fixed-window baseline, chosen by `FI_UET_CC`) and one
//!   [`LoadBalancer`] (chosen by `FI_UET_LB`), built with
//!   [`LbConfig::from_config`] and a per-peer seed.
//!
//! # When the engine calls what
//!
//! In-flight accounting belongs to the engine: the controller does **not**
//! own `in_flight`. The engine counts bytes sent (headers included) and
//! subtracts what the receiver reports (the ACK's cumulative received-bytes
//! field, and NACKed packets) and packets it declares lost (timer, SLEEK,
//! probe), never counting more than the unacknowledged packets it sent, then
//! passes the current value in. This keeps a single source of truth and the
//! controller small. A resend counts again and, like new data, waits until
//! the window has room for it.
//!
//! | event | call |
//! |---|---|
//! | before sending a data packet (new or retransmitted) | [`CongestionControl::can_send`]`(in_flight, packet_bytes)`; then [`lb::LoadBalancer::next_entropy`] (with the packet's wire bytes: a spray unit may keep the last pick) or, for a resend, [`lb::LoadBalancer::resend_entropy`] to pick the UDP source port (entropy index `0..entropies`) |
//! | ACK received | build an [`AckFeedback`] (`newly_acked_bytes` from the received-bytes delta, `in_flight_bytes` after subtracting them, `ecn` from the M flag, `rtt` from [`RttSample::validate`] with the triggering packet's send time, its send count and the ACK's RETX echo) and call [`CongestionControl::on_ack`]; then [`lb::LoadBalancer::on_feedback`] with the ACK's entropy and [`lb::PathFeedback::Ecn`] or [`lb::PathFeedback::Good`] |
//! | NACK for a trimmed packet (code 0x01 fabric, 0x02 last hop) | [`CongestionControl::on_nack`]`(now, packet_bytes, last_hop, in_flight_after)`, queue the packet for retransmission, and [`lb::LoadBalancer::on_feedback`] with [`lb::PathFeedback::Nack`]`{ last_hop }` for the packet's entropy |
//! | new data leaves while the peer's pipe is empty and the last ACK found nothing left to send (an application-limited gap) | [`CongestionControl::on_idle_restart`] before the packet is counted in flight |
//! | retransmission timeout of a packet | [`CongestionControl::on_timeout`]`(now, packet_bytes)` and [`lb::LoadBalancer::on_feedback`] with [`lb::PathFeedback::Timeout`] |
//! | diagnostics | [`CongestionControl::stats`], [`lb::LoadBalancer::entropy_stats`] |
//!
//! Neither the controller nor the load balancers arm timers: QuickAdapt and
//! the fulfill clock run on the `now` of incoming feedback, as in the
//! reference simulator.
//!
//! # State size
//!
//! The per-peer NSCC state is [`nscc::Nscc`]: the algorithm state proper
//! ([`nscc::NsccState`], **72 bytes** on 64-bit targets: cwnd, base RTT,
//! the delay EWMA, the byte counters and three timestamps, kept as u32/f32
//! where the range allows, u64 for times and f64 for the increase credit),
//! an `Arc` to the shared
//! configuration (8 bytes), the parameters derived from the base RTT
//! ([`nscc::NsccDerived`], 72 bytes, kept so that an ACK does not compute
//! them again) and the diagnostic counters ([`nscc::NsccCounters`],
//! 152 bytes), **304 bytes** in all. The SMaRTT paper's 19 bytes per flow
//! assume 16-bit fields and times relative to a NIC clock; we keep full
//! nanosecond timestamps and counters for measurement. A unit test pins these
//! numbers so this paragraph stays true. A [`LoadBalancer`] takes 136 bytes
//! plus 56 bytes of counters per entropy (1 KiB at the default 16).

pub mod lb;
pub mod nscc;

use std::sync::Arc;

use crate::config::Config;

/// Which congestion controller (`FI_UET_CC`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CcAlgorithm {
    /// NSCC (simulator behaviour, paper forms per [`PaperFeatures`]).
    Nscc,
    /// A fixed window of `FI_UET_WINDOW` packets: the no-CC baseline.
    None,
}

impl CcAlgorithm {
    pub fn parse(s: &str) -> Option<CcAlgorithm> {
        match s.trim() {
            "nscc" => Some(CcAlgorithm::Nscc),
            "none" => Some(CcAlgorithm::None),
            _ => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            CcAlgorithm::Nscc => "nscc",
            CcAlgorithm::None => "none",
        }
    }
}

pub use lb::{LbAlgorithm, LbConfig, LoadBalancer, PathFeedback};
pub use nscc::{Nscc, NsccDerived};

/// Reference network of the parameter scaling (NSCC.md §1): 100 Gb/s, 12 us.
pub const REFERENCE_RTT_NS: u64 = 12_000;
/// 100 Gb/s in bytes per nanosecond.
pub const REFERENCE_LINK_BYTES_PER_NS: f64 = 12.5;
/// 150 kB.
pub const REFERENCE_BDP: f64 = REFERENCE_RTT_NS as f64 * REFERENCE_LINK_BYTES_PER_NS;

/// The paper (SMaRTT / SMaRTT-REPS) forms of NSCC, each selectable on its own;
/// all off = the reference simulator's behaviour.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PaperFeatures {
    /// Target queueing delay 0.5 * base RTT (target RTT = 1.5 * base RTT)
    /// instead of 0.75 (with trimming) / 1.0 (without).
    pub target: bool,
    /// maxwnd = 1.25 * bdp instead of 1.5 * bdp.
    pub maxwnd: bool,
    /// Wait-to-Decrease: in the ECN + low-delay quadrant, apply a fair
    /// decrease once the EWMA of the ECN fraction exceeds 0.25.
    pub wait_to_decrease: bool,
    /// QuickAdapt sets cwnd to 0.8 * achieved bytes instead of 1.0 *.
    pub qa_scaling: bool,
    /// FastIncrease adds k MTUs per ACK instead of 0.25 * a per acked byte.
    pub fast_increase: bool,
    /// Multiplicative decrease severity from RTTs, (avg_rtt - target_rtt) /
    /// avg_rtt, instead of queueing delays.
    pub md_rtt: bool,
}

impl PaperFeatures {
    pub const ALL: PaperFeatures = PaperFeatures {
        target: true,
        maxwnd: true,
        wait_to_decrease: true,
        qa_scaling: true,
        fast_increase: true,
        md_rtt: true,
    };
    const NAMES: [&'static str; 6] = [
        "target",
        "maxwnd",
        "wtd",
        "qa_scaling",
        "fast_increase",
        "md_rtt",
    ];

    fn flags(&self) -> [bool; 6] {
        [
            self.target,
            self.maxwnd,
            self.wait_to_decrease,
            self.qa_scaling,
            self.fast_increase,
            self.md_rtt,
        ]
    }

    /// Parse `sim`, `paper`, or a comma-separated list of feature names
    /// (`target,maxwnd,wtd,qa_scaling,fast_increase,md_rtt`).
    pub fn parse(s: &str) -> Option<PaperFeatures> {
        let s = s.trim();
        match s {
            "sim" | "" => return Some(PaperFeatures::default()),
            "paper" => return Some(PaperFeatures::ALL),
            _ => {}
        }
        let mut f = PaperFeatures::default();
        for name in s.split(',').map(str::trim) {
            match name {
                "target" => f.target = true,
                "maxwnd" => f.maxwnd = true,
                "wtd" => f.wait_to_decrease = true,
                "qa_scaling" => f.qa_scaling = true,
                "fast_increase" => f.fast_increase = true,
                "md_rtt" => f.md_rtt = true,
                _ => return None,
            }
        }
        Some(f)
    }

    /// Inverse of [`PaperFeatures::parse`].
    pub fn name(&self) -> String {
        if *self == PaperFeatures::default() {
            return "sim".into();
        }
        if *self == PaperFeatures::ALL {
            return "paper".into();
        }
        let names: Vec<&str> = Self::NAMES
            .iter()
            .zip(self.flags())
            .filter(|(_, on)| *on)
            .map(|(n, _)| *n)
            .collect();
        names.join(",")
    }
}

/// Everything a congestion controller needs that is shared by all peers of
/// an endpoint. Built with [`CcConfig::from_config`] or by hand (tests,
/// emu-net's simulation front-end).
#[derive(Clone, Debug, PartialEq)]
pub struct CcConfig {
    pub algorithm: CcAlgorithm,
    /// Bottleneck (NIC) link rate in bytes per nanosecond (Gb/s / 8).
    pub link_bytes_per_ns: f64,
    /// Base RTT seed in ns; 0 = unknown until the first valid RTT sample
    /// (the controller assumes [`REFERENCE_RTT_NS`] until then).
    pub base_rtt_ns: u64,
    /// Packet size including headers (the largest data packet).
    pub mtu: u32,
    /// Payload bytes per full packet.
    pub mss: u32,
    /// The fabric trims instead of dropping: target_qdelay 0.75 * R0, else 1.0.
    pub trimming: bool,
    /// Explicit target queueing delay in percent of the base RTT (0 = from the
    /// variant: 75/100 simulator, 50 paper).
    pub target_pct: u32,
    /// Initial cwnd in bytes; 0 = maxwnd (simulator).
    pub initial_cwnd: u32,
    pub paper: PaperFeatures,
    /// k of the paper's FastIncrease (MTUs per ACK).
    pub fast_increase_mtus: u32,
    /// Window of the `none` baseline, bytes.
    pub fixed_window: u32,
    /// Weight of the delay EWMA (0.0125; the emergency case is pinned to
    /// 0.0125 whatever this is).
    pub delay_ewma_weight: f64,
    /// Floor of maxwnd in packets (0 = none: maxwnd is 1.5 bdp, at least
    /// one MTU). Where the measured bdp is below a few packets (loopback
    /// with 64 KB datagrams and microsecond RTTs, or small emulated links)
    /// a one-packet window would serialise the transfer.
    pub min_maxwnd_packets: u32,
    /// QuickAdapt starts a new window when the sender resumes after an
    /// application-limited idle gap ([`nscc::Nscc::on_idle_restart`]).
    pub qa_idle_restart: bool,
    /// QuickAdapt's extreme-delay trigger counts only in a window in which
    /// the sender was held back by its window ([`CongestionControl::on_window_limited`])
    /// or had at least half of it in flight; false = the simulator's rule
    /// (any sender).
    pub qa_window_limited: bool,
}

impl CcConfig {
    /// NSCC at `link_gbps` with simulator defaults; base RTT measured.
    pub fn nscc(link_gbps: f64, mtu: u32, mss: u32) -> CcConfig {
        CcConfig {
            algorithm: CcAlgorithm::Nscc,
            link_bytes_per_ns: link_gbps / 8.0,
            base_rtt_ns: 0,
            mtu,
            mss,
            trimming: true,
            target_pct: 0,
            initial_cwnd: 0,
            paper: PaperFeatures::default(),
            fast_increase_mtus: 2,
            fixed_window: 256 * mtu,
            delay_ewma_weight: 0.0125,
            min_maxwnd_packets: 0,
            qa_idle_restart: true,
            qa_window_limited: true,
        }
    }

    /// The configuration an endpoint with packet size `mtu` (headers
    /// included) and `mss` payload bytes per packet derives from `cfg`.
    pub fn from_config(cfg: &Config, mtu: usize, mss: usize) -> CcConfig {
        let mtu = mtu.clamp(1, u32::MAX as usize) as u32;
        let mss = mss.clamp(1, mtu as usize) as u32;
        CcConfig {
            algorithm: cfg.cc,
            base_rtt_ns: cfg.base_rtt_us.saturating_mul(1000),
            trimming: cfg.trimming,
            target_pct: cfg.nscc_target_pct,
            paper: cfg.nscc_variant,
            fast_increase_mtus: cfg.nscc_fast_increase_mtus,
            fixed_window: (cfg.window as u64 * mtu as u64).min(u32::MAX as u64) as u32,
            min_maxwnd_packets: cfg.nscc_min_maxwnd_packets,
            qa_idle_restart: cfg.nscc_qa_idle_restart,
            qa_window_limited: cfg.nscc_qa_window_limited,
            ..CcConfig::nscc(cfg.link_rate_gbps(), mtu, mss)
        }
    }
}

/// One round-trip time sample from an ACK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RttSample {
    /// now - send time of the packet that triggered the ACK.
    pub raw_ns: u64,
    /// Whether the sample may be trusted (see [`RttSample::validate`]).
    pub valid: bool,
    /// Whether it may lower the base RTT: a full-size packet's. The base
    /// RTT is that of a data packet; where moving bytes costs time (a
    /// host's loopback copies them), a small packet's round trip is shorter
    /// and would make every full packet read as queueing delay.
    pub sets_base: bool,
}

impl RttSample {
    /// A sample is valid when the packet was sent once and the receiver did
    /// not flag a retransmission, or sent exactly twice and the receiver
    /// flagged it (then `raw_ns` is measured from the second send). Anything
    /// else is ambiguous: the ACK may answer an earlier copy.
    pub fn validate(raw_ns: u64, times_sent: u32, receiver_saw_retx: bool) -> RttSample {
        let valid = matches!((times_sent, receiver_saw_retx), (1, false) | (2, true));
        RttSample {
            raw_ns,
            valid,
            sets_base: true,
        }
    }

    /// The same sample from a packet too small to define the base RTT.
    pub fn from_small_packet(self) -> RttSample {
        RttSample {
            sets_base: false,
            ..self
        }
    }
}

/// What one ACK tells the congestion controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckFeedback {
    /// Bytes (headers included) newly acknowledged by this ACK.
    pub newly_acked_bytes: u64,
    /// Bytes still in flight after removing `newly_acked_bytes`.
    pub in_flight_bytes: u64,
    /// ECN-CE echo of the packet that triggered the ACK.
    pub ecn: bool,
    pub rtt: Option<RttSample>,
}

/// Counters and current values of a controller, for diagnostics.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CcStats {
    pub cwnd: u64,
    pub maxwnd: u64,
    /// In-flight bytes as last reported by the engine.
    pub in_flight: u64,
    pub base_rtt_ns: u64,
    pub avg_delay_ns: f64,
    pub target_qdelay_ns: u64,
    pub acks: u64,
    pub ecn_echoes: u64,
    pub invalid_rtt_samples: u64,
    /// ACKs per quadrant: no ECN + high delay.
    pub fair_increase: u64,
    /// no ECN + low delay (including those handled by FastIncrease).
    pub proportional_increase: u64,
    /// ECN + high delay (whether or not a decrease was allowed).
    pub multiplicative_decrease: u64,
    /// ECN + low delay.
    pub steer_only: u64,
    /// Decreases actually applied (at most one per base RTT).
    pub decreases_applied: u64,
    /// Wait-to-Decrease fair decreases (paper variant).
    pub fair_decreases: u64,
    pub fast_increase_acks: u64,
    /// Times FastIncrease switched on.
    pub fast_increase_events: u64,
    pub quick_adapt_events: u64,
    /// Feedback dropped during the QuickAdapt ignore phase.
    pub quick_adapt_ignored: u64,
    /// QuickAdapt windows restarted after an idle gap.
    pub idle_restarts: u64,
    pub fulfills: u64,
    pub nacks_fabric: u64,
    pub nacks_last_hop: u64,
    pub timeouts: u64,
}

/// The `none` baseline: a fixed window, no reaction to congestion.
#[derive(Clone, Debug)]
pub struct FixedWindow {
    window: u64,
    stats: CcStats,
}

impl FixedWindow {
    pub fn new(window_bytes: u64) -> FixedWindow {
        FixedWindow {
            window: window_bytes,
            stats: CcStats::default(),
        }
    }
}

/// The congestion controller of one peer: NSCC or the fixed-window baseline.
#[derive(Clone, Debug)]
pub enum CongestionControl {
    Nscc(Nscc),
    Fixed(FixedWindow),
}

impl CongestionControl {
    pub fn new(cfg: &Arc<CcConfig>) -> CongestionControl {
        match cfg.algorithm {
            CcAlgorithm::Nscc => CongestionControl::Nscc(Nscc::new(Arc::clone(cfg))),
            CcAlgorithm::None => {
                CongestionControl::Fixed(FixedWindow::new(cfg.fixed_window as u64))
            }
        }
    }

    /// Process one ACK (NSCC.md §2).
    pub fn on_ack(&mut self, now: u64, fb: &AckFeedback) {
        match self {
            CongestionControl::Nscc(c) => c.on_ack(now, fb),
            CongestionControl::Fixed(f) => {
                f.stats.acks += 1;
                f.stats.ecn_echoes += fb.ecn as u64;
                f.stats.in_flight = fb.in_flight_bytes;
            }
        }
    }

    /// A trimmed packet of `bytes` was NACKed; `last_hop` when the trim
    /// happened at the receiver's downlink (NSCC.md §5). The window reaction
    /// is the same for both; the distinction matters to the load balancer.
    pub fn on_nack(&mut self, now: u64, bytes: u64, last_hop: bool, in_flight_bytes: u64) {
        match self {
            CongestionControl::Nscc(c) => c.on_nack(now, bytes, last_hop, in_flight_bytes),
            CongestionControl::Fixed(f) => {
                if last_hop {
                    f.stats.nacks_last_hop += 1
                } else {
                    f.stats.nacks_fabric += 1
                }
                f.stats.in_flight = in_flight_bytes;
            }
        }
    }

    /// The sender resumes after its pipe drained with nothing left to send.
    pub fn on_idle_restart(&mut self) {
        if let CongestionControl::Nscc(c) = self {
            c.on_idle_restart()
        }
    }

    /// The sender has data its congestion or packet window holds back.
    pub fn on_window_limited(&mut self) {
        if let CongestionControl::Nscc(c) = self {
            c.on_window_limited()
        }
    }

    /// A packet of `bytes` timed out.
    pub fn on_timeout(&mut self, now: u64, bytes: u64) {
        match self {
            CongestionControl::Nscc(c) => c.on_timeout(now, bytes),
            CongestionControl::Fixed(f) => f.stats.timeouts += 1,
        }
    }

    /// Current congestion window in bytes.
    pub fn cwnd(&self) -> u64 {
        match self {
            CongestionControl::Nscc(c) => c.cwnd(),
            CongestionControl::Fixed(f) => f.window,
        }
    }

    /// SLEEK's out-of-order threshold in bytes (NSCC.md section 5):
    /// max(min(1.5 cwnd, maxwnd), 5 packets).
    pub fn loss_threshold_bytes(&self, mtu: u64) -> u64 {
        let (cwnd, maxwnd) = match self {
            CongestionControl::Nscc(c) => (c.cwnd(), c.derived().maxwnd),
            CongestionControl::Fixed(f) => (f.window, f.window),
        };
        (cwnd * 3 / 2).min(maxwnd).max(5 * mtu)
    }

    /// The base RTT in ns the congestion control works with (0 = unknown).
    pub fn base_rtt(&self) -> u64 {
        match self {
            CongestionControl::Nscc(c) => c.base_rtt(),
            CongestionControl::Fixed(_) => 0,
        }
    }

    /// May a packet of `packet_bytes` leave with `in_flight_bytes` outstanding?
    /// Always true on an empty pipe, so a window below one packet cannot stall.
    pub fn can_send(&self, in_flight_bytes: u64, packet_bytes: u64) -> bool {
        in_flight_bytes == 0 || in_flight_bytes + packet_bytes <= self.cwnd()
    }

    pub fn stats(&self) -> CcStats {
        match self {
            CongestionControl::Nscc(c) => c.stats(),
            CongestionControl::Fixed(f) => CcStats {
                cwnd: f.window,
                maxwnd: f.window,
                ..f.stats
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_validation_follows_the_retransmission_echo() {
        assert!(RttSample::validate(10, 1, false).valid);
        assert!(RttSample::validate(10, 2, true).valid);
        assert!(!RttSample::validate(10, 1, true).valid);
        assert!(!RttSample::validate(10, 2, false).valid);
        assert!(!RttSample::validate(10, 3, true).valid);
        assert!(!RttSample::validate(10, 0, false).valid);
    }

    #[test]
    fn paper_features_round_trip() {
        for s in [
            "sim",
            "paper",
            "wtd",
            "target,maxwnd",
            "qa_scaling,fast_increase,md_rtt",
        ] {
            let f = PaperFeatures::parse(s).unwrap();
            assert_eq!(f.name(), s);
        }
        assert_eq!(
            PaperFeatures::parse("target,maxwnd,wtd,qa_scaling,fast_increase,md_rtt"),
            Some(PaperFeatures::ALL)
        );
        assert_eq!(PaperFeatures::parse("bogus"), None);
    }

    #[test]
    fn fixed_window_ignores_congestion() {
        let cfg = Arc::new(CcConfig {
            algorithm: CcAlgorithm::None,
            fixed_window: 40_000,
            ..CcConfig::nscc(100.0, 4096, 4000)
        });
        let mut cc = CongestionControl::new(&cfg);
        assert_eq!(cc.cwnd(), 40_000);
        cc.on_nack(1000, 4096, false, 0);
        cc.on_timeout(2000, 4096);
        cc.on_ack(
            3000,
            &AckFeedback {
                newly_acked_bytes: 4096,
                in_flight_bytes: 0,
                ecn: true,
                rtt: None,
            },
        );
        assert_eq!(cc.cwnd(), 40_000);
        assert!(cc.can_send(0, 100_000));
        assert!(cc.can_send(35_000, 5_000));
        assert!(!cc.can_send(35_001, 5_000));
        let s = cc.stats();
        assert_eq!((s.nacks_fabric, s.timeouts, s.ecn_echoes), (1, 1, 1));
    }

    #[test]
    fn state_size_matches_the_module_docs() {
        assert_eq!(std::mem::size_of::<nscc::NsccState>(), 72);
        assert_eq!(std::mem::size_of::<nscc::NsccCounters>(), 152);
        assert_eq!(std::mem::size_of::<nscc::NsccDerived>(), 72);
        assert_eq!(std::mem::size_of::<Nscc>(), 304);
        assert_eq!(std::mem::size_of::<LoadBalancer>(), 136);
        assert_eq!(std::mem::size_of::<lb::EntropyStats>(), 56);
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;
    use crate::config::ParamValue;

    #[test]
    fn endpoint_config_maps_to_controller_and_balancer() {
        let mut c = Config::default();
        let cc = CcConfig::from_config(&c, 4096, 4032);
        assert_eq!(cc.algorithm, CcAlgorithm::Nscc);
        assert_eq!(
            (cc.link_bytes_per_ns, cc.base_rtt_ns, cc.mtu, cc.mss),
            (12.5, 0, 4096, 4032)
        );
        assert_eq!(cc.fixed_window, 256 * 4096);
        let lb = LbConfig::from_config(&c, 4096);
        assert_eq!(
            (lb.algorithm, lb.entropies, lb.freeze_ns),
            (LbAlgorithm::Reps, 16, 1_000_000)
        );
        // One 150 kB reference BDP of 4 KiB packets.
        assert_eq!(lb.explore_packets, 37);

        for (k, v) in [
            ("cc", ParamValue::Str("none".into())),
            ("link_gbps", ParamValue::Int(800)),
            ("base_rtt_us", ParamValue::Int(6)),
            ("lb", ParamValue::Str("reps_paper".into())),
            ("entropies", ParamValue::Int(256)),
            ("nscc_variant", ParamValue::Str("paper".into())),
            ("nscc_target_pct", ParamValue::Int(40)),
            ("nscc_trimming", ParamValue::Bool(false)),
            ("nscc_fast_increase_mtus", ParamValue::Int(3)),
        ] {
            c.set(k, v).unwrap();
        }
        let cc = CcConfig::from_config(&c, 4096, 4032);
        assert_eq!(cc.algorithm, CcAlgorithm::None);
        assert_eq!(
            (cc.link_bytes_per_ns, cc.base_rtt_ns, cc.target_pct),
            (100.0, 6_000, 40)
        );
        assert_eq!(
            (cc.paper, cc.trimming, cc.fast_increase_mtus),
            (PaperFeatures::ALL, false, 3)
        );
        let lb = LbConfig::from_config(&c, 4096);
        assert_eq!(
            (lb.algorithm, lb.entropies, lb.explore_packets),
            (LbAlgorithm::RepsPaper, 256, 147)
        );
    }
}
