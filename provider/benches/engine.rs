//! Micro-benchmarks of the engine's per-packet work: header build and parse,
//! tag matching against many posted receives or unexpected messages, ACK/SACK processing, one
//! 64-byte message through two engines (no sockets), and the timer question
//! an endpoint asks after every busy progress call, with many peers or
//! many pulls in progress.
//!
//! `cargo bench -p uet --bench engine` (add `-- --quick` for a short run).

use std::hint::black_box;
use std::net::SocketAddr;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};

use uet::cms::{CcConfig, CongestionControl};
use uet::engine::Engine;
use uet::pds::{AckOutcome, SlotKind, TxPdc};
use uet::ses::{PostedQueues, Unexpected, UnexpectedQueue};
use uet::wire::{AckRepr, NextHeader, PacketType, RequestRepr, SesRequestRepr};
use uet::{CompletionLevel, Config, Payload, ProbeFlags, RecvOp, SendOp};

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn request() -> RequestRepr {
    RequestRepr {
        ptype: PacketType::RudRequest,
        next: NextHeader::SesRequest,
        flags: 0,
        clear_psn_offset: 3,
        psn: 0x1234_5678,
        spdcid: 7,
        dpdcid: 9,
    }
}

fn ses_header() -> SesRequestRepr {
    SesRequestRepr {
        opcode: 1,
        flags: 0x03,
        message_id: 42,
        match_bits: 0xdead_beef,
        request_length: 64,
        ..SesRequestRepr::default()
    }
}

fn wire(c: &mut Criterion) {
    let mut g = c.benchmark_group("wire");
    let (req, ses) = (request(), ses_header());
    let mut buf = [0u8; RequestRepr::LEN + SesRequestRepr::LEN + 64];
    g.bench_function("build data packet headers", |b| {
        b.iter(|| {
            black_box(&req).emit(&mut buf);
            black_box(&ses).emit(&mut buf[RequestRepr::LEN..]);
            black_box(&buf);
        })
    });
    req.emit(&mut buf);
    ses.emit(&mut buf[RequestRepr::LEN..]);
    g.bench_function("parse data packet headers", |b| {
        b.iter(|| {
            let r = RequestRepr::parse(black_box(&buf)).ok();
            let s = SesRequestRepr::parse(&buf[RequestRepr::LEN..]).ok();
            black_box((r, s))
        })
    });
    let ack = AckRepr {
        cack_psn: 1000,
        sack_offset: 1,
        sack_bitmap: 0xf0f0,
        spdcid: 3,
        dpdcid: 4,
        ..AckRepr::default()
    };
    let mut abuf = [0u8; AckRepr::LEN];
    g.bench_function("build ACK", |b| {
        b.iter(|| {
            black_box(&ack).emit(&mut abuf);
            black_box(&abuf);
        })
    });
    ack.emit(&mut abuf);
    g.bench_function("parse ACK", |b| {
        b.iter(|| black_box(AckRepr::parse(black_box(&abuf)).ok()))
    });
    g.finish();
}

fn posted_recv(tag: u64) -> RecvOp {
    RecvOp {
        src: None,
        tagged: true,
        tag,
        ignore: 0,
        buffer: Box::new(Vec::new()),
        context: tag,
        signal: true,
        probe: ProbeFlags::default(),
    }
}

/// Match a message against N posted tagged receives with distinct tags, the
/// matching one being the most recently posted (the far end for a linear
/// search), then post it again so the queue keeps its length.
fn matching(c: &mut Criterion) {
    let mut g = c.benchmark_group("tag matching");
    let src = addr(1);
    for n in [1u64, 100, 10_000] {
        let mut q = PostedQueues::default();
        for tag in 0..n {
            q.push(posted_recv(tag));
        }
        g.bench_with_input(BenchmarkId::new("newest of N posted", n), &n, |b, &n| {
            b.iter(|| {
                let r = q.take_match(src, true, black_box(n - 1));
                let Some(r) = r else { panic!("no match") };
                q.push(r);
            })
        });
        // A receive posted for the newest of N unexpected messages with
        // distinct tags (MPI's early arrivals from many ranks), which then
        // arrives again so the queue keeps its length.
        let mut u = UnexpectedQueue::default();
        let waiting = |tag: u64| Unexpected {
            peer: 0,
            src,
            seq: tag,
            tagged: true,
            tag,
            claimed: None,
        };
        for tag in 0..n {
            u.push(waiting(tag));
        }
        let wanted = posted_recv(n - 1);
        g.bench_with_input(
            BenchmarkId::new("receive for the newest of N unexpected", n),
            &n,
            |b, _| {
                b.iter(|| {
                    let slot = u.find(black_box(&wanted));
                    let Some(m) = slot.and_then(|s| u.remove(s)) else {
                        panic!("no match")
                    };
                    u.push(waiting(m.tag));
                })
            },
        );
        g.bench_with_input(BenchmarkId::new("oldest of N posted", n), &n, |b, _| {
            let mut next = 0u64;
            b.iter(|| {
                let r = q.take_match(src, true, black_box(next));
                let Some(r) = r else { panic!("no match") };
                q.push(r);
                next = (next + 1) % n;
            })
        });
    }
    g.finish();
}

