//! Two sans-IO engines over an in-memory channel that drops, duplicates,
//! reorders, trims and ECN-marks datagrams, in virtual time. Every message
//! must arrive exactly once, intact and matched in send order.

mod common;

use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use common::{addrs, advance, lossy_config, pattern, send, InFlight, Shared};
use uet::engine::Stats;
use uet::wire::ip::{self, Ecn, DSCP_TRIMMED, DSCP_TRIMMED_LASTHOP};
use uet::{CompletionKind, Config, Engine, ProbeFlags, RecvOp};

/// UET headers in front of a data packet's payload: PDS request + SES.
const DATA_HEADERS: usize = 12 + 44;

#[derive(Clone, Copy, Debug, Default)]
struct Impairments {
    drop: f64,
    duplicate: f64,
    /// Extra random delay up to this many ns (reordering).
    jitter: u64,
    /// Data packets whose payload is cut (like a switch with a full queue);
    /// half of them marked as trimmed at the last hop.
    trim: f64,
    /// Data packets that arrive ECN CE-marked.
    ce: f64,
    /// Split the messages into two bursts with an idle gap longer than
    /// this (us) between them, so the delivery context closes and reopens.
    idle_close_us: Option<u64>,
    /// The receiver's budget for unmatched messages (FI_UET_UNEXPECTED_BYTES).
    unexpected_bytes: Option<usize>,
    /// Sends longer than this are pulled by the receiver
    /// (FI_UET_RENDEZVOUS_BYTES; `None` = the default).
    rendezvous_bytes: Option<usize>,
    /// Reliable ordered delivery (FI_UET_DELIVERY=rod).
    ordered: bool,
}

/// A receive buffer that also records the offset of every write, so a test
/// can tell in which order payload was placed.
#[derive(Clone)]
struct Recorded {
    data: Shared,
    writes: Arc<Mutex<Vec<usize>>>,
}

impl uet::MsgBuffer for Recorded {
    fn len(&self) -> usize {
        self.data.len()
    }
    fn read_at(&self, offset: usize, out: &mut [u8]) {
        self.data.read_at(offset, out)
    }
    fn write_at(&mut self, offset: usize, data: &[u8]) {
        self.writes.lock().unwrap().push(offset);
        self.data.write_at(offset, data)
    }
}

