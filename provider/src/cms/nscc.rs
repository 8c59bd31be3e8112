//! NSCC, the per-peer window controller of NSCC.md §1-5.
//!
//! The window moves in four quadrants chosen from the raw queueing delay of
//! each ACK and its ECN echo; increases accumulate and are applied in batches
//! ("fulfill"), decreases are immediate. A slow EWMA of the delay sizes the
//! multiplicative decrease; QuickAdapt resets the window to what was actually
//! delivered when a flow is badly overdriven; FastIncrease refills an empty
//! pipe. Parameters scale with the bandwidth-delay product of the link rate
//! (configured) and the base RTT (measured, min-tracking).
//!
//! Derived parameters ([`NsccDerived`]) are kept and computed again from
//! the current base RTT when it moves, so a new minimum rescales bdp,
//! maxwnd, the target and every gain at once.
//!
//! Choices where NSCC.md leaves room (each one covered by a unit test):
//! * Base RTT: seeded from `FI_UET_BASE_RTT_US`, else the 12 us reference
//!   stands in until the first valid sample, which replaces it even when
//!   larger; after that the base only goes down (no upward drift). Samples
//!   are floored at 1 us so a coarse clock cannot zero the BDP.
//! * "Network RTT" (fulfill clock, NACK sample) is the current base RTT; a
//!   NACK feeds the EWMA a marked sample of one base RTT of queueing (what a
//!   full one-BDP queue causes).
//! * A NACK or timeout reacts the same whether the trim was at the last hop
//!   or inside the fabric; only the load balancer tells them apart.
//! * QuickAdapt's trigger (set by a NACK) is judged at the end of the window
//!   it arose in and then cleared, so a stale trigger cannot shrink an
//!   application-limited flow much later. Firing also drops the pending
//!   increase credit, which was earned before the reset.
//! * A flow is a busy period: when the sender resumes after its pipe
//!   drained with nothing left to send, QuickAdapt starts a new window as
//!   for a new flow ([`Nscc::on_idle_restart`], `FI_UET_NSCC_QA_IDLE_RESTART`).
//!   Otherwise the first ACK of each message of a ping-pong closes a window
//!   stretched over the idle gap and finds almost nothing achieved in it.
//! * QuickAdapt's extreme-delay trigger counts only after a window in which
//!   the sender used its window: its window held data back
//!   ([`Nscc::on_window_limited`]) or at least half of it was in flight
//!   when an ACK came (RFC 7661's validated window; a flow's tail qualifies)
//!   (`FI_UET_NSCC_QA_WINDOW_LIMITED`). What an application-limited sender
//!   achieved is its offered load, and its ACK's delay may be the peer's
//!   host. On loopback, a rendezvous pull request ACKed late by a peer busy
//!   with its own sends cut the window to one packet just before the
//!   pulled megabyte left. NACKs fire it whatever the sender had to send.
//! * The very first multiplicative decrease is not rate-limited (there is no
//!   previous one to be a base RTT away from).
//! * Wait-to-Decrease (paper) only adds the fair decrease in the ECN +
//!   low-delay quadrant; the multiplicative decrease keeps its own once per
//!   base RTT limit, as NSCC.md §2 describes.
//! * FastIncrease (both forms) counts ACKs with less than 1 us of queueing
//!   delay; the paper's "rtt close to base rtt" uses the same threshold.

use std::sync::Arc;

use super::{AckFeedback, CcConfig, CcStats, REFERENCE_BDP, REFERENCE_RTT_NS};

/// Decrease gain (gamma).
pub const GAMMA: f64 = 0.8;
/// Weight of the emergency EWMA case, pinned regardless of the normal weight.
pub const EMERGENCY_EWMA_WEIGHT: f64 = 0.0125;
/// A multiplicative decrease keeps at least this fraction of the window.
pub const MD_FLOOR: f64 = 0.5;
/// Fulfill once more than this many MTUs were acknowledged.
pub const FULFILL_MTUS: u64 = 8;
/// QuickAdapt fires only when achieved < maxwnd >> QA_GATE_SHIFT.
pub const QA_GATE_SHIFT: u32 = 3;
/// QuickAdapt's delay trigger: qdelay > QA_DELAY_FACTOR * target.
pub const QA_DELAY_FACTOR: f64 = 4.0;
/// QuickAdapt scaling of the paper variant.
pub const PAPER_QA_SCALING: f64 = 0.8;
/// FastIncrease counts ACKs whose queueing delay is below this.
pub const FAST_INCREASE_DELAY_NS: f64 = 1000.0;
/// Wait-to-Decrease: EWMA weight of the ECN fraction, threshold, and the
/// fair-decrease constant fd.
pub const WTD_WEIGHT: f32 = 0.125;
pub const WTD_THRESHOLD: f32 = 0.25;
pub const FAIR_DECREASE: f64 = 0.8;
/// Base RTTs are floored here so a coarse clock cannot zero the BDP.
pub const MIN_BASE_RTT_NS: u64 = 1000;

/// Parameters derived from the link rate and the current base RTT (§1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NsccDerived {
    pub base_rtt_ns: u64,
    /// Bytes.
    pub bdp: f64,
    pub maxwnd: u64,
    pub target_qdelay_ns: f64,
    /// bdp / reference bdp.
    pub a: f64,
    /// Proportional-increase gain, bytes per ns of headroom per acked byte.
    pub alpha: f64,
    /// Fair increase, bytes per RTT.
    pub fi: f64,
    /// Liveness floor added once per base RTT, bytes.
    pub eta: f64,
    /// FastIncrease bytes per acked byte.
    pub fast_increase_factor: f64,
}

impl NsccDerived {
    pub fn compute(cfg: &CcConfig, base_rtt_ns: u64) -> NsccDerived {
        let base = base_rtt_ns.max(MIN_BASE_RTT_NS);
        let bdp = base as f64 * cfg.link_bytes_per_ns;
        let maxwnd_factor = if cfg.paper.maxwnd { 1.25 } else { 1.5 };
        let floor = (cfg.mtu as f64 * cfg.min_maxwnd_packets as f64).max(cfg.mtu as f64);
        let maxwnd = (bdp * maxwnd_factor).clamp(floor, u32::MAX as f64) as u64;
        let target_pct = match cfg.target_pct {
            0 if cfg.paper.target => 50,
            0 if cfg.trimming => 75,
            0 => 100,
            p => p,
        };
        let target = base as f64 * target_pct as f64 / 100.0;
        let a = bdp / REFERENCE_BDP;
        let mss = cfg.mss as f64;
        NsccDerived {
            base_rtt_ns: base,
            bdp,
            maxwnd,
            target_qdelay_ns: target,
            a,
            // 4 * MSS * a * b / target with b = target / 12 us: the target cancels.
            alpha: 4.0 * mss * a / REFERENCE_RTT_NS as f64,
            fi: 5.0 * mss * a,
            eta: 0.15 * mss * a,
            fast_increase_factor: 0.25 * a,
        }
    }
}

