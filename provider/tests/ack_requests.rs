//! When a sender asks for an immediate ACK (the AR flag): at the end of its
//! backlog, and whenever the window is about to stall; packets in between
//! let the receiver coalesce (NSCC.md section 6).

mod common;

use std::net::SocketAddr;

use uet::wire::prologue::flags;
use uet::wire::PacketType;
use uet::{CompletionLevel, SendOp};

use common::{acquainted, drain, flags_of, recv, send};

fn injected(dest: SocketAddr, len: usize, context: u64) -> SendOp {
    SendOp {
        level: CompletionLevel::Inject,
        signal: false,
        ..send(dest, vec![5; len], None, context)
    }
}

fn is_data(t: PacketType) -> bool {
    matches!(t, PacketType::RudRequest | PacketType::RodRequest)
}

#[test]
fn the_end_of_the_backlog_asks_for_its_ack() {
    let (addrs, mut a, mut b) = acquainted();
    b.post_recv(10_000, recv(64, None, 2)).unwrap();
    a.post_send(10_000, send(addrs[1], vec![2; 64], None, 2))
        .unwrap();
    let out = drain(&mut a, 10_000);
    assert_eq!(out.len(), 1);
    assert!(is_data(out[0].0));
    assert_eq!(flags_of(&out[0].1) & (flags::AR | flags::SYN), flags::AR);
    b.handle_datagram(11_000, addrs[0], 0, &out[0].1);
    assert!(b.has_queued_acks(), "AR: acknowledged at once");
}

#[test]
fn a_backlog_asks_for_an_ack_before_the_window_stalls() {
    let (addrs, mut a, _b) = acquainted();
    let window = 4;
    a.set_window(window);
    for k in 0..2 * window as u64 {
        a.post_send(10_000, injected(addrs[1], 64, 10 + k)).unwrap();
    }
    let out = drain(&mut a, 10_000);
    // The window lets `window` packets go; the last of them asks (the
    // backlog goes on behind it).
    assert_eq!(out.len(), window);
    for (k, (_, d)) in out.iter().enumerate() {
        assert_eq!(flags_of(d) & flags::AR != 0, k == window - 1, "packet {k}");
    }
}
