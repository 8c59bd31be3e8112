//! Control packets (16 B): close handshake, probes, ACK requests, credit.
//!
//! ```text
//!  0 prologue: type 11 (5 bits) | control type (4 bits, in the next-header slot) | flags (7)
//!  2 probe opaque (u16): echoed by the answer to a probe; 0 otherwise
//!  4 PSN (u32): the sender's PSN this control refers to (close: next PSN)
//!  8 SPDCID (u16)   10 DPDCID (u16)
//! 12 payload (u32): type-specific (credit: bytes granted; otherwise 0)
//! ```
//!
//! The control type takes the 4-bit next-header slot of the prologue because
//! a control packet is never followed by an SES header.

use super::prologue::{PacketType, Prologue};
use super::{be16, be32, packet_view, put16, put32, WireError};

/// Control packet types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ControlType {
    /// Ask the receiver for an immediate ACK.
    AckRequest = 1,
    /// The sender has every ACK and tears its context down.
    Close = 4,
    /// Ask the peer to close the context (the receiver side initiates).
    CloseRequest = 5,
    /// Liveness / loss probe; answered by an ACK echoing the probe opaque.
    Probe = 6,
    /// Receiver grants the sender more buffer (payload = bytes).
    Credit = 7,
    /// Sender asks for credit (payload = bytes wanted).
    CreditRequest = 8,
}

impl ControlType {
    pub const ALL: [ControlType; 6] = [
        ControlType::AckRequest,
        ControlType::Close,
        ControlType::CloseRequest,
        ControlType::Probe,
        ControlType::Credit,
        ControlType::CreditRequest,
    ];

    pub fn from_u8(v: u8) -> Result<Self, WireError> {
        use ControlType::*;
        Ok(match v {
            1 => AckRequest,
            4 => Close,
            5 => CloseRequest,
            6 => Probe,
            7 => Credit,
            8 => CreditRequest,
            _ => return Err(WireError::Malformed),
        })
    }
}

mod field {
    pub const PROLOGUE: usize = 0;
    pub const PROBE: usize = 2;
    pub const PSN: usize = 4;
    pub const SPDCID: usize = 8;
    pub const DPDCID: usize = 10;
    pub const PAYLOAD: usize = 12;
}

packet_view!(
    /// A bounds-checked view of a control packet.
    Packet, len = ControlRepr::LEN
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Raw packet type (5 bits); 11 for a control packet.
    pub fn packet_type(&self) -> u8 {
        self.buffer.as_ref()[field::PROLOGUE] >> 3
    }
    /// Raw control type (4 bits).
    pub fn control_type(&self) -> u8 {
        ((be16(self.buffer.as_ref(), field::PROLOGUE) >> 7) & 0xf) as u8
    }
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::PROLOGUE + 1] & 0x7f
    }
    pub fn probe_opaque(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PROBE)
    }
    pub fn psn(&self) -> u32 {
        be32(self.buffer.as_ref(), field::PSN)
    }
    pub fn spdcid(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SPDCID)
    }
    pub fn dpdcid(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DPDCID)
    }
    pub fn payload(&self) -> u32 {
        be32(self.buffer.as_ref(), field::PAYLOAD)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Write type 11, the control type and the flags.
    pub fn set_prologue(&mut self, control_type: u8, flags: u8) {
        let v = ((PacketType::Control as u16) << 11)
            | (((control_type & 0xf) as u16) << 7)
            | (flags & 0x7f) as u16;
        put16(self.buffer.as_mut(), field::PROLOGUE, v);
    }
    pub fn set_probe_opaque(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::PROBE, v);
    }
    pub fn set_psn(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::PSN, v);
    }
    pub fn set_spdcid(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::SPDCID, v);
    }
    pub fn set_dpdcid(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::DPDCID, v);
    }
    pub fn set_payload(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::PAYLOAD, v);
    }
}

/// A parsed control packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlRepr {
    pub ctl_type: ControlType,
    /// Prologue flags (7 bits); RETX / AR / SYN as for requests.
    pub flags: u8,
    pub probe_opaque: u16,
    pub psn: u32,
    pub spdcid: u16,
    pub dpdcid: u16,
    pub payload: u32,
}

