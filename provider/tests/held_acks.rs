//! ACKs held while the application answers (`Engine::hold_acks`), with
//! `FI_UET_ACK_PIGGYBACK` off: the reply leaves first, the ACK follows in a
//! datagram of its own with the time it was held as its service time, and
//! the sender's congestion control sees the round trip without it. (With
//! the knob on, the ACK rides in the reply: `piggyback.rs`.)

mod common;

use uet::wire::{AckRepr, PacketType};
use uet::{Config, Engine};

use common::{ack_rtts, drain, engine_pair_with, recv, send};

/// Two engines that send held ACKs in datagrams of their own.
fn engine_pair() -> ([std::net::SocketAddr; 2], Engine, Engine) {
    engine_pair_with(&Config {
        ack_piggyback: false,
        ..Config::default()
    })
}

fn is_data(t: PacketType) -> bool {
    matches!(t, PacketType::RudRequest | PacketType::RodRequest)
}

#[test]
fn held_ack_follows_the_reply_and_reports_its_hold_time() {
    let (addrs, mut a, mut b) = engine_pair();
    a.enable_trace();
    a.post_recv(0, recv(64, None, 10)).unwrap();
    b.post_recv(0, recv(64, None, 20)).unwrap();

    // Ping: a -> b, one packet (asks for an immediate ACK).
    a.post_send(0, send(addrs[1], vec![1; 64], None, 1))
        .unwrap();
    let ping = drain(&mut a, 0);
    assert_eq!(ping.len(), 1);
    let arrival = 10_000;
    b.handle_datagram(arrival, addrs[0], 0, &ping[0].1);
    assert!(b.has_completions());
    assert!(b.has_queued_acks());

    // While held, nothing but data leaves; the reply goes out first.
    b.hold_acks(true);
    assert!(drain(&mut b, arrival).is_empty());
    let reply_at = arrival + 6_400;
    b.post_send(reply_at, send(addrs[0], vec![2; 64], None, 2))
        .unwrap();
    let reply = drain(&mut b, reply_at);
    assert_eq!(reply.len(), 1);
    assert!(is_data(reply[0].0), "{:?}", reply[0].0);
    assert!(b.has_queued_acks());

    // Released: the ACK, reporting how long after the ping it left.
    b.hold_acks(false);
    let ack = drain(&mut b, reply_at);
    assert_eq!(ack.len(), 1);
    assert_eq!(ack[0].0, PacketType::AckCc);
    let parsed = AckRepr::parse(&ack[0].1).unwrap();
    assert_eq!(parsed.service_time_ns(), 6_400);

    // The sender's congestion control sees the round trip less the hold.
    let ack_arrival = reply_at + 3_000;
    a.handle_datagram(ack_arrival, addrs[1], 0, &reply[0].1);
    a.handle_datagram(ack_arrival, addrs[1], 0, &ack[0].1);
    assert_eq!(ack_rtts(&mut a), vec![ack_arrival - 6_400]);
}

/// The receiving engine of a 64 B ping at 10 us that has queued its ACK
/// and posted a 64 B reply, nothing sent yet.
fn pinged_and_replying() -> Engine {
    let (addrs, mut a, mut b) = engine_pair();
    b.post_recv(0, recv(64, None, 20)).unwrap();
    a.post_send(0, send(addrs[1], vec![1; 64], None, 1))
        .unwrap();
    let ping = drain(&mut a, 0);
    b.handle_datagram(10_000, addrs[0], 0, &ping[0].1);
    b.post_send(10_000, send(addrs[0], vec![2; 64], None, 2))
        .unwrap();
    b
}

#[test]
fn acks_leave_at_once_when_not_held() {
    let mut b = pinged_and_replying();
    // Control ahead of data, and nothing held: no service time.
    let out = drain(&mut b, 10_000);
    let types: Vec<PacketType> = out.iter().map(|(t, _)| *t).collect();
    assert_eq!(types.len(), 2);
    assert_eq!(types[0], PacketType::AckCc);
    assert!(is_data(types[1]));
    assert_eq!(AckRepr::parse(&out[0].1).unwrap().service_time, 0);
}

#[test]
fn held_acks_let_the_reply_leave_alone_then_follow_with_their_wait() {
    let mut b = pinged_and_replying();
    b.hold_acks(true);
    let reply = drain(&mut b, 10_000);
    assert_eq!(reply.len(), 1, "only the reply while ACKs are held");
    assert!(is_data(reply[0].0));
    b.hold_acks(false);
    let acks = drain(&mut b, 12_000);
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].0, PacketType::AckCc);
    // It reports the 2 us it waited (in the field's units).
    let waited = AckRepr::parse(&acks[0].1).unwrap().service_time_ns();
    assert!((1_900..=2_000).contains(&waited), "{waited}");
}

/// A delayed ACK whose time came while ACKs are held leaves no timer due:
/// it is queued, and waits for the driver from then on. (A deadline left in
/// the past would tell the driver never to sleep, and would fire the
/// timers on every call until the ACK left.)
#[test]
fn a_queued_delayed_ack_leaves_no_timer_due() {
    let (addrs, mut a, mut b) = common::acquainted();
    // Two messages back to back: the first leaves without asking for an
    // immediate ACK (more is queued behind it), so its ACK is delayed.
    b.post_recv(10_000, recv(64, None, 2)).unwrap();
    b.post_recv(10_000, recv(64, None, 3)).unwrap();
    a.post_send(10_000, send(addrs[1], vec![2; 64], None, 2))
        .unwrap();
    a.post_send(10_000, send(addrs[1], vec![3; 64], None, 3))
        .unwrap();
    let mut buf = vec![0u8; 65536];
    let first = a
        .poll_transmit(10_000, &mut buf)
        .expect("the first message");
    b.handle_datagram(15_000, addrs[0], 0, &buf[..first.len]);
    let due = b.next_timeout().expect("the delayed ACK's deadline");
    b.hold_acks(true);
    b.handle_timeout(due);
    assert!(b.has_queued_acks());
    assert!(
        b.next_timeout().is_none_or(|t| t > due),
        "deadline {:?} left at or before {due}",
        b.next_timeout()
    );
    b.hold_acks(false);
    assert_eq!(drain(&mut b, due)[0].0, PacketType::AckCc);
}