const FLAG_FAST_INCREASE: u8 = 1;
const FLAG_TRIGGER_QA: u8 = 2;
const FLAG_BASE_MEASURED: u8 = 4;
/// In the current QuickAdapt window the sender was held back by its window
/// or had at least half of it in flight.
const FLAG_WINDOW_LIMITED: u8 = 8;

/// The algorithm state of one flow (see the module docs for its size).
#[derive(Clone, Debug, Default)]
pub struct NsccState {
    cwnd: u32,
    /// ns; the reference RTT until measured or seeded.
    base_rtt: u32,
    /// EWMA of the queueing delay, ns.
    avg_delay: f32,
    /// EWMA of the ECN-marked fraction (Wait-to-Decrease).
    avg_wtd: f32,
    /// Bytes acked in the current QuickAdapt window.
    achieved: u32,
    /// Bytes acked since the last fulfill.
    received: u32,
    /// FastIncrease: uncongested bytes in a row.
    fi_count: u32,
    bytes_to_ignore: u32,
    bytes_ignored: u32,
    /// Increase credit, bytes^2 (applied as inc / cwnd).
    inc_bytes: f64,
    /// End of the QuickAdapt window (0 = not started).
    qa_end: u64,
    last_dec_time: u64,
    /// 0 = before the first feedback.
    last_adjust_time: u64,
    flags: u8,
}

/// Diagnostic counters (see [`CcStats`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct NsccCounters {
    acks: u64,
    ecn_echoes: u64,
    invalid_rtt_samples: u64,
    fair_increase: u64,
    proportional_increase: u64,
    multiplicative_decrease: u64,
    steer_only: u64,
    decreases_applied: u64,
    fair_decreases: u64,
    fast_increase_acks: u64,
    fast_increase_events: u64,
    quick_adapt_events: u64,
    quick_adapt_ignored: u64,
    idle_restarts: u64,
    fulfills: u64,
    nacks_fabric: u64,
    nacks_last_hop: u64,
    timeouts: u64,
    in_flight: u64,
}

/// The NSCC controller of one peer.
#[derive(Clone, Debug)]
pub struct Nscc {
    cfg: Arc<CcConfig>,
    s: NsccState,
    /// [`NsccDerived::compute`] at the current base RTT, kept because the
    /// base RTT changes only on a new minimum while every ACK reads them
    /// (a third of the per-ACK instructions when computed each time).
    d: NsccDerived,
    n: NsccCounters,
}

fn sat32(v: u64) -> u32 {
    v.min(u32::MAX as u64) as u32
}

impl Nscc {
    pub fn new(cfg: Arc<CcConfig>) -> Nscc {
        let (base, flags) = match cfg.base_rtt_ns {
            0 => (REFERENCE_RTT_NS, 0),
            b => (b.max(MIN_BASE_RTT_NS), FLAG_BASE_MEASURED),
        };
        let base = sat32(base) as u64;
        let d = NsccDerived::compute(&cfg, base);
        let cwnd = match cfg.initial_cwnd {
            0 => d.maxwnd,
            w => (w as u64).clamp(cfg.mtu as u64, d.maxwnd),
        };
        Nscc {
            s: NsccState {
                cwnd: sat32(cwnd),
                base_rtt: sat32(base),
                flags,
                ..NsccState::default()
            },
            d,
            n: NsccCounters::default(),
            cfg,
        }
    }

    pub fn cwnd(&self) -> u64 {
        self.s.cwnd as u64
    }

    pub fn base_rtt(&self) -> u64 {
        self.s.base_rtt as u64
    }

    pub fn avg_delay(&self) -> f64 {
        self.s.avg_delay as f64
    }

    /// Parameters at the current base RTT.
    pub fn derived(&self) -> NsccDerived {
        self.d
    }

    fn flag(&self, f: u8) -> bool {
        self.s.flags & f != 0
    }

    fn set_flag(&mut self, f: u8, on: bool) {
        if on {
            self.s.flags |= f
        } else {
            self.s.flags &= !f
        }
    }

    fn set_cwnd(&mut self, w: f64) {
        self.s.cwnd = w.max(0.0).min(u32::MAX as f64) as u32;
    }

    /// Keep cwnd within [MTU, maxwnd]; MTU wins should maxwnd be below it.
    fn clamp(&mut self) {
        // In u32: NsccDerived::compute caps maxwnd there.
        self.s.cwnd = self.s.cwnd.min(self.d.maxwnd as u32).max(self.cfg.mtu);
    }

    /// Min-track the base RTT. The first sample of an unseeded flow replaces
    /// the provisional reference value, which may be too low for this path.
    #[inline]
    fn update_base_rtt(&mut self, raw: u64) {
        // Almost every sample is no new minimum: flooring and saturating it
        // could not bring it below the base, so nothing else to check.
        if raw >= self.s.base_rtt as u64 && self.flag(FLAG_BASE_MEASURED) {
            return;
        }
        self.take_base_rtt_sample(raw);
    }

    /// The rest of [`Nscc::update_base_rtt`], out of the per-ACK path.
    #[cold]
    #[inline(never)]
    fn take_base_rtt_sample(&mut self, raw: u64) {
        let raw = sat32(raw.max(MIN_BASE_RTT_NS));
        let first = !self.flag(FLAG_BASE_MEASURED);
        if (first || raw < self.s.base_rtt) && raw != self.s.base_rtt {
            self.s.base_rtt = raw;
            self.d = NsccDerived::compute(&self.cfg, raw as u64);
        }
        self.set_flag(FLAG_BASE_MEASURED, true);
    }

    /// The three-case delay EWMA (§2 step 2).
    fn update_avg_delay(&mut self, delay: f64, ecn: bool) {
        let w = self.cfg.delay_ewma_weight;
        let avg = self.s.avg_delay as f64;
        // d.base_rtt_ns, from the u32 copy: one instruction to convert, a
        // u64 takes six.
        let base = self.s.base_rtt as f64;
        let new = if !ecn && delay > self.d.target_qdelay_ns {
            // High delay without a mark is likely one bad path: barely trust it.
            w * (0.25 * base) + (1.0 - w) * avg
        } else if delay > 5.0 * base {
            EMERGENCY_EWMA_WEIGHT * delay + (1.0 - EMERGENCY_EWMA_WEIGHT) * avg
        } else {
            w * delay + (1.0 - w) * avg
        };
        self.s.avg_delay = new as f32;
    }

    fn reset_fast_increase(&mut self) {
        self.s.fi_count = 0;
        self.set_flag(FLAG_FAST_INCREASE, false);
    }

