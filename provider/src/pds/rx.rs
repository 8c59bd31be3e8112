//! Receiver side of a PDC: duplicate detection and ACK state.

use super::{psn_le, psn_lt};
use crate::wire::{AckRepr, RequestRepr};

/// How the receiver treats an arriving PSN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// First arrival: deliver the payload.
    New,
    /// Already received: drop the payload, acknowledge again.
    Duplicate,
    /// Beyond the window the receiver tracks: drop without state change.
    OutOfWindow,
    /// Ordered delivery (ROD) and not the next PSN: dropped, and the
    /// sender told at once (its cumulative PSN stays), so it goes back.
    OutOfOrder,
}

/// Receiver state of one PDC.
#[derive(Debug)]
pub struct RxPdc {
    pub local_id: u16,
    /// The sender's PDC ID (its SPDCID).
    pub remote_id: u16,
    pub start_psn: u32,
    /// Every PSN up to and including `cack` has arrived.
    cack: u32,
    /// Bit i: PSN `cack + 1 + i` has arrived. Length = window.
    seen: Vec<u64>,
    window: u32,
    /// Bytes accepted, headers included (the ACK's rcvd_bytes field).
    pub rcvd_bytes: u64,
    /// Bytes accepted since the last ACK (coalescing trigger).
    pub unacked_bytes: usize,
    /// PSN of the latest arrival, reported as the ACK's trigger.
    pub last_psn: u32,
    /// When it arrived: the ACK reports how long after (its service time).
    pub last_arrival_at: u64,
    /// Close requests sent since the sender last showed it holds this
    /// context (any packet of it, data or control): a context silent for
    /// long is asked to close, and dropped when nobody answers (its sender
    /// is gone).
    pub close_asks: u16,
    /// When the sender last showed it (no request yet), or when the
    /// latest request left.
    pub quiet_since: u64,
    /// When the reclaim timer last found this context's messages all in
    /// (none with packets still to come): its next look is due a quiet
    /// period after that (`Engine::rx_reclaim_due`).
    pub reclaim_checked: u64,
    /// Highest attempt number (payload) of a close of this context
    /// answered so far: an older attempt the network delivers late is
    /// dropped unanswered, so answers never go back from a refusal to a
    /// confirmation the sender would take for a stale one.
    pub close_attempt: u16,
    pub last_was_retx: bool,
    /// A probe or an ACK request asked for the ACK owed, and no data came
    /// since: it leaves with the P flag.
    pub answering_probe: bool,
    /// A packet since the last ACK arrived with ECN CE: echo it (M flag).
    pub ecn_echo: bool,
    /// Packets that arrived ahead of a hole since the last ACK.
    pub ooo_count: u16,
    /// A packet since the last ACK asked for it (AR) without NO_WAIT, or
    /// came again or out of order: its sender waits for that ACK, which
    /// must not be held for our reply.
    pub ack_awaited: bool,
    /// A packet since the last ACK asked for it with NO_WAIT: unless
    /// `ack_awaited`, the ACK may wait for our next send.
    pub ack_may_wait: bool,
    /// An ACK is owed; `ack_due` is when it must leave at the latest.
    pub ack_pending: bool,
    pub ack_due: u64,
    /// Reliable ordered delivery: only the next PSN is accepted.
    pub ordered: bool,
}

impl RxPdc {
    /// The sender showed it holds this context at `now`.
    pub fn heard(&mut self, now: u64) {
        self.quiet_since = now;
        self.close_asks = 0;
    }

    pub fn new(local_id: u16, remote_id: u16, start_psn: u32, window: usize) -> RxPdc {
        // A power of two, so PSN modulo the ring size stays consistent across the
        // 32-bit wrap.
        let words = window.next_power_of_two().div_ceil(64).max(1);
        RxPdc {
            local_id,
            remote_id,
            start_psn,
            cack: start_psn.wrapping_sub(1),
            seen: vec![0; words],
            window: (words * 64) as u32,
            rcvd_bytes: 0,
            unacked_bytes: 0,
            last_psn: start_psn.wrapping_sub(1),
            last_arrival_at: 0,
            close_asks: 0,
            quiet_since: 0,
            reclaim_checked: 0,
            close_attempt: 0,
            last_was_retx: false,
            answering_probe: false,
            ecn_echo: false,
            ooo_count: 0,
            ack_awaited: false,
            ack_may_wait: false,
            ack_pending: false,
            ack_due: 0,
            ordered: false,
        }
    }

    /// Whether a SYN request belongs to this context (a retransmitted
    /// SYN), not to a new one the sender opened: same peer ID, same start
    /// PSN.
    pub fn opened_by(&self, syn: &RequestRepr) -> bool {
        self.remote_id == syn.spdcid && self.start_psn == syn.syn_start_psn()
    }

    /// The same context in ordered mode (ROD).
    pub fn ordered(mut self) -> RxPdc {
        self.ordered = true;
        self
    }

