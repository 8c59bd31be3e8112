//! What the sender's congestion control takes for a round trip: the ACK's
//! round trip less the service time the receiver reports, and nothing when
//! that service time is as long as the whole round trip (a receiver clock
//! read too early), which would otherwise become a base RTT of zero.

mod common;

use std::net::SocketAddr;

use common::{pattern, send};
use uet::{Config, Engine};

/// One full-size packet from a new sender, acknowledged after
/// `service_ns` at the receiver; the sender reads the ACK at `ack_at`.
/// Returns the sender's base RTT afterwards.
fn base_rtt_after(service_ns: u64, ack_at: u64) -> u64 {
    let cfg = Config {
        mtu: 1500,
        ..Config::default()
    };
    let a: SocketAddr = "10.0.0.1:4793".parse().unwrap();
    let b: SocketAddr = "10.0.0.2:4793".parse().unwrap();
    let mut tx = Engine::new(&cfg, a, 1);
    let mut rx = Engine::new(&cfg, b, 2);
    tx.post_send(0, send(b, pattern(1, 1000), None, 1)).unwrap();
    let mut buf = vec![0u8; 65536];
    let t = tx.poll_transmit(0, &mut buf).unwrap();
    rx.handle_datagram(0, a, 0, &buf[..t.len]);
    // The ACK waits out its delay (or `service_ns`) before it leaves.
    let mut ack = None;
    let mut now = 0;
    while ack.is_none() && now <= service_ns.max(1_000_000) {
        now = now.max(service_ns);
        rx.handle_timeout(now);
        ack = rx
            .poll_transmit(now, &mut buf)
            .map(|t| buf[..t.len].to_vec());
        now += 1_000;
    }
    let ack = ack.expect("the receiver never acknowledged");
    tx.handle_datagram(ack_at, b, 0, &ack);
    tx.peer_stats(b).unwrap().cc.base_rtt_ns
}

#[test]
fn service_time_comes_off_the_round_trip() {
    let service = 50_000;
    let base = base_rtt_after(service, service + 20_000);
    assert!((19_000..=21_000).contains(&base), "base RTT {base} ns");
}

#[test]
fn a_service_time_longer_than_the_round_trip_is_no_sample() {
    // No sample: the base RTT stays the provisional reference.
    let base = base_rtt_after(200_000, 100_000);
    assert_eq!(base, uet::cms::REFERENCE_RTT_NS);
}

/// What a closing endpoint takes for the longest a peer may wait before it
/// resends: the minimum timeout on a fast path, the timeout of our own
/// context to that peer once round trips there were long.
#[test]
fn peer_resend_wait_follows_the_round_trips_to_the_peers_we_receive_from() {
    const MS: u64 = 1_000_000;
    let cfg = Config {
        rto_min_us: 1_000,
        ..Config::default()
    };
    let (addrs, mut a, mut b) = common::engine_pair_with(&cfg);
    assert_eq!(a.peer_resend_wait_ns(), MS, "no peer yet");
    let mut now = 0;
    // b sends to a (so a receives from b), and a's messages to b are
    // acknowledged 8 ms after they leave, without a's timer firing (a's
    // ACKs take as long, so b's round trips are as long).
    for i in 0..6u64 {
        b.post_recv(now, common::recv(64, None, 100 + i)).unwrap();
        a.post_send(now, send(addrs[1], pattern(i, 64), None, i))
            .unwrap();
        a.post_recv(now, common::recv(64, None, 200 + i)).unwrap();
        b.post_send(now, send(addrs[0], pattern(i, 64), None, i))
            .unwrap();
        for (_, d) in common::drain(&mut a, now) {
            b.handle_datagram(now, addrs[0], 0, &d);
        }
        for (_, d) in common::drain(&mut b, now) {
            a.handle_datagram(now + 8 * MS, addrs[1], 0, &d);
        }
        now += 8 * MS;
        for (_, d) in common::drain(&mut a, now) {
            b.handle_datagram(now, addrs[0], 0, &d);
        }
        now += MS;
    }
    let wait = a.peer_resend_wait_ns();
    assert!(wait >= 8 * MS, "a's resend wait stayed at {wait} ns");
}
