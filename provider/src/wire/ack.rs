//! Acknowledgements: ACK_CC (32 B) with the 64-bit SACK bitmap and the NSCC
//! state fields, and the plain ACK (24 B) without congestion state.
//!
//! ```text
//!  0 prologue: type 8 ACK_CC (or 7 ACK) | next header 0 | flags M = ECN echo 0x20, RETX 0x10, P 0x08
//!  2 ack_psn_offset (s16): triggering PSN = cack_psn + offset
//!  4 cack_psn (u32): every PSN up to and including it was received
//!  8 SPDCID (u16)   10 DPDCID (u16)
//! 12 cc_type (4 bits, 0 = NSCC) | cc flags (4 bits)   (plain ACK: 0)
//! 13 MPR (u8): most packets the receiver accepts beyond cack_psn, in units of 8
//! 14 sack_offset (s16): bit i of the bitmap is PSN cack_psn + sack_offset + i
//! 16 SACK bitmap (u64, bit 0 = least significant)
//! -- ACK_CC only --
//! 24 service_time (u16, in 64 ns units): from the triggering packet's
//!    arrival to the ACK's departure; the sender takes it off the RTT its
//!    congestion control sees

//! 26 restore_cwnd (1 bit) | rcv_cwnd_pend (7 bits)
//! 27 rcvd_bytes (24 bits, 256-byte units, wrapping)
//! 30 out-of-order count (u16)
//! ```

use super::prologue::{self, NextHeader, PacketType, Prologue};
use super::{be16, be32, be64, packet_view, put16, put32, put64, WireError};

mod field {
    pub const ACK_PSN_OFFSET: usize = 2;
    pub const CACK_PSN: usize = 4;
    pub const SPDCID: usize = 8;
    pub const DPDCID: usize = 10;
    pub const CC_TYPE_FLAGS: usize = 12;
    pub const MPR: usize = 13;
    pub const SACK_OFFSET: usize = 14;
    pub const SACK_BITMAP: usize = 16;
    pub const SERVICE_TIME: usize = 24;
    pub const CWND: usize = 26;
    pub const RCVD_BYTES: usize = 27;
    pub const OOO_COUNT: usize = 30;
}

packet_view!(
    /// A bounds-checked view of the part every ACK has (24 B): PSNs, PDC
    /// IDs, MPR and the SACK bitmap.
    Packet, len = PlainAckRepr::LEN
);

packet_view!(
    /// A bounds-checked view of a whole ACK_CC (32 B).
    CcPacket, len = AckRepr::LEN
);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn prologue(&self) -> prologue::Packet<&[u8]> {
        prologue::Packet::new_unchecked(self.buffer.as_ref())
    }
    pub fn ack_psn_offset(&self) -> i16 {
        be16(self.buffer.as_ref(), field::ACK_PSN_OFFSET) as i16
    }
    pub fn cack_psn(&self) -> u32 {
        be32(self.buffer.as_ref(), field::CACK_PSN)
    }
    pub fn spdcid(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SPDCID)
    }
    pub fn dpdcid(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DPDCID)
    }
    pub fn cc_type(&self) -> u8 {
        self.buffer.as_ref()[field::CC_TYPE_FLAGS] >> 4
    }
    pub fn cc_flags(&self) -> u8 {
        self.buffer.as_ref()[field::CC_TYPE_FLAGS] & 0xf
    }
    pub fn mpr(&self) -> u8 {
        self.buffer.as_ref()[field::MPR]
    }
    pub fn sack_offset(&self) -> i16 {
        be16(self.buffer.as_ref(), field::SACK_OFFSET) as i16
    }
    pub fn sack_bitmap(&self) -> u64 {
        be64(self.buffer.as_ref(), field::SACK_BITMAP)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_prologue(&mut self, p: &Prologue) {
        p.emit(self.buffer.as_mut());
    }
    pub fn set_ack_psn_offset(&mut self, v: i16) {
        put16(self.buffer.as_mut(), field::ACK_PSN_OFFSET, v as u16);
    }
    pub fn set_cack_psn(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::CACK_PSN, v);
    }
    pub fn set_spdcid(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::SPDCID, v);
    }
    pub fn set_dpdcid(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::DPDCID, v);
    }
    /// Both 4-bit fields (each masked to its width).
    pub fn set_cc_type_flags(&mut self, cc_type: u8, cc_flags: u8) {
        self.buffer.as_mut()[field::CC_TYPE_FLAGS] = (cc_type << 4) | (cc_flags & 0xf);
    }
    pub fn set_mpr(&mut self, v: u8) {
        self.buffer.as_mut()[field::MPR] = v;
    }
    pub fn set_sack_offset(&mut self, v: i16) {
        put16(self.buffer.as_mut(), field::SACK_OFFSET, v as u16);
    }
    pub fn set_sack_bitmap(&mut self, v: u64) {
        put64(self.buffer.as_mut(), field::SACK_BITMAP, v);
    }
}