    pub fn cack(&self) -> u32 {
        self.cack
    }

    fn bit(&self, psn: u32) -> bool {
        let i = psn.wrapping_sub(self.cack).wrapping_sub(1);
        let slot = self.slot(i);
        self.seen[slot / 64] & (1 << (slot % 64)) != 0
    }

    /// Ring position of offset `i` past cack+1 (the ring start moves with cack).
    fn slot(&self, i: u32) -> usize {
        (self.cack.wrapping_add(1).wrapping_add(i) % self.window) as usize
    }

    /// How an arriving PSN would be treated, without recording it.
    pub fn classify(&self, psn: u32) -> Arrival {
        if psn_le(psn, self.cack) {
            return Arrival::Duplicate;
        }
        let ahead = psn.wrapping_sub(self.cack).wrapping_sub(1);
        if ahead >= self.window {
            return Arrival::OutOfWindow;
        }
        if self.bit(psn) {
            return Arrival::Duplicate;
        }
        if self.ordered && ahead > 0 {
            return Arrival::OutOfOrder;
        }
        Arrival::New
    }

    /// Classify an arriving PSN and record it when new.
    pub fn arrive(&mut self, psn: u32) -> Arrival {
        let verdict = self.classify(psn);
        if verdict == Arrival::New {
            self.accept(psn);
        }
        verdict
    }

    /// Record a PSN [`classify`](Self::classify) found new.
    pub fn accept(&mut self, psn: u32) {
        let ahead = psn.wrapping_sub(self.cack).wrapping_sub(1);
        if ahead > 0 {
            self.ooo_count = self.ooo_count.saturating_add(1);
        }
        let slot = self.slot(ahead);
        self.seen[slot / 64] |= 1 << (slot % 64);
        // Advance the cumulative point over every contiguous arrival,
        // clearing bits as they leave the ring.
        loop {
            let next = self.cack.wrapping_add(1);
            let s = (next % self.window) as usize;
            if self.seen[s / 64] & (1 << (s % 64)) == 0 {
                break;
            }
            self.seen[s / 64] &= !(1 << (s % 64));
            self.cack = next;
        }
    }

    /// Fill the PDS fields of the ACK sent at `now` for the current state
    /// and reset the coalescing counters.
    pub fn build_ack(&mut self, now: u64) -> AckRepr {
        let skip = self.sack_skip();
        let bitmap = self.sack_bitmap_from(skip);
        let offset = self.last_psn.wrapping_sub(self.cack) as i32;
        use crate::wire::prologue::flags::{ACK_M, ACK_P, ACK_RETX};
        let mut flags = 0;
        if self.last_was_retx {
            flags |= ACK_RETX;
        }
        if std::mem::take(&mut self.answering_probe) {
            flags |= ACK_P;
        }
        if self.ecn_echo {
            flags |= ACK_M;
        }
        let ack = AckRepr {
            flags,
            ack_psn_offset: offset.clamp(i16::MIN as i32, i16::MAX as i32) as i16,
            cack_psn: self.cack,
            spdcid: self.local_id,
            dpdcid: self.remote_id,
            mpr: (self.window / 8).min(255) as u8,
            sack_offset: 1 + skip as i16,
            sack_bitmap: bitmap,
            rcvd_bytes: ((self.rcvd_bytes >> 8) & 0x00ff_ffff) as u32,
            ooo_count: self.ooo_count,
            service_time: AckRepr::service_time_of(now.saturating_sub(self.last_arrival_at)),
            ..AckRepr::default()
        };
        self.ack_pending = false;
        self.ack_awaited = false;
        self.ack_may_wait = false;
        self.ecn_echo = false;
        self.unacked_bytes = 0;
        self.ooo_count = 0;
        ack
    }

    /// Where the SACK bitmap starts, as PSNs skipped past `cack + 1`: at
    /// `cack + 1` unless the packet that triggers the ACK lies further
    /// ahead, then it ends at that packet (the reference simulator's
    /// choice). With a hole at `cack + 1` that keeps being trimmed, packets
    /// more than 64 ahead of it would otherwise never be reported and
    /// their timers would expire although they arrived.
    fn sack_skip(&self) -> u32 {
        let ahead = self.last_psn.wrapping_sub(self.cack).wrapping_sub(1);
        if ahead >= self.window {
            // Behind the cumulative point, or outside the window.
            return 0;
        }
        ahead.saturating_sub(63).min(i16::MAX as u32 - 1)
    }

    /// Bit i: PSN `cack + 1 + i` arrived, for i < 64.
    #[cfg(test)]
    fn sack_bitmap(&self) -> u64 {
        self.sack_bitmap_from(0)
    }

    /// Bit i: PSN `cack + 1 + skip + i` arrived, for i < 64: one or two
    /// word reads of the ring (the window is a power of two of at least 64
    /// bits, and `skip + 63` stays inside it).
    fn sack_bitmap_from(&self, skip: u32) -> u64 {
        let start = self.slot(skip);
        let (word, shift) = (start / 64, start % 64);
        let low = self.seen[word] >> shift;
        if shift == 0 {
            return low;
        }
        let next = self.seen[(word + 1) % self.seen.len()];
        low | next << (64 - shift)
    }

