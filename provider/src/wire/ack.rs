//! ACK_CC (32 B): the acknowledgement with a 64-bit SACK bitmap and the NSCC
//! state fields.
//!
//! ```text
//!  0 prologue (flags: M = ECN echo 0x20, RETX 0x10, P 0x08)
//!  2 ack_psn_offset (s16): triggering PSN = cack_psn + offset
//!  4 cack_psn (u32): every PSN up to and including it was received
//!  8 SPDCID (u16)   10 DPDCID (u16)
//! 12 cc_type (4 bits, 0 = NSCC) | cc flags (4 bits)
//! 13 MPR (u8): most packets the receiver accepts beyond cack_psn, in units of 8
//! 14 sack_offset (s16): bit i of the bitmap is PSN cack_psn + sack_offset + i
//! 16 SACK bitmap (u64, bit 0 = least significant)
//! 24 service_time (u16, in 64 ns units)
//! 26 restore_cwnd (1 bit) | rcv_cwnd_pend (7 bits)
//! 27 rcvd_bytes (24 bits, 256-byte units, wrapping)
//! 30 out-of-order count (u16)
//! ```

use super::prologue::{NextHeader, PacketType, Prologue};
use super::{be16, be32, be64, put16, put32, put64, WireError};

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

    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        let p = Prologue::parse(b)?;
        if p.ptype != PacketType::AckCc {
            return Err(WireError::UnknownType(p.ptype as u8));
        }
        if b.len() < Self::LEN {
            return Err(WireError::Truncated);
        }
        Ok(AckRepr {
            flags: p.flags,
            ack_psn_offset: be16(b, 2) as i16,
            cack_psn: be32(b, 4),
            spdcid: be16(b, 8),
            dpdcid: be16(b, 10),
            cc_type: b[12] >> 4,
            cc_flags: b[12] & 0xf,
            mpr: b[13],
            sack_offset: be16(b, 14) as i16,
            sack_bitmap: be64(b, 16),
            service_time: be16(b, 24),
            restore_cwnd: b[26] & 0x80 != 0,
            rcv_cwnd_pend: b[26] & 0x7f,
            rcvd_bytes: be32(b, 26) & 0x00ff_ffff,
            ooo_count: be16(b, 30),
        })
    }

    pub fn emit(&self, b: &mut [u8]) {
        Prologue {
            ptype: PacketType::AckCc,
            next: NextHeader::None,
            flags: self.flags,
        }
        .emit(b);
        put16(b, 2, self.ack_psn_offset as u16);
        put32(b, 4, self.cack_psn);
        put16(b, 8, self.spdcid);
        put16(b, 10, self.dpdcid);
        b[12] = (self.cc_type << 4) | (self.cc_flags & 0xf);
        b[13] = self.mpr;
        put16(b, 14, self.sack_offset as u16);
        put64(b, 16, self.sack_bitmap);
        put16(b, 24, self.service_time);
        put32(b, 26, self.rcvd_bytes & 0x00ff_ffff);
        b[26] = ((self.restore_cwnd as u8) << 7) | (self.rcv_cwnd_pend & 0x7f);
        put16(b, 30, self.ooo_count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let a = AckRepr {
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
        };
        let mut b = [0u8; AckRepr::LEN];
        a.emit(&mut b);
        assert_eq!(AckRepr::parse(&b), Ok(a));
        assert_eq!(AckRepr::parse(&b[..31]), Err(WireError::Truncated));
    }
}
