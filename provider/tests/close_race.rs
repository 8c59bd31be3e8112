//! The close handshake of an idle context against a receiver that first
//! refuses (it still holds an unmatched message) and then confirms a
//! retransmitted close (or a late copy of an earlier one): the sender must
//! not keep using a context the receiver has dropped.

mod common;

use common::{brisk_config, drain, engine_pair_with, recv, send};
use uet::wire::PacketType;
use uet::{CompletionKind, Engine};

fn deliver(to: &mut Engine, now: u64, from: std::net::SocketAddr, pkts: &[(PacketType, Vec<u8>)]) {
    for (_, d) in pkts {
        to.handle_datagram(now, from, 0, d);
    }
}

/// Fire `e`'s timers until `now`.
fn timers(e: &mut Engine, now: u64) {
    while e.next_timeout().is_some_and(|t| t <= now) {
        e.handle_timeout(now);
    }
}

#[test]
fn a_stale_refusal_does_not_hide_the_confirmation_of_a_resent_close() {
    let (addrs, mut a, mut b) = engine_pair_with(&brisk_config());
    let mut now = 0;
    // An unexpected message: b stages it, so it refuses a close for now.
    a.post_send(now, send(addrs[1], vec![7; 64], None, 1))
        .unwrap();
    for _ in 0..4 {
        now += 5_000;
        let out = drain(&mut a, now);
        deliver(&mut b, now, addrs[0], &out);
        now += 5_000;
        let back = drain(&mut b, now);
        deliver(&mut a, now, addrs[1], &back);
        timers(&mut a, now);
        timers(&mut b, now);
    }
    let sent: Vec<_> = std::iter::from_fn(|| a.poll_completion()).collect();
    assert!(sent.iter().all(|c| c.error.is_none()), "{sent:?}");
    // Idle for longer than pdc_idle: a starts the close.
    now += 2_000_000;
    timers(&mut a, now);
    let close1 = drain(&mut a, now);
    assert!(
        close1.iter().any(|(t, _)| *t == PacketType::Control),
        "{close1:?}"
    );
    // b refuses it (message still unmatched); the refusal is delayed.
    now += 5_000;
    deliver(&mut b, now, addrs[0], &close1);
    let refusal = drain(&mut b, now);
    assert!(!refusal.is_empty());
    // a hears nothing and resends the close.
    let mut close2 = Vec::new();
    for _ in 0..100 {
        now += 100_000;
        timers(&mut a, now);
        close2 = drain(&mut a, now);
        if !close2.is_empty() {
            break;
        }
    }
    assert!(!close2.is_empty(), "no close resent");
    // Meanwhile b's application takes the message; now b confirms.
    b.post_recv(now, recv(64, None, 2)).unwrap();
    let got: Vec<_> = std::iter::from_fn(|| b.poll_completion()).collect();
    assert!(
        got.iter()
            .any(|c| c.kind == CompletionKind::Recv && c.error.is_none()),
        "{got:?}"
    );
    deliver(&mut b, now, addrs[0], &close2);
    let confirm = drain(&mut b, now);
    // Both answers reach a, in the order b sent them.
    now += 5_000;
    deliver(&mut a, now, addrs[1], &refusal);
    deliver(&mut a, now, addrs[1], &confirm);
    // A new message right away, then a lossless exchange until quiet.
    b.post_recv(now, recv(64, None, 3)).unwrap();
    a.post_send(now, send(addrs[1], vec![8; 64], None, 4))
        .unwrap();
    let mut done = Vec::new();
    for _ in 0..200 {
        now += 5_000;
        let out = drain(&mut a, now);
        deliver(&mut b, now, addrs[0], &out);
        now += 5_000;
        let back = drain(&mut b, now);
        deliver(&mut a, now, addrs[1], &back);
        timers(&mut a, now);
        timers(&mut b, now);
        done.extend(std::iter::from_fn(|| a.poll_completion()));
        done.extend(std::iter::from_fn(|| b.poll_completion()));
    }
    assert!(
        done.iter().all(|c| c.error.is_none()),
        "{done:?}\n{:?}",
        a.stats()
    );
    assert!(done
        .iter()
        .any(|c| c.kind == CompletionKind::Recv && c.context == 3));
}

#[test]
fn a_late_earlier_close_attempt_is_not_confirmed_after_a_refusal() {
    let (addrs, mut a, mut b) = engine_pair_with(&brisk_config());
    let mut now = 0;
    // An unexpected message: b stages it, so it refuses a close for now.
    a.post_send(now, send(addrs[1], vec![7; 64], None, 1))
        .unwrap();
    for _ in 0..4 {
        now += 5_000;
        let out = drain(&mut a, now);
        deliver(&mut b, now, addrs[0], &out);
        now += 5_000;
        let back = drain(&mut b, now);
        deliver(&mut a, now, addrs[1], &back);
        timers(&mut a, now);
        timers(&mut b, now);
    }
    let sent: Vec<_> = std::iter::from_fn(|| a.poll_completion()).collect();
    assert!(sent.iter().all(|c| c.error.is_none()), "{sent:?}");
    // Idle for longer than pdc_idle: a starts the close.
    now += 2_000_000;
    timers(&mut a, now);
    let close1 = drain(&mut a, now);
    assert!(
        close1.iter().any(|(t, _)| *t == PacketType::Control),
        "{close1:?}"
    );
    // The network holds it back.
    // a hears nothing and resends the close.
    let mut close2 = Vec::new();
    for _ in 0..100 {
        now += 100_000;
        timers(&mut a, now);
        close2 = drain(&mut a, now);
        if !close2.is_empty() {
            break;
        }
    }
    assert!(!close2.is_empty(), "no close resent");
    // b refuses the resent close (message still unmatched); then its
    // application takes the message, and the first close arrives late:
    // confirming it would drop the context a's latest answer keeps.
    now += 5_000;
    deliver(&mut b, now, addrs[0], &close2);
    let refusal = drain(&mut b, now);
    assert!(!refusal.is_empty());
    b.post_recv(now, recv(64, None, 2)).unwrap();
    let got: Vec<_> = std::iter::from_fn(|| b.poll_completion()).collect();
    assert!(
        got.iter()
            .any(|c| c.kind == CompletionKind::Recv && c.error.is_none()),
        "{got:?}"
    );
    deliver(&mut b, now, addrs[0], &close1);
    let confirm = drain(&mut b, now);
    // Whatever b answered reaches a, in the order b sent it.
    now += 5_000;
    deliver(&mut a, now, addrs[1], &refusal);
    deliver(&mut a, now, addrs[1], &confirm);
    // A new message right away, then a lossless exchange until quiet.
    b.post_recv(now, recv(64, None, 3)).unwrap();
    a.post_send(now, send(addrs[1], vec![8; 64], None, 4))
        .unwrap();
    let mut done = Vec::new();
    for _ in 0..200 {
        now += 5_000;
        let out = drain(&mut a, now);
        deliver(&mut b, now, addrs[0], &out);
        now += 5_000;
        let back = drain(&mut b, now);
        deliver(&mut a, now, addrs[1], &back);
        timers(&mut a, now);
        timers(&mut b, now);
        done.extend(std::iter::from_fn(|| a.poll_completion()));
        done.extend(std::iter::from_fn(|| b.poll_completion()));
    }
    assert!(
        done.iter().all(|c| c.error.is_none()),
        "{done:?}\n{:?}",
        a.stats()
    );
    assert!(done
        .iter()
        .any(|c| c.kind == CompletionKind::Recv && c.context == 3));
}
