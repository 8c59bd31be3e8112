//! The 2-byte PDS prologue: type (5 bits) | next header (4) | flags (7).
//!
//! ```text
//!  bit 15..11 type   10..7 next header (control packets: control type)   6..0 flags
//! ```
//! Control packets (type 11) carry their control type in the next-header
//! slot; [`Prologue::parse`] reports `NextHeader::None` for them and
//! [`crate::wire::control`] reads the control type.

use super::{be16, put16, WireError};

/// PDS packet types (UET 1.0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PacketType {
    RudRequest = 2,
    RodRequest = 3,
    RudiRequest = 4,
    RudiResponse = 5,
    UudRequest = 6,
    Ack = 7,
    AckCc = 8,
    AckCcx = 9,
    Nack = 10,
    Control = 11,
    NackCcx = 12,
    RudCcRequest = 13,
    RodCcRequest = 14,
}

impl PacketType {
    pub const ALL: [PacketType; 13] = [
        PacketType::RudRequest,
        PacketType::RodRequest,
        PacketType::RudiRequest,
        PacketType::RudiResponse,
        PacketType::UudRequest,
        PacketType::Ack,
        PacketType::AckCc,
        PacketType::AckCcx,
        PacketType::Nack,
        PacketType::Control,
        PacketType::NackCcx,
        PacketType::RudCcRequest,
        PacketType::RodCcRequest,
    ];

    /// A request: the packets that carry data (and SES headers).
    pub fn is_request(self) -> bool {
        use PacketType::*;
        matches!(
            self,
            RudRequest | RodRequest | RudiRequest | UudRequest | RudCcRequest | RodCcRequest
        )
    }

    pub fn from_u8(v: u8) -> Result<Self, WireError> {
        use PacketType::*;
        Ok(match v {
            2 => RudRequest,
            3 => RodRequest,
            4 => RudiRequest,
            5 => RudiResponse,
            6 => UudRequest,
            7 => Ack,
            8 => AckCc,
            9 => AckCcx,
            10 => Nack,
            11 => Control,
            12 => NackCcx,
            13 => RudCcRequest,
            14 => RodCcRequest,
            other => return Err(WireError::UnknownType(other)),
        })
    }
}

/// What follows the PDS header of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NextHeader {
    None = 0,
    /// SES standard request header (44 B).
    SesRequest = 1,
    /// SES response header (12 B).
    SesResponse = 2,
}

impl NextHeader {
    pub const ALL: [NextHeader; 3] = [
        NextHeader::None,
        NextHeader::SesRequest,
        NextHeader::SesResponse,
    ];

    pub fn from_u8(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            0 => NextHeader::None,
            1 => NextHeader::SesRequest,
            2 => NextHeader::SesResponse,
            other => return Err(WireError::UnknownNextHeader(other)),
        })
    }
}

/// Request flags.
pub mod flags {
    pub const RETX: u8 = 0x10;
    pub const AR: u8 = 0x08;
    pub const SYN: u8 = 0x04;
    /// Request flags, a uet extension in a bit UET leaves reserved: with
    /// AR, nothing at the sender waits for this ACK (no completion or
    /// counter, no full window), so the receiver may hold it for the reply
    /// it is about to send even when our packets crossed in flight.
    pub const NO_WAIT: u8 = 0x02;
    /// ACK flags: ECN echo.
    pub const ACK_M: u8 = 0x20;
    /// ACK flags: the triggering packet was a retransmission.
    pub const ACK_RETX: u8 = 0x10;
    /// ACK flags (P): the answer to a probe or an ACK request, not to a
    /// data arrival; its trigger PSN names the latest arrival, which may be
    /// long past, so it carries no round-trip sample.
    pub const ACK_P: u8 = 0x08;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prologue {
    pub ptype: PacketType,
    pub next: NextHeader,
    pub flags: u8,
}

impl Prologue {
    pub const LEN: usize = 2;

    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        if b.len() < Self::LEN {
            return Err(WireError::Truncated);
        }
        let p = Packet::new_unchecked(b);
        let ptype = PacketType::from_u8(p.packet_type())?;
        let next = match ptype {
            PacketType::Control => NextHeader::None,
            _ => NextHeader::from_u8(p.next_header())?,
        };
        Ok(Prologue {
            ptype,
            next,
            flags: p.flags(),
        })
    }

