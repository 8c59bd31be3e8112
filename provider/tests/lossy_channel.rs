//! Two sans-IO engines over an in-memory channel that drops, duplicates and
//! reorders datagrams, in virtual time. Every message must arrive exactly
//! once, intact and matched in send order.

mod common;

use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use common::{pattern, send, Shared};
use uet::{CompletionKind, Config, Engine, ProbeFlags, RecvOp};

#[derive(Clone, Copy, Debug)]
struct Impairments {
    drop: f64,
    duplicate: f64,
    /// Extra random delay up to this many ns (reordering).
    jitter: u64,
}

struct InFlight {
    at: u64,
    seq: u64,
    to: usize,
    from: SocketAddr,
    data: Vec<u8>,
}
impl PartialEq for InFlight {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for InFlight {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// Run `sizes` messages from engine 0 to engine 1; returns the number of
/// virtual nanoseconds it took.
fn run(seed: u64, imp: Impairments, sizes: &[usize], tagged: bool) -> u64 {
    let cfg = Config {
        mtu: 1500,
        window: 64,
        rto_min_us: 100,
        rto_max_us: 2000,
        max_retries: 1000,
        ..Config::default()
    };
    let addrs: [SocketAddr; 2] = [
        "10.0.0.1:4793".parse().unwrap(),
        "10.0.0.2:4793".parse().unwrap(),
    ];
    let mut eng = [
        Engine::new(&cfg, addrs[0], seed),
        Engine::new(&cfg, addrs[1], seed ^ 0xabc),
    ];
    let mut rng = SmallRng::seed_from_u64(seed);
    let base_delay = 2_000u64;

    let mut bufs = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let tag = tagged.then_some(42);
        eng[0]
            .post_send(0, send(addrs[1], pattern(i as u64, len), tag, i as u64))
            .unwrap();
        // Post half the receives late, so some messages are unexpected.
        let buf = Shared(Arc::new(Mutex::new(vec![0u8; len])));
        bufs.push(buf);
    }
    let mut posted = 0;
    let mut net: BinaryHeap<InFlight> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut now = 0u64;
    let mut sends_done = vec![0u32; sizes.len()];
    let mut recvs_done = vec![0u32; sizes.len()];
    let mut next_recv_ctx = Vec::new();
    let mut buf = vec![0u8; 65536];
    for _step in 0..2_000_000 {
        if posted < sizes.len() && (posted < sizes.len() / 2 || now > 50_000) {
            let op = RecvOp {
                src: None,
                tagged,
                tag: 42,
                ignore: 0,
                buffer: Box::new(bufs[posted].clone()),
                context: 1_000_000 + posted as u64,
                signal: true,
                probe: ProbeFlags::default(),
            };
            eng[1].post_recv(now, op).unwrap();
            next_recv_ctx.push(posted);
            posted += 1;
        }
        for (e, engine) in eng.iter_mut().enumerate() {
            while let Some(t) = engine.poll_transmit(now, &mut buf) {
                let to = if t.dest == addrs[0] { 0 } else { 1 };
                if rng.gen_bool(imp.drop) {
                    continue;
                }
                let copies = if rng.gen_bool(imp.duplicate) { 2 } else { 1 };
                for _ in 0..copies {
                    let at = now + base_delay + rng.gen_range(0..=imp.jitter);
                    seq += 1;
                    net.push(InFlight {
                        at,
                        seq,
                        to,
                        from: addrs[e],
                        data: buf[..t.len].to_vec(),
                    });
                }
            }
            while let Some(c) = engine.poll_completion() {
                assert_eq!(c.error, None, "error completion {c:?}");
                match c.kind {
                    CompletionKind::Send => sends_done[c.context as usize] += 1,
                    CompletionKind::Recv => {
                        let i = (c.context - 1_000_000) as usize;
                        recvs_done[i] += 1;
                        assert_eq!(c.len, sizes[i]);
                    }
                    other => panic!("no RMA here, got {other:?}"),
                }
            }
        }
        if sends_done.iter().all(|&n| n == 1)
            && recvs_done.iter().all(|&n| n == 1)
            && net.is_empty()
        {
            break;
        }
        // Advance virtual time to the next event.
        let next_net = net.peek().map(|p| p.at);
        let next_timer = eng.iter().filter_map(|e| e.next_timeout()).min();
        let next = match (next_net, next_timer) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(now + 10_000),
        };
        now = next.max(now).min(now + 10_000).max(now + 1);
        while net.peek().is_some_and(|p| p.at <= now) {
            let p = net.pop().unwrap();
            eng[p.to].handle_datagram(now, p.from, 0, &p.data);
        }
        for e in eng.iter_mut() {
            if e.next_timeout().is_some_and(|t| t <= now) {
                e.handle_timeout(now);
            }
        }
    }
    for (i, b) in bufs.iter().enumerate() {
        assert_eq!(sends_done[i], 1, "send {i} completions");
        assert_eq!(recvs_done[i], 1, "recv {i} completions");
        assert!(
            *b.0.lock().unwrap() == pattern(i as u64, sizes[i]),
            "message {i} corrupted"
        );
    }
    now
}

#[test]
fn clean_channel() {
    run(
        1,
        Impairments {
            drop: 0.0,
            duplicate: 0.0,
            jitter: 0,
        },
        &[0, 1, 1500, 100_000, 7],
        true,
    );
}

#[test]
fn heavy_loss_duplication_reordering() {
    for seed in 0..8 {
        run(
            seed,
            Impairments {
                drop: 0.2,
                duplicate: 0.1,
                jitter: 20_000,
            },
            &[3000, 0, 64_000, 10, 200_000, 1],
            seed % 2 == 0,
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn exactly_once_in_order(
        seed in any::<u64>(),
        drop in 0.0f64..0.3,
        duplicate in 0.0f64..0.3,
        jitter in 0u64..50_000,
        sizes in proptest::collection::vec(0usize..40_000, 1..12),
        tagged in any::<bool>(),
    ) {
        run(seed, Impairments { drop, duplicate, jitter }, &sizes, tagged);
    }
}
