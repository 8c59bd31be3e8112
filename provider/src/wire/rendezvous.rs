//! Rendezvous extension header (28 B).
//!
//! A rendezvous send (SES opcode 6, or 0x0A tagged) carries only the first
//! `eager_length` bytes of the message; this header, placed between the SES
//! standard request header and the payload of its first packet (SOM), tells
//! the target where the rest is so it can pull it with an SES read once the
//! message is matched. Unexpected large messages thus cost the target only
//! the eager part.
//!
//! ```text
//!  0 eager_length (u32): message bytes carried by the send itself
//!  4 ri_generation (u8)
//!  5 PIDonFEP (12 bits) | resource index (12 bits): the initiator's resource to read from
//!  8 read_address (u64): initiator buffer address (or offset) of the first byte to pull
//! 16 read_key (u64): memory key the read must present
//! 24 read_length (u32): bytes to pull
//! ```
//! The target reads `read_length` bytes from `read_address` and places them
//! at message offset `eager_length`; `eager_length + read_length` is the SES
//! request length. All fields big-endian.
//!
//! When the resource index is [`HOST_MEMORY_RESOURCE`], a 40-byte host read
//! descriptor ([`HostMemoryRepr`]) follows: the remainder also lies, in one
//! piece, in the memory of a process of the initiator's host, so a target
//! on that host may copy it in place instead of pulling it over the network.
//!
//! ```text
//!  0 host (u64): the initiator's host (boot and PID namespace)
//!  8 pid (u32): the initiator's process, in that namespace
//! 12 expires (u32): 0 here; in a pull's descriptor, the host's
//!    CLOCK_MONOTONIC millisecond (wrapping) from which it may no longer
//!    be written
//! 16 address (u64): virtual address of the remainder's first byte
//! 24 offer (u64): a token the peer is to return in its own descriptors to
//!    this one; 0: none yet
//! 32 echo (u64): the latest token this peer offered the one that sends
//!    the descriptor; 0: none yet
//! ```
//! The tokens prove that whoever sent a descriptor receives what is sent to
//! its address (see `io/host_memory.rs`): only one that does can echo.

use super::{be32, be64, packet_view, put32, put64, WireError};

/// Resource index of a rendezvous header followed by a host read
/// descriptor.
pub const HOST_MEMORY_RESOURCE: u16 = 0xffe;

mod field {
    pub const EAGER_LENGTH: usize = 0;
    pub const RI_GENERATION: usize = 4;
    pub const PID_RI: usize = 5;
    pub const READ_ADDRESS: usize = 8;
    pub const READ_KEY: usize = 16;
    pub const READ_LENGTH: usize = 24;
}

packet_view!(
    /// A bounds-checked view of the rendezvous extension header.
    Packet, len = RendezvousRepr::LEN
);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn eager_length(&self) -> u32 {
        be32(self.buffer.as_ref(), field::EAGER_LENGTH)
    }
    pub fn ri_generation(&self) -> u8 {
        self.buffer.as_ref()[field::RI_GENERATION]
    }
    fn pid_ri(&self) -> u32 {
        let b = self.buffer.as_ref();
        let at = field::PID_RI;
        u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
    }
    pub fn pid_on_fep(&self) -> u16 {
        (self.pid_ri() >> 12) as u16
    }
    pub fn resource_index(&self) -> u16 {
        (self.pid_ri() & 0xfff) as u16
    }
    pub fn read_address(&self) -> u64 {
        be64(self.buffer.as_ref(), field::READ_ADDRESS)
    }
    pub fn read_key(&self) -> u64 {
        be64(self.buffer.as_ref(), field::READ_KEY)
    }
    pub fn read_length(&self) -> u32 {
        be32(self.buffer.as_ref(), field::READ_LENGTH)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_eager_length(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::EAGER_LENGTH, v);
    }
    pub fn set_ri_generation(&mut self, v: u8) {
        self.buffer.as_mut()[field::RI_GENERATION] = v;
    }
    /// Both 12-bit fields (each masked to its width).
    pub fn set_pid_resource(&mut self, pid_on_fep: u16, resource_index: u16) {
        let v = ((pid_on_fep as u32 & 0xfff) << 12) | (resource_index as u32 & 0xfff);
        let [_, x, y, z] = v.to_be_bytes();
        self.buffer.as_mut()[field::PID_RI..field::PID_RI + 3].copy_from_slice(&[x, y, z]);
    }
    pub fn set_read_address(&mut self, v: u64) {
        put64(self.buffer.as_mut(), field::READ_ADDRESS, v);
    }
    pub fn set_read_key(&mut self, v: u64) {
        put64(self.buffer.as_mut(), field::READ_KEY, v);
    }
    pub fn set_read_length(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::READ_LENGTH, v);
    }
}

