//! Peer identity across entropy ports: two sans-IO engines over an in-memory
//! channel where each datagram's source port is the sender's canonical port
//! plus its `Transmit.entropy` (what the UDP driver's socket pool does). Data
//! sprayed over many source ports must still be matched in send order and
//! reported (FI_SOURCE) from the sender's canonical address.

mod common;

use std::collections::{BTreeSet, BinaryHeap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use common::{pattern, send, InFlight, Shared};
use uet::wire::{NextHeader, PacketType, Prologue};
use uet::{CompletionKind, CompletionLevel, Config, Engine, ProbeFlags, RecvOp};

const ENTROPIES: u16 = 8;

fn is_data(d: &[u8]) -> bool {
    Prologue::parse(d)
        .is_ok_and(|p| p.ptype == PacketType::RudRequest && p.next == NextHeader::SesRequest)
}

#[test]
fn sprayed_data_matches_in_order_from_the_canonical_address() {
    let cfg = Config {
        mtu: 1500,
        window: 64,
        entropies: ENTROPIES,
        lb: Some(uet::cms::LbAlgorithm::Oblivious),
        ..Config::default()
    };
    let addrs: [SocketAddr; 2] = [
        "10.0.0.1:4793".parse().unwrap(),
        "10.0.0.2:5000".parse().unwrap(),
    ];
    let mut eng = [
        Engine::new(&cfg, addrs[0], 1),
        Engine::new(&cfg, addrs[1], 2),
    ];
    let sizes = [5000usize, 0, 1, 20_000, 1400, 3000, 64, 100_000];
    // Both directions, alternate messages asking for delivery complete so
    // SES responses flow too; receives posted up front, in order.
    let mut bufs: [Vec<Shared>; 2] = [Vec::new(), Vec::new()];
    for (e, engine) in eng.iter_mut().enumerate() {
        let peer = addrs[1 - e];
        for (i, &len) in sizes.iter().enumerate() {
            let mut op = send(peer, pattern((e * 100 + i) as u64, len), None, i as u64);
            if i % 2 == 1 {
                op.level = CompletionLevel::Delivery;
            }
            engine.post_send(0, op).unwrap();
            let buf = Shared(Arc::new(Mutex::new(vec![0u8; len])));
            engine
                .post_recv(
                    0,
                    RecvOp {
                        src: None,
                        tagged: false,
                        tag: 0,
                        ignore: 0,
                        buffer: Box::new(buf.clone()),
                        context: 1000 + i as u64,
                        signal: true,
                        probe: ProbeFlags::default(),
                    },
                )
                .unwrap();
            bufs[e].push(buf);
        }
    }
    let mut rng = SmallRng::seed_from_u64(7);
    let mut net = BinaryHeap::new();
    let mut seq = 0;
    let mut now = 0u64;
    let mut buf = vec![0u8; 2048];
    let mut data_ports = [BTreeSet::new(), BTreeSet::new()];
    let mut sends = [0usize; 2];
    let mut recvs: [Vec<usize>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..200_000 {
        for (e, engine) in eng.iter_mut().enumerate() {
            while let Some(t) = engine.poll_transmit(now, &mut buf) {
                let data = buf[..t.len].to_vec();
                if is_data(&data) {
                    data_ports[e].insert(t.entropy);
                } else {
                    assert_eq!(t.entropy, 0, "only data may leave from the pool");
                }
                let mut from = addrs[e];
                from.set_port(from.port() + t.entropy);
                seq += 1;
                // Jitter so packets from different ports overtake each other.
                net.push(InFlight {
                    at: now + 1000 + rng.gen_range(0..5000),
                    seq,
                    to: 1 - e,
                    from,
                    tos: 0,
                    data,
                });
            }
            while let Some(c) = engine.poll_completion() {
                assert_eq!(c.error, None, "{c:?}");
                match c.kind {
                    CompletionKind::Send => sends[e] += 1,
                    CompletionKind::Recv => {
                        assert_eq!(c.src, Some(addrs[1 - e]), "FI_SOURCE");
                        recvs[e].push((c.context - 1000) as usize);
                    }
                    other => panic!("unexpected completion kind {other:?}"),
                }
            }
        }
        if sends == [sizes.len(); 2] && recvs.iter().all(|r| r.len() == sizes.len()) {
            break;
        }
        now = net.peek().map_or(now + 1000, |p| p.at).max(now + 1);
        if let Some(t) = eng.iter().filter_map(|e| e.next_timeout()).min() {
            now = now.min(t.max(now));
        }
        while net.peek().is_some_and(|p| p.at <= now) {
            let p = net.pop().unwrap();
            eng[p.to].handle_datagram(now, p.from, p.tos, &p.data);
        }
        for e in eng.iter_mut() {
            if e.next_timeout().is_some_and(|t| t <= now) {
                e.handle_timeout(now);
            }
        }
    }
    for e in 0..2 {
        assert_eq!(sends[e], sizes.len(), "sends completed at {e}");
        // Every receive completed once; the contents below show message i
        // was matched to receive i (send order), whatever order the packets
        // and completions came in.
        let mut done = recvs[e].clone();
        done.sort_unstable();
        assert_eq!(done, (0..sizes.len()).collect::<Vec<_>>());
        for (i, b) in bufs[e].iter().enumerate() {
            let sender = 1 - e;
            assert!(
                *b.0.lock().unwrap() == pattern((sender * 100 + i) as u64, sizes[i]),
                "message {i} to {e} corrupted"
            );
        }
        // The data really came from several ports (socket 0 is one of the
        // load balancer's entropies too).
        assert!(data_ports[e].len() > 1, "{:?}", data_ports[e]);
        // No peer was created for an entropy port: nothing unknown arrived.
        assert_eq!(eng[e].stats().unknown_pdc, 0);
    }
}

/// The per-entropy counters add up to the data packets sent, sprayed or
/// kept to one path (ordered delivery: all on the endpoint's own entropy),
/// retransmissions included.
#[test]
fn entropy_counters_add_up_to_the_data_packets_sent() {
    for ordered in [false, true] {
        let cfg = Config {
            mtu: 1500,
            entropies: ENTROPIES,
            lb: Some(uet::cms::LbAlgorithm::Oblivious),
            ordered,
            ..Config::default()
        };
        let mut net = common::Net::new(&[cfg.clone(), cfg]);
        let to = net.addrs[1];
        for i in 0..6u64 {
            net.eng[1]
                .post_recv(0, common::recv(5000, None, 100 + i))
                .unwrap();
            net.eng[0]
                .post_send(0, send(to, pattern(i, 5000), None, i))
                .unwrap();
        }
        // Drop the first burst whole, so everything is sent again.
        let mut buf = vec![0u8; 2048];
        let mut dropped = 0;
        while net.eng[0].poll_transmit(0, &mut buf).is_some() {
            dropped += 1;
        }
        net.run("all delivered", |n| {
            n.done[0].len() == 6 && n.done[1].len() == 6
        });
        let sent = net.eng[0].stats().packets_sent;
        assert!(
            dropped > 0 && sent > dropped as u64,
            "no resend: {sent} sent"
        );
        let per_entropy = net.eng[0].peer_stats(to).unwrap().entropies;
        let counted: u64 = per_entropy.iter().map(|e| e.sent).sum();
        assert_eq!(counted, sent, "ordered {ordered}: {per_entropy:?}");
        if ordered {
            assert_eq!(per_entropy[0].sent, sent, "ordered delivery left its path");
        } else {
            assert!(per_entropy.iter().filter(|e| e.sent > 0).count() > 1);
        }
    }
}

/// NACKs go to the sender's canonical address, whatever port its data left
/// from: the driver may send data from ports it never reads (sockets
/// connected to one peer each, FI_UET_CONNECTED_PEERS) or reads only now
/// and then (the entropy pool).
#[test]
fn nacks_answer_the_canonical_address() {
    let (addrs, mut a, _b) = common::acquainted();
    let mut sprayed = addrs[0];
    sprayed.set_port(addrs[0].port() + 5);
    // b restarted: a's open context is unknown to the new b.
    let mut restarted = Engine::new(&Config::default(), addrs[1], 3);
    a.post_send(20_000, send(addrs[1], vec![2; 64], None, 2))
        .unwrap();
    let data = common::drain(&mut a, 20_000);
    assert!(data.iter().any(|(_, d)| is_data(d)), "{data:?}");
    for (_, d) in &data {
        restarted.handle_datagram(25_000, sprayed, 0, d);
    }
    let mut buf = vec![0u8; 2048];
    let mut nacks = 0;
    while let Some(t) = restarted.poll_transmit(25_000, &mut buf) {
        let ptype = Prologue::parse(&buf[..t.len]).unwrap().ptype;
        assert_eq!(ptype, PacketType::Nack);
        assert_eq!(t.dest, addrs[0], "NACK to the canonical address");
        nacks += 1;
    }
    assert!(nacks > 0);
    assert!(restarted.stats().unknown_pdc > 0);
}
