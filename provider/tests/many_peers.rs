//! Several sans-IO engines in a full mesh over a lossy in-memory channel, in
//! virtual time: every engine sends to every other, some with a delivery-
//! context pool far smaller than their peer count, so contexts must close
//! when idle and reopen for the next peer. Every message must arrive exactly
//! once, intact, and match in its sender's order.

mod common;

use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use common::{advance, lossy_config, pattern, send, InFlight, Shared};
use uet::engine::Stats;
use uet::{CompletionKind, Config, Engine, ProbeFlags, RecvOp};

/// Context of receive `k` from sender `s` at any receiver.
fn recv_ctx(s: usize, k: usize) -> u64 {
    1_000_000 + (s * 1000 + k) as u64
}

/// `n` engines; engine `i` sends `sizes` to every other engine, tagged with
/// its own index. Engines listed in `small_pool` get FI_UET_MAX_PDCS = 2.
/// Returns the virtual time taken and every engine's statistics.
fn mesh(
    seed: u64,
    n: usize,
    sizes: &[usize],
    drop: f64,
    small_pool: &[usize],
) -> (u64, Vec<Stats>) {
    let addrs: Vec<SocketAddr> = (0..n)
        .map(|i| format!("10.0.0.{}:4793", i + 1).parse().unwrap())
        .collect();
    let mut eng: Vec<Engine> = (0..n)
        .map(|i| {
            let cfg = Config {
                // Idle contexts close quickly, so a small pool turns over.
                pdc_idle_us: 300,
                max_pdcs: if small_pool.contains(&i) { 2 } else { 16384 },
                ..lossy_config()
            };
            Engine::new(&cfg, addrs[i], seed.wrapping_add(i as u64 * 7919))
        })
        .collect();
    // bufs[r][s][k]: what receiver r got as message k from sender s.
    let mut bufs = vec![vec![Vec::new(); n]; n];
    for r in 0..n {
        for s in (0..n).filter(|&s| s != r) {
            for (k, &len) in sizes.iter().enumerate() {
                let b = Shared(Arc::new(Mutex::new(vec![0u8; len])));
                bufs[r][s].push(b.clone());
                let op = RecvOp {
                    src: None,
                    tagged: true,
                    tag: s as u64,
                    ignore: 0,
                    buffer: Box::new(b),
                    context: recv_ctx(s, k),
                    signal: true,
                    probe: ProbeFlags::default(),
                };
                eng[r].post_recv(0, op).unwrap();
            }
        }
    }
    for (s, sender) in eng.iter_mut().enumerate() {
        for d in (0..n).filter(|&d| d != s) {
            for (k, &len) in sizes.iter().enumerate() {
                let data = pattern((s * 1000 + k) as u64, len);
                let ctx = (d * 1000 + k) as u64;
                sender
                    .post_send(0, send(addrs[d], data, Some(s as u64), ctx))
                    .unwrap();
            }
        }
    }
    let expected = n * (n - 1) * sizes.len();
    let mut sends = 0usize;
    let mut recvs = 0usize;
    // Completions per (receiver or sender, peer, message).
    let mut recv_seen = vec![vec![vec![0u32; sizes.len()]; n]; n];
    let mut send_seen = vec![vec![vec![0u32; sizes.len()]; n]; n];
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut net = BinaryHeap::new();
    let mut seq = 0u64;
    let mut now = 0u64;
    let mut buf = vec![0u8; 65536];
    for _ in 0..4_000_000 {
        for (e, engine) in eng.iter_mut().enumerate() {
            while let Some(t) = engine.poll_transmit(now, &mut buf) {
                if rng.gen_bool(drop) {
                    continue;
                }
                let to = addrs.iter().position(|a| *a == t.dest).unwrap();
                seq += 1;
                net.push(InFlight {
                    at: now + 2_000 + rng.gen_range(0..=3_000),
                    seq,
                    to,
                    from: addrs[e],
                    tos: 0,
                    data: buf[..t.len].to_vec(),
                });
            }
            while let Some(c) = engine.poll_completion() {
                assert_eq!(c.error, None, "error completion at {e}: {c:?}");
                match c.kind {
                    CompletionKind::Send => {
                        let (d, k) = (c.context as usize / 1000, c.context as usize % 1000);
                        send_seen[e][d][k] += 1;
                        sends += 1;
                    }
                    CompletionKind::Recv => {
                        let x = (c.context - 1_000_000) as usize;
                        let (s, k) = (x / 1000, x % 1000);
                        assert_eq!(c.len, sizes[k], "length of {s}->{e} #{k}");
                        recv_seen[e][s][k] += 1;
                        recvs += 1;
                    }
                    other => panic!("no RMA here, got {other:?}"),
                }
            }
        }
        if sends == expected && recvs == expected && net.is_empty() {
            break;
        }
        now = advance(&mut eng, &mut net, now, None);
    }
    for r in 0..n {
        for s in (0..n).filter(|&s| s != r) {
            for (k, &len) in sizes.iter().enumerate() {
                assert_eq!(send_seen[s][r][k], 1, "send {s}->{r} #{k} completions");
                assert_eq!(recv_seen[r][s][k], 1, "recv {s}->{r} #{k} completions");
                // Receives of one tag match in posting order, so message k
                // of a sender landing in buffer k proves its order held.
                let got = bufs[r][s][k].0.lock().unwrap().clone();
                assert!(
                    got == pattern((s * 1000 + k) as u64, len),
                    "{s}->{r} #{k} corrupted or out of order"
                );
            }
        }
    }
    (now, eng.iter().map(Engine::stats).collect())
}

#[test]
fn full_mesh_of_four() {
    mesh(1, 4, &[1, 3000, 0, 20_000], 0.02, &[]);
}

#[test]
fn small_context_pool_turns_over() {
    // Engine 0 sends to and hears from five peers with two context IDs.
    let (_, stats) = mesh(7, 6, &[100, 5000, 1], 0.01, &[0]);
    assert!(
        stats[0].pdc_exhausted > 0,
        "the pool never ran out: {:?}",
        stats[0]
    );
    assert!(
        stats[0].pdcs_closed > 0,
        "no context closed: {:?}",
        stats[0]
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]
    #[test]
    fn mesh_exactly_once_in_order(
        seed in any::<u64>(),
        n in 3usize..6,
        drop in 0.0f64..0.1,
        sizes in proptest::collection::vec(0usize..12_000, 1..5),
        small in any::<bool>(),
    ) {
        let small_pool: &[usize] = if small { &[1] } else { &[] };
        let (took, _) = mesh(seed, n, &sizes, drop, small_pool);
        // Within a bounded number of (virtual) maximum RTOs of 2 ms and
        // idle-close periods.
        prop_assert!(took < 4000 * 2_000_000, "took {took} ns");
    }
}
