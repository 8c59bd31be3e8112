//! QuickAdapt's new window after an application-limited gap: the engine
//! tells congestion control when a sender resumes after its pipe drained
//! with nothing left to send, and only then.

mod common;

use std::net::SocketAddr;

use common::{acquainted, recv, send, shuffled_round};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use uet::Engine;

/// Exchange datagrams, 5 us a round, until neither engine sends; returns
/// the time reached.
fn settle(a: Engine, b: Engine, addrs: &[SocketAddr; 2], mut now: u64) -> ([Engine; 2], u64) {
    let mut eng = [a, b];
    let mut rng = SmallRng::seed_from_u64(7);
    while !shuffled_round(&mut eng, addrs, now, &mut rng, [false; 2]) {
        now += 5_000;
    }
    (eng, now)
}

fn idle_restarts(a: &Engine, to: SocketAddr) -> u64 {
    a.peer_stats(to).unwrap().cc.idle_restarts
}

#[test]
fn each_message_of_a_ping_pong_restarts_and_a_backlog_does_not() {
    let (addrs, mut a, mut b) = acquainted();
    let mut now = 20_000;
    // One message at a time, each after the previous one was acknowledged.
    for i in 0..3u64 {
        b.post_recv(now, recv(64 << 10, None, i)).unwrap();
        a.post_send(now, send(addrs[1], vec![i as u8; 64 << 10], None, i))
            .unwrap();
        let ([a2, b2], t) = settle(a, b, &addrs, now);
        (a, b, now) = (a2, b2, t + 100_000);
        assert_eq!(idle_restarts(&a, addrs[1]), i + 1);
    }
    // Three queued together: one busy period.
    for i in 3..6u64 {
        b.post_recv(now, recv(64 << 10, None, i)).unwrap();
        a.post_send(now, send(addrs[1], vec![i as u8; 64 << 10], None, i))
            .unwrap();
    }
    let ([a, _b], _) = settle(a, b, &addrs, now);
    assert_eq!(idle_restarts(&a, addrs[1]), 4);
}
