//! The IP header bits the transport reads and writes through the socket: the
//! TOS / traffic-class byte, `DSCP (6 bits) | ECN (2 bits)`.
//!
//! Data packets leave with ECT(0); a switch (or emu-net) turns that into CE
//! under congestion, and rewrites the DSCP of a packet whose payload it cut
//! (trimmed) so the receiver can tell a trimmed packet from a short one.

/// ECN codepoint (RFC 3168), the low two bits of the TOS byte.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Ecn {
    #[default]
    NotEct = 0b00,
    Ect1 = 0b01,
    Ect0 = 0b10,
    Ce = 0b11,
}

impl Ecn {
    pub fn from_tos(tos: u8) -> Ecn {
        match tos & 0b11 {
            0b00 => Ecn::NotEct,
            0b01 => Ecn::Ect1,
            0b10 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// ECN-capable transport (ECT(0), ECT(1) or already CE).
    pub fn is_ect(self) -> bool {
        self != Ecn::NotEct
    }
}

/// DSCP a switch writes into a packet it trimmed inside the fabric
/// (`FI_UET_DSCP_TRIMMED` in fi_ext_uet.h).
pub const DSCP_TRIMMED: u8 = 0x0B;
/// DSCP of a packet trimmed at the receiver's downlink (last hop).
pub const DSCP_TRIMMED_LASTHOP: u8 = 0x0F;

/// The DSCP field of a TOS byte.
pub fn dscp(tos: u8) -> u8 {
    tos >> 2
}

/// The TOS byte carrying `dscp` and `ecn`.
pub fn tos(dscp: u8, ecn: Ecn) -> u8 {
    ((dscp & 0x3f) << 2) | ecn as u8
}

/// Where a packet was trimmed, from its TOS byte; `None` when not trimmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trim {
    Fabric,
    LastHop,
}

pub fn trim_of(tos: u8) -> Option<Trim> {
    match dscp(tos) {
        DSCP_TRIMMED => Some(Trim::Fabric),
        DSCP_TRIMMED_LASTHOP => Some(Trim::LastHop),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tos_round_trip() {
        for d in 0..64u8 {
            for e in [Ecn::NotEct, Ecn::Ect1, Ecn::Ect0, Ecn::Ce] {
                let t = tos(d, e);
                assert_eq!(dscp(t), d);
                assert_eq!(Ecn::from_tos(t), e);
            }
        }
        // The header's FI_UET_DSCP_TO_TOS(FI_UET_DSCP_TRIMMED, 0) is 0x2C.
        assert_eq!(tos(DSCP_TRIMMED, Ecn::NotEct), 0x2C);
        assert_eq!(
            trim_of(tos(DSCP_TRIMMED_LASTHOP, Ecn::Ce)),
            Some(Trim::LastHop)
        );
        assert_eq!(trim_of(tos(0, Ecn::Ect0)), None);
    }
}