impl ControlRepr {
    pub const LEN: usize = 16;

    /// Parse a control packet; never panics.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        let p = Prologue::parse(b)?;
        if p.ptype != PacketType::Control {
            return Err(WireError::UnknownType(p.ptype as u8));
        }
        Self::from_packet(&Packet::new_checked(b)?)
    }

    /// The representation of a checked view.
    pub fn from_packet<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self, WireError> {
        if p.packet_type() != PacketType::Control as u8 {
            return Err(WireError::UnknownType(p.packet_type()));
        }
        Ok(ControlRepr {
            ctl_type: ControlType::from_u8(p.control_type())?,
            flags: p.flags(),
            probe_opaque: p.probe_opaque(),
            psn: p.psn(),
            spdcid: p.spdcid(),
            dpdcid: p.dpdcid(),
            payload: p.payload(),
        })
    }

    /// Write the packet into `b[..LEN]`; panics if `b` is shorter.
    pub fn emit(&self, b: &mut [u8]) {
        let mut p = Packet::new_unchecked(&mut b[..Self::LEN]);
        p.set_prologue(self.ctl_type as u8, self.flags);
        p.set_probe_opaque(self.probe_opaque);
        p.set_psn(self.psn);
        p.set_spdcid(self.spdcid);
        p.set_dpdcid(self.dpdcid);
        p.set_payload(self.payload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_control() -> impl Strategy<Value = ControlRepr> {
        (
            proptest::sample::select(ControlType::ALL.to_vec()),
            0u8..0x80,
            any::<u16>(),
            any::<u32>(),
            any::<u16>(),
            any::<u16>(),
            any::<u32>(),
        )
            .prop_map(
                |(ctl_type, flags, probe_opaque, psn, spdcid, dpdcid, payload)| ControlRepr {
                    ctl_type,
                    flags,
                    probe_opaque,
                    psn,
                    spdcid,
                    dpdcid,
                    payload,
                },
            )
    }

    #[test]
    fn close_round_trip_and_layout() {
        let c = ControlRepr {
            ctl_type: ControlType::Close,
            flags: 0,
            probe_opaque: 0,
            psn: 0x0102_0304,
            spdcid: 0x0a0b,
            dpdcid: 0x0c0d,
            payload: 7,
        };
        let mut b = [0u8; ControlRepr::LEN];
        c.emit(&mut b);
        // type 11, control type 4: 01011 0100 0000000
        assert_eq!(&b[..2], &[0x5a, 0x00]);
        assert_eq!(&b[4..12], &[1, 2, 3, 4, 0x0a, 0x0b, 0x0c, 0x0d]);
        assert_eq!(ControlRepr::parse(&b), Ok(c));
        assert_eq!(ControlRepr::parse(&b[..15]), Err(WireError::Truncated));
    }

    #[test]
    fn unknown_control_type_is_malformed() {
        let mut b = [0u8; ControlRepr::LEN];
        Packet::new_unchecked(&mut b[..]).set_prologue(2, 0);
        assert_eq!(ControlRepr::parse(&b), Err(WireError::Malformed));
    }

    #[test]
    fn other_types_are_rejected() {
        let mut b = [0u8; ControlRepr::LEN];
        b[0] = (PacketType::Nack as u8) << 3;
        assert_eq!(
            ControlRepr::parse(&b),
            Err(WireError::UnknownType(PacketType::Nack as u8))
        );
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(c in any_control()) {
            let mut b = [0u8; ControlRepr::LEN];
            c.emit(&mut b);
            prop_assert_eq!(ControlRepr::parse(&b), Ok(c));
        }

        #[test]
        fn parse_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(c) = ControlRepr::parse(&b) {
                let mut out = [0u8; ControlRepr::LEN];
                c.emit(&mut out);
                prop_assert_eq!(&out[..], &b[..ControlRepr::LEN]);
            }
        }
    }
}
