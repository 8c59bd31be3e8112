//! QuickAdapt's extreme-delay trigger (NSCC.md section 3) judges only a
//! sender that used its window (`FI_UET_NSCC_QA_WINDOW_LIMITED`): the
//! engine tells its controller when a window holds data back, and the
//! controller counts a window at least half in flight as used. A sender
//! that leaves most of its window unused, whose ACKs come back late (the
//! peer's host busy), keeps its window; one that fills it shrinks to what
//! it achieved, as in the reference.

mod common;

use std::collections::BinaryHeap;

use common::{advance, engine_pair_with, recv, send, InFlight};
use uet::{CompletionKind, Config, Engine};

/// Each way on the wire, ns.
const HOP_NS: u64 = 5_000;
/// Far above four target delays of a 10 us base RTT.
const LATE_NS: u64 = 200_000;

/// What the wire does after the first message (which sets the base RTT).
#[derive(Clone, Copy)]
enum Wire {
    /// Engine 1's datagrams (its ACKs) come back `LATE_NS` late.
    LateAcks,
    /// Engine 0's datagrams queue for a port that moves one byte per ns.
    Bottleneck,
}

struct Run {
    quick_adapts: u64,
    cwnd: u64,
    initial_cwnd: u64,
}

/// Engine 0 sends `count` messages of `len` bytes to engine 1, a new one
/// every `gap_ns` (after the previous one's send completion for the
/// first), with 4 KiB packets, over `wire`.
fn run(cfg: &Config, wire: Wire, len: usize, count: u64, gap_ns: u64) -> Run {
    let (addrs, a, b) = engine_pair_with(cfg);
    let mut eng = [a, b];
    let mut net = BinaryHeap::new();
    let mut buf = vec![0u8; 65536];
    let (mut now, mut seq) = (0u64, 0u64);
    let (mut posted, mut sent, mut received) = (0u64, 0u64, 0u64);
    let mut next_post = 0u64;
    let mut initial_cwnd = 0;
    let mut port_free = 0u64;
    for _ in 0..2_000_000 {
        if posted < count && now >= next_post && (posted == 0 || sent >= 1) {
            eng[1].post_recv(now, recv(len, None, posted)).unwrap();
            eng[0]
                .post_send(now, send(addrs[1], vec![7; len], None, posted))
                .unwrap();
            if posted == 1 {
                initial_cwnd = cc(&eng[0], &addrs).cwnd;
            }
            posted += 1;
            next_post = now + gap_ns;
        }
        for (e, engine) in eng.iter_mut().enumerate() {
            while let Some(t) = engine.poll_transmit(now, &mut buf) {
                let at = match (wire, e) {
                    _ if sent == 0 => now + HOP_NS,
                    (Wire::LateAcks, 1) => now + HOP_NS + LATE_NS,
                    (Wire::Bottleneck, 0) => {
                        port_free = port_free.max(now) + t.len as u64;
                        port_free + HOP_NS
                    }
                    _ => now + HOP_NS,
                };
                seq += 1;
                net.push(InFlight {
                    at,
                    seq,
                    to: 1 - e,
                    from: addrs[e],
                    tos: 0,
                    data: buf[..t.len].to_vec(),
                });
            }
            while let Some(c) = engine.poll_completion() {
                assert_eq!(c.error, None, "{c:?}");
                match c.kind {
                    CompletionKind::Send => sent += 1,
                    CompletionKind::Recv => received += 1,
                    other => panic!("no RMA here, got {other:?}"),
                }
            }
        }
        if sent == count && received == count && net.is_empty() {
            let s = cc(&eng[0], &addrs);
            return Run {
                quick_adapts: s.quick_adapt_events,
                cwnd: s.cwnd,
                initial_cwnd,
            };
        }
        let due = (posted < count).then_some(next_post);
        now = advance(&mut eng, &mut net, now, due);
    }
    panic!("did not finish: {sent} sent, {received} received of {count}");
}

fn cc(e: &Engine, addrs: &[std::net::SocketAddr; 2]) -> uet::cms::CcStats {
    e.peer_stats(addrs[1]).expect("peer known").cc
}

fn config(window_limited_only: bool) -> Config {
    Config {
        mtu: 4096,
        nscc_qa_window_limited: window_limited_only,
        ..Config::default()
    }
}

#[test]
fn a_sender_held_back_by_its_packet_window_counts_as_using_its_window() {
    // 64 B messages posted faster than eight packets in flight let them
    // leave, with late ACKs: few bytes in flight, far below half the
    // congestion window, but the packet window holds messages back.
    let cfg = Config {
        window: 8,
        ..config(true)
    };
    let r = run(&cfg, Wire::LateAcks, 64, 400, 0);
    assert!(r.quick_adapts > 0, "QuickAdapt never fired");
}

#[test]
fn late_acks_of_a_sender_with_less_than_its_window_leave_the_window_alone() {
    // 2 KiB messages every 20 us: about ten in flight while their ACKs are
    // late, far below the window, and the pipe never drains.
    let r = run(&config(true), Wire::LateAcks, 2048, 200, 20_000);
    assert_eq!(
        r.quick_adapts, 0,
        "QuickAdapt fired for an application-limited sender"
    );
    assert!(
        r.cwnd >= r.initial_cwnd,
        "window {} from {}",
        r.cwnd,
        r.initial_cwnd
    );
    // The reference rule cuts that window to what the sender offered.
    let r = run(&config(false), Wire::LateAcks, 2048, 200, 20_000);
    assert!(r.quick_adapts > 0);
    assert!(
        r.cwnd < r.initial_cwnd / 4,
        "window {} from {}",
        r.cwnd,
        r.initial_cwnd
    );
}

#[test]
fn a_sender_held_back_by_its_window_behind_a_slow_port_still_quick_adapts() {
    // 4 MiB at once into a port far slower than the window assumes: the
    // window is full, the queue delays every ACK, little is delivered per
    // window.
    let r = run(&config(true), Wire::Bottleneck, 4 << 20, 2, 0);
    assert!(r.quick_adapts > 0, "QuickAdapt never fired");
    assert!(
        r.cwnd < r.initial_cwnd,
        "window {} from {}",
        r.cwnd,
        r.initial_cwnd
    );
}
