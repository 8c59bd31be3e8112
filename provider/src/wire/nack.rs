//! NACK (16 B): `prologue | code (u8) | vendor code (u8) | PSN (u32) | SPDCID |
//! DPDCID | payload (u32)`.

use super::prologue::{NextHeader, PacketType, Prologue};
use super::{be16, be32, put16, put32, WireError};

/// NACK codes used by the provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NackCode {
    Trimmed = 0x01,
    TrimmedLastHop = 0x02,
    NoPacketBuffer = 0x07,
    PsnOutOfWindow = 0x0B,
    InvalidDpdcid = 0x0E,
    Closing = 0x10,
    InvalidSyn = 0x15,
}

impl NackCode {
    pub fn from_u8(v: u8) -> Result<Self, WireError> {
        use NackCode::*;
        Ok(match v {
            0x01 => Trimmed,
            0x02 => TrimmedLastHop,
            0x07 => NoPacketBuffer,
            0x0B => PsnOutOfWindow,
            0x0E => InvalidDpdcid,
            0x10 => Closing,
            0x15 => InvalidSyn,
            _ => return Err(WireError::Malformed),
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NackRepr {
    pub flags: u8,
    pub code: NackCode,
    pub vendor_code: u8,
    pub psn: u32,
    pub spdcid: u16,
    pub dpdcid: u16,
    pub payload: u32,
}

impl NackRepr {
    pub const LEN: usize = 16;

    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        let p = Prologue::parse(b)?;
        if p.ptype != PacketType::Nack {
            return Err(WireError::UnknownType(p.ptype as u8));
        }
        if b.len() < Self::LEN {
            return Err(WireError::Truncated);
        }
        Ok(NackRepr {
            flags: p.flags,
            code: NackCode::from_u8(b[2])?,
            vendor_code: b[3],
            psn: be32(b, 4),
            spdcid: be16(b, 8),
            dpdcid: be16(b, 10),
            payload: be32(b, 12),
        })
    }

    pub fn emit(&self, b: &mut [u8]) {
        Prologue {
            ptype: PacketType::Nack,
            next: NextHeader::None,
            flags: self.flags,
        }
        .emit(b);
        b[2] = self.code as u8;
        b[3] = self.vendor_code;
        put32(b, 4, self.psn);
        put16(b, 8, self.spdcid);
        put16(b, 10, self.dpdcid);
        put32(b, 12, self.payload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let n = NackRepr {
            flags: 0,
            code: NackCode::TrimmedLastHop,
            vendor_code: 1,
            psn: 42,
            spdcid: 3,
            dpdcid: 4,
            payload: 99,
        };
        let mut b = [0u8; NackRepr::LEN];
        n.emit(&mut b);
        assert_eq!(NackRepr::parse(&b), Ok(n));
        b[2] = 0x99;
        assert_eq!(NackRepr::parse(&b), Err(WireError::Malformed));
    }
}