    /// QuickAdapt (§3). `congested` = the feedback is ECN-marked or a NACK;
    /// `loss` = it is a NACK. Returns true when the caller must stop
    /// processing this feedback (fired, or in the ignore phase).
    fn quick_adapt(
        &mut self,
        now: u64,
        congested: bool,
        loss: bool,
        delay: f64,
        in_flight: u64,
    ) -> bool {
        if congested && self.s.bytes_ignored < self.s.bytes_to_ignore {
            // Stale congestion signals from before the reset.
            self.s.inc_bytes = 0.0;
            self.s.received = 0;
            self.n.quick_adapt_ignored += 1;
            return true;
        }
        let mut fired = false;
        if now > self.s.qa_end {
            // Extreme delay says the network delivers only `achieved` per
            // window if the sender used its window: one that kept most of it
            // unused measured its application, and its delay may be the
            // peer's host (a receiver busy with its own sends).
            let delay_counts = !self.cfg.qa_window_limited || self.flag(FLAG_WINDOW_LIMITED);
            let triggered = self.flag(FLAG_TRIGGER_QA)
                || loss
                || delay_counts && delay > QA_DELAY_FACTOR * self.d.target_qdelay_ns;
            if self.s.qa_end != 0
                && triggered
                && (self.s.achieved as u64) < self.d.maxwnd >> QA_GATE_SHIFT
            {
                let scaling = if self.cfg.paper.qa_scaling {
                    PAPER_QA_SCALING
                } else {
                    1.0
                };
                let w = (self.s.achieved as f64 * scaling).max(self.cfg.mtu as f64);
                self.set_cwnd(w);
                self.s.bytes_to_ignore = sat32(in_flight);
                self.s.bytes_ignored = 0;
                self.s.inc_bytes = 0.0;
                self.s.received = 0;
                self.reset_fast_increase();
                self.n.quick_adapt_events += 1;
                fired = true;
            }
            // A trigger is judged once, at the end of the window it arose in,
            // so an old NACK cannot reset an application-limited flow later.
            self.set_flag(FLAG_TRIGGER_QA, false);
            self.set_flag(FLAG_WINDOW_LIMITED, false);
            self.s.achieved = 0;
            self.s.qa_end = now + self.d.base_rtt_ns + self.d.target_qdelay_ns as u64;
        }
        fired
    }

    /// FastIncrease (§4); true when it handled this ACK.
    fn fast_increase(&mut self, newly: u64, delay: f64) -> bool {
        if delay >= FAST_INCREASE_DELAY_NS {
            self.reset_fast_increase();
            return false;
        }
        self.s.fi_count = sat32(self.s.fi_count as u64 + newly);
        let active = self.flag(FLAG_FAST_INCREASE);
        if self.s.fi_count <= self.s.cwnd && !active {
            return false;
        }
        if !active {
            self.n.fast_increase_events += 1;
        }
        self.set_flag(FLAG_FAST_INCREASE, true);
        let add = if self.cfg.paper.fast_increase {
            self.cfg.fast_increase_mtus as f64 * self.cfg.mtu as f64
        } else {
            newly as f64 * self.d.fast_increase_factor
        };
        self.set_cwnd(self.s.cwnd as f64 + add);
        self.n.fast_increase_acks += 1;
        true
    }

    fn multiplicative_decrease(&mut self, now: u64) {
        let avg = self.s.avg_delay as f64;
        let target = self.d.target_qdelay_ns;
        let rested = self.s.last_dec_time == 0
            || now.saturating_sub(self.s.last_dec_time) > self.d.base_rtt_ns;
        if !(avg > target && rested) {
            return;
        }
        let severity = if self.cfg.paper.md_rtt {
            let base = self.d.base_rtt_ns as f64;
            ((base + avg) - (base + target)) / (base + avg)
        } else {
            (avg - target) / avg
        };
        let factor = (1.0 - GAMMA * severity).max(MD_FLOOR);
        self.set_cwnd(self.s.cwnd as f64 * factor);
        self.s.last_dec_time = now;
        self.reset_fast_increase();
        self.n.decreases_applied += 1;
    }

    /// Apply batched increases (§2 step 7) when due.
    fn fulfill_if_due(&mut self, now: u64) {
        let elapsed = now.saturating_sub(self.s.last_adjust_time);
        let due = FULFILL_MTUS * self.cfg.mtu as u64;
        if (self.s.received as u64) > due || elapsed > self.d.base_rtt_ns {
            self.fulfill(now, elapsed);
        }
    }

    /// Out of line: it is due about once per 8 MTUs acked, and as the last
    /// step of an ACK it is a jump; inlined, its registers would be saved
    /// and restored on every ACK.
    #[inline(never)]
    fn fulfill(&mut self, now: u64, elapsed: u64) {
        let mut w = self.s.cwnd as f64 + self.s.inc_bytes / self.s.cwnd.max(1) as f64;
        if elapsed >= self.d.base_rtt_ns {
            w += self.d.eta;
            self.s.last_adjust_time = now;
        }
        self.set_cwnd(w);
        self.s.inc_bytes = 0.0;
        self.s.received = 0;
        self.n.fulfills += 1;
        self.clamp();
    }

    /// Process one ACK (§2).
    pub fn on_ack(&mut self, now: u64, fb: &AckFeedback) {
        // The base RTT first: its rare call to recompute the parameters
        // then finds few values to keep across it, so fewer registers are
        // saved on every ACK.
        if let Some(r) = fb.rtt {
            if r.valid && r.sets_base {
                self.update_base_rtt(r.raw_ns);
            }
        }
        if self.s.last_adjust_time == 0 {
            self.s.last_adjust_time = now;
        }
        let newly = fb.newly_acked_bytes;
        let ecn = fb.ecn;
        self.s.achieved = sat32(self.s.achieved as u64 + newly);
        self.s.received = sat32(self.s.received as u64 + newly);
        self.s.bytes_ignored = sat32(self.s.bytes_ignored as u64 + newly);
        self.n.acks += 1;
        // Not `+= ecn as u64`: the compiler pairs that with `acks` in
        // vector registers, which costs more than this branch.
        if ecn {
            self.n.ecn_echoes += 1;
        }
        self.n.in_flight = fb.in_flight_bytes;

        let delay = match fb.rtt {
            Some(r) if r.valid => {
                let delay = r.raw_ns.saturating_sub(self.d.base_rtt_ns) as f64;
                self.update_avg_delay(delay, ecn);
                delay
            }
            _ => {
                self.n.invalid_rtt_samples += 1;
                self.s.avg_delay as f64
            }
        };
        if self.cfg.paper.wait_to_decrease {
            let mark = if ecn { 1.0 } else { 0.0 };
            self.s.avg_wtd = WTD_WEIGHT * mark + (1.0 - WTD_WEIGHT) * self.s.avg_wtd;
        }

        // At least half the window in flight before this ACK: the window
        // was in use (RFC 7661's validated window), as at a flow's tail.
        if (fb.in_flight_bytes + newly) * 2 >= self.s.cwnd as u64 {
            self.set_flag(FLAG_WINDOW_LIMITED, true);
        }
        if self.quick_adapt(now, ecn, false, delay, fb.in_flight_bytes) {
            self.clamp();
            return;
        }

        let target = self.d.target_qdelay_ns;
        match (ecn, delay >= target) {
            (false, true) => {
                self.n.fair_increase += 1;
                self.reset_fast_increase();
                self.s.inc_bytes += self.d.fi * newly as f64;
            }
            (false, false) => {
                self.n.proportional_increase += 1;
                if !self.fast_increase(newly, delay) {
                    self.s.inc_bytes += self.d.alpha * newly as f64 * (target - delay);
                }
            }
            (true, true) => {
                self.n.multiplicative_decrease += 1;
                self.reset_fast_increase();
                self.multiplicative_decrease(now);
            }
            (true, false) => {
                // Steer only: the load balancer moves off the marked path.
                self.n.steer_only += 1;
                self.reset_fast_increase();
                if self.cfg.paper.wait_to_decrease && self.s.avg_wtd > WTD_THRESHOLD {
                    let cwnd = self.s.cwnd as f64;
                    self.set_cwnd(cwnd - cwnd / self.d.bdp * FAIR_DECREASE * newly as f64);
                    self.n.fair_decreases += 1;
                }
            }
        }
        self.clamp();
        self.fulfill_if_due(now);
    }

