//! Sender side of a PDC: PSN allocation, the retransmission buffer, ACK
//! processing and the retransmission timer.

use std::collections::VecDeque;

use super::{psn_le, psn_lt};
use crate::wire::{AckRepr, ControlRepr, ControlType};

/// What an unacknowledged PSN carried, so it can be rebuilt for a
/// retransmission without keeping the packet bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotKind {
    /// A slice of an outgoing message.
    Data { msg_id: u16, offset: u64, len: u32 },
    /// An SES response for a message the peer sent us.
    Response { msg_id: u16, len: u32, code: u8 },
}

#[derive(Clone, Copy, Debug)]
pub struct TxSlot {
    pub kind: SlotKind,
    pub sent_at: u64,
    pub retries: u32,
    /// Times its timer expired since the cumulative PSN last moved: drives
    /// the backoff and declares the peer dead. Resends after a NACK
    /// (trimming) or SLEEK do not count, so a fabric that trims a lot never
    /// fails a live peer; nor do expiries before the receiver's latest
    /// progress, so packets an ordered receiver dropped behind a hole never
    /// add up to a dead peer.
    pub timeouts: u16,
    /// `TxPdc::advances` when `timeouts` was last counted.
    pub timeouts_epoch: u16,
    /// Bytes on the wire (headers included), for congestion control.
    pub bytes: u32,
    /// Entropy (source-port index) of the latest transmission.
    pub entropy: u16,
    pub acked: bool,
    /// Already queued for retransmission and not yet resent.
    pub queued: bool,
    /// Counted in the sender's in-flight bytes (false after a NACK took it
    /// out, until it is resent).
    pub in_flight: bool,
}

/// Result of processing one ACK.
#[derive(Debug, Default)]
pub struct AckOutcome {
    /// Slots acknowledged for the first time, in PSN order.
    pub newly_acked: Vec<SlotKind>,
    /// A round-trip sample (ns) from the triggering PSN, when valid.
    pub rtt_sample: Option<u64>,
    /// Raw round trip of the triggering PSN whether or not the sample is
    /// valid (congestion control keeps its own filter).
    pub rtt_raw: Option<u64>,
    /// Times the triggering packet was sent, and its entropy.
    pub trigger_sends: u32,
    /// Wire bytes of the triggering packet.
    pub trigger_bytes: u32,
    pub trigger_entropy: Option<u16>,
}

/// Sender state of one PDC.
#[derive(Debug)]
pub struct TxPdc {
    pub local_id: u16,
    /// The receiver's PDC ID, learned from its first ACK; until then every
    /// packet carries SYN.
    pub remote_id: Option<u16>,
    pub start_psn: u32,
    /// PSN of `slots[0]`: the oldest unacknowledged packet.
    base: u32,
    slots: VecDeque<TxSlot>,
    /// PSNs waiting to be retransmitted, oldest first.
    pub retransmit: VecDeque<u32>,
    srtt: u64,
    rttvar: u64,
    /// Earliest instant a slot's timer can expire (0 = none armed).
    pub rto_due: u64,
    /// Slots acknowledged out of order (SACKed above the oldest hole): the
    /// sender's view of the receiver's out-of-order count.
    sacked: usize,
    /// SLEEK loss recovery in progress (NSCC.md section 5).
    recovery: Option<Recovery>,
    /// Last ACK, last transmission and the outstanding probe: silence is
    /// measured from the latest of them.
    last_ack_at: u64,
    last_sent_at: u64,
    probe: Option<Probe>,
    /// Probes in a row no ACK followed: each doubles the silence before the
    /// next (up to [`PROBE_BACKOFF_MAX`] doublings), so a peer that stopped
    /// answering gets a few probes, not one every few round trips until
    /// the retransmission timer gives up on it.
    probes_unanswered: u8,
    /// Latest send time among first transmissions acknowledged so far: an
    /// unacknowledged packet sent well before it was overtaken (RACK-style,
    /// immune to retransmissions still on their way).
    latest_acked_sent_at: u64,
    /// What the latest ACK reported: every PSN up to its cumulative PSN + 1
    /// (the first missing one) and its 64 bits of SACK from
    /// `reported_from`; elsewhere, unacknowledged says nothing.
    reported_cack: u32,
    reported_from: u32,
    reported_until: u32,
    /// ACKs in a row that acknowledged nothing new while packets were
    /// outstanding (ordered delivery's loss signal).
    pub dupacks: u32,
    /// Wire bytes of the unacknowledged slots that count as in flight: an
    /// upper bound for the engine's in-flight estimate.
    counted_bytes: u64,
    /// Bytes of packets declared lost (timer, SLEEK, go-back-N, probe)
    /// since the engine last took them out of its in-flight estimate.
    lost_bytes: u64,
    /// ACKs that moved the cumulative PSN (wrapping): a slot's timeouts
    /// counted before the latest one are stale.
    advances: u16,
}

/// A SLEEK recovery episode: every PSN below `until` (the highest sent when
/// it began) is suspect; `scan` is the next one to examine.
#[derive(Clone, Copy, Debug)]
struct Recovery {
    until: u32,
    scan: u32,
}

/// Most doublings of the silence before a probe (30 us on loopback becomes
/// at most about 30 ms).
const PROBE_BACKOFF_MAX: u8 = 10;

/// A probe sent into silence, asking the receiver for an ACK.
#[derive(Clone, Copy, Debug)]
pub struct Probe {
    pub sent_at: u64,
    /// PSNs below it were sent before the probe.
    pub until: u32,
}

