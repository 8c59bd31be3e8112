//! When a sender asks for an immediate ACK (the AR flag): at the end of its
//! backlog, and whenever the window is about to stall; packets in between
//! let the receiver coalesce (NSCC.md section 6).

mod common;

use std::net::SocketAddr;

use uet::wire::prologue::flags;
use uet::wire::{PacketType, Prologue};
use uet::{CompletionLevel, Config, Engine, SendOp};

use common::{recv, send};

/// Everything `from` has ready at `now`, as (packet type, flags, bytes).
fn drain(from: &mut Engine, now: u64) -> Vec<(PacketType, u8, Vec<u8>)> {
    let mut buf = vec![0u8; 65536];
    let mut out = Vec::new();
    while let Some(t) = from.poll_transmit(now, &mut buf) {
        let p = Prologue::parse(&buf[..t.len]).unwrap();
        out.push((p.ptype, p.flags, buf[..t.len].to_vec()));
    }
    out
}

fn injected(dest: SocketAddr, len: usize, context: u64) -> SendOp {
    SendOp {
        level: CompletionLevel::Inject,
        signal: false,
        ..send(dest, vec![5; len], None, context)
    }
}

/// Two engines whose delivery context is open (one message each way was
/// exchanged and acknowledged), so no packet carries SYN any more.
fn established() -> ([SocketAddr; 2], Engine, Engine) {
    let addrs: [SocketAddr; 2] = [
        "10.0.0.1:4793".parse().unwrap(),
        "10.0.0.2:4793".parse().unwrap(),
    ];
    let cfg = Config::default();
    let mut a = Engine::new(&cfg, addrs[0], 1);
    let mut b = Engine::new(&cfg, addrs[1], 2);
    b.post_recv(0, recv(64, None, 1)).unwrap();
    a.post_send(0, send(addrs[1], vec![1; 64], None, 1))
        .unwrap();
    for (_, _, d) in drain(&mut a, 0) {
        b.handle_datagram(1_000, addrs[0], 0, &d);
    }
    for (_, _, d) in drain(&mut b, 1_000) {
        a.handle_datagram(2_000, addrs[1], 0, &d);
    }
    while a.poll_completion().is_some() {}
    while b.poll_completion().is_some() {}
    assert!(!a.has_queued_data() && !b.has_queued_acks());
    (addrs, a, b)
}

fn is_data(t: PacketType) -> bool {
    matches!(t, PacketType::RudRequest | PacketType::RodRequest)
}

#[test]
fn the_end_of_the_backlog_asks_for_its_ack() {
    let (addrs, mut a, mut b) = established();
    b.post_recv(10_000, recv(64, None, 2)).unwrap();
    a.post_send(10_000, send(addrs[1], vec![2; 64], None, 2))
        .unwrap();
    let out = drain(&mut a, 10_000);
    assert_eq!(out.len(), 1);
    assert!(is_data(out[0].0));
    assert_eq!(out[0].1 & (flags::AR | flags::SYN), flags::AR);
    b.handle_datagram(11_000, addrs[0], 0, &out[0].2);
    assert!(b.has_queued_acks(), "AR: acknowledged at once");
}

#[test]
fn a_backlog_asks_for_an_ack_before_the_window_stalls() {
    let (addrs, mut a, _b) = established();
    let window = 4;
    a.set_window(window);
    for k in 0..2 * window as u64 {
        a.post_send(10_000, injected(addrs[1], 64, 10 + k)).unwrap();
    }
    let out = drain(&mut a, 10_000);
    // The window lets `window` packets go; the last of them asks (the
    // backlog goes on behind it).
    assert_eq!(out.len(), window);
    for (k, (_, f, _)) in out.iter().enumerate() {
        assert_eq!(f & flags::AR != 0, k == window - 1, "packet {k}");
    }
}
