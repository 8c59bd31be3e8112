//! An ACK riding at the end of a request datagram (a uet extension).
//!
//! A receiver holding an ACK for a peer while its application answers
//! (`FI_UET_DEFER_ACKS`) may append that ACK_CC to the next request it sends
//! the peer, instead of sending it in a datagram of its own, and set the
//! request's [`FLAG`]:
//!
//! ```text
//! request header (12 B) | SES header(s) | payload | ACK_CC (32 B)
//! ```
//!
//! The request's own fields (payload length included) are read as if the
//! trailer were not there. A switch trimming such a packet keeps the
//! trailer behind the headers it keeps ([`trim`]; emu-net does); if one
//! cuts it away, the receiver takes the trimmed request alone and the ACK
//! is lost, like any ACK a network drops.

use super::prologue::{PacketType, Prologue};
use super::{AckRepr, RequestRepr};

/// Request prologue flag: the datagram's last [`LEN`] bytes are an ACK_CC.
/// (UET 1.0 leaves this bit of a RUD/ROD request's flags unused.)
pub const FLAG: u8 = 0x40;

/// Bytes the trailer adds to a datagram.
pub const LEN: usize = AckRepr::LEN;

/// Whether `data` is a request that says it carries an ACK trailer.
pub fn flagged(data: &[u8]) -> bool {
    Prologue::parse(data).is_ok_and(|p| {
        matches!(p.ptype, PacketType::RudRequest | PacketType::RodRequest) && p.flags & FLAG != 0
    })
}

/// Mark the request whose prologue starts `datagram` as carrying a trailer
/// (the caller wrote the ACK_CC into the datagram's last [`LEN`] bytes).
pub fn mark(datagram: &mut [u8]) {
    if datagram.len() > 1 {
        datagram[1] |= FLAG;
    }
}

/// Split a flagged request datagram into the request and its ACK. `trimmed`
/// (the IP header said so): a trailer that is not an ACK_CC was cut away,
/// and the whole datagram is the request. `None` when an untrimmed datagram
/// does not end in an ACK_CC.
pub fn split(data: &[u8], trimmed: bool) -> Option<(&[u8], Option<&[u8]>)> {
    let at = data
        .len()
        .checked_sub(LEN)
        .filter(|&at| at >= RequestRepr::LEN);
    if let Some(at) = at {
        let (request, ack) = data.split_at(at);
        if Prologue::parse(ack).is_ok_and(|p| p.ptype == PacketType::AckCc) {
            return Some((request, Some(ack)));
        }
    }
    trimmed.then_some((data, None))
}

/// Trim a request datagram held in `buf` to its first `keep` bytes, as a
/// switch does when its data queue is full, keeping a trailer behind them.
/// Returns the new length (at most `buf.len()`; unchanged when there is no
/// payload to cut).
pub fn trim(buf: &mut [u8], keep: usize) -> usize {
    let len = buf.len();
    if !flagged(buf) {
        return len.min(keep);
    }
    if len <= keep + LEN {
        return len;
    }
    buf.copy_within(len - LEN.., keep);
    keep + LEN
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{NextHeader, SesRequestRepr};

    fn request(payload: usize) -> Vec<u8> {
        let mut b = vec![0xab; RequestRepr::LEN + SesRequestRepr::LEN + payload];
        RequestRepr {
            ptype: PacketType::RudRequest,
            next: NextHeader::SesRequest,
            flags: 0,
            clear_psn_offset: 0,
            psn: 7,
            spdcid: 1,
            dpdcid: 2,
        }
        .emit(&mut b);
        b
    }

    fn ack() -> [u8; LEN] {
        let mut a = [0u8; LEN];
        AckRepr {
            cack_psn: 41,
            spdcid: 2,
            dpdcid: 1,
            ..AckRepr::default()
        }
        .emit(&mut a);
        a
    }

    fn bundle(payload: usize) -> Vec<u8> {
        let mut b = request(payload);
        b.extend_from_slice(&ack());
        mark(&mut b);
        b
    }

    #[test]
    fn marked_request_splits_into_request_and_ack() {
        let b = bundle(64);
        assert!(flagged(&b));
        let (req, a) = split(&b, false).expect("splits");
        assert_eq!(req.len(), RequestRepr::LEN + SesRequestRepr::LEN + 64);
        assert_eq!(a, Some(&ack()[..]));
        let r = RequestRepr::parse(req).expect("request parses");
        assert_eq!((r.psn, r.flags & FLAG), (7, FLAG));
        assert_eq!(AckRepr::parse(a.unwrap()).map(|a| a.cack_psn), Ok(41));
    }

    #[test]
    fn unmarked_and_non_requests_are_not_flagged() {
        assert!(!flagged(&request(8)));
        assert!(!flagged(&ack()));
        assert!(!flagged(&[]));
    }

    #[test]
    fn a_flag_without_an_ack_is_malformed_unless_trimmed() {
        let mut b = request(64);
        mark(&mut b);
        assert_eq!(split(&b, false), None);
        assert_eq!(split(&b, true), Some((&b[..], None)));
        assert_eq!(split(&b[..4], false), None);
    }

    #[test]
    fn trimming_keeps_headers_and_trailer() {
        let keep = RequestRepr::LEN + SesRequestRepr::LEN;
        let mut b = bundle(1000);
        let n = trim(&mut b, keep);
        assert_eq!(n, keep + LEN);
        let (req, a) = split(&b[..n], true).expect("splits");
        assert_eq!(req.len(), keep);
        assert_eq!(req[2..], request(0)[2..keep]);
        assert!(flagged(req));
        assert_eq!(a, Some(&ack()[..]));
        // Nothing to cut: left whole.
        let mut short = bundle(0);
        assert_eq!(trim(&mut short, keep), short.len());
        // Without a trailer: the plain cut.
        let mut plain = request(1000);
        assert_eq!(trim(&mut plain, keep), keep);
    }
}