impl<T: AsRef<[u8]>> CcPacket<T> {
    /// The common ACK fields.
    pub fn ack(&self) -> Packet<&[u8]> {
        Packet::new_unchecked(self.buffer.as_ref())
    }
    pub fn service_time(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SERVICE_TIME)
    }
    pub fn restore_cwnd(&self) -> bool {
        self.buffer.as_ref()[field::CWND] & 0x80 != 0
    }
    pub fn rcv_cwnd_pend(&self) -> u8 {
        self.buffer.as_ref()[field::CWND] & 0x7f
    }
    /// Received bytes in 256-byte units, modulo 2^24.
    pub fn rcvd_bytes(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([
            0,
            b[field::RCVD_BYTES],
            b[field::RCVD_BYTES + 1],
            b[field::RCVD_BYTES + 2],
        ])
    }
    pub fn ooo_count(&self) -> u16 {
        be16(self.buffer.as_ref(), field::OOO_COUNT)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CcPacket<T> {
    /// The common ACK fields, writable.
    pub fn ack_mut(&mut self) -> Packet<&mut [u8]> {
        Packet::new_unchecked(self.buffer.as_mut())
    }
    pub fn set_service_time(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::SERVICE_TIME, v);
    }
    /// Both fields of the byte (rcv_cwnd_pend masked to 7 bits).
    pub fn set_cwnd_state(&mut self, restore_cwnd: bool, rcv_cwnd_pend: u8) {
        self.buffer.as_mut()[field::CWND] = ((restore_cwnd as u8) << 7) | (rcv_cwnd_pend & 0x7f);
    }
    /// Stores the low 24 bits.
    pub fn set_rcvd_bytes(&mut self, v: u32) {
        let [_, a, b, c] = v.to_be_bytes();
        self.buffer.as_mut()[field::RCVD_BYTES..field::RCVD_BYTES + 3].copy_from_slice(&[a, b, c]);
    }
    pub fn set_ooo_count(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::OOO_COUNT, v);
    }
}

/// A parsed ACK_CC (type 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AckRepr {
    pub flags: u8,
    pub ack_psn_offset: i16,
    pub cack_psn: u32,
    pub spdcid: u16,
    pub dpdcid: u16,
    pub cc_type: u8,
    pub cc_flags: u8,
    pub mpr: u8,
    pub sack_offset: i16,
    pub sack_bitmap: u64,
    pub service_time: u16,
    pub restore_cwnd: bool,
    pub rcv_cwnd_pend: u8,
    /// Received bytes in 256-byte units, modulo 2^24.
    pub rcvd_bytes: u32,
    pub ooo_count: u16,
}

impl AckRepr {
    pub const LEN: usize = 32;
    /// Nanoseconds per unit of `service_time`.
    pub const SERVICE_TIME_UNIT_NS: u64 = 64;

    /// `service_time` for `ns` nanoseconds (rounded down, saturating at
    /// about 4.2 ms).
    pub fn service_time_of(ns: u64) -> u16 {
        (ns / Self::SERVICE_TIME_UNIT_NS).min(u16::MAX as u64) as u16
    }

    /// How long the receiver held the triggering packet before acknowledging it.
    pub fn service_time_ns(&self) -> u64 {
        self.service_time as u64 * Self::SERVICE_TIME_UNIT_NS
    }