fn window_of(n: u32) -> TxPdc {
    let mut tx = TxPdc::new(1, 0);
    for i in 0..n {
        tx.push(
            SlotKind::Data {
                msg_id: 0,
                offset: u64::from(i) * 4096,
                len: 4096,
            },
            0,
            1_000_000,
            4152,
            0,
        );
    }
    tx
}

fn sack(c: &mut Criterion) {
    let mut g = c.benchmark_group("ack processing");
    // The steady state: one cumulative ACK retiring one packet of 256.
    g.bench_function("cumulative ACK, 256 in flight", |b| {
        let mut tx = window_of(256);
        let mut out = AckOutcome::default();
        let mut cack = 0u32;
        b.iter(|| {
            let ack = AckRepr {
                cack_psn: cack,
                sack_offset: 1,
                spdcid: 2,
                ..AckRepr::default()
            };
            tx.on_ack_into(&ack, 10_000, &mut out);
            black_box(&out);
            tx.push(
                SlotKind::Data {
                    msg_id: 0,
                    offset: 0,
                    len: 4096,
                },
                10_000,
                1_000_000,
                4152,
                0,
            );
            cack = cack.wrapping_add(1);
        })
    });
    // A hole at the front and 63 packets selectively acknowledged behind it:
    // the bitmap walk and the retransmit decision.
    g.bench_function("SACK 63 behind a hole, 256 in flight", |b| {
        b.iter_batched(
            || {
                // The engine's outcome has grown to its working size.
                let mut out = AckOutcome::default();
                out.newly_acked.reserve(256);
                (window_of(256), out)
            },
            |(mut tx, mut out)| {
                let ack = AckRepr {
                    cack_psn: u32::MAX,
                    sack_offset: 1,
                    sack_bitmap: u64::MAX << 1,
                    spdcid: 2,
                    ..AckRepr::default()
                };
                tx.on_ack_into(&ack, 10_000_000, &mut out);
                (tx, out)
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

/// One 64-byte tagged message from engine A to engine B with a receive
/// posted, its ACK back, both completions taken: the engine's share of a
/// ping-pong's one-way latency (both ends).
fn message(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine");
    let cfg = large_datagrams();
    let (aa, ba) = (addr(1000), addr(2000));
    let mut a = Engine::new(&cfg, aa, 1);
    let mut b = Engine::new(&cfg, ba, 2);
    let mut buf = vec![0u8; 65536];
    let mut now = 1_000u64;
    g.bench_function("64 B message and its ACK through two engines", |bch| {
        bch.iter(|| black_box(one_message((&mut a, aa), (&mut b, ba), &mut now, &mut buf)))
    });
    g.finish();
}

/// A 64 B message from `a` to `b` (`small_send`), with a receive posted
/// for it, moved until both sides are quiet, 1 us after the last one
/// (`now`); the completions each side took. The packet asks for an
/// immediate ACK, so no timer is needed (firing timers here would also
/// close idle contexts and measure their set-up).
fn one_message(
    a: (&mut Engine, SocketAddr),
    b: (&mut Engine, SocketAddr),
    now: &mut u64,
    buf: &mut [u8],
) -> (usize, usize) {
    one_message_at(a, b, now, CompletionLevel::Transmit, buf)
}

/// [`one_message`] at completion level `level`.
fn one_message_at(
    (a, aa): (&mut Engine, SocketAddr),
    (b, ba): (&mut Engine, SocketAddr),
    now: &mut u64,
    level: CompletionLevel,
    buf: &mut [u8],
) -> (usize, usize) {
    *now += 1_000;
    b.post_recv(*now, posted_recv(5))
        .unwrap_or_else(|e| panic!("{e}"));
    let send = SendOp {
        level,
        ..small_send(ba)
    };
    a.post_send(*now, send).unwrap_or_else(|e| panic!("{e}"));
    let done = settle((a, aa), (b, ba), *now, buf);
    assert!(done.0 > 0 && done.1 > 0, "message, ACK or response lost");
    done
}

/// The engines' configuration in these benches: large datagrams, as on
/// loopback by default.
fn large_datagrams() -> Config {
    Config {
        mtu: 65000,
        ..Config::default()
    }
}

/// A message to `dest` of 64 bytes, tagged 5, transmit complete.
fn small_send(dest: SocketAddr) -> SendOp {
    SendOp {
        dest,
        payload: Payload::Owned(vec![7u8; 64]),
        tag: Some(5),
        cq_data: None,
        context: 1,
        level: CompletionLevel::Transmit,
        signal: true,
    }
}

/// Move datagrams between `a` and `b` until both are quiet, then take
/// their completions; how many each had.
fn settle(
    (a, aa): (&mut Engine, SocketAddr),
    (b, ba): (&mut Engine, SocketAddr),
    now: u64,
    buf: &mut [u8],
) -> (usize, usize) {
    loop {
        let mut moved = false;
        while let Some(t) = a.poll_transmit(now, buf) {
            b.handle_datagram(now, aa, 0, &buf[..t.len]);
            moved = true;
        }
        while let Some(t) = b.poll_transmit(now, buf) {
            a.handle_datagram(now, ba, 0, &buf[..t.len]);
            moved = true;
        }
        if !moved {
            break;
        }
    }
    let (mut from_a, mut from_b) = (0, 0);
    while a.poll_completion().is_some() {
        from_a += 1;
    }
    while b.poll_completion().is_some() {
        from_b += 1;
    }
    (from_a, from_b)
}

/// The earliest timer of an engine that has exchanged a message with N
/// peers (each keeps its contexts and their idle-close deadlines), and a
/// 64 B message with its ACK to one of them followed by that question, as
/// an endpoint asks it after a busy progress call. Neither should grow
/// with N (an MPI job's all-to-all gives every rank N = ranks - 1).
fn timers(c: &mut Criterion) {
    let mut g = c.benchmark_group("timers");
    let cfg = large_datagrams();
    let mut buf = vec![0u8; 65536];
    for n in [1usize, 64, 1024] {
        let aa = addr(1000);
        let mut a = Engine::new(&cfg, aa, 1);
        let mut now = 1_000u64;
        let mut others: Vec<(Engine, SocketAddr)> = (0..n)
            .map(|i| {
                let oa = addr(3000 + i as u16);
                (Engine::new(&cfg, oa, 10 + i as u64), oa)
            })
            .collect();
        for (o, oa) in others.iter_mut() {
            o.post_recv(now, posted_recv(5))
                .unwrap_or_else(|e| panic!("{e}"));
            a.post_send(now, small_send(*oa))
                .unwrap_or_else(|e| panic!("{e}"));
            settle((&mut a, aa), (o, *oa), now, &mut buf);
        }
        g.bench_with_input(BenchmarkId::new("next_timeout, peers", n), &n, |bch, _| {
            bch.iter(|| black_box(a.next_timeout()))
        });
        let (b, ba) = &mut others[0];
        g.bench_with_input(
            BenchmarkId::new("64 B message, ACK and next_timeout, peers", n),
            &n,
            |bch, _| {
                bch.iter(|| {
                    one_message((&mut a, aa), (b, *ba), &mut now, &mut buf);
                    black_box(a.next_timeout())
                })
            },
        );
    }
    g.finish();
}

/// The earliest timer of an engine pulling a rendezvous message from each
/// of N peers (its pull requests are lost, so every pull and the watch on
/// every peer stay), and a delivery-complete message to one more peer,
/// whose response is looked up among the pulls first. An MPI all-to-all of
/// large messages gives each rank N = ranks - 1; neither should grow with
/// N.
fn pulls(c: &mut Criterion) {
    let mut g = c.benchmark_group("timers");
    let cfg = Config {
        rendezvous_bytes: 1024,
        ..large_datagrams()
    };
    let mut buf = vec![0u8; 65536];
    for n in [1usize, 64, 1024] {
        let aa = addr(1000);
        let mut a = Engine::new(&cfg, aa, 1);
        let now = 1_000u64;
        for i in 0..n {
            let oa = addr(3000 + i as u16);
            let mut o = Engine::new(&cfg, oa, 10 + i as u64);
            let recv = RecvOp {
                buffer: Box::new(vec![0u8; 4096]),
                ..posted_recv(5)
            };
            a.post_recv(now, recv).unwrap_or_else(|e| panic!("{e}"));
            let send = SendOp {
                payload: Payload::Owned(vec![7u8; 4096]),
                ..small_send(aa)
            };
            o.post_send(now, send).unwrap_or_else(|e| panic!("{e}"));
            while let Some(t) = o.poll_transmit(now, &mut buf) {
                a.handle_datagram(now, oa, 0, &buf[..t.len]);
            }
            // The pull request (and any ACK) is lost.
            while a.poll_transmit(now, &mut buf).is_some() {}
        }
        assert_eq!(a.pulls_pending(), n, "one pull per peer");
        g.bench_with_input(BenchmarkId::new("next_timeout, pulls", n), &n, |bch, _| {
            bch.iter(|| black_box(a.next_timeout()))
        });
        // Every SES response is first looked up as the answer to a pull.
        let ba = addr(2000);
        let mut b = Engine::new(&cfg, ba, 2);
        let mut now = now;
        g.bench_with_input(
            BenchmarkId::new("64 B delivery-complete message, pulls", n),
            &n,
            |bch, _| {
                let level = CompletionLevel::Delivery;
                bch.iter(|| {
                    let (a, b) = ((&mut a, aa), (&mut b, ba));
                    black_box(one_message_at(a, b, &mut now, level, &mut buf))
                })
            },
        );
    }
    g.finish();
}

/// A receive posted for one of N unexpected messages (one per tag, all
/// from one peer), then that message's tag sent again, so N stay waiting:
/// the engine's whole path, matching included. Each round takes every tag
/// once, newest first, then oldest first in the next (the order they now
/// wait in), so a pass in arrival order would look at N/2 messages on
/// average, and no message waits through more than 2N others: message IDs
/// are 16 bits, and one waiting while the ID comes round again would be
/// mistaken for the new one.
fn unexpected(c: &mut Criterion) {
    let mut g = c.benchmark_group("unexpected");
    let cfg = large_datagrams();
    let mut buf = vec![0u8; 65536];
    let (aa, ba) = (addr(1000), addr(2000));
    for n in [1u64, 100, 10_000] {
        let mut a = Engine::new(&cfg, aa, 1);
        let mut b = Engine::new(&cfg, ba, 2);
        let mut now = 1_000u64;
        let send = |tag: u64| SendOp {
            tag: Some(tag),
            ..small_send(ba)
        };
        let mut step = |a: &mut Engine, b: &mut Engine, now: u64| {
            settle((&mut *a, aa), (&mut *b, ba), now, &mut buf);
            for e in [&mut *a, &mut *b] {
                if e.next_timeout().is_some_and(|t| t <= now) {
                    e.handle_timeout(now);
                }
            }
            settle((a, aa), (b, ba), now, &mut buf);
        };
        for tag in 0..n {
            // Time enough for the delayed ACKs, or the sender's window
            // would fill with messages never acknowledged.
            now += 100_000;
            a.post_send(now, send(tag))
                .unwrap_or_else(|e| panic!("{e}"));
            step(&mut a, &mut b, now);
        }
        // Kept across criterion's calls of the routine, which start every
        // sample afresh: the rounds go on where they were.
        let mut i = 0u64;
        g.bench_with_input(
            BenchmarkId::new("receive for one of N, and its tag again", n),
            &n,
            |bch, &n| {
                bch.iter(|| {
                    let k = i % n;
                    let tag = if (i / n).is_multiple_of(2) {
                        n - 1 - k
                    } else {
                        k
                    };
                    i += 1;
                    now += 100_000;
                    b.post_recv(now, posted_recv(tag))
                        .unwrap_or_else(|e| panic!("{e}"));
                    a.post_send(now, send(tag))
                        .unwrap_or_else(|e| panic!("{e}"));
                    step(&mut a, &mut b, now);
                })
            },
        );
    }
    g.finish();
}

/// One NSCC per-ACK update (the controller alone, as the SMaRTT paper
/// counts it): alternating marked and unmarked ACKs around the target.
fn nscc(c: &mut Criterion) {
    let cfg = std::sync::Arc::new(CcConfig::nscc(100.0, 4152, 4096));
    let mut cc = CongestionControl::new(&cfg);
    let mut now = 0u64;
    let mut i = 0u64;
    c.bench_function("nscc per-ACK update", |b| {
        b.iter(|| {
            now += 300;
            i += 1;
            let fb = uet::cms::nscc::cost_workload_ack(i);
            cc.on_ack(now, black_box(&fb));
            black_box(cc.cwnd())
        })
    });
}

criterion_group!(benches, wire, matching, sack, message, timers, pulls, unexpected, nscc);
criterion_main!(benches);