    /// A trimmed packet of `bytes` was NACKed (§5).
    pub fn on_nack(&mut self, now: u64, bytes: u64, last_hop: bool, in_flight_bytes: u64) {
        if self.s.last_adjust_time == 0 {
            self.s.last_adjust_time = now;
        }
        if last_hop {
            self.n.nacks_last_hop += 1;
        } else {
            self.n.nacks_fabric += 1;
        }
        self.n.in_flight = in_flight_bytes;
        self.s.bytes_ignored = sat32(self.s.bytes_ignored as u64 + bytes);
        // A trim means a full queue: feed the EWMA a marked sample of one
        // network RTT of queueing.
        let synthetic = self.d.base_rtt_ns as f64;
        self.update_avg_delay(synthetic, true);
        self.set_flag(FLAG_TRIGGER_QA, true);
        if !self.quick_adapt(now, true, true, synthetic, in_flight_bytes) {
            self.set_cwnd((self.s.cwnd as u64).saturating_sub(bytes) as f64);
        }
        self.clamp();
    }

    /// The sender starts sending again after its pipe drained with nothing
    /// left to send (an application-limited gap, as between the messages of
    /// a ping-pong). QuickAdapt treats the new busy period as a new flow:
    /// its window starts afresh, so the first ACKs cannot compare a delivery
    /// rate diluted by the idle gap against a delay that includes the
    /// receiver's wake-up, and a trigger left from before the gap is dropped.
    pub fn on_idle_restart(&mut self) {
        if !self.cfg.qa_idle_restart {
            return;
        }
        self.s.qa_end = 0;
        self.s.achieved = 0;
        self.set_flag(FLAG_TRIGGER_QA, false);
        self.set_flag(FLAG_WINDOW_LIMITED, false);
        self.n.idle_restarts += 1;
    }

    /// The sender had more to send than its congestion or packet window
    /// let out (see `CcConfig::qa_window_limited`).
    pub fn on_window_limited(&mut self) {
        self.set_flag(FLAG_WINDOW_LIMITED, true);
    }

    /// A packet of `bytes` timed out: shrink by it, never below one MTU.
    pub fn on_timeout(&mut self, _now: u64, bytes: u64) {
        self.n.timeouts += 1;
        let w = (self.s.cwnd as u64)
            .saturating_sub(bytes)
            .max(self.cfg.mtu as u64);
        self.s.cwnd = sat32(w);
    }

    pub fn stats(&self) -> CcStats {
        let d = self.derived();
        let n = &self.n;
        CcStats {
            cwnd: self.cwnd(),
            maxwnd: d.maxwnd,
            in_flight: n.in_flight,
            base_rtt_ns: d.base_rtt_ns,
            avg_delay_ns: self.s.avg_delay as f64,
            target_qdelay_ns: d.target_qdelay_ns as u64,
            acks: n.acks,
            ecn_echoes: n.ecn_echoes,
            invalid_rtt_samples: n.invalid_rtt_samples,
            fair_increase: n.fair_increase,
            proportional_increase: n.proportional_increase,
            multiplicative_decrease: n.multiplicative_decrease,
            steer_only: n.steer_only,
            decreases_applied: n.decreases_applied,
            fair_decreases: n.fair_decreases,
            fast_increase_acks: n.fast_increase_acks,
            fast_increase_events: n.fast_increase_events,
            quick_adapt_events: n.quick_adapt_events,
            quick_adapt_ignored: n.quick_adapt_ignored,
            idle_restarts: n.idle_restarts,
            fulfills: n.fulfills,
            nacks_fabric: n.nacks_fabric,
            nacks_last_hop: n.nacks_last_hop,
            timeouts: n.timeouts,
        }
    }
}