/// Where bytes lie in the memory of a process on this host: the remainder
/// of a rendezvous send (after the extension header), or the receive
/// buffer a pull's bytes go to (a pull's payload).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct HostMemoryRepr {
    /// Names the host and PID namespace the process lives in.
    pub host: u64,
    pub pid: u32,
    /// A write target's expiry: the host's monotonic clock in milliseconds
    /// (wrapping) from which the memory may no longer be written.
    pub expires_ms: u32,
    pub address: u64,
    /// A token for the peer to return in its descriptors to this side.
    pub offer: u64,
    /// The latest token the peer offered this side (0: none yet).
    pub echo: u64,
}

impl HostMemoryRepr {
    pub const LEN: usize = 40;

    /// Parse the first `LEN` bytes of `b`. Never panics.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        let b = b.get(..Self::LEN).ok_or(WireError::Truncated)?;
        Ok(HostMemoryRepr {
            host: be64(b, 0),
            pid: be32(b, 8),
            expires_ms: be32(b, 12),
            address: be64(b, 16),
            offer: be64(b, 24),
            echo: be64(b, 32),
        })
    }

    /// Write the descriptor into `b[..LEN]`; panics if `b` is shorter.
    pub fn emit(&self, b: &mut [u8]) {
        put64(b, 0, self.host);
        put32(b, 8, self.pid);
        put32(b, 12, self.expires_ms);
        put64(b, 16, self.address);
        put64(b, 24, self.offer);
        put64(b, 32, self.echo);
    }
}

/// A parsed rendezvous extension header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RendezvousRepr {
    pub eager_length: u32,
    pub ri_generation: u8,
    /// 12 bits.
    pub pid_on_fep: u16,
    /// 12 bits.
    pub resource_index: u16,
    pub read_address: u64,
    pub read_key: u64,
    pub read_length: u32,
    /// The host memory descriptor; when present, the resource index on the
    /// wire is [`HOST_MEMORY_RESOURCE`] whatever `resource_index` says.
    pub host_read: Option<HostMemoryRepr>,
}

impl RendezvousRepr {
    /// Length of the header alone.
    pub const LEN: usize = 28;

    /// Bytes this header takes on the wire (with its descriptor).
    pub fn wire_len(&self) -> usize {
        Self::LEN + self.host_read.map_or(0, |_| HostMemoryRepr::LEN)
    }