impl TxPdc {
    pub fn new(local_id: u16, start_psn: u32) -> TxPdc {
        TxPdc {
            local_id,
            remote_id: None,
            start_psn,
            base: start_psn,
            slots: VecDeque::new(),
            retransmit: VecDeque::new(),
            srtt: 0,
            rttvar: 0,
            rto_due: 0,
            sacked: 0,
            recovery: None,
            last_ack_at: 0,
            last_sent_at: 0,
            probe: None,
            probes_unanswered: 0,
            latest_acked_sent_at: 0,
            reported_cack: start_psn.wrapping_sub(1),
            reported_from: start_psn,
            reported_until: start_psn,
            dupacks: 0,
            counted_bytes: 0,
            lost_bytes: 0,
            advances: 0,
        }
    }

    /// Packets sent and not yet acknowledged (the window in use).
    pub fn in_flight(&self) -> usize {
        self.slots.len()
    }

    /// Wire bytes of the unacknowledged packets still counted in flight
    /// (not taken out by a NACK).
    pub fn counted_bytes(&self) -> u64 {
        self.counted_bytes
    }

    /// Bytes of the packets declared lost since the last call: they left
    /// the network, so they leave the in-flight count (as a NACK takes a
    /// trimmed packet out), and their resends count again.
    pub fn take_lost_bytes(&mut self) -> u64 {
        std::mem::take(&mut self.lost_bytes)
    }

    /// Queue slot `i` for retransmission as lost.
    fn queue_lost(&mut self, i: usize) {
        let Some(s) = self.slots.get_mut(i) else {
            return;
        };
        s.queued = true;
        if s.in_flight {
            s.in_flight = false;
            self.counted_bytes -= s.bytes as u64;
            self.lost_bytes += s.bytes as u64;
        }
        self.retransmit.push_back(self.base.wrapping_add(i as u32));
    }

    /// The oldest PSN not yet acknowledged cumulatively.
    pub fn base(&self) -> u32 {
        self.base
    }

    pub fn next_psn(&self) -> u32 {
        self.base.wrapping_add(self.slots.len() as u32)
    }

    /// Whether an ACK with cumulative PSN `cack_psn` covers every packet
    /// sent so far.
    pub fn acked_through_last(&self, cack_psn: u32) -> bool {
        cack_psn.wrapping_add(1) == self.next_psn()
    }

    /// Offset of a PSN from the start PSN, for the SYN field (12 bits).
    pub fn syn_offset(&self, psn: u32) -> Option<u16> {
        let off = psn.wrapping_sub(self.start_psn);
        (off <= 0xfff).then_some(off as u16)
    }

    /// Record a new packet; returns its PSN.
    pub fn push(&mut self, kind: SlotKind, now: u64, rto: u64, bytes: u32, entropy: u16) -> u32 {
        let psn = self.next_psn();
        self.slots.push_back(TxSlot {
            kind,
            sent_at: now,
            retries: 0,
            timeouts: 0,
            timeouts_epoch: self.advances,
            bytes,
            entropy,
            acked: false,
            queued: false,
            in_flight: true,
        });
        self.counted_bytes += bytes as u64;
        self.arm_timer(now + rto);
        self.last_sent_at = now;
        psn
    }

    /// Make sure the retransmission timer fires by `due`. Early is harmless:
    /// the expiry scan re-arms it for the slots not yet due.
    fn arm_timer(&mut self, due: u64) {
        if self.rto_due == 0 || due < self.rto_due {
            self.rto_due = due;
        }
    }

    pub fn slot(&self, psn: u32) -> Option<&TxSlot> {
        let i = psn.wrapping_sub(self.base) as usize;
        self.slots.get(i)
    }

    fn slot_mut(&mut self, psn: u32) -> Option<&mut TxSlot> {
        let i = psn.wrapping_sub(self.base) as usize;
        self.slots.get_mut(i)
    }

    /// Mark a queued retransmission as sent again on `entropy`; returns the
    /// slot as it was (its `in_flight` says whether it still counted).
    /// A queued packet leaves again; its timer is armed for `now + rto` at
    /// the latest (the expiry scan skips queued packets, so when every
    /// outstanding one was queued none was armed, and a lost resend would
    /// otherwise wait forever).
    pub fn resend(&mut self, psn: u32, now: u64, rto: u64, entropy: u16) -> Option<TxSlot> {
        let slot = self.slot_mut(psn)?;
        if slot.acked {
            return None;
        }
        let before = *slot;
        slot.queued = false;
        slot.retries += 1;
        slot.sent_at = now;
        slot.entropy = entropy;
        slot.in_flight = true;
        let retries = slot.retries;
        if !before.in_flight {
            self.counted_bytes += before.bytes as u64;
        }
        self.arm_timer(now + rto);
        self.last_sent_at = now;
        Some(TxSlot { retries, ..before })
    }

    /// Take a NACKed packet out of the in-flight count; returns its bytes
    /// and entropy when it was counted.
    pub fn uncount(&mut self, psn: u32) -> Option<(u32, u16)> {
        let (base, end) = (self.base, self.next_psn());
        if !(psn_le(base, psn) && psn_lt(psn, end)) {
            return None;
        }
        let slot = self.slot_mut(psn)?;
        if slot.acked || !slot.in_flight {
            return None;
        }
        slot.in_flight = false;
        let (bytes, entropy) = (slot.bytes, slot.entropy);
        self.counted_bytes -= bytes as u64;
        Some((bytes, entropy))
    }

    /// A NACK says `psn` was trimmed: queue it for retransmission now.
    /// False when there is nothing to resend (acked, queued, or unknown).
    pub fn nack(&mut self, psn: u32, now: u64) -> bool {
        let base = self.base;
        let end = self.next_psn();
        if !(psn_le(base, psn) && psn_lt(psn, end)) {
            return false;
        }
        let Some(slot) = self.slot_mut(psn) else {
            return false;
        };
        if slot.acked || slot.queued || slot.sent_at > now {
            return false;
        }
        slot.queued = true;
        // Ahead of timer-driven resends: the receiver is waiting for it.
        self.retransmit.push_front(psn);
        true
    }

