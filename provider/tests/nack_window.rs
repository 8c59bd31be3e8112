//! A NACKed packet's resend waits for room in the congestion window
//! (NSCC.md section 5): the NACK took it out of flight and cut the window,
//! so resending every NACKed packet at once would put the whole burst
//! straight back into the queue that trimmed it.

mod common;

use std::net::SocketAddr;

use common::{pattern, send};
use uet::cms::CcAlgorithm;
use uet::wire::ip::{self, Ecn, DSCP_TRIMMED_LASTHOP};
use uet::wire::prologue::flags::RETX;
use uet::wire::{PacketType, Prologue, RequestRepr};
use uet::{Config, Engine};

/// UET headers in front of a data packet's payload: PDS request + SES.
const DATA_HEADERS: usize = 12 + 44;
const MTU: usize = 1500;
/// The window NSCC starts with: maxwnd, here its floor of this many MTUs.
const WINDOW_PACKETS: usize = 4;

/// Datagrams as (destination, bytes).
type Datagrams = Vec<(SocketAddr, Vec<u8>)>;

/// Every datagram `e` has to send now.
fn drain(e: &mut Engine, now: u64) -> Datagrams {
    let mut buf = vec![0u8; 65536];
    let mut out = Vec::new();
    while let Some(t) = e.poll_transmit(now, &mut buf) {
        out.push((t.dest, buf[..t.len].to_vec()));
    }
    out
}

fn is_data(d: &[u8]) -> bool {
    Prologue::parse(d)
        .is_ok_and(|p| matches!(p.ptype, PacketType::RudRequest | PacketType::RodRequest))
}

/// A configuration whose congestion window starts at `WINDOW_PACKETS`
/// MTUs and cannot fall below one.
fn small_window(ordered: bool) -> Config {
    Config {
        mtu: MTU,
        cc: CcAlgorithm::Nscc,
        link_gbps: 1,
        // bdp = 1 Gb/s * 10 us = 1250 B: maxwnd is its floor, 4 MTUs.
        base_rtt_us: 10,
        nscc_min_maxwnd_packets: WINDOW_PACKETS as u32,
        ordered,
        ..Config::default()
    }
}

/// Send 64 KiB from a new engine, trim its whole first window on the way
/// and hand the receiver's NACKs back in the order given by `order` (indices
/// into the first window). Returns the sender, the receiver, the PSNs of
/// the first window and what the sender sends next.
fn trim_first_window(
    ordered: bool,
    order: impl Fn(usize) -> usize,
) -> (Engine, Engine, Vec<u32>, Datagrams) {
    let cfg = small_window(ordered);
    let a: SocketAddr = "10.0.0.1:4793".parse().unwrap();
    let b: SocketAddr = "10.0.0.2:4793".parse().unwrap();
    let mut tx = Engine::new(&cfg, a, 1);
    let mut rx = Engine::new(&cfg, b, 2);
    tx.post_send(0, send(b, pattern(1, 64 << 10), None, 1))
        .unwrap();
    let first = drain(&mut tx, 0);
    assert_eq!(first.len(), WINDOW_PACKETS);
    assert!(first.iter().all(|(_, d)| is_data(d)));
    let trimmed = ip::tos(DSCP_TRIMMED_LASTHOP, Ecn::Ect0);
    for (_, d) in &first {
        rx.handle_datagram(1_000, a, trimmed, &d[..DATA_HEADERS]);
    }
    let nacks = drain(&mut rx, 1_000);
    assert_eq!(nacks.len(), WINDOW_PACKETS);
    for i in 0..nacks.len() {
        tx.handle_datagram(2_000, b, 0, &nacks[order(i)].1);
    }
    let next = drain(&mut tx, 2_000);
    let psns = first
        .iter()
        .map(|(_, d)| RequestRepr::parse(d).unwrap().psn)
        .collect();
    (tx, rx, psns, next)
}

#[test]
fn resends_after_nacks_wait_for_the_window() {
    let a: SocketAddr = "10.0.0.1:4793".parse().unwrap();
    let b: SocketAddr = "10.0.0.2:4793".parse().unwrap();
    // Nothing is in flight and each NACK took a packet off the window,
    // down to its one-MTU floor: one resend leaves, not the whole burst.
    let (mut tx, mut rx, _, resent) = trim_first_window(false, |i| i);
    assert_eq!(resent.len(), 1, "{} datagrams", resent.len());
    let req = RequestRepr::parse(&resent[0].1).unwrap();
    assert_ne!(req.flags & RETX, 0);

    // Its ACK makes room for the next one.
    rx.handle_datagram(3_000, a, ip::tos(0, Ecn::Ect0), &resent[0].1);
    let acks = drain(&mut rx, 3_000);
    assert_eq!(acks.len(), 1);
    tx.handle_datagram(4_000, b, 0, &acks[0].1);
    let next = drain(&mut tx, 4_000);
    assert!(!next.is_empty() && next.len() < WINDOW_PACKETS);
    assert_ne!(RequestRepr::parse(&next[0].1).unwrap().flags & RETX, 0);
}

#[test]
fn ordered_delivery_resends_the_lowest_psn_first() {
    // Each NACK goes to the head of the queue, so NACKs in PSN order leave
    // the highest first: under ordered delivery the receiver would drop
    // it, so the lowest must leave instead, whatever order they came in.
    for reversed in [false, true] {
        let order = |i| if reversed { WINDOW_PACKETS - 1 - i } else { i };
        let (_, _, psns, resent) = trim_first_window(true, order);
        assert_eq!(resent.len(), 1, "{} datagrams", resent.len());
        let req = RequestRepr::parse(&resent[0].1).unwrap();
        assert_ne!(req.flags & RETX, 0);
        assert_eq!(
            Some(&req.psn),
            psns.iter().min(),
            "NACKs reversed: {reversed}"
        );
    }
}

/// The window admits the next packet by its own size: with a one-MTU
/// window and one small message in flight, a second small message still
/// leaves at once, whether it was posted before the first went out or
/// after, instead of waiting for an ACK.
#[test]
fn small_messages_share_a_one_packet_window() {
    // bdp = 1 Gb/s * 1 us: the window is its floor, one MTU.
    let cfg = Config {
        nscc_min_maxwnd_packets: 1,
        base_rtt_us: 1,
        ..small_window(false)
    };
    let a: SocketAddr = "10.0.0.1:4793".parse().unwrap();
    let b: SocketAddr = "10.0.0.2:4793".parse().unwrap();
    let mut tx = Engine::new(&cfg, a, 1);
    tx.post_send(0, send(b, pattern(1, 64), None, 1)).unwrap();
    tx.post_send(0, send(b, pattern(2, 64), None, 2)).unwrap();
    let both = drain(&mut tx, 0);
    assert_eq!(both.len(), 2);
    assert!(both.iter().all(|(_, d)| is_data(d)));
    tx.post_send(10, send(b, pattern(3, 64), None, 3)).unwrap();
    assert_eq!(drain(&mut tx, 10).len(), 1);
    // A full-size packet does not fit beside them: it waits for an ACK.
    tx.post_send(20, send(b, pattern(4, 64 << 10), None, 4))
        .unwrap();
    assert!(drain(&mut tx, 20).is_empty());
}