    /// Parse the header and its host memory descriptor, if it has one; a read
    /// range that wraps the 64-bit address space is `Malformed`. Never
    /// panics.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        let v = Packet::new_checked(b)?;
        let mut r = RendezvousRepr {
            eager_length: v.eager_length(),
            ri_generation: v.ri_generation(),
            pid_on_fep: v.pid_on_fep(),
            resource_index: v.resource_index(),
            read_address: v.read_address(),
            read_key: v.read_key(),
            read_length: v.read_length(),
            host_read: None,
        };
        if r.resource_index == HOST_MEMORY_RESOURCE {
            r.host_read = Some(HostMemoryRepr::parse(&b[Self::LEN..])?);
        }
        if r.read_address.checked_add(r.read_length as u64).is_none() {
            return Err(WireError::Malformed);
        }
        Ok(r)
    }

    /// Write the header (and descriptor) into `b[..wire_len()]`; panics if
    /// `b` is shorter.
    pub fn emit(&self, b: &mut [u8]) {
        let resource_index = match self.host_read {
            Some(_) => HOST_MEMORY_RESOURCE,
            None => self.resource_index,
        };
        let mut v = Packet::new_unchecked(&mut b[..Self::LEN]);
        v.set_eager_length(self.eager_length);
        v.set_ri_generation(self.ri_generation);
        v.set_pid_resource(self.pid_on_fep, resource_index);
        v.set_read_address(self.read_address);
        v.set_read_key(self.read_key);
        v.set_read_length(self.read_length);
        if let Some(h) = &self.host_read {
            h.emit(&mut b[Self::LEN..Self::LEN + HostMemoryRepr::LEN]);
        }
    }

    /// The whole message length this header describes (eager + pulled);
    /// the engine checks it against the SES request length.
    pub fn total_length(&self) -> u64 {
        self.eager_length as u64 + self.read_length as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout_and_round_trip() {
        let r = RendezvousRepr {
            eager_length: 0x1000,
            ri_generation: 9,
            pid_on_fep: 0x123,
            resource_index: 0x456,
            read_address: 0x7f00_0000_1000,
            read_key: 0xfeed,
            read_length: 0x0010_0000,
            host_read: None,
        };
        let mut b = [0u8; RendezvousRepr::LEN];
        r.emit(&mut b);
        assert_eq!(&b[..8], &[0, 0, 0x10, 0, 9, 0x12, 0x34, 0x56]);
        assert_eq!(&b[24..], &[0, 0x10, 0, 0]);
        assert_eq!(RendezvousRepr::parse(&b), Ok(r));
        assert_eq!(r.total_length(), 0x0010_1000);
        assert_eq!(RendezvousRepr::parse(&b[..27]), Err(WireError::Truncated));
    }

    #[test]
    fn host_read_descriptor_follows_its_resource_index() {
        let r = RendezvousRepr {
            eager_length: 0x1000,
            read_address: 0x1000,
            read_length: 0x2000,
            resource_index: HOST_MEMORY_RESOURCE,
            host_read: Some(HostMemoryRepr {
                host: 0x0102_0304_0506_0708,
                pid: 4242,
                expires_ms: 0,
                address: 0x7f12_3456_7000,
                offer: 0x1111_2222_3333_4444,
                echo: 0x5555_6666_7777_8888,
            }),
            ..RendezvousRepr::default()
        };
        assert_eq!(r.wire_len(), 68);
        let mut b = [0xaau8; 68];
        r.emit(&mut b);
        assert_eq!(&b[5..8], &[0, 0x0f, 0xfe]);
        assert_eq!(&b[28..36], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[36..44], &[0, 0, 0x10, 0x92, 0, 0, 0, 0]);
        assert_eq!(&b[52..54], &[0x11, 0x11]);
        assert_eq!(&b[60..62], &[0x55, 0x55]);
        assert_eq!(RendezvousRepr::parse(&b), Ok(r));
        assert_eq!(
            RendezvousRepr::parse(&b[..67]),
            Err(WireError::Truncated),
            "a descriptor cut short"
        );
        // Without the resource index the same bytes are header and payload.
        b[7] = 0;
        let plain = RendezvousRepr::parse(&b).unwrap();
        assert_eq!((plain.host_read, plain.wire_len()), (None, 28));
    }

    #[test]
    fn wrapping_read_range_rejected() {
        let r = RendezvousRepr {
            read_address: u64::MAX,
            read_length: 1,
            ..RendezvousRepr::default()
        };
        let mut b = [0u8; RendezvousRepr::LEN];
        r.emit(&mut b);
        assert_eq!(RendezvousRepr::parse(&b), Err(WireError::Malformed));
    }

    pub(crate) fn any_rendezvous() -> impl Strategy<Value = RendezvousRepr> {
        let host_read = proptest::option::of(
            (
                (any::<u64>(), any::<u32>(), any::<u32>(), any::<u64>()),
                (any::<u64>(), any::<u64>()),
            )
                .prop_map(|((host, pid, expires_ms, address), (offer, echo))| {
                    HostMemoryRepr {
                        host,
                        pid,
                        expires_ms,
                        address,
                        offer,
                        echo,
                    }
                }),
        );
        (
            (any::<u32>(), any::<u8>(), 0u16..1 << 12, 0u16..1 << 12),
            (0u64..u64::MAX - u32::MAX as u64, any::<u64>(), any::<u32>()),
            host_read,
        )
            .prop_map(
                |(
                    (eager_length, ri_generation, pid_on_fep, resource_index),
                    (addr, key, len),
                    host_read,
                )| {
                    RendezvousRepr {
                        eager_length,
                        ri_generation,
                        pid_on_fep,
                        // The index on the wire says whether a descriptor follows.
                        resource_index: match host_read {
                            Some(_) => HOST_MEMORY_RESOURCE,
                            None if resource_index == HOST_MEMORY_RESOURCE => 0,
                            None => resource_index,
                        },
                        read_address: addr,
                        read_key: key,
                        read_length: len,
                        host_read,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(r in any_rendezvous()) {
            let mut b = [0u8; RendezvousRepr::LEN + HostMemoryRepr::LEN];
            r.emit(&mut b);
            prop_assert_eq!(RendezvousRepr::parse(&b), Ok(r));
        }

        #[test]
        fn parse_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(r) = RendezvousRepr::parse(&b) {
                let mut out = [0u8; RendezvousRepr::LEN + HostMemoryRepr::LEN];
                r.emit(&mut out);
                let n = r.wire_len();
                prop_assert_eq!(&out[..n], &b[..n]);
            }
        }
    }
}