    /// The receiver refused `psn` for lack of buffer (NACK 0x07): restart its
    /// timer from now with no retries counted, so a receiver that keeps
    /// answering is never declared dead for it.
    pub fn defer(&mut self, psn: u32, now: u64) {
        let (base, end) = (self.base, self.next_psn());
        if !(psn_le(base, psn) && psn_lt(psn, end)) {
            return;
        }
        if let Some(slot) = self.slot_mut(psn) {
            if !slot.acked && slot.sent_at <= now {
                slot.sent_at = now;
                slot.timeouts = 0;
            }
        }
    }

    /// The retransmission timeout for a packet retried `retries` times.
    /// Smoothed round-trip time in ns (0 before the first valid sample).
    pub fn srtt(&self) -> u64 {
        self.srtt
    }

    pub fn rto(&self, min: u64, max: u64, retries: u32) -> u64 {
        rto_for(self.srtt, self.rttvar, min, max, retries)
    }

    fn rtt_update(&mut self, sample: u64) {
        if self.srtt == 0 {
            self.srtt = sample;
            self.rttvar = sample / 2;
        } else {
            let err = self.srtt.abs_diff(sample);
            self.rttvar = (3 * self.rttvar + err) / 4;
            self.srtt = (7 * self.srtt + sample) / 8;
        }
    }

    /// Whether the ACK's cumulative PSN is one this context sent: an ACK
    /// beyond that is bogus.
    pub fn acks_only_sent(&self, ack: &AckRepr) -> bool {
        psn_lt(ack.cack_psn, self.next_psn())
    }

    /// Whether `psn` is a next-expected PSN a receiver of this context
    /// could report (its cumulative ACK + 1): from the first PSN sent up
    /// to the next one to send.
    pub fn could_expect(&self, psn: u32) -> bool {
        psn.wrapping_sub(self.start_psn) <= self.next_psn().wrapping_sub(self.start_psn)
    }

    /// Apply an ACK: cumulative PSN plus SACK bitmap.
    pub fn on_ack(&mut self, ack: &AckRepr, now: u64) -> AckOutcome {
        let mut out = AckOutcome::default();
        self.on_ack_into(ack, now, &mut out);
        out
    }

    /// [`TxPdc::on_ack`] into a caller-kept outcome, so the per-ACK path
    /// reuses its vector instead of allocating one.
    pub fn on_ack_into(&mut self, ack: &AckRepr, now: u64, out: &mut AckOutcome) {
        // Every field starts afresh; only the vector's capacity is kept.
        let mut acked = std::mem::take(&mut out.newly_acked);
        acked.clear();
        *out = AckOutcome {
            newly_acked: acked,
            ..AckOutcome::default()
        };
        // An ACK for PSNs never sent is bogus: ignore it whole (it names
        // no receiver context either).
        if !self.acks_only_sent(ack) {
            return;
        }
        let end = self.next_psn();
        if self.remote_id.is_none() {
            self.remote_id = Some(ack.spdcid);
        }
        self.last_ack_at = now;
        self.probes_unanswered = 0;
        let trigger = ack.cack_psn.wrapping_add(ack.ack_psn_offset as i32 as u32);
        use crate::wire::prologue::flags::{ACK_P, ACK_RETX};
        let retx_echo = ack.flags & ACK_RETX != 0;
        // No round trip from the answer to a probe (its trigger arrived
        // whenever it did), nor from an ACK held longer than its service
        // time field can say: either would put a stale packet's age into
        // SRTT and NSCC's delay (a ROD receiver's probe answers made SRTT
        // 190 ms and held every loss for a backed-off RTO).
        let fresh = ack.flags & ACK_P == 0 && ack.service_time < u16::MAX;
        if let Some(s) = self.slot(trigger).filter(|_| fresh) {
            if !s.acked && now >= s.sent_at {
                out.rtt_raw = Some(now - s.sent_at);
                out.trigger_sends = s.retries + 1;
                out.trigger_bytes = s.bytes;
                out.trigger_entropy = Some(s.entropy);
                // The receiver echoes whether the copy it saw was a
                // retransmission, so one resend still gives a sample
                // (NSCC.md section 2; plain Karn would discard it).
                if sample_is_valid(s.retries, retx_echo) {
                    out.rtt_sample = Some(now - s.sent_at);
                }
            }
        }
        // Slots the cumulative PSN acknowledges now were never SACKed.
        let mut cumulative = 0;
        if psn_le(self.base, ack.cack_psn) {
            let upto = ack.cack_psn.wrapping_sub(self.base) as usize + 1;
            for s in self.slots.iter_mut().take(upto) {
                if !s.acked {
                    s.acked = true;
                    if s.in_flight {
                        self.counted_bytes -= s.bytes as u64;
                    }
                    out.newly_acked.push(s.kind);
                    cumulative += 1;
                    if s.retries == 0 {
                        self.latest_acked_sent_at = self.latest_acked_sent_at.max(s.sent_at);
                    }
                }
            }
        }
        let sack_base = ack.cack_psn.wrapping_add(ack.sack_offset as i32 as u32);
        self.reported_cack = ack.cack_psn;
        self.reported_from = sack_base;
        self.reported_until = sack_base.wrapping_add(64);
        let mut bits = ack.sack_bitmap;
        while bits != 0 {
            let i = bits.trailing_zeros();
            bits &= bits - 1;
            let psn = sack_base.wrapping_add(i);
            if psn_lt(psn, end) && psn_le(self.base, psn) {
                if let Some(s) = self.slot_mut(psn) {
                    if !s.acked {
                        s.acked = true;
                        let counted = if s.in_flight { s.bytes as u64 } else { 0 };
                        out.newly_acked.push(s.kind);
                        let first_send = (s.retries == 0).then_some(s.sent_at);
                        self.counted_bytes -= counted;
                        self.sacked += 1;
                        if let Some(t) = first_send {
                            self.latest_acked_sent_at = self.latest_acked_sent_at.max(t);
                        }
                    }
                }
            }
        }
        if !out.newly_acked.is_empty() || self.slots.is_empty() {
            self.dupacks = 0;
        } else if self.probe.is_none() {
            // The answer to a probe acknowledges nothing new by design; it
            // is no sign of a packet dropped behind a hole.
            self.dupacks += 1;
        }
        // Every acked slot leaving the front was SACKed, except those the
        // cumulative PSN acknowledged just now.
        let mut popped = 0;
        while self.slots.front().is_some_and(|s| s.acked) {
            self.slots.pop_front();
            self.base = self.base.wrapping_add(1);
            popped += 1;
        }
        self.sacked = self.sacked.saturating_sub(popped - cumulative);
        if popped > 0 {
            self.advances = self.advances.wrapping_add(1);
        }
        if let Some(sample) = out.rtt_sample {
            self.rtt_update(sample);
        }
        if self.slots.is_empty() {
            self.rto_due = 0;
        }
    }

