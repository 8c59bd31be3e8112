//! UET 1.0 packet layouts carried over UDP (DESIGN.md section 4).
//!
//! One file per header. Each offers a parsed representation (`*Repr`) with
//! `parse`, which validates lengths and field values and never panics on any
//! input, and `emit`, which writes the header into a buffer the caller sized
//! with `LEN`. All multi-byte fields are big-endian.
//!
//! Each module also has a `Packet<T: AsRef<[u8]>>` view (smoltcp style):
//! `new_checked` validates the length, after which the field accessors never
//! panic; setters exist when `T: AsMut<[u8]>`.
//!
//! A data packet is `prologue+request (12 B) | SES header (44 B) |
//! [rendezvous extension (28 B)] | payload`; an ACK is `prologue+ACK_CC
//! (32 B)` (or a plain 24 B ACK); NACKs and control packets are 16 B.
//! A request may end in an ACK_CC it carries for its receiver
//! ([`ack_trailer`]). `provider/README.md` draws every layout.

pub mod ack;
pub mod ack_trailer;
pub mod control;
pub mod ip;
pub mod nack;
pub mod prologue;
pub mod relay;
pub mod rendezvous;
pub mod request;
pub mod ses;

pub use ack::{AckRepr, PlainAckRepr};
pub use control::{ControlRepr, ControlType};
pub use ip::{Ecn, Trim};
pub use nack::{NackCode, NackRepr};
pub use prologue::{NextHeader, PacketType, Prologue};
pub use relay::RelayHeader;
pub use rendezvous::{HostMemoryRepr, RendezvousRepr, HOST_MEMORY_RESOURCE};
pub use request::RequestRepr;
pub use ses::{SesOpcode, SesRequestRepr, SesResponseRepr};

/// The UDP port UET uses by default: an endpoint that names no port binds it
/// when free, and an address given without a port means it.
pub const UET_UDP_PORT: u16 = 4793;

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

/// Declares a view `$name<T: AsRef<[u8]>>` over a header with the
/// smoltcp-style constructors; `$len` is the shortest buffer its accessors
/// may read, so a view made by `new_checked` never panics.
macro_rules! packet_view {
    ($(#[$doc:meta])* $name:ident, len = $len:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wrap a buffer without checking it; accessors panic if it is short.
            pub const fn new_unchecked(buffer: T) -> $name<T> {
                $name { buffer }
            }

            /// Wrap a buffer long enough for every accessor.
            pub fn new_checked(buffer: T) -> Result<$name<T>, $crate::wire::WireError> {
                let p = $name::new_unchecked(buffer);
                p.check_len()?;
                Ok(p)
            }

            pub fn check_len(&self) -> Result<(), $crate::wire::WireError> {
                if self.buffer.as_ref().len() < $len {
                    Err($crate::wire::WireError::Truncated)
                } else {
                    Ok(())
                }
            }

            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The bytes after this header.
            pub fn after_header(&self) -> &[u8] {
                &self.buffer.as_ref()[$len..]
            }
        }
    };
}
pub(crate) use packet_view;

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