    /// Write the prologue into `b[..2]`; panics if `b` is shorter.
    pub fn emit(&self, b: &mut [u8]) {
        Packet::new_unchecked(b).set_fields(self.ptype as u8, self.next as u8, self.flags);
    }
}

/// A bounds-checked view of the prologue at the start of any PDS packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap a buffer without checking it; accessors panic if it is short.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Packet<T>, WireError> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    pub fn check_len(&self) -> Result<(), WireError> {
        if self.buffer.as_ref().len() < Prologue::LEN {
            Err(WireError::Truncated)
        } else {
            Ok(())
        }
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Raw packet type (5 bits).
    pub fn packet_type(&self) -> u8 {
        self.buffer.as_ref()[0] >> 3
    }
    /// Raw next-header value (4 bits); the control type for control packets.
    pub fn next_header(&self) -> u8 {
        ((be16(self.buffer.as_ref(), 0) >> 7) & 0xf) as u8
    }
    /// Flags (7 bits).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[1] & 0x7f
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Write all three fields (each masked to its width).
    pub fn set_fields(&mut self, packet_type: u8, next_header: u8, flags: u8) {
        let v = (((packet_type & 0x1f) as u16) << 11)
            | (((next_header & 0xf) as u16) << 7)
            | (flags & 0x7f) as u16;
        put16(self.buffer.as_mut(), 0, v);
    }
    pub fn set_packet_type(&mut self, v: u8) {
        let (n, f) = (self.next_header(), self.flags());
        self.set_fields(v, n, f);
    }
    pub fn set_next_header(&mut self, v: u8) {
        let (t, f) = (self.packet_type(), self.flags());
        self.set_fields(t, v, f);
    }
    pub fn set_flags(&mut self, v: u8) {
        let (t, n) = (self.packet_type(), self.next_header());
        self.set_fields(t, n, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip() {
        let p = Prologue {
            ptype: PacketType::AckCc,
            next: NextHeader::SesResponse,
            flags: 0x7f,
        };
        let mut b = [0u8; 2];
        p.emit(&mut b);
        assert_eq!(Prologue::parse(&b), Ok(p));
    }

    #[test]
    fn rejects_unknown_and_short() {
        assert_eq!(Prologue::parse(&[0]), Err(WireError::Truncated));
        assert_eq!(Prologue::parse(&[0xf8, 0]), Err(WireError::UnknownType(31)));
        // RUD request with next header 9.
        assert_eq!(
            Prologue::parse(&[0x14, 0x80]),
            Err(WireError::UnknownNextHeader(9))
        );
    }

    #[test]
    fn control_type_is_not_a_next_header() {
        let mut b = [0u8; 2];
        Packet::new_unchecked(&mut b[..]).set_fields(PacketType::Control as u8, 6, 0x08);
        let p = Prologue::parse(&b).unwrap();
        assert_eq!(p.ptype, PacketType::Control);
        assert_eq!(p.next, NextHeader::None);
        assert_eq!(Packet::new_checked(&b[..]).unwrap().next_header(), 6);
    }

    #[test]
    fn setters_keep_other_fields() {
        let mut b = [0u8; 2];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_packet_type(PacketType::Nack as u8);
        p.set_flags(0x55);
        p.set_next_header(2);
        assert_eq!(
            (p.packet_type(), p.next_header(), p.flags()),
            (PacketType::Nack as u8, 2, 0x55)
        );
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(
            ptype in proptest::sample::select(PacketType::ALL.to_vec()),
            next in proptest::sample::select(NextHeader::ALL.to_vec()),
            flags in 0u8..0x80,
        ) {
            let next = if ptype == PacketType::Control { NextHeader::None } else { next };
            let p = Prologue { ptype, next, flags };
            let mut b = [0u8; 2];
            p.emit(&mut b);
            prop_assert_eq!(Prologue::parse(&b), Ok(p));
        }

        #[test]
        fn parse_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..4)) {
            let _ = Prologue::parse(&b);
        }
    }
}
