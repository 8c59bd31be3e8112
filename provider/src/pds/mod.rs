//! Packet delivery sublayer: per-peer delivery contexts (PDCs).
//!
//! A peer pair has one PDC per direction. The sender side ([`TxPdc`]) hands
//! out PSNs, remembers what each unacknowledged PSN carried, processes
//! cumulative + selective ACKs and decides what to retransmit. The receiver
//! side ([`RxPdc`]) deduplicates PSNs (so each packet is delivered exactly
//! once) and builds the ACKs. Neither touches sockets or clocks: `now` is an
//! argument.

pub mod rx;
pub mod tx;

pub use rx::{Arrival, RxPdc};
pub use tx::{AckOutcome, SlotKind, TxPdc, TxSlot};

/// `a < b` in PSN space (wrapping 32-bit sequence numbers).
pub fn psn_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// `a <= b` in PSN space.
pub fn psn_le(a: u32, b: u32) -> bool {
    a == b || psn_lt(a, b)
}
