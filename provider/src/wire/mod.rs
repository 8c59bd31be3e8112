//! UET 1.0 packet layouts carried over UDP (DESIGN.md section 4).
//!
//! One file per header. Each offers a parsed representation (`*Repr`) with
//! `parse`, which validates lengths and field values and never panics on any
//! input, and `emit`, which writes the header into a buffer the caller sized
//! with `LEN`. All multi-byte fields are big-endian.
//!
//! A data packet is `prologue+request (12 B) | SES header | payload`; an ACK
//! is `prologue+ACK_CC (32 B)`.

pub mod ack;
pub mod control;
pub mod nack;
pub mod prologue;
pub mod request;
pub mod ses;

pub use ack::AckRepr;
pub use control::{ControlRepr, ControlType};
pub use nack::{NackCode, NackRepr};
pub use prologue::{NextHeader, PacketType, Prologue};
pub use request::RequestRepr;
pub use ses::{SesOpcode, SesRequestRepr, SesResponseRepr};

/// Why a datagram was not understood.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("datagram shorter than its headers")]
    Truncated,
    #[error("unknown packet type {0}")]
    UnknownType(u8),
    #[error("unknown next-header value {0}")]
    UnknownNextHeader(u8),
    #[error("unknown SES opcode {0}")]
    UnknownOpcode(u8),
    #[error("field value out of range")]
    Malformed,
}

pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
pub(crate) fn be64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}
pub(crate) fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}
