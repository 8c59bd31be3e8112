//! RUD/ROD request header (12 B including the prologue).
//!
//! `prologue | clear_psn_offset (s16) | PSN (u32) | SPDCID (u16) | DPDCID (u16)`.
//! With SYN set the DPDCID slot holds the 12-bit offset of this PSN from the
//! PDC's start PSN, which establishes the context in zero round trips.

use super::prologue::{flags, NextHeader, PacketType, Prologue};
use super::{be16, be32, put16, put32, WireError};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestRepr {
    pub ptype: PacketType,
    pub next: NextHeader,
    pub flags: u8,
    pub clear_psn_offset: i16,
    pub psn: u32,
    pub spdcid: u16,
    /// The destination PDC ID, or with SYN the PSN offset (12 bits).
    pub dpdcid: u16,
}

impl RequestRepr {
    pub const LEN: usize = 12;

    pub fn syn(&self) -> bool {
        self.flags & flags::SYN != 0
    }

    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        let p = Prologue::parse(b)?;
        if !matches!(p.ptype, PacketType::RudRequest | PacketType::RodRequest) {
            return Err(WireError::UnknownType(p.ptype as u8));
        }
        if b.len() < Self::LEN {
            return Err(WireError::Truncated);
        }
        let r = RequestRepr {
            ptype: p.ptype,
            next: p.next,
            flags: p.flags,
            clear_psn_offset: be16(b, 2) as i16,
            psn: be32(b, 4),
            spdcid: be16(b, 8),
            dpdcid: be16(b, 10),
        };
        if r.syn() && r.dpdcid > 0xfff {
            return Err(WireError::Malformed);
        }
        Ok(r)
    }

    pub fn emit(&self, b: &mut [u8]) {
        Prologue {
            ptype: self.ptype,
            next: self.next,
            flags: self.flags,
        }
        .emit(b);
        put16(b, 2, self.clear_psn_offset as u16);
        put32(b, 4, self.psn);
        put16(b, 8, self.spdcid);
        put16(b, 10, self.dpdcid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = RequestRepr {
            ptype: PacketType::RudRequest,
            next: NextHeader::SesRequest,
            flags: flags::SYN | flags::AR,
            clear_psn_offset: -3,
            psn: 0xdead_beef,
            spdcid: 77,
            dpdcid: 0xabc,
        };
        let mut b = [0u8; RequestRepr::LEN];
        r.emit(&mut b);
        assert_eq!(RequestRepr::parse(&b), Ok(r));
        assert_eq!(RequestRepr::parse(&b[..11]), Err(WireError::Truncated));
    }

    #[test]
    fn syn_offset_is_twelve_bits() {
        let mut b = [0u8; RequestRepr::LEN];
        RequestRepr {
            ptype: PacketType::RudRequest,
            next: NextHeader::SesRequest,
            flags: flags::SYN,
            clear_psn_offset: 0,
            psn: 1,
            spdcid: 1,
            dpdcid: 0x1000,
        }
        .emit(&mut b);
        assert_eq!(RequestRepr::parse(&b), Err(WireError::Malformed));
    }
}