    /// True when `psn` was received (for tests and diagnostics).
    pub fn has(&self, psn: u32) -> bool {
        if psn_le(psn, self.cack) {
            return true;
        }
        psn_lt(psn, self.cack.wrapping_add(1).wrapping_add(self.window)) && self.bit(psn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sack_bitmap_matches_the_bits_one_by_one() {
        for window in [64usize, 128, 256] {
            for start in [0u32, 5, 63, 64, 100, u32::MAX - 70] {
                let mut rx = RxPdc::new(1, 2, start, window);
                // Advance cack by a varying amount, then leave holes.
                for step in 0..3u32 {
                    for k in 0..(window as u32) {
                        let psn = rx.cack().wrapping_add(1).wrapping_add(k);
                        if (k * 7 + step) % 3 == 0 {
                            rx.arrive(psn);
                        }
                    }
                    let base = rx.cack().wrapping_add(1);
                    let naive = (0..64u32)
                        .filter(|&i| rx.bit(base.wrapping_add(i)))
                        .fold(0u64, |b, i| b | 1 << i);
                    assert_eq!(rx.sack_bitmap(), naive, "window {window} start {start}");
                    assert_eq!(rx.build_ack(0).sack_bitmap, naive);
                }
            }
        }
    }

    #[test]
    fn sack_bitmap_ends_at_a_trigger_far_past_the_hole() {
        let mut rx = RxPdc::new(1, 2, 0, 256);
        // PSN 0 missing (trimmed again and again), 1..=100 arrived.
        for psn in 1..=100u32 {
            rx.arrive(psn);
            rx.last_psn = psn;
        }
        let ack = rx.build_ack(0);
        assert_eq!(ack.cack_psn, u32::MAX);
        // The bitmap covers 37..=100: the trigger and the 63 before it.
        assert_eq!(ack.sack_offset, 38);
        assert_eq!(ack.sack_bitmap, u64::MAX);
        let sacked = |psn: u32| {
            let i = psn.wrapping_sub(ack.cack_psn.wrapping_add(ack.sack_offset as u32));
            i < 64 && ack.sack_bitmap & (1 << i) != 0
        };
        assert!(sacked(100) && sacked(37) && !sacked(36));
        // A trigger within 64 of the hole keeps the bitmap at the hole.
        rx.last_psn = 50;
        let ack = rx.build_ack(0);
        assert_eq!(ack.sack_offset, 1);
        assert_eq!(ack.sack_bitmap, u64::MAX << 1);
        // So does a duplicate below the cumulative point.
        rx.arrive(0);
        rx.last_psn = 0;
        let ack = rx.build_ack(0);
        assert_eq!((ack.cack_psn, ack.sack_offset), (100, 1));
    }

    #[test]
    fn in_order_and_duplicates() {
        let mut rx = RxPdc::new(1, 2, u32::MAX - 2, 128);
        for i in 0..6u32 {
            let psn = (u32::MAX - 2).wrapping_add(i);
            assert_eq!(rx.arrive(psn), Arrival::New);
            assert_eq!(rx.arrive(psn), Arrival::Duplicate);
        }
        assert_eq!(rx.cack(), 2);
    }

    #[test]
    fn holes_are_sacked_then_filled() {
        let mut rx = RxPdc::new(1, 2, 100, 128);
        assert_eq!(rx.arrive(100), Arrival::New);
        assert_eq!(rx.arrive(102), Arrival::New);
        assert_eq!(rx.arrive(104), Arrival::New);
        let ack = rx.build_ack(0);
        assert_eq!(ack.cack_psn, 100);
        assert_eq!(ack.sack_bitmap, 0b1010);
        assert_eq!(rx.arrive(101), Arrival::New);
        assert_eq!(rx.cack(), 102);
        assert_eq!(rx.arrive(103), Arrival::New);
        assert_eq!(rx.cack(), 104);
        assert!(rx.has(104) && !rx.has(105));
    }

    #[test]
    fn window_bounds() {
        let mut rx = RxPdc::new(1, 2, 0, 64);
        assert_eq!(rx.arrive(64), Arrival::OutOfWindow);
        assert_eq!(rx.arrive(63), Arrival::New);
        assert_eq!(rx.cack(), u32::MAX);
    }

    #[test]
    fn ring_reuse_after_many_packets() {
        let mut rx = RxPdc::new(1, 2, 7, 64);
        for k in 0..1000u32 {
            let a = 7 + 2 * k + 1;
            let b = 7 + 2 * k;
            assert_eq!(rx.arrive(a), Arrival::New);
            assert_eq!(rx.arrive(b), Arrival::New);
        }
        assert_eq!(rx.cack(), 7 + 2000 - 1);
    }
}
