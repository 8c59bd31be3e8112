//! NSCC, the per-peer window controller of NSCC.md §1-5.
//!
//! The window moves in four quadrants chosen from the raw queueing delay of
//! each ACK and its ECN echo; increases accumulate and are applied in batches
//! ("fulfill"), decreases are immediate. A slow EWMA of the delay sizes the
//! multiplicative decrease; QuickAdapt resets the window to what was actually
//! delivered when a flow is badly overdriven; FastIncrease refills an empty
//! pipe. Parameters scale with the bandwidth-delay product of the link rate
//! (configured) and the base RTT (measured, min-tracking).

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
        let maxwnd = (bdp * maxwnd_factor).clamp(cfg.mtu as f64, u32::MAX as f64) as u64;
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
        NsccDerived::compute(&self.cfg, self.s.base_rtt as u64)
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

    fn clamp(&mut self, d: &NsccDerived) {
        let w = (self.s.cwnd as u64).clamp(self.cfg.mtu as u64, d.maxwnd.max(self.cfg.mtu as u64));
        self.s.cwnd = sat32(w);
    }

    /// Min-track the base RTT. The first sample of an unseeded flow replaces
    /// the provisional reference value, which may be too low for this path.
    fn update_base_rtt(&mut self, raw: u64) {
        let raw = sat32(raw.max(MIN_BASE_RTT_NS));
        if !self.flag(FLAG_BASE_MEASURED) {
            self.s.base_rtt = raw;
            self.set_flag(FLAG_BASE_MEASURED, true);
        } else if raw < self.s.base_rtt {
            self.s.base_rtt = raw;
        }
    }

    /// The three-case delay EWMA (§2 step 2).
    fn update_avg_delay(&mut self, delay: f64, ecn: bool, d: &NsccDerived) {
        let w = self.cfg.delay_ewma_weight;
        let avg = self.s.avg_delay as f64;
        let new = if !ecn && delay > d.target_qdelay_ns {
            // High delay without a mark is likely one bad path: barely trust it.
            w * (0.25 * d.base_rtt_ns as f64) + (1.0 - w) * avg
        } else if delay > 5.0 * d.base_rtt_ns as f64 {
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
        d: &NsccDerived,
    ) -> bool {
        if self.s.bytes_ignored < self.s.bytes_to_ignore && congested {
            // Stale congestion signals from before the reset.
            self.s.inc_bytes = 0.0;
            self.s.received = 0;
            self.n.quick_adapt_ignored += 1;
            return true;
        }
        let mut fired = false;
        if now > self.s.qa_end {
            let triggered =
                self.flag(FLAG_TRIGGER_QA) || loss || delay > QA_DELAY_FACTOR * d.target_qdelay_ns;
            if self.s.qa_end != 0
                && triggered
                && (self.s.achieved as u64) < d.maxwnd >> QA_GATE_SHIFT
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
            self.s.achieved = 0;
            self.s.qa_end = now + d.base_rtt_ns + d.target_qdelay_ns as u64;
        }
        fired
    }

    /// FastIncrease (§4); true when it handled this ACK.
    fn fast_increase(&mut self, newly: u64, delay: f64, d: &NsccDerived) -> bool {
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
            newly as f64 * d.fast_increase_factor
        };
        self.set_cwnd(self.s.cwnd as f64 + add);
        self.n.fast_increase_acks += 1;
        true
    }

    fn multiplicative_decrease(&mut self, now: u64, d: &NsccDerived) {
        let avg = self.s.avg_delay as f64;
        let target = d.target_qdelay_ns;
        if !(avg > target && now.saturating_sub(self.s.last_dec_time) > d.base_rtt_ns) {
            return;
        }
        let severity = if self.cfg.paper.md_rtt {
            let base = d.base_rtt_ns as f64;
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

    /// Apply batched increases (§2 step 7).
    fn fulfill(&mut self, now: u64, d: &NsccDerived) {
        let elapsed = now.saturating_sub(self.s.last_adjust_time);
        if (self.s.received as u64) <= FULFILL_MTUS * self.cfg.mtu as u64
            && elapsed <= d.base_rtt_ns
        {
            return;
        }
        let mut w = self.s.cwnd as f64 + self.s.inc_bytes / self.s.cwnd.max(1) as f64;
        if elapsed >= d.base_rtt_ns {
            w += d.eta;
            self.s.last_adjust_time = now;
        }
        self.set_cwnd(w);
        self.s.inc_bytes = 0.0;
        self.s.received = 0;
        self.n.fulfills += 1;
        self.clamp(d);
    }

    /// Process one ACK (§2).
    pub fn on_ack(&mut self, now: u64, fb: &AckFeedback) {
        if self.s.last_adjust_time == 0 {
            self.s.last_adjust_time = now;
        }
        let newly = fb.newly_acked_bytes;
        let ecn = fb.ecn;
        self.s.achieved = sat32(self.s.achieved as u64 + newly);
        self.s.received = sat32(self.s.received as u64 + newly);
        self.s.bytes_ignored = sat32(self.s.bytes_ignored as u64 + newly);
        self.n.acks += 1;
        self.n.ecn_echoes += ecn as u64;
        self.n.in_flight = fb.in_flight_bytes;

        let delay = match fb.rtt {
            Some(r) if r.valid => {
                self.update_base_rtt(r.raw_ns);
                let d = self.derived();
                let delay = r.raw_ns.saturating_sub(d.base_rtt_ns) as f64;
                self.update_avg_delay(delay, ecn, &d);
                delay
            }
            _ => {
                self.n.invalid_rtt_samples += 1;
                self.s.avg_delay as f64
            }
        };
        let d = self.derived();
        if self.cfg.paper.wait_to_decrease {
            let mark = if ecn { 1.0 } else { 0.0 };
            self.s.avg_wtd = WTD_WEIGHT * mark + (1.0 - WTD_WEIGHT) * self.s.avg_wtd;
        }

        if self.quick_adapt(now, ecn, false, delay, fb.in_flight_bytes, &d) {
            self.clamp(&d);
            return;
        }

        let target = d.target_qdelay_ns;
        match (ecn, delay >= target) {
            (false, true) => {
                self.n.fair_increase += 1;
                self.reset_fast_increase();
                self.s.inc_bytes += d.fi * newly as f64;
            }
            (false, false) => {
                self.n.proportional_increase += 1;
                if !self.fast_increase(newly, delay, &d) {
                    self.s.inc_bytes += d.alpha * newly as f64 * (target - delay);
                }
            }
            (true, true) => {
                self.n.multiplicative_decrease += 1;
                self.reset_fast_increase();
                self.multiplicative_decrease(now, &d);
            }
            (true, false) => {
                // Steer only: the load balancer moves off the marked path.
                self.n.steer_only += 1;
                self.reset_fast_increase();
                if self.cfg.paper.wait_to_decrease && self.s.avg_wtd > WTD_THRESHOLD {
                    let cwnd = self.s.cwnd as f64;
                    self.set_cwnd(cwnd - cwnd / d.bdp * FAIR_DECREASE * newly as f64);
                    self.n.fair_decreases += 1;
                }
            }
        }
        self.clamp(&d);
        self.fulfill(now, &d);
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
        let d = self.derived();
        // A trim means a full queue: feed the EWMA a marked sample of one
        // network RTT of queueing.
        let synthetic = d.base_rtt_ns as f64;
        self.update_avg_delay(synthetic, true, &d);
        self.set_flag(FLAG_TRIGGER_QA, true);
        if !self.quick_adapt(now, true, true, synthetic, in_flight_bytes, &d) {
            self.set_cwnd((self.s.cwnd as u64).saturating_sub(bytes) as f64);
        }
        self.clamp(&d);
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
            fulfills: n.fulfills,
            nacks_fabric: n.nacks_fabric,
            nacks_last_hop: n.nacks_last_hop,
            timeouts: n.timeouts,
        }
    }
}