    /// Packets acknowledged out of order and still held behind a hole.
    pub fn sacked(&self) -> usize {
        self.sacked
    }

    /// A probe is out and not yet answered.
    pub fn probe_pending(&self) -> bool {
        self.probe.is_some()
    }

    pub fn in_recovery(&self) -> bool {
        self.recovery.is_some()
    }

    /// SLEEK loss recovery (NSCC.md section 5), run after each ACK. Once
    /// `threshold` packets have been acknowledged out of order, every
    /// unacknowledged packet below the highest sent at that moment is
    /// suspect; those a later transmission has overtaken (sent more than
    /// a quarter SRTT, the reordering allowance, before the latest first
    /// transmission acknowledged) are queued for retransmission, at most
    /// `budget` per call (one window), until the cumulative PSN passes the
    /// snapshot. The scan waits at the first suspect not yet overtaken.
    /// Returns how many were queued.
    pub fn sleek(&mut self, threshold: usize, budget: usize) -> usize {
        self.end_finished_recovery();
        if self.recovery.is_none() && self.sacked < threshold.max(1) {
            return 0;
        }
        self.begin_recovery();
        let overtaken_before = self.latest_acked_sent_at.saturating_sub(self.srtt / 4);
        self.recovery_scan(budget, Some(overtaken_before))
    }

    /// Continue the recovery episode's scan: queue unacknowledged packets
    /// below its snapshot, at most `budget`; with `sent_before`, wait at the
    /// first one sent at or after it.
    fn recovery_scan(&mut self, budget: usize, sent_before: Option<u64>) -> usize {
        let Some(mut r) = self.recovery else {
            return 0;
        };
        if psn_lt(r.scan, self.base) {
            r.scan = self.base;
        }
        let mut queued = 0;
        while queued < budget && psn_lt(r.scan, r.until) {
            let psn = r.scan;
            if let Some(s) = self.slot_mut(psn) {
                if !s.acked && !s.queued {
                    if sent_before.is_some_and(|t| s.sent_at >= t) {
                        break;
                    }
                    self.queue_lost(psn.wrapping_sub(self.base) as usize);
                    queued += 1;
                }
            }
            r.scan = r.scan.wrapping_add(1);
        }
        self.recovery = Some(r);
        queued
    }

    /// End the recovery episode once the cumulative PSN passed its snapshot.
    fn end_finished_recovery(&mut self) {
        if self.recovery.is_some_and(|r| psn_le(r.until, self.base)) {
            self.recovery = None;
        }
    }

    /// A new recovery episode unless one is under way: everything
    /// outstanding now is suspect.
    fn begin_recovery(&mut self) {
        if self.recovery.is_none() {
            self.recovery = Some(Recovery {
                until: self.next_psn(),
                scan: self.base,
            });
        }
    }

    /// Go back N (ordered delivery), run after each ACK: the receiver drops
    /// everything after a lost packet, so once `dupacks` ACKs in a row
    /// acknowledged nothing new, resend every unacknowledged packet from
    /// the oldest, at most `budget` per call, once per episode (until the
    /// cumulative PSN passes what was outstanding when it began). An
    /// episode that has finished ends here, so the ACK that finishes it
    /// never starts another. Returns how many were queued.
    pub fn go_back_n(&mut self, dupacks: u32, budget: usize) -> usize {
        self.end_finished_recovery();
        if self.recovery.is_none() && self.dupacks < dupacks.max(1) {
            return 0;
        }
        self.begin_recovery();
        self.recovery_scan(budget, None)
    }

    /// A control packet for the receiver's context of this PDC (probe, ACK
    /// request, close); `None` until the receiver has named its context.
    pub fn control(&self, ctl_type: ControlType, psn: u32) -> Option<ControlRepr> {
        Some(ControlRepr {
            ctl_type,
            flags: 0,
            probe_opaque: 0,
            psn,
            spdcid: self.local_id,
            dpdcid: self.remote_id?,
            payload: 0,
        })
    }

    /// When a probe is due (0 = never): packets are outstanding, the
    /// receiver's context is known, and nothing was heard, sent or probed
    /// for `silence` ns, doubled for every probe in a row that went
    /// unanswered.
    pub fn probe_due(&self, silence: u64) -> u64 {
        if self.slots.is_empty() || silence == 0 || self.remote_id.is_none() {
            return 0;
        }
        let probed = self.probe.map_or(0, |p| p.sent_at);
        let silence = silence.saturating_mul(1 << self.probes_unanswered);
        self.last_ack_at
            .max(self.last_sent_at)
            .max(probed)
            .saturating_add(silence)
    }