/// Run `sizes` messages from engine 0 to engine 1; returns the number of
/// virtual nanoseconds it took.
fn run(seed: u64, imp: Impairments, sizes: &[usize], tagged: bool) -> (u64, [Stats; 2]) {
    let cfg = Config {
        pdc_idle_us: imp.idle_close_us.unwrap_or(0),
        unexpected_bytes: imp.unexpected_bytes.unwrap_or(64 << 20),
        ordered: imp.ordered,
        rendezvous_bytes: imp
            .rendezvous_bytes
            .unwrap_or(Config::default().rendezvous_bytes),
        ..lossy_config()
    };
    let addrs = addrs();
    let mut eng = [
        Engine::new(&cfg, addrs[0], seed),
        Engine::new(&cfg, addrs[1], seed ^ 0xabc),
    ];
    let mut rng = SmallRng::seed_from_u64(seed);
    let base_delay = 2_000u64;

    let mut bufs = Vec::new();
    // With an idle gap, the second half is sent once the first is done.
    let first_burst = match imp.idle_close_us {
        Some(_) => sizes.len().div_ceil(2),
        None => sizes.len(),
    };
    let tag = tagged.then_some(42);
    for (i, &len) in sizes.iter().enumerate() {
        if i < first_burst {
            eng[0]
                .post_send(0, send(addrs[1], pattern(i as u64, len), tag, i as u64))
                .unwrap();
        }
        // Post half the receives late, so some messages are unexpected.
        bufs.push(Recorded {
            data: Shared(Arc::new(Mutex::new(vec![0u8; len]))),
            writes: Arc::default(),
        });
    }
    let mut second_burst_at = None;
    let mut second_posted = false;
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
                if imp.ordered {
                    assert_eq!(t.entropy, 0, "ordered delivery sprayed a packet");
                }
                if rng.gen_bool(imp.drop) {
                    continue;
                }
                let copies = if rng.gen_bool(imp.duplicate) { 2 } else { 1 };
                let is_data = t.ecn == Ecn::Ect0 && t.len > DATA_HEADERS;
                for _ in 0..copies {
                    let at = now + base_delay + rng.gen_range(0..=imp.jitter);
                    seq += 1;
                    let mut tos = ip::tos(0, t.ecn);
                    let mut len = t.len;
                    if is_data && rng.gen_bool(imp.trim) {
                        len = DATA_HEADERS;
                        let dscp = if rng.gen_bool(0.5) {
                            DSCP_TRIMMED
                        } else {
                            DSCP_TRIMMED_LASTHOP
                        };
                        tos = ip::tos(dscp, t.ecn);
                    } else if is_data && rng.gen_bool(imp.ce) {
                        tos = ip::tos(0, Ecn::Ce);
                    }
                    net.push(InFlight {
                        at,
                        seq,
                        to,
                        from: addrs[e],
                        tos,
                        data: buf[..len].to_vec(),
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
        if !second_posted
            && first_burst < sizes.len()
            && sends_done[..first_burst].iter().all(|&n| n == 1)
            && recvs_done[..first_burst].iter().all(|&n| n == 1)
        {
            // Idle long enough for the close handshake, then the rest.
            let gap = imp.idle_close_us.unwrap_or(0) * 1000 * 3 + 40_000_000;
            match second_burst_at {
                None => second_burst_at = Some(now + gap),
                Some(t) if now >= t => {
                    assert!(
                        eng[0].stats().pdcs_closed >= 1,
                        "idle context not closed: {:?}",
                        eng[0].stats()
                    );
                    for (i, &len) in sizes.iter().enumerate().skip(first_burst) {
                        eng[0]
                            .post_send(now, send(addrs[1], pattern(i as u64, len), tag, i as u64))
                            .unwrap();
                    }
                    second_burst_at = None;
                    second_posted = true;
                }
                Some(_) => {}
            }
        }
        if sends_done.iter().all(|&n| n == 1)
            && recvs_done.iter().all(|&n| n == 1)
            && net.is_empty()
        {
            break;
        }
        now = advance(&mut eng, &mut net, now, second_burst_at);
    }
    assert_eq!(eng[1].staged_bytes(), 0, "staging not released");
    assert_eq!(eng[1].pulls_pending(), 0, "pulls left behind");
    assert_eq!(eng[1].inbound_len(), 0, "inbound state left behind");
    for (i, b) in bufs.iter().enumerate() {
        assert_eq!(sends_done[i], 1, "send {i} completions");
        assert_eq!(recvs_done[i], 1, "recv {i} completions");
        assert!(
            *b.data.0.lock().unwrap() == pattern(i as u64, sizes[i]),
            "message {i} corrupted"
        );
        if imp.ordered {
            let w = b.writes.lock().unwrap();
            assert!(
                w.windows(2).all(|p| p[0] < p[1]),
                "ordered delivery placed message {i} out of order: {w:?}"
            );
        }
    }
    (now, [eng[0].stats(), eng[1].stats()])
}

#[test]
fn clean_channel() {
    run(1, Impairments::default(), &[0, 1, 1500, 100_000, 7], true);
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
                ..Impairments::default()
            },
            &[3000, 0, 64_000, 10, 200_000, 1],
            seed % 2 == 0,
        );
    }
}

#[test]
fn trimming_is_recovered_by_nacks() {
    for seed in 0..6 {
        let stats = run(
            seed,
            Impairments {
                trim: 0.1,
                jitter: 5_000,
                ..Impairments::default()
            },
            &[200_000, 3000, 0, 64_000],
            seed % 2 == 1,
        );
        let (_, [tx, rx]) = stats;
        assert!(rx.trimmed_received > 0 && rx.nacks_sent > 0, "{rx:?}");
        assert!(tx.nack_retransmits > 0, "{tx:?}");
    }
}

#[test]
fn ecn_marks_are_echoed_without_harm() {
    let (_, [tx, rx]) = run(
        3,
        Impairments {
            ce: 0.3,
            ..Impairments::default()
        },
        &[100_000, 10, 50_000],
        true,
    );
    assert!(rx.ecn_ce_received > 0);
    assert!(tx.ecn_echoes_received > 0 && tx.ecn_echoes_received <= rx.acks_sent);
}