    /// Parse an ACK_CC; never panics.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        let p = Prologue::parse(b)?;
        if p.ptype != PacketType::AckCc {
            return Err(WireError::UnknownType(p.ptype as u8));
        }
        let v = CcPacket::new_checked(b)?;
        let a = v.ack();
        Ok(AckRepr {
            flags: p.flags,
            ack_psn_offset: a.ack_psn_offset(),
            cack_psn: a.cack_psn(),
            spdcid: a.spdcid(),
            dpdcid: a.dpdcid(),
            cc_type: a.cc_type(),
            cc_flags: a.cc_flags(),
            mpr: a.mpr(),
            sack_offset: a.sack_offset(),
            sack_bitmap: a.sack_bitmap(),
            service_time: v.service_time(),
            restore_cwnd: v.restore_cwnd(),
            rcv_cwnd_pend: v.rcv_cwnd_pend(),
            rcvd_bytes: v.rcvd_bytes(),
            ooo_count: v.ooo_count(),
        })
    }

    /// Write the ACK_CC into `b[..LEN]`; panics if `b` is shorter. Fields
    /// wider than their slot are masked (cc_type, cc_flags, rcv_cwnd_pend,
    /// rcvd_bytes).
    pub fn emit(&self, b: &mut [u8]) {
        let mut v = CcPacket::new_unchecked(&mut b[..Self::LEN]);
        self.plain()
            .emit_common(PacketType::AckCc, &mut v.ack_mut());
        v.set_service_time(self.service_time);
        v.set_cwnd_state(self.restore_cwnd, self.rcv_cwnd_pend);
        v.set_rcvd_bytes(self.rcvd_bytes);
        v.set_ooo_count(self.ooo_count);
    }

    /// The fields a plain ACK also has.
    pub fn plain(&self) -> PlainAckRepr {
        PlainAckRepr {
            flags: self.flags,
            ack_psn_offset: self.ack_psn_offset,
            cack_psn: self.cack_psn,
            spdcid: self.spdcid,
            dpdcid: self.dpdcid,
            cc_type: self.cc_type,
            cc_flags: self.cc_flags,
            mpr: self.mpr,
            sack_offset: self.sack_offset,
            sack_bitmap: self.sack_bitmap,
        }
    }
}

/// A parsed plain ACK (type 7): the ACK_CC layout without the 8 bytes of
/// congestion state. cc_type and cc_flags are carried but have no meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PlainAckRepr {
    pub flags: u8,
    pub ack_psn_offset: i16,
    pub cack_psn: u32,
    pub spdcid: u16,
    pub dpdcid: u16,
    pub cc_type: u8,
    pub cc_flags: u8,
    pub mpr: u8,
    pub sack_offset: i16,
    pub sack_bitmap: u64,
}

impl PlainAckRepr {
    pub const LEN: usize = 24;