    /// A probe left now; it asks the receiver for an ACK.
    pub fn probe_sent(&mut self, now: u64) {
        if self.probe.is_some() {
            self.probes_unanswered = (self.probes_unanswered + 1).min(PROBE_BACKOFF_MAX);
        }
        self.probe = Some(Probe {
            sent_at: now,
            until: self.next_psn(),
        });
    }

    /// After an ACK: when a probe is outstanding and the ACK came within
    /// `fast` ns of it, the path is clear, so packets sent before the probe
    /// that this ACK could have reported (cumulative PSN + SACK range) and
    /// did not are lost: queue them. Returns how many.
    ///
    /// Only packets out for longer than a round trip as measured (SRTT + 4
    /// RTTVAR, queueing included) count: the probe is a control packet and
    /// overtakes queued data at every switch (NSCC.md section 8), so a
    /// prompt answer says nothing of data still waiting in a deep queue.
    pub fn probe_answered(&mut self, now: u64, fast: u64) -> usize {
        let Some(p) = self.probe.take() else {
            return 0;
        };
        if now.saturating_sub(p.sent_at) > fast {
            return 0;
        }
        let sent_before = p
            .sent_at
            .min(now.saturating_sub(self.srtt + 4 * self.rttvar));
        let mut queued = 0;
        let mut psn = self.base;
        let first_missing = self.reported_cack.wrapping_add(1);
        let (from, until) = (self.reported_from, self.reported_until);
        while psn_lt(psn, p.until) && psn_lt(psn, until) {
            // The SACK bitmap may start past the first missing PSN.
            let reported = psn_le(psn, first_missing) || psn_le(from, psn);
            if !reported {
                psn = from;
                continue;
            }
            if let Some(s) = self.slot_mut(psn) {
                if !s.acked && !s.queued && s.sent_at <= sent_before {
                    self.queue_lost(psn.wrapping_sub(self.base) as usize);
                    queued += 1;
                }
            }
            psn = psn.wrapping_add(1);
        }
        queued
    }

    /// Queue every packet whose timer expired. Returns the highest retry
    /// count among them, so the caller can give up on a dead peer; `expired`
    /// gets each one's bytes and entropy (for congestion control).
    pub fn on_timeout(&mut self, now: u64, min: u64, max: u64) -> u32 {
        self.on_timeout_with(now, min, max, |_, _| {})
    }

    pub fn on_timeout_with(
        &mut self,
        now: u64,
        min: u64,
        max: u64,
        mut expired: impl FnMut(u32, u16),
    ) -> u32 {
        let mut worst = 0;
        let mut next_due = u64::MAX;
        let (srtt, rttvar) = (self.srtt, self.rttvar);
        let rto = |retries: u32| rto_for(srtt, rttvar, min, max, retries);
        let epoch = self.advances;
        for i in 0..self.slots.len() {
            let s = &mut self.slots[i];
            if s.acked || s.queued {
                continue;
            }
            if s.timeouts_epoch != epoch {
                // The receiver has made progress since these expiries.
                s.timeouts = 0;
                s.timeouts_epoch = epoch;
            }
            let due = s.sent_at + rto(s.timeouts as u32);
            if due <= now {
                expired(s.bytes, s.entropy);
                s.timeouts = s.timeouts.saturating_add(1);
                worst = worst.max(s.timeouts as u32);
                next_due = next_due.min(now + rto(s.timeouts as u32));
                self.queue_lost(i);
            } else {
                next_due = next_due.min(due);
            }
        }
        self.rto_due = if next_due == u64::MAX { 0 } else { next_due };
        if worst > 0 {
            // After a timeout, loss recovery starts afresh from the oldest.
            self.recovery = None;
        }
        worst
    }

    /// Forget every packet (the peer is gone); returns what they carried.
    pub fn abandon(&mut self) -> Vec<SlotKind> {
        self.retransmit.clear();
        self.rto_due = 0;
        self.sacked = 0;
        self.recovery = None;
        self.probe = None;
        self.dupacks = 0;
        self.counted_bytes = 0;
        let kinds = self
            .slots
            .iter()
            .filter(|s| !s.acked)
            .map(|s| s.kind)
            .collect();
        self.base = self.base.wrapping_add(self.slots.len() as u32);
        self.slots.clear();
        kinds
    }
}

/// An RTT sample is valid when the packet was sent once and the receiver saw
/// that copy, or sent exactly twice and the receiver saw the resend.
pub fn sample_is_valid(retries: u32, retx_echo: bool) -> bool {
    (retries == 0 && !retx_echo) || (retries == 1 && retx_echo)
}

