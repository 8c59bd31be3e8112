//! NACK (16 B).
//!
//! ```text
//!  0 prologue: type 10 | next header 0 | flags (RETX 0x10: the NACKed packet was a retransmission)
//!  2 NACK code (u8)     3 vendor code (u8, 0)
//!  4 PSN (u32): the packet refused
//!  8 SPDCID (u16)       10 DPDCID (u16)
//! 12 payload (u32): code-specific (no packet buffer: retry delay in µs; otherwise 0)
//! ```

use super::prologue::{self, NextHeader, PacketType, Prologue};
use super::{be16, be32, packet_view, put16, put32, WireError};

/// NACK codes used by the provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NackCode {
    /// The packet was trimmed by a switch; retransmit at once.
    Trimmed = 0x01,
    /// Trimmed at the last-hop switch (the receiver's port is congested).
    TrimmedLastHop = 0x02,
    /// The receiver has no buffer for it now; retry later.
    NoPacketBuffer = 0x07,
    /// The PSN lies outside the receiver's window.
    PsnOutOfWindow = 0x0B,
    /// No context with that DPDCID (stale or restarted peer).
    InvalidDpdcid = 0x0E,
    /// The context is closing; open a new one.
    Closing = 0x10,
    /// A SYN the receiver cannot accept (e.g. PSN offset out of range).
    InvalidSyn = 0x15,
}

impl NackCode {
    pub const ALL: [NackCode; 7] = [
        NackCode::Trimmed,
        NackCode::TrimmedLastHop,
        NackCode::NoPacketBuffer,
        NackCode::PsnOutOfWindow,
        NackCode::InvalidDpdcid,
        NackCode::Closing,
        NackCode::InvalidSyn,
    ];

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

    /// Whether the sender should retransmit the packet (rather than give up
    /// on the context).
    pub fn retransmit(self) -> bool {
        matches!(
            self,
            NackCode::Trimmed | NackCode::TrimmedLastHop | NackCode::NoPacketBuffer
        )
    }
}

mod field {
    pub const CODE: usize = 2;
    pub const VENDOR_CODE: usize = 3;
    pub const PSN: usize = 4;
    pub const SPDCID: usize = 8;
    pub const DPDCID: usize = 10;
    pub const PAYLOAD: usize = 12;
}

packet_view!(
    /// A bounds-checked view of a NACK.
    Packet, len = NackRepr::LEN
);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn prologue(&self) -> prologue::Packet<&[u8]> {
        prologue::Packet::new_unchecked(self.buffer.as_ref())
    }
    /// Raw NACK code.
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }
    pub fn vendor_code(&self) -> u8 {
        self.buffer.as_ref()[field::VENDOR_CODE]
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
    pub fn set_prologue(&mut self, p: &Prologue) {
        p.emit(self.buffer.as_mut());
    }
    pub fn set_code(&mut self, v: u8) {
        self.buffer.as_mut()[field::CODE] = v;
    }
    pub fn set_vendor_code(&mut self, v: u8) {
        self.buffer.as_mut()[field::VENDOR_CODE] = v;
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

    /// Parse a NACK; unknown codes are `Malformed`. Never panics.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        let p = Prologue::parse(b)?;
        if p.ptype != PacketType::Nack {
            return Err(WireError::UnknownType(p.ptype as u8));
        }
        let v = Packet::new_checked(b)?;
        Ok(NackRepr {
            flags: p.flags,
            code: NackCode::from_u8(v.code())?,
            vendor_code: v.vendor_code(),
            psn: v.psn(),
            spdcid: v.spdcid(),
            dpdcid: v.dpdcid(),
            payload: v.payload(),
        })
    }

    /// Write the NACK into `b[..LEN]`; panics if `b` is shorter.
    pub fn emit(&self, b: &mut [u8]) {
        let mut v = Packet::new_unchecked(&mut b[..Self::LEN]);
        v.set_prologue(&Prologue {
            ptype: PacketType::Nack,
            next: NextHeader::None,
            flags: self.flags,
        });
        v.set_code(self.code as u8);
        v.set_vendor_code(self.vendor_code);
        v.set_psn(self.psn);
        v.set_spdcid(self.spdcid);
        v.set_dpdcid(self.dpdcid);
        v.set_payload(self.payload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
        assert_eq!(&b[..4], &[0x50, 0x00, 0x02, 0x01]);
        assert_eq!(NackRepr::parse(&b), Ok(n));
        assert_eq!(NackRepr::parse(&b[..15]), Err(WireError::Truncated));
        b[2] = 0x99;
        assert_eq!(NackRepr::parse(&b), Err(WireError::Malformed));
        assert_eq!(Packet::new_checked(&b[..]).unwrap().code(), 0x99);
    }

    #[test]
    fn every_code_round_trips() {
        for c in NackCode::ALL {
            assert_eq!(NackCode::from_u8(c as u8), Ok(c));
        }
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(
            code in proptest::sample::select(NackCode::ALL.to_vec()),
            flags in 0u8..0x80,
            vendor_code in any::<u8>(),
            psn in any::<u32>(),
            spdcid in any::<u16>(),
            dpdcid in any::<u16>(),
            payload in any::<u32>(),
        ) {
            let n = NackRepr { flags, code, vendor_code, psn, spdcid, dpdcid, payload };
            let mut b = [0u8; NackRepr::LEN];
            n.emit(&mut b);
            prop_assert_eq!(NackRepr::parse(&b), Ok(n));
        }

        #[test]
        fn parse_arbitrary_bytes(mut b in proptest::collection::vec(any::<u8>(), 0..32)) {
            if let Some(x) = b.first_mut() {
                *x = (PacketType::Nack as u8) << 3;
            }
            if let Some(x) = b.get_mut(1) {
                *x &= 0x7f;
            }
            if let Ok(n) = NackRepr::parse(&b) {
                let mut out = [0u8; NackRepr::LEN];
                n.emit(&mut out);
                prop_assert_eq!(&out[..], &b[..NackRepr::LEN]);
            }
        }
    }
}