/// The `i`-th ACK of the per-ACK cost workload shared by the criterion
/// bench and the callgrind example (`make bench-nscc`), so both measure the
/// same mix: every fourth ACK marked, queueing delays around the 100 Gb/s
/// target, one 4 KiB packet acknowledged each time.
#[doc(hidden)]
#[inline]
pub fn cost_workload_ack(i: u64) -> super::AckFeedback {
    super::AckFeedback {
        newly_acked_bytes: 4152,
        in_flight_bytes: 100_000,
        ecn: i.is_multiple_of(4),
        rtt: Some(super::RttSample::validate(
            12_000 + (i % 16) * 1000,
            1,
            false,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cms::{PaperFeatures, RttSample};

    const MTU: u32 = 4096;
    const MSS: u32 = 4032;
    const BASE: u64 = 12_000;
    /// 0.75 * base RTT (simulator, trimming).
    const TARGET: f64 = 9_000.0;
    const W0: u64 = 100_000;

    fn cfg() -> CcConfig {
        CcConfig {
            base_rtt_ns: BASE,
            initial_cwnd: W0 as u32,
            ..CcConfig::nscc(100.0, MTU, MSS)
        }
    }

    fn nscc(c: CcConfig) -> Nscc {
        Nscc::new(Arc::new(c))
    }

    /// An ACK of one MTU whose packet saw `delay` ns of queueing.
    fn ack(cc: &mut Nscc, now: u64, ecn: bool, delay: u64) {
        ack_in_flight(cc, now, ecn, delay, 50_000);
    }

    fn ack_in_flight(cc: &mut Nscc, now: u64, ecn: bool, delay: u64, in_flight: u64) {
        let fb = AckFeedback {
            newly_acked_bytes: MTU as u64,
            in_flight_bytes: in_flight,
            ecn,
            rtt: Some(RttSample::validate(BASE + delay, 1, false)),
        };
        cc.on_ack(now, &fb);
    }

    #[test]
    fn parameters_scale_with_the_bdp() {
        let d = NsccDerived::compute(&CcConfig::nscc(100.0, MTU, MSS), 12_000);
        assert_eq!(d.bdp, 150_000.0);
        assert_eq!(d.maxwnd, 225_000);
        assert_eq!(d.target_qdelay_ns, 9_000.0);
        assert_eq!(d.a, 1.0);
        assert!((d.alpha - 4.0 * 4032.0 / 12_000.0).abs() < 1e-12);
        assert!((d.fi - 5.0 * 4032.0).abs() < 1e-9);
        assert!((d.eta - 0.15 * 4032.0).abs() < 1e-9);
        assert_eq!(d.fast_increase_factor, 0.25);

        let d = NsccDerived::compute(&CcConfig::nscc(800.0, MTU, MSS), 12_000);
        assert_eq!(d.bdp, 1_200_000.0);
        assert_eq!(d.maxwnd, 1_800_000);
        assert_eq!(d.a, 8.0);
        assert!((d.alpha - 8.0 * 4.0 * 4032.0 / 12_000.0).abs() < 1e-9);
        assert!((d.fi - 40.0 * 4032.0).abs() < 1e-6);
        assert!((d.eta - 1.2 * 4032.0).abs() < 1e-6);
        assert_eq!(d.fast_increase_factor, 2.0);
        // alpha does not depend on the target; the target scales with R0.
        let d6 = NsccDerived::compute(&CcConfig::nscc(800.0, MTU, MSS), 6_000);
        assert_eq!(
            (d6.a, d6.target_qdelay_ns, d6.maxwnd),
            (4.0, 4_500.0, 900_000)
        );

        let no_trim = CcConfig {
            trimming: false,
            ..CcConfig::nscc(100.0, MTU, MSS)
        };
        assert_eq!(
            NsccDerived::compute(&no_trim, 12_000).target_qdelay_ns,
            12_000.0
        );
        let paper = CcConfig {
            paper: PaperFeatures::ALL,
            ..CcConfig::nscc(100.0, MTU, MSS)
        };
        let d = NsccDerived::compute(&paper, 12_000);
        assert_eq!((d.target_qdelay_ns, d.maxwnd), (6_000.0, 187_500));
        let explicit = CcConfig {
            target_pct: 40,
            ..paper
        };
        assert_eq!(
            NsccDerived::compute(&explicit, 12_000).target_qdelay_ns,
            4_800.0
        );
    }

    #[test]
    fn initial_window_is_maxwnd_unless_configured() {
        let c = nscc(CcConfig {
            initial_cwnd: 0,
            ..cfg()
        });
        assert_eq!(c.cwnd(), 225_000);
        assert_eq!(nscc(cfg()).cwnd(), W0);
        // Unseeded: the 12 us reference until measured.
        let c = nscc(CcConfig::nscc(100.0, MTU, MSS));
        assert_eq!((c.base_rtt(), c.cwnd()), (REFERENCE_RTT_NS, 225_000));
    }

    #[test]
    fn fair_increase_is_batched_until_eight_mtus() {
        let mut c = nscc(cfg());
        // No ECN, delay 10 us >= target: fair increase credit, not applied yet.
        for _ in 0..8 {
            ack(&mut c, 1_000, false, 10_000);
        }
        assert_eq!(c.cwnd(), W0, "32768 acked bytes do not fulfill");
        ack(&mut c, 1_000, false, 10_000);
        let fi = 5.0 * MSS as f64;
        let expect = W0 as f64 + fi * 9.0 * MTU as f64 / W0 as f64;
        assert_eq!(c.cwnd(), expect as u64);
        let s = c.stats();
        assert_eq!((s.fair_increase, s.fulfills), (9, 1));
    }

    #[test]
    fn proportional_increase_follows_the_headroom() {
        let w0 = 50_000.0;
        let mut c = nscc(CcConfig {
            initial_cwnd: w0 as u32,
            ..cfg()
        });
        for _ in 0..9 {
            ack(&mut c, 1_000, false, 3_000);
        }
        let alpha = 4.0 * MSS as f64 / 12_000.0;
        // The credit is divided by cwnd: small windows grow faster.
        let expect = w0 + alpha * 9.0 * MTU as f64 * (TARGET - 3_000.0) / w0;
        assert_eq!(c.cwnd(), expect as u64);
        assert_eq!(c.stats().proportional_increase, 9);
    }

    #[test]
    fn eta_is_added_once_per_base_rtt() {
        let mut c = nscc(cfg());
        // ECN + low delay adds no credit; only the time-driven eta moves cwnd.
        ack(&mut c, 1_000, true, 3_000);
        assert_eq!(c.cwnd(), W0);
        ack(&mut c, 1_000 + BASE, true, 3_000);
        assert_eq!(c.cwnd(), W0, "exactly one base RTT is not yet a fulfill");
        ack(&mut c, 1_001 + BASE, true, 3_000);
        assert_eq!(c.cwnd(), (W0 as f64 + 0.15 * MSS as f64) as u64);
        ack(&mut c, 2_000 + BASE, true, 3_000);
        assert_eq!(c.cwnd(), (W0 as f64 + 0.15 * MSS as f64) as u64);
        assert_eq!(c.stats().steer_only, 4);
    }

    #[test]
    fn steer_only_leaves_the_window_alone() {
        let mut c = nscc(cfg());
        for _ in 0..20 {
            ack(&mut c, 1_000, true, 3_000);
        }
        assert_eq!(c.cwnd(), W0);
        let s = c.stats();
        assert_eq!((s.steer_only, s.fair_decreases, s.ecn_echoes), (20, 0, 20));
    }

    #[test]
    fn wait_to_decrease_applies_fair_decrease_above_a_quarter_marked() {
        let mut c = nscc(CcConfig {
            paper: PaperFeatures {
                wait_to_decrease: true,
                ..PaperFeatures::default()
            },
            ..cfg()
        });
        // avg_wtd = 1 - 0.875^k: 0.125, 0.234, 0.330 -> only the third decreases.
        ack(&mut c, 1_000, true, 3_000);
        ack(&mut c, 1_000, true, 3_000);
        assert_eq!(c.cwnd(), W0);
        ack(&mut c, 1_000, true, 3_000);
        let w1 = W0 as f64 - W0 as f64 / 150_000.0 * 0.8 * MTU as f64;
        assert_eq!(c.cwnd(), w1 as u64);
        ack(&mut c, 1_000, true, 3_000);
        let w1 = w1 as u32 as f64;
        let w2 = w1 - w1 / 150_000.0 * 0.8 * MTU as f64;
        assert_eq!(c.cwnd(), w2 as u64);
        assert_eq!(c.stats().fair_decreases, 2);
    }

    #[test]
    fn multiplicative_decrease_uses_the_average_and_is_rate_limited() {
        // A full-weight EWMA makes avg_delay equal to the last sample.
        let mut c = nscc(CcConfig {
            delay_ewma_weight: 1.0,
            ..cfg()
        });
        ack(&mut c, 1_000, true, 18_000);
        // severity (18 - 9) / 18 = 0.5 -> keep 1 - 0.8 * 0.5 = 0.6
        assert_eq!(c.cwnd(), 60_000);
        ack(&mut c, 1_000 + BASE, true, 18_000);
        assert_eq!(c.cwnd(), 60_000, "at most one decrease per base RTT");
        ack(&mut c, 1_001 + BASE, true, 18_000);
        // 0.6 again, then the fulfill of this base RTT adds eta.
        assert_eq!(c.cwnd(), (36_000.0 + 0.15 * MSS as f64) as u64);
        let s = c.stats();
        assert_eq!((s.multiplicative_decrease, s.decreases_applied), (3, 2));

        // Severity 0.82 would keep 34 %; the floor keeps 50 %.
        let mut c = nscc(CcConfig {
            delay_ewma_weight: 1.0,
            ..cfg()
        });
        ack(&mut c, 1_000, true, 50_000);
        assert_eq!(c.cwnd(), W0 / 2);
    }

    #[test]
    fn multiplicative_decrease_needs_the_average_above_target() {
        let mut c = nscc(cfg());
        ack(&mut c, 1_000, true, 18_000);
        // avg = 0.0125 * 18000 = 225 ns < target: the raw delay alone does not cut.
        assert_eq!(c.cwnd(), W0);
        assert_eq!(c.stats().multiplicative_decrease, 1);
        assert_eq!(c.stats().decreases_applied, 0);
    }

    #[test]
    fn paper_decrease_uses_rtts() {
        let mut c = nscc(CcConfig {
            delay_ewma_weight: 1.0,
            paper: PaperFeatures {
                md_rtt: true,
                ..PaperFeatures::default()
            },
            ..cfg()
        });
        ack(&mut c, 1_000, true, 18_000);
        // (30 - 21) / 30 = 0.3 -> keep 0.76
        assert_eq!(c.cwnd(), 76_000);
    }

    #[test]
    fn delay_ewma_has_three_cases() {
        let mut c = nscc(CcConfig {
            delay_ewma_weight: 0.5,
            ..cfg()
        });
        // Normal: trusted sample (below target, no ECN).
        ack(&mut c, 1_000, false, 5_000);
        assert_eq!(c.avg_delay(), 2_500.0);
        // Discount: no ECN and above target -> 0.25 * base RTT stands in.
        ack(&mut c, 1_000, false, 20_000);
        assert_eq!(c.avg_delay(), 0.5 * 3_000.0 + 0.5 * 2_500.0);
        // Normal with ECN: the high sample is trusted.
        ack(&mut c, 1_000, true, 20_000);
        assert_eq!(c.avg_delay(), 0.5 * 20_000.0 + 0.5 * 2_750.0);
        // Emergency: ECN and more than 5 base RTTs -> weight pinned at 0.0125.
        let before = c.avg_delay();
        ack(&mut c, 1_000, true, 70_000);
        let expect = 0.0125 * 70_000.0 + (1.0 - 0.0125) * before;
        assert!(
            (c.avg_delay() - expect).abs() < 0.01,
            "{} vs {expect}",
            c.avg_delay()
        );
    }

    #[test]
    fn invalid_samples_neither_move_the_base_nor_the_average() {
        let mut c = nscc(cfg());
        ack(&mut c, 1_000, true, 8_000);
        let avg = c.avg_delay();
        let fb = AckFeedback {
            newly_acked_bytes: MTU as u64,
            in_flight_bytes: 0,
            ecn: true,
            rtt: Some(RttSample::validate(2_000, 2, false)),
        };
        c.on_ack(1_000, &fb);
        assert_eq!((c.base_rtt(), c.avg_delay()), (BASE, avg));
        c.on_ack(1_000, &AckFeedback { rtt: None, ..fb });
        assert_eq!(c.stats().invalid_rtt_samples, 2);
        // The invalid ACKs used avg_delay (100 ns < target): steer, not decrease.
        assert_eq!(c.stats().steer_only, 3);
    }

    #[test]
    fn base_rtt_min_tracks_and_rescales() {
        let mut c = nscc(CcConfig {
            initial_cwnd: 0,
            ..cfg()
        });
        assert_eq!(c.cwnd(), 225_000);
        let fb = AckFeedback {
            newly_acked_bytes: MTU as u64,
            in_flight_bytes: 0,
            ecn: true,
            rtt: Some(RttSample::validate(10_000, 1, false)),
        };
        c.on_ack(1_000, &fb);
        assert_eq!(c.base_rtt(), 10_000);
        // bdp 125 kB, maxwnd 187.5 kB: the window is clamped at once.
        assert_eq!(c.cwnd(), 187_500);
        assert_eq!(c.derived().target_qdelay_ns, 7_500.0);
        c.on_ack(
            1_000,
            &AckFeedback {
                rtt: Some(RttSample::validate(30_000, 1, false)),
                ..fb
            },
        );
        assert_eq!(c.base_rtt(), 10_000, "never rises");
        // A small packet's shorter round trip does not lower it.
        c.on_ack(
            1_000,
            &AckFeedback {
                rtt: Some(RttSample::validate(4_000, 1, false).from_small_packet()),
                ..fb
            },
        );
        assert_eq!(c.base_rtt(), 10_000, "small packets do not set the base");

        // Unseeded: the first sample replaces the 12 us reference, even upwards.
        let mut c = nscc(CcConfig::nscc(100.0, MTU, MSS));
        c.on_ack(
            1_000,
            &AckFeedback {
                rtt: Some(RttSample::validate(30_000, 1, false)),
                ..fb
            },
        );
        assert_eq!(c.base_rtt(), 30_000);
        let fresh = |c: &Nscc| NsccDerived::compute(&c.cfg, c.base_rtt());
        assert_eq!(c.derived(), fresh(&c), "the kept parameters follow a rise");
        c.on_ack(
            1_000,
            &AckFeedback {
                rtt: Some(RttSample::validate(25_000, 1, false)),
                ..fb
            },
        );
        assert_eq!(c.base_rtt(), 25_000);
        assert_eq!(c.derived(), fresh(&c), "and a new minimum");
        assert_eq!(c.derived().target_qdelay_ns, 18_750.0);
    }

    /// Opens a QuickAdapt window at t=1000 (ends at 1000 + 12000 + 9000 =
    /// 22000) and acks `n` MTUs in it.
    fn qa_window(c: &mut Nscc, n: usize) {
        qa_window_in_flight(c, n, 50_000);
    }

    /// [`qa_window`] with `in_flight` bytes left after each ACK.
    fn qa_window_in_flight(c: &mut Nscc, n: usize, in_flight: u64) {
        ack_in_flight(c, 1_000, false, 3_000, in_flight);
        for _ in 0..n {
            ack_in_flight(c, 5_000, false, 3_000, in_flight);
        }
    }

    #[test]
    fn nack_fires_quick_adapt_then_ignores_stale_signals() {
        let mut c = nscc(cfg());
        qa_window(&mut c, 3);
        let before = c.cwnd();
        c.on_nack(23_000, MTU as u64, true, 50_000);
        // achieved 3 MTUs < maxwnd >> 3: the window becomes what was delivered.
        assert_eq!(c.cwnd(), 3 * MTU as u64);
        assert!(before > c.cwnd());
        assert_eq!(c.stats().quick_adapt_events, 1);
        // Ignore phase: marked ACKs and NACKs of the 50000 bytes in flight
        // leave the window alone...
        ack(&mut c, 24_000, true, 20_000);
        c.on_nack(24_000, MTU as u64, true, 40_000);
        assert_eq!(c.cwnd(), 3 * MTU as u64);
        assert_eq!(c.stats().quick_adapt_ignored, 2);
        // ...unmarked ACKs are processed (fair increase counted)...
        ack(&mut c, 24_000, false, 20_000);
        assert_eq!(c.stats().fair_increase, 1);
        // ...and once 50000 bytes went by, marked feedback counts again.
        for _ in 0..10 {
            ack(&mut c, 24_000, false, 3_000);
        }
        c.on_nack(24_000, MTU as u64, false, 10_000);
        assert_eq!(c.stats().quick_adapt_ignored, 2);
        assert_eq!(c.stats().nacks_fabric, 1);
    }

    #[test]
    fn quick_adapt_is_gated_on_achieved_bytes() {
        let mut c = nscc(cfg());
        // 8 MTUs = 32768 >= maxwnd >> 3 = 28125: the flow is not stalled.
        qa_window(&mut c, 8);
        let before = c.cwnd();
        c.on_nack(23_000, MTU as u64, false, 50_000);
        assert_eq!(c.stats().quick_adapt_events, 0);
        // Without QuickAdapt a NACK takes its size off the window.
        assert_eq!(c.cwnd(), before - MTU as u64);
    }

    #[test]
    fn quick_adapt_waits_for_its_window_to_end() {
        let mut c = nscc(cfg());
        qa_window(&mut c, 3);
        c.on_nack(21_000, MTU as u64, true, 50_000);
        assert_eq!(c.stats().quick_adapt_events, 0);
        assert_eq!(c.cwnd(), W0 - MTU as u64);
        // The NACK armed the trigger: the first feedback after the window fires.
        ack(&mut c, 22_001, false, 3_000);
        assert_eq!(c.stats().quick_adapt_events, 1);
        assert_eq!(c.cwnd(), 4 * MTU as u64);
    }

    #[test]
    fn quick_adapt_fires_on_extreme_delay_without_loss() {
        let mut c = nscc(cfg());
        qa_window(&mut c, 2);
        // Its window held the sender back: what it achieved is what the
        // network delivered.
        c.on_window_limited();
        // 40 us > 4 * 9 us target, no ECN, no NACK.
        ack(&mut c, 23_000, false, 40_000);
        assert_eq!(c.stats().quick_adapt_events, 1);
        assert_eq!(c.cwnd(), 3 * MTU as u64);
        // Moderate delay in the next window does not fire it.
        let mut c = nscc(cfg());
        qa_window(&mut c, 2);
        c.on_window_limited();
        ack(&mut c, 23_000, false, 30_000);
        assert_eq!(c.stats().quick_adapt_events, 0);
    }

    #[test]
    fn extreme_delay_of_a_sender_that_left_its_window_unused_does_not_fire() {
        // An application-limited sender (a pull request, a small message)
        // whose ACK the peer's host held back: two MTUs achieved say
        // nothing about the network.
        let mut c = nscc(cfg());
        qa_window_in_flight(&mut c, 2, 0);
        let before = c.cwnd();
        ack_in_flight(&mut c, 23_000, false, 40_000, 0);
        assert_eq!(c.stats().quick_adapt_events, 0);
        assert!(c.cwnd() >= before);
        // Held back in one window, not in the next: only the first counts.
        let mut c = nscc(cfg());
        qa_window_in_flight(&mut c, 2, 0);
        c.on_window_limited();
        ack_in_flight(&mut c, 23_000, false, 3_000, 0);
        assert_eq!(c.stats().quick_adapt_events, 0);
        ack_in_flight(&mut c, 46_000, false, 40_000, 0);
        assert_eq!(c.stats().quick_adapt_events, 0);
        // Half the window in flight is a window in use (a flow's tail,
        // everything sent): it fires.
        let mut c = nscc(cfg());
        qa_window_in_flight(&mut c, 2, 0);
        ack_in_flight(&mut c, 23_000, false, 40_000, W0 / 2);
        assert_eq!(c.stats().quick_adapt_events, 1);
        // The reference simulator's rule: any sender.
        let mut c = nscc(CcConfig {
            qa_window_limited: false,
            ..cfg()
        });
        qa_window_in_flight(&mut c, 2, 0);
        ack_in_flight(&mut c, 23_000, false, 40_000, 0);
        assert_eq!(c.stats().quick_adapt_events, 1);
        assert_eq!(c.cwnd(), 3 * MTU as u64);
    }

    #[test]
    fn a_nack_fires_quick_adapt_whatever_the_sender_had_to_send() {
        let mut c = nscc(cfg());
        qa_window(&mut c, 2);
        c.on_nack(23_000, MTU as u64, false, 0);
        assert_eq!(c.stats().quick_adapt_events, 1);
        assert_eq!(c.cwnd(), 2 * MTU as u64);
    }

    #[test]
    fn idle_restart_starts_a_new_quick_adapt_window() {
        // A ping-pong message: one MTU acked in the window, then the pipe
        // drains and the sender waits for the reply. The next message's first
        // ACK comes long after the window and sees the receiver's wake-up as
        // 40 us of delay.
        let mut c = nscc(cfg());
        qa_window(&mut c, 0);
        c.on_idle_restart();
        ack(&mut c, 500_000, false, 40_000);
        // Only a new window opened: nothing was measured before the gap.
        assert_eq!(c.stats().quick_adapt_events, 0);
        assert_eq!(c.stats().idle_restarts, 1);
        assert!(c.cwnd() >= W0 - MTU as u64);
        // The new window judges the busy period on its own: held back by
        // its window and still stalled at its end, it fires.
        c.on_window_limited();
        ack(&mut c, 500_000 + 22_000, false, 40_000);
        assert_eq!(c.stats().quick_adapt_events, 1);
        assert_eq!(c.cwnd(), MTU as u64);

        // The same gap without the restart: the first ACK after it fires,
        // measuring the one MTU of the window the gap stretched.
        let mut c = nscc(CcConfig {
            qa_idle_restart: false,
            ..cfg()
        });
        qa_window(&mut c, 0);
        c.on_window_limited();
        c.on_idle_restart();
        ack(&mut c, 500_000, false, 40_000);
        assert_eq!(c.stats().idle_restarts, 0);
        assert_eq!(c.stats().quick_adapt_events, 1);
        assert_eq!(c.cwnd(), MTU as u64);
    }

    #[test]
    fn idle_restart_drops_a_trigger_from_before_the_gap() {
        let mut c = nscc(cfg());
        qa_window(&mut c, 3);
        // A NACK inside the window arms the trigger...
        c.on_nack(21_000, MTU as u64, true, 0);
        c.on_idle_restart();
        // ...but the pipe drained before the window ended: an ACK of the next
        // busy period, with no congestion of its own, does not fire.
        ack(&mut c, 400_000, false, 3_000);
        ack(&mut c, 400_000 + 22_000, false, 3_000);
        assert_eq!(c.stats().quick_adapt_events, 0);
    }

    #[test]
    fn paper_quick_adapt_scales_by_0_8() {
        let mut c = nscc(CcConfig {
            paper: PaperFeatures {
                qa_scaling: true,
                ..PaperFeatures::default()
            },
            ..cfg()
        });
        qa_window(&mut c, 5);
        c.on_nack(23_000, MTU as u64, true, 50_000);
        assert_eq!(c.cwnd(), (0.8 * 5.0 * MTU as f64) as u64);
    }

    /// Acks MTUs with 500 ns of queueing until FastIncrease switches on;
    /// returns how many it took. Checks that it starts exactly when the
    /// uncongested bytes exceed cwnd.
    fn until_fast_increase(c: &mut Nscc) -> u64 {
        for n in 1..100u64 {
            let before = c.cwnd();
            ack(c, 1_000, false, 500);
            if c.stats().fast_increase_events == 1 {
                assert!(n * MTU as u64 > before, "started early at {n}");
                return n;
            }
            assert!(n * MTU as u64 <= c.cwnd(), "not started at {n}");
        }
        panic!("FastIncrease never started");
    }

    /// Per-ACK growth while FastIncrease is on, on ACKs without a fulfill.
    fn fast_increase_steps(c: &mut Nscc, acks: usize) -> Vec<u64> {
        let mut steps = Vec::new();
        for _ in 0..acks {
            let (w, f) = (c.cwnd(), c.stats().fulfills);
            ack(c, 1_000, false, 500);
            if c.stats().fulfills == f {
                steps.push(c.cwnd() - w);
            }
        }
        steps
    }

    #[test]
    fn fast_increase_after_a_window_of_empty_queue() {
        let mut c = nscc(cfg());
        until_fast_increase(&mut c);
        let steps = fast_increase_steps(&mut c, 10);
        assert!(steps.len() >= 5);
        // 0.25 * a per acked byte, with a = 1.
        assert!(steps.iter().all(|&s| s == MTU as u64 / 4), "{steps:?}");
        // A delayed ACK ends it; the count starts over.
        ack(&mut c, 1_000, false, 2_000);
        let acks = c.stats().fast_increase_acks;
        ack(&mut c, 1_000, false, 500);
        assert_eq!(c.stats().fast_increase_acks, acks);
    }

    #[test]
    fn paper_fast_increase_adds_k_mtus_per_ack() {
        let mut c = nscc(CcConfig {
            paper: PaperFeatures {
                fast_increase: true,
                ..PaperFeatures::default()
            },
            fast_increase_mtus: 2,
            ..cfg()
        });
        until_fast_increase(&mut c);
        let steps = fast_increase_steps(&mut c, 10);
        assert!(steps.len() >= 5);
        assert!(steps.iter().all(|&s| s == 2 * MTU as u64), "{steps:?}");
    }

    #[test]
    fn multiplicative_decrease_ends_fast_increase() {
        let mut c = nscc(CcConfig {
            delay_ewma_weight: 1.0,
            ..cfg()
        });
        until_fast_increase(&mut c);
        ack(&mut c, 1_000, true, 18_000);
        assert_eq!(c.stats().decreases_applied, 1);
        let acks = c.stats().fast_increase_acks;
        ack(&mut c, 1_000, false, 500);
        assert_eq!(c.stats().fast_increase_acks, acks);
    }

    #[test]
    fn nacks_shrink_the_window_and_feed_the_average() {
        for last_hop in [false, true] {
            let mut c = nscc(cfg());
            ack(&mut c, 1_000, false, 3_000);
            let avg = c.avg_delay();
            c.on_nack(2_000, MTU as u64, last_hop, 50_000);
            // A synthetic marked sample of one network RTT of queueing.
            let expect = 0.0125 * BASE as f64 + (1.0 - 0.0125) * avg;
            assert!((c.avg_delay() - expect).abs() < 0.01);
            assert_eq!(c.cwnd(), W0 - MTU as u64);
            let s = c.stats();
            assert_eq!(
                (s.nacks_fabric, s.nacks_last_hop),
                (!last_hop as u64, last_hop as u64)
            );
        }
    }

    #[test]
    fn timeouts_shrink_the_window_to_at_least_one_mtu() {
        let mut c = nscc(CcConfig {
            initial_cwnd: 2 * MTU,
            ..cfg()
        });
        c.on_timeout(1_000, MTU as u64);
        assert_eq!(c.cwnd(), MTU as u64);
        c.on_timeout(2_000, MTU as u64);
        assert_eq!(c.cwnd(), MTU as u64);
        assert_eq!(c.stats().timeouts, 2);
    }

    #[test]
    fn window_stays_within_one_mtu_and_maxwnd() {
        let mut c = nscc(CcConfig {
            initial_cwnd: 220_000,
            ..cfg()
        });
        for i in 0..200 {
            ack(&mut c, 1_000 + i * 20_000, false, 0);
        }
        assert_eq!(c.cwnd(), 225_000);
        for i in 0..100 {
            c.on_nack(10_000_000 + i, 20_000, false, 0);
        }
        assert_eq!(c.cwnd(), MTU as u64);
    }
}