/// RFC 6298 timeout (srtt + 4 rttvar, clamped), doubled per retry.
fn rto_for(srtt: u64, rttvar: u64, min: u64, max: u64, retries: u32) -> u64 {
    let base = if srtt == 0 {
        min
    } else {
        (srtt + 4 * rttvar).clamp(min, max)
    };
    base.saturating_mul(1u64 << retries.min(20)).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(i: u32) -> SlotKind {
        SlotKind::Data {
            msg_id: 0,
            offset: i as u64 * 100,
            len: 100,
        }
    }

    fn ack(cack: u32, bitmap: u64) -> AckRepr {
        AckRepr {
            cack_psn: cack,
            sack_offset: 1,
            sack_bitmap: bitmap,
            spdcid: 5,
            ..AckRepr::default()
        }
    }

    #[test]
    fn cumulative_and_selective() {
        let mut tx = TxPdc::new(1, u32::MAX - 1);
        for i in 0..6 {
            tx.push(data(i), 0, 1000, 100, 0);
        }
        // cack = start (u32::MAX - 1), SACK the packets at +2 and +4.
        let out = tx.on_ack(&ack(u32::MAX - 1, 0b1010), 10);
        assert_eq!(out.newly_acked.len(), 3);
        assert_eq!(tx.remote_id, Some(5));
        assert_eq!(tx.in_flight(), 5);
        let out = tx.on_ack(&ack(3, 0), 20);
        assert_eq!(out.newly_acked.len(), 3);
        assert_eq!(tx.in_flight(), 0);
        assert_eq!(tx.rto_due, 0);
    }

    #[test]
    fn bogus_ack_ignored() {
        let mut tx = TxPdc::new(1, 100);
        tx.push(data(0), 0, 1000, 100, 0);
        assert!(tx.on_ack(&ack(500, 0), 5).newly_acked.is_empty());
        assert_eq!(tx.in_flight(), 1);
        // Nor does it name the receiver's context.
        assert_eq!(tx.remote_id, None);
    }

    #[test]
    fn timeout_backs_off() {
        let mut tx = TxPdc::new(1, 0);
        tx.push(data(0), 0, 1000, 100, 0);
        assert_eq!(tx.on_timeout(999, 1000, 8000), 0);
        assert_eq!(tx.on_timeout(1000, 1000, 8000), 1);
        assert_eq!(tx.retransmit.pop_front(), Some(0));
        let s = tx.resend(0, 1000, 1000, 0).unwrap();
        assert_eq!(s.retries, 1);
        // Second timer is twice as long.
        assert_eq!(tx.on_timeout(2999, 1000, 8000), 0);
        assert_eq!(tx.on_timeout(3000, 1000, 8000), 2);
    }

    #[test]
    fn a_resend_arms_the_timer_when_every_packet_was_queued() {
        let mut tx = TxPdc::new(1, 0);
        tx.push(data(0), 0, 1000, 100, 0);
        // Go back N queues it; its timer then finds nothing counted.
        tx.dupacks = 3;
        assert_eq!(tx.go_back_n(3, 8), 1);
        assert_eq!(tx.on_timeout(1000, 1000, 8000), 0);
        assert_eq!(tx.rto_due, 0);
        // The resend is lost too: its own timer must bring it back.
        tx.retransmit.clear();
        tx.resend(0, 1500, 1000, 0).unwrap();
        assert_eq!(tx.rto_due, 2500);
        assert_eq!(tx.on_timeout(2500, 1000, 8000), 1);
        assert_eq!(tx.retransmit.pop_front(), Some(0));
    }

    #[test]
    fn go_back_n_waits_for_three_dupacks_and_its_last_ack_starts_nothing() {
        let mut tx = TxPdc::new(1, 0);
        for i in 0..4 {
            tx.push(data(i), 0, 1000, 100, 0);
        }
        // Packet 1 is lost: the receiver acknowledges 0, then drops 2 and 3.
        tx.on_ack(&ack(0, 0), 10);
        assert_eq!(tx.go_back_n(3, 8), 0);
        tx.on_ack(&ack(0, 0), 11);
        tx.on_ack(&ack(0, 0), 12);
        assert_eq!(tx.go_back_n(3, 8), 0, "two duplicates are not enough");
        tx.on_ack(&ack(0, 0), 13);
        assert_eq!(tx.go_back_n(3, 8), 3);
        assert_eq!(
            tx.retransmit.iter().copied().collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        while let Some(psn) = tx.retransmit.pop_front() {
            tx.resend(psn, 20, 1000, 0);
        }
        // New data follows the resends; the ACK for the resends ends the
        // episode and must not take the new packets for lost.
        tx.push(data(4), 21, 1000, 100, 0);
        tx.push(data(5), 21, 1000, 100, 0);
        tx.on_ack(&ack(3, 0), 30);
        assert_eq!(tx.go_back_n(3, 8), 0);
        assert!(!tx.in_recovery());
        assert!(tx.retransmit.is_empty());
    }

    #[test]
    fn progress_of_the_receiver_forgets_earlier_timeouts() {
        let mut tx = TxPdc::new(1, 0);
        tx.push(data(0), 0, 1000, 100, 0);
        tx.push(data(1), 0, 1000, 100, 0);
        assert_eq!(tx.on_timeout(1000, 1000, 64_000), 1);
        assert_eq!(tx.on_timeout(1000, 1000, 64_000), 0);
        tx.retransmit.clear();
        tx.resend(0, 1500, 1000, 0);
        tx.resend(1, 1500, 1000, 0);
        // Both expire again: the second expiry counts and backs off.
        assert_eq!(tx.on_timeout(2500, 1000, 64_000), 0);
        assert_eq!(tx.on_timeout(3500, 1000, 64_000), 2);
        tx.retransmit.clear();
        tx.resend(0, 4000, 1000, 0);
        tx.resend(1, 4000, 1000, 0);
        // Packet 0 gets through: packet 1 starts counting afresh, with
        // the timeout a first expiry has.
        tx.on_ack(&ack(0, 0), 4100);
        assert_eq!(tx.on_timeout(5000, 1000, 64_000), 1);
    }

    #[test]
    fn the_answer_to_a_probe_is_no_duplicate_ack() {
        let mut tx = TxPdc::new(1, 0);
        for i in 0..4 {
            tx.push(data(i), 0, 1000, 100, 0);
        }
        tx.on_ack(&ack(0, 0), 10);
        tx.probe_sent(20);
        tx.on_ack(&ack(0, 0), 25);
        assert_eq!(tx.dupacks, 0);
        tx.probe_answered(25, 100);
        tx.on_ack(&ack(0, 0), 30);
        assert_eq!(tx.dupacks, 1);
    }

    #[test]
    fn probe_answers_and_overlong_holds_give_no_round_trip() {
        use crate::wire::prologue::flags::ACK_P;
        for (flags, service_time, sampled) in [
            (0, 0, true),
            (ACK_P, 0, false),
            (0, u16::MAX - 1, true),
            (0, u16::MAX, false),
        ] {
            let mut tx = TxPdc::new(1, 0);
            tx.push(data(0), 0, 1000, 100, 0);
            tx.push(data(1), 0, 1000, 100, 0);
            // Triggered by PSN 1; PSN 0 is the hole.
            let a = AckRepr {
                flags,
                service_time,
                cack_psn: u32::MAX,
                ack_psn_offset: 2,
                sack_offset: 1,
                sack_bitmap: 0b10,
                spdcid: 5,
                ..AckRepr::default()
            };
            let out = tx.on_ack(&a, 5_000_000);
            assert_eq!(
                out.rtt_sample.is_some(),
                sampled,
                "{flags:#x} {service_time}"
            );
            assert_eq!(out.rtt_raw.is_some(), sampled);
            assert_eq!(tx.srtt() != 0, sampled);
            // Acknowledged all the same.
            assert_eq!(out.newly_acked.len(), 1);
        }
    }

    #[test]
    fn rtt_sample_validation_uses_the_retransmission_echo() {
        assert!(sample_is_valid(0, false));
        assert!(!sample_is_valid(0, true));
        assert!(!sample_is_valid(1, false));
        assert!(sample_is_valid(1, true));
        assert!(!sample_is_valid(2, true));
        let mut tx = TxPdc::new(1, 0);
        tx.push(data(0), 0, 1000, 100, 0);
        tx.on_timeout(1000, 1000, 8000);
        tx.retransmit.clear();
        tx.resend(0, 1000, 1000, 0).unwrap();
        // The ACK says the retransmission was seen: a valid 500 ns sample.
        let a = AckRepr {
            flags: crate::wire::prologue::flags::ACK_RETX,
            ack_psn_offset: 0,
            ..ack(0, 0)
        };
        let out = tx.on_ack(&a, 1500);
        assert_eq!(out.rtt_sample, Some(500));
    }

    #[test]
    fn nack_queues_once_and_first() {
        let mut tx = TxPdc::new(1, 10);
        for i in 0..4 {
            tx.push(data(i), 0, 1000, 100, 0);
        }
        tx.on_timeout(1000, 1000, 8000);
        assert_eq!(tx.retransmit.len(), 4);
        tx.retransmit.clear();
        for psn in 10..14 {
            tx.resend(psn, 1000, 1000, 0);
        }
        assert!(tx.nack(12, 1100));
        assert!(!tx.nack(12, 1100), "already queued");
        assert!(!tx.nack(14, 1100), "never sent");
        assert!(!tx.nack(9, 1100), "below the window");
        assert_eq!(tx.retransmit.front(), Some(&12));
        tx.on_ack(&ack(11, 0), 1200);
        assert!(!tx.nack(11, 1200), "acked");
    }

    #[test]
    fn sack_hole_is_retransmitted() {
        let mut tx = TxPdc::new(1, 0);
        for i in 0..8 {
            tx.push(data(i), i as u64 * 10, 1000, 100, 0);
        }
        // PSN 0 arrived, 1 lost, 2..=5 arrived.
        tx.on_ack(&ack(0, 0b11110), 100);
        assert_eq!(tx.sacked(), 4);
        // Below SLEEK's threshold nothing is resent: spraying reorders.
        assert_eq!(tx.sleek(5, 8), 0);
        assert!(tx.retransmit.is_empty());
        // At the threshold the hole is; 6 and 7 are merely in flight (no
        // later transmission overtook them).
        assert_eq!(tx.sleek(4, 8), 1);
        assert_eq!(tx.retransmit.iter().copied().collect::<Vec<_>>(), vec![1]);
        assert!(tx.in_recovery());
        // The resend arrives: the cumulative PSN passes 5; 6 and 7 are
        // still below the snapshot, recovery lasts until they are in.
        tx.resend(1, 200, 1000, 0);
        tx.on_ack(&ack(5, 0), 300);
        assert_eq!(tx.sacked(), 0);
        assert_eq!(tx.sleek(4, 8), 0);
        tx.on_ack(&ack(7, 0), 400);
        assert_eq!(tx.sleek(4, 8), 0);
        assert!(!tx.in_recovery());
    }

    #[test]
    fn resends_after_nacks_do_not_count_towards_failure() {
        let mut tx = TxPdc::new(1, 0);
        tx.push(data(0), 0, 1000, 100, 0);
        let mut now = 0;
        for _ in 0..50 {
            now += 10;
            assert!(tx.nack(0, now));
            tx.retransmit.clear();
            tx.resend(0, now, 1000, 0);
        }
        assert_eq!(tx.slot(0).unwrap().retries, 50);
        // The first timeout after all that is the first strike.
        let worst = tx.on_timeout(now + 1_000_000, 100, 1000);
        assert_eq!(worst, 1);
    }

    #[test]
    fn sleek_paces_retransmissions_by_the_budget() {
        let mut tx = TxPdc::new(1, 0);
        for i in 0..20 {
            tx.push(data(i), i as u64 * 10, 1000, 100, 0);
        }
        // Every even PSN below 16 lost, the odd ones and 16..20 arrived.
        let mut sack = 0u64;
        for psn in 1..20u32 {
            if psn % 2 == 1 || psn >= 16 {
                sack |= 1 << psn;
            }
        }
        // cack = u32::MAX (nothing cumulative yet): SACK base is PSN 0.
        let mut a = ack(u32::MAX, 0);
        a.sack_offset = 1;
        a.sack_bitmap = sack;
        tx.on_ack(&a, 100);
        assert_eq!(tx.sacked(), 12);
        assert_eq!(tx.sleek(6, 3), 3);
        assert_eq!(tx.sleek(6, 3), 3);
        assert_eq!(tx.sleek(6, 3), 2);
        assert_eq!(
            tx.retransmit.iter().copied().collect::<Vec<_>>(),
            vec![0, 2, 4, 6, 8, 10, 12, 14]
        );
    }

    #[test]
    fn prompt_probe_answer_resends_what_is_missing() {
        let mut tx = TxPdc::new(1, 0);
        tx.remote_id = Some(9);
        for i in 0..4 {
            tx.push(data(i), 0, 1000, 100, 0);
        }
        // Silence of 300 ns after the last send at 0.
        assert_eq!(tx.probe_due(300), 300);
        tx.probe_sent(300);
        assert_eq!(tx.probe_due(300), 600, "one probe per silence period");
        // A slow answer says nothing about loss.
        tx.on_ack(&ack(0, 0), 10_000);
        assert_eq!(tx.probe_answered(10_000, 200), 0);
        // A prompt one: 1..=3 were sent before the probe and are missing.
        tx.probe_sent(10_100);
        tx.on_ack(&ack(0, 0), 10_200);
        assert_eq!(tx.probe_answered(10_200, 200), 3);
        assert_eq!(
            tx.retransmit.iter().copied().collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        // Nothing outstanding, nothing to probe.
        tx.on_ack(&ack(3, 0), 10_300);
        assert_eq!(tx.probe_due(300), 0);
    }

    #[test]
    fn unanswered_probes_back_off_until_an_ack_arrives() {
        let mut tx = TxPdc::new(1, 0);
        tx.remote_id = Some(9);
        tx.push(data(0), 0, 1_000_000, 100, 0);
        tx.push(data(1), 0, 1_000_000, 100, 0);
        // Silence doubles with every probe nobody answered.
        let mut at = tx.probe_due(300);
        assert_eq!(at, 300);
        let mut gaps = Vec::new();
        for _ in 0..13 {
            tx.probe_sent(at);
            let next = tx.probe_due(300);
            gaps.push(next - at);
            at = next;
        }
        assert_eq!(&gaps[..4], &[300, 600, 1200, 2400]);
        // Capped: 2^10 silences at most.
        assert!(gaps[10..].iter().all(|&g| g == 300 << PROBE_BACKOFF_MAX));
        // Any ACK shows the peer alive: back to one silence.
        tx.on_ack(&ack(0, 0), at);
        assert_eq!(tx.probe_due(300), at + 300);
    }

    #[test]
    fn probe_answer_spares_packets_that_may_still_be_queued() {
        let mut tx = TxPdc::new(1, 0);
        tx.remote_id = Some(9);
        tx.push(data(0), 0, 100_000, 100, 0);
        // One round trip of 10 us: SRTT 10 us, RTTVAR 5 us.
        tx.on_ack(&ack(0, 0), 10_000);
        assert_eq!(tx.srtt(), 10_000);
        for i in 1..4 {
            tx.push(data(i), 11_000, 100_000, 100, 0);
        }
        // The probe overtakes data in the queues: its prompt answer does
        // not make packets out for less than SRTT + 4 RTTVAR lost.
        tx.probe_sent(20_000);
        tx.on_ack(&ack(0, 0), 20_100);
        assert_eq!(tx.probe_answered(20_100, 200), 0);
        assert!(tx.retransmit.is_empty());
        // Out for longer than that, they are.
        tx.probe_sent(45_000);
        tx.on_ack(&ack(0, 0), 45_100);
        assert_eq!(tx.probe_answered(45_100, 200), 3);
    }

    #[test]
    fn probe_answer_skips_what_a_moved_sack_bitmap_leaves_out() {
        let mut tx = TxPdc::new(1, 0);
        tx.remote_id = Some(9);
        for i in 0..100 {
            tx.push(data(i), 0, 1000, 100, 0);
        }
        tx.probe_sent(300);
        // Nothing cumulative; the bitmap starts at PSN 36 (it ends at the
        // packet that triggered the ACK, 99) and has all of 36..=99.
        let mut a = ack(u32::MAX, u64::MAX);
        a.sack_offset = 37;
        tx.on_ack(&a, 400);
        // PSN 0 is the first missing one, 1..36 were not reported at all.
        assert_eq!(tx.probe_answered(400, 200), 1);
        assert_eq!(tx.retransmit.iter().copied().collect::<Vec<_>>(), vec![0]);
    }

    #[test]
    fn counted_bytes_follow_nacks_resends_and_acks() {
        let mut tx = TxPdc::new(1, 0);
        for i in 0..4 {
            tx.push(data(i), 0, 1000, 100, 0);
        }
        assert_eq!(tx.counted_bytes(), 400);
        // A NACK takes PSN 1 out; only once.
        assert_eq!(tx.uncount(1), Some((100, 0)));
        assert_eq!(tx.uncount(1), None);
        assert_eq!(tx.counted_bytes(), 300);
        // Acking a NACKed packet (its full copy had arrived) takes nothing.
        tx.on_ack(&ack(u32::MAX, 0b10), 10);
        assert_eq!(tx.counted_bytes(), 300);
        // Packets whose timer expired are lost: out of the count, once.
        tx.on_timeout(5000, 1000, 8000);
        assert_eq!(tx.counted_bytes(), 0);
        assert_eq!(tx.take_lost_bytes(), 300);
        assert_eq!(tx.take_lost_bytes(), 0);
        // A resend counts again.
        tx.retransmit.clear();
        tx.resend(2, 5000, 1000, 0);
        assert_eq!(tx.counted_bytes(), 100);
        tx.on_ack(&ack(3, 0), 6000);
        assert_eq!(tx.counted_bytes(), 0);
        // A resend after a NACK counts again.
        tx.push(data(4), 7000, 1000, 100, 0);
        tx.uncount(4);
        assert_eq!(tx.counted_bytes(), 0);
        tx.resend(4, 7100, 1000, 0);
        assert_eq!(tx.counted_bytes(), 100);
    }
}