    /// Parse a plain ACK; never panics.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        let p = Prologue::parse(b)?;
        if p.ptype != PacketType::Ack {
            return Err(WireError::UnknownType(p.ptype as u8));
        }
        let a = Packet::new_checked(b)?;
        Ok(PlainAckRepr {
            flags: p.flags,
            ack_psn_offset: a.ack_psn_offset(),
            cack_psn: a.cack_psn(),
            spdcid: a.spdcid(),
            dpdcid: a.dpdcid(),
            cc_type: a.cc_type(),
            cc_flags: a.cc_flags(),
            mpr: a.mpr(),
            sack_offset: a.sack_offset(),
            sack_bitmap: a.sack_bitmap(),
        })
    }

    /// Write the ACK into `b[..LEN]`; panics if `b` is shorter.
    pub fn emit(&self, b: &mut [u8]) {
        self.emit_common(
            PacketType::Ack,
            &mut Packet::new_unchecked(&mut b[..Self::LEN]),
        );
    }

    fn emit_common(&self, ptype: PacketType, v: &mut Packet<&mut [u8]>) {
        v.set_prologue(&Prologue {
            ptype,
            next: NextHeader::None,
            flags: self.flags,
        });
        v.set_ack_psn_offset(self.ack_psn_offset);
        v.set_cack_psn(self.cack_psn);
        v.set_spdcid(self.spdcid);
        v.set_dpdcid(self.dpdcid);
        v.set_cc_type_flags(self.cc_type, self.cc_flags);
        v.set_mpr(self.mpr);
        v.set_sack_offset(self.sack_offset);
        v.set_sack_bitmap(self.sack_bitmap);
    }

    /// Whether PSN `cack_psn + sack_offset + i` is marked received.
    pub fn sacked(&self, psn: u32) -> bool {
        let base = self.cack_psn.wrapping_add(self.sack_offset as i32 as u32);
        let i = psn.wrapping_sub(base);
        i < 64 && self.sack_bitmap & (1 << i) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> AckRepr {
        AckRepr {
            flags: 0x20,
            ack_psn_offset: 5,
            cack_psn: 0xffff_fffe,
            spdcid: 9,
            dpdcid: 10,
            cc_type: 0,
            cc_flags: 3,
            mpr: 16,
            sack_offset: 1,
            sack_bitmap: 0x8000_0000_0000_0001,
            service_time: 1234,
            restore_cwnd: true,
            rcv_cwnd_pend: 0x55,
            rcvd_bytes: 0xabcdef,
            ooo_count: 7,
        }
    }

    #[test]
    fn round_trip() {
        let a = sample();
        let mut b = [0u8; AckRepr::LEN];
        a.emit(&mut b);
        assert_eq!(AckRepr::parse(&b), Ok(a));
        assert_eq!(AckRepr::parse(&b[..31]), Err(WireError::Truncated));
        assert_eq!(&b[26..30], &[0xd5, 0xab, 0xcd, 0xef]);
        assert_eq!(
            PlainAckRepr::parse(&b),
            Err(WireError::UnknownType(PacketType::AckCc as u8))
        );
    }

    #[test]
    fn plain_round_trip() {
        let a = sample().plain();
        let mut b = [0u8; PlainAckRepr::LEN];
        a.emit(&mut b);
        assert_eq!(b[0] >> 3, PacketType::Ack as u8);
        assert_eq!(PlainAckRepr::parse(&b), Ok(a));
        assert_eq!(PlainAckRepr::parse(&b[..23]), Err(WireError::Truncated));
        assert!(a.sacked(0xffff_ffff));
        assert!(a.sacked(0xffff_ffff_u32.wrapping_add(63)));
        assert!(!a.sacked(0));
    }

    pub(crate) fn any_ack() -> impl Strategy<Value = AckRepr> {
        (
            (
                0u8..0x80,
                any::<i16>(),
                any::<u32>(),
                any::<u16>(),
                any::<u16>(),
                0u8..16,
                0u8..16,
                any::<u8>(),
            ),
            (
                any::<i16>(),
                any::<u64>(),
                any::<u16>(),
                any::<bool>(),
                0u8..0x80,
                0u32..1 << 24,
                any::<u16>(),
            ),
        )
            .prop_map(
                |(
                    (flags, ack_psn_offset, cack_psn, spdcid, dpdcid, cc_type, cc_flags, mpr),
                    (sack_offset, sack_bitmap, service_time, restore, pend, rcvd, ooo),
                )| AckRepr {
                    flags,
                    ack_psn_offset,
                    cack_psn,
                    spdcid,
                    dpdcid,
                    cc_type,
                    cc_flags,
                    mpr,
                    sack_offset,
                    sack_bitmap,
                    service_time,
                    restore_cwnd: restore,
                    rcv_cwnd_pend: pend,
                    rcvd_bytes: rcvd,
                    ooo_count: ooo,
                },
            )
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(a in any_ack()) {
            let mut b = [0u8; AckRepr::LEN];
            a.emit(&mut b);
            prop_assert_eq!(AckRepr::parse(&b), Ok(a));
            let p = a.plain();
            let mut b = [0u8; PlainAckRepr::LEN];
            p.emit(&mut b);
            prop_assert_eq!(PlainAckRepr::parse(&b), Ok(p));
        }

        #[test]
        fn parse_arbitrary_bytes(mut b in proptest::collection::vec(any::<u8>(), 0..48), cc in any::<bool>()) {
            // Steer the inputs to an ACK type, next header 0, so the body is
            // parsed and emitting gives the same bytes back.
            if let Some(x) = b.first_mut() {
                *x = if cc { 8 << 3 } else { 7 << 3 };
            }
            if let Some(x) = b.get_mut(1) {
                *x &= 0x7f;
            }
            if let Ok(a) = AckRepr::parse(&b) {
                let mut out = [0u8; AckRepr::LEN];
                a.emit(&mut out);
                prop_assert_eq!(&out[..], &b[..AckRepr::LEN]);
            }
            if let Ok(a) = PlainAckRepr::parse(&b) {
                let mut out = [0u8; PlainAckRepr::LEN];
                a.emit(&mut out);
                prop_assert_eq!(&out[..], &b[..PlainAckRepr::LEN]);
            }
        }
    }
}