#[test]
fn unexpected_messages_stay_within_the_budget() {
    for seed in 0..4 {
        let stats = run(
            seed,
            Impairments {
                drop: 0.02,
                jitter: 2_000,
                unexpected_bytes: Some(20_000),
                ..Impairments::default()
            },
            &[100_000, 30_000, 5, 250_000, 64_000, 1],
            seed % 2 == 0,
        );
        let (_, [tx, rx]) = stats;
        assert!(rx.backpressure > 0, "budget never reached: {rx:?}");
        assert!(tx.nacks_received > 0);
    }
}

#[test]
fn loss_without_trimming_is_found_before_the_timeout() {
    // Plain drops, no trimming: SLEEK's out-of-order count and probes find
    // the losses; the timer is the last resort.
    let mut found = 0;
    for seed in 0..4 {
        let (_, [tx, _]) = run(
            seed,
            Impairments {
                drop: 0.03,
                jitter: 1_000,
                ..Impairments::default()
            },
            &[300_000, 5, 120_000],
            false,
        );
        found += tx.sleek_retransmits;
        assert!(tx.retransmits > 0, "nothing was lost? {tx:?}");
    }
    assert!(found > 0, "neither SLEEK nor a probe found a loss");
}

#[test]
fn ordered_delivery_places_data_in_order() {
    for seed in 0..4 {
        let (_, [tx, rx]) = run(
            seed,
            Impairments {
                drop: 0.03,
                duplicate: 0.02,
                jitter: 4_000,
                trim: 0.02,
                ordered: true,
                ..Impairments::default()
            },
            &[200_000, 7, 64_000, 0, 150_000],
            seed % 2 == 1,
        );
        assert!(
            rx.rod_out_of_order > 0,
            "nothing arrived out of order: {rx:?}"
        );
        assert!(tx.sleek_retransmits > 0, "never went back: {tx:?}");
    }
}

#[test]
fn rendezvous_sends_are_pulled_exactly_once_under_loss() {
    for seed in 0..6 {
        let (_, [tx, rx]) = run(
            seed,
            Impairments {
                drop: 0.1,
                duplicate: 0.05,
                jitter: 10_000,
                trim: 0.05,
                rendezvous_bytes: Some(3000),
                ..Impairments::default()
            },
            &[200_000, 3000, 3001, 0, 64_000, 10, 9000],
            seed % 2 == 0,
        );
        assert!(tx.retransmits > 0, "{tx:?}");
        assert_eq!(rx.rendezvous_pulls, 4, "{rx:?}");
    }
}

#[test]
fn unexpected_rendezvous_messages_fit_a_small_budget() {
    // Five unexpected 100 KB messages with a budget of 20 KB: eager sends
    // would need backpressure, rendezvous sends stage one packet each.
    let (_, [_, rx]) = run(
        2,
        Impairments {
            unexpected_bytes: Some(20_000),
            rendezvous_bytes: Some(2000),
            ..Impairments::default()
        },
        &[100_000; 10],
        true,
    );
    assert_eq!(rx.backpressure, 0, "{rx:?}");
    assert_eq!(rx.rendezvous_pulls, 10, "{rx:?}");
}

#[test]
fn idle_context_closes_and_reopens() {
    for seed in 0..4 {
        run(
            seed,
            Impairments {
                drop: 0.05 * seed as f64,
                jitter: 3_000,
                idle_close_us: Some(500),
                ..Impairments::default()
            },
            &[5000, 1, 70_000, 0, 9000, 12],
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
        trim in 0.0f64..0.2,
        ce in 0.0f64..0.3,
        idle_close in proptest::option::of(100u64..2000),
        sizes in proptest::collection::vec(0usize..40_000, 1..12),
        tagged in any::<bool>(),
        ordered in any::<bool>(),
        rendezvous in proptest::option::of(1000usize..20_000),
    ) {
        let imp = Impairments {
            drop, duplicate, jitter, trim, ce, idle_close_us: idle_close, unexpected_bytes: None,
            ordered,
            rendezvous_bytes: rendezvous,
        };
        let (took, _) = run(seed, imp, &sizes, tagged);
        // Bounded: every message through within a bounded number of
        // (virtual) maximum RTOs of 2 ms, plus the idle gap.
        let gap = idle_close.map_or(0, |us| us * 3000 + 40_000_000);
        prop_assert!(took < gap + 2000 * 2_000_000, "took {took} ns");
    }
}
