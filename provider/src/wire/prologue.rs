//! The 2-byte PDS prologue: type (5 bits) | next header (4) | flags (7).

use super::{be16, put16, WireError};

/// PDS packet types (UET 1.0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextHeader {
    None = 0,
    /// SES standard request header (44 B).
    SesRequest = 1,
    /// SES response header (12 B).
    SesResponse = 2,
}

impl NextHeader {
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
    /// ACK flags: ECN echo.
    pub const ACK_M: u8 = 0x20;
    /// ACK flags: the triggering packet was a retransmission.
    pub const ACK_RETX: u8 = 0x10;
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
        let v = be16(b, 0);
        Ok(Prologue {
            ptype: PacketType::from_u8((v >> 11) as u8)?,
            next: NextHeader::from_u8(((v >> 7) & 0xf) as u8)?,
            flags: (v & 0x7f) as u8,
        })
    }

    pub fn emit(&self, b: &mut [u8]) {
        let v =
            ((self.ptype as u16) << 11) | ((self.next as u16) << 7) | (self.flags as u16 & 0x7f);
        put16(b, 0, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
