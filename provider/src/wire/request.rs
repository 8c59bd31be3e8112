//! RUD/ROD request header (12 B including the prologue).
//!
//! ```text
//!  0 prologue: type 2 (RUD) or 3 (ROD) | next header | flags RETX 0x10, AR 0x08, SYN 0x04
//!  2 clear_psn_offset (s16): the sender no longer needs state below PSN + offset
//!  4 PSN (u32)
//!  8 SPDCID (u16): the sender's PDC ID
//! 10 DPDCID (u16): the receiver's PDC ID; with SYN, the 12-bit offset of
//!    this PSN from the PDC's start PSN
//! ```
//! With SYN set the DPDCID slot holds the offset of this PSN from the PDC's
//! start PSN, which establishes the context in zero round trips.

use super::prologue::{self, flags, NextHeader, PacketType, Prologue};
use super::{be16, be32, packet_view, put16, put32, WireError};

mod field {
    pub const CLEAR_PSN_OFFSET: usize = 2;
    pub const PSN: usize = 4;
    pub const SPDCID: usize = 8;
    pub const DPDCID: usize = 10;
}

packet_view!(
    /// A bounds-checked view of a RUD/ROD request header.
    Packet, len = RequestRepr::LEN
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The prologue's view.
    pub fn prologue(&self) -> prologue::Packet<&[u8]> {
        prologue::Packet::new_unchecked(self.buffer.as_ref())
    }
    pub fn clear_psn_offset(&self) -> i16 {
        be16(self.buffer.as_ref(), field::CLEAR_PSN_OFFSET) as i16
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
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_prologue(&mut self, p: &Prologue) {
        p.emit(self.buffer.as_mut());
    }
    pub fn set_clear_psn_offset(&mut self, v: i16) {
        put16(self.buffer.as_mut(), field::CLEAR_PSN_OFFSET, v as u16);
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
}

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
    /// Largest PSN offset a SYN packet can carry.
    pub const MAX_SYN_OFFSET: u16 = 0xfff;

    pub fn syn(&self) -> bool {
        self.flags & flags::SYN != 0
    }

    /// The first PSN of the context a SYN packet opens: its DPDCID field
    /// carries the packet's offset from it.
    pub fn syn_start_psn(&self) -> u32 {
        self.psn.wrapping_sub(self.dpdcid as u32)
    }

    /// Parse a RUD/ROD request header; never panics.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        let p = Prologue::parse(b)?;
        if !matches!(p.ptype, PacketType::RudRequest | PacketType::RodRequest) {
            return Err(WireError::UnknownType(p.ptype as u8));
        }
        let v = Packet::new_checked(b)?;
        let r = RequestRepr {
            ptype: p.ptype,
            next: p.next,
            flags: p.flags,
            clear_psn_offset: v.clear_psn_offset(),
            psn: v.psn(),
            spdcid: v.spdcid(),
            dpdcid: v.dpdcid(),
        };
        if r.syn() && r.dpdcid > Self::MAX_SYN_OFFSET {
            return Err(WireError::Malformed);
        }
        Ok(r)
    }

    /// Write the header into `b[..LEN]`; panics if `b` is shorter.
    pub fn emit(&self, b: &mut [u8]) {
        let mut v = Packet::new_unchecked(&mut b[..Self::LEN]);
        v.set_prologue(&Prologue {
            ptype: self.ptype,
            next: self.next,
            flags: self.flags,
        });
        v.set_clear_psn_offset(self.clear_psn_offset);
        v.set_psn(self.psn);
        v.set_spdcid(self.spdcid);
        v.set_dpdcid(self.dpdcid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
        assert_eq!(
            b,
            [0x10, 0x8c, 0xff, 0xfd, 0xde, 0xad, 0xbe, 0xef, 0, 77, 0x0a, 0xbc]
        );
        assert_eq!(RequestRepr::parse(&b), Ok(r));
        assert_eq!(RequestRepr::parse(&b[..11]), Err(WireError::Truncated));
        let v = Packet::new_checked(&b[..]).unwrap();
        assert_eq!((v.psn(), v.spdcid(), v.dpdcid()), (0xdead_beef, 77, 0xabc));
        assert_eq!(v.prologue().flags(), flags::SYN | flags::AR);
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

    #[test]
    fn acks_are_not_requests() {
        let mut b = [0u8; RequestRepr::LEN];
        b[0] = (PacketType::AckCc as u8) << 3;
        assert_eq!(
            RequestRepr::parse(&b),
            Err(WireError::UnknownType(PacketType::AckCc as u8))
        );
    }

    pub(crate) fn any_request() -> impl Strategy<Value = RequestRepr> {
        (
            prop_oneof![Just(PacketType::RudRequest), Just(PacketType::RodRequest)],
            proptest::sample::select(NextHeader::ALL.to_vec()),
            0u8..0x80,
            any::<i16>(),
            any::<u32>(),
            any::<u16>(),
            any::<u16>(),
        )
            .prop_map(
                |(ptype, next, flags, clear_psn_offset, psn, spdcid, dpdcid)| {
                    let syn = flags & super::flags::SYN != 0;
                    RequestRepr {
                        ptype,
                        next,
                        flags,
                        clear_psn_offset,
                        psn,
                        spdcid,
                        dpdcid: if syn { dpdcid & 0xfff } else { dpdcid },
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(r in any_request()) {
            let mut b = [0u8; RequestRepr::LEN];
            r.emit(&mut b);
            prop_assert_eq!(RequestRepr::parse(&b), Ok(r));
        }

        #[test]
        fn parse_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..32)) {
            if let Ok(r) = RequestRepr::parse(&b) {
                let mut out = [0u8; RequestRepr::LEN];
                r.emit(&mut out);
                prop_assert_eq!(&out[..], &b[..RequestRepr::LEN]);
            }
        }
    }
}
