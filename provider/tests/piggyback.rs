//! ACKs riding at the end of a reply (`FI_UET_ACK_PIGGYBACK`,
//! `wire::ack_trailer`): an ACK held while the application answers leaves
//! inside the answer's datagram, and the peer takes both from it, whole,
//! trimmed or with the ACK cut away; a request-response exchange over a
//! lossy channel still delivers every message intact.

mod common;

use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use common::{
    ack_rtts, addrs, advance, drain, engine_pair_with, flags_of, lossy_config, pattern, recv, send,
    InFlight, Shared,
};
use uet::engine::{PayloadRef, LANDING_MIN_PAYLOAD};
use uet::wire::ip::{self, Ecn, DSCP_TRIMMED};
use uet::wire::{ack_trailer, AckRepr, PacketType};
use uet::{CompletionKind, Config, Engine, ProbeFlags, RecvOp, SendOp};

/// An ACK request the receiver may hold for its next send.
const AR_NO_WAIT: u8 = uet::wire::prologue::flags::AR | uet::wire::prologue::flags::NO_WAIT;

/// UET headers in front of a data packet's payload: PDS request + SES.
const DATA_HEADERS: usize = 12 + 44;

/// a pinged b with 64 B at 10 us; b took the message, holds its ACK and
/// has posted a reply of `reply_len` bytes. Returns the addresses, a (with
/// a receive posted for the reply), b, and b's datagrams while holding.
fn replying(reply_len: usize) -> ([SocketAddr; 2], Engine, Engine, Vec<Vec<u8>>) {
    replying_to(reply_len, true)
}

/// [`replying`], the ping an inject (no completion) unless `signaled`.
fn replying_to(
    reply_len: usize,
    signaled: bool,
) -> ([SocketAddr; 2], Engine, Engine, Vec<Vec<u8>>) {
    replying_with(&Config::default(), reply_len, signaled, false)
}

/// [`replying_to`] with settings `cfg`; with `gather`, b's datagrams are
/// taken the way the provider's driver takes them ([`drain_gathered`]).
fn replying_with(
    cfg: &Config,
    reply_len: usize,
    signaled: bool,
    gather: bool,
) -> ([SocketAddr; 2], Engine, Engine, Vec<Vec<u8>>) {
    let (addrs, mut a, mut b) = engine_pair_with(cfg);
    a.enable_trace();
    a.post_recv(0, recv(reply_len, None, 10)).unwrap();
    b.post_recv(0, recv(64, None, 20)).unwrap();
    let mut ping = send(addrs[1], vec![1; 64], None, 1);
    ping.signal = signaled;
    a.post_send(0, ping).unwrap();
    let ping = drain(&mut a, 0);
    assert_eq!(ping.len(), 1);
    b.handle_datagram(10_000, addrs[0], 0, &ping[0].1);
    assert!(b.has_queued_acks());
    b.hold_acks(true);
    b.post_send(16_400, send(addrs[0], vec![2; reply_len], None, 2))
        .unwrap();
    let held = if gather {
        drain_gathered(&mut b, 16_400)
    } else {
        drain(&mut b, 16_400).into_iter().map(|(_, d)| d).collect()
    };
    b.hold_acks(false);
    (addrs, a, b, held)
}

/// Datagrams taken with `poll_transmit_ref`: a payload in one piece of its
/// message's memory is left out of the buffer, to be put back in its place
/// (`PayloadRef::at`) between the headers and whatever follows it.
fn drain_gathered(from: &mut Engine, now: u64) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; 65536];
    let mut out = Vec::new();
    while let Some((t, payload)) = from.poll_transmit_ref(now, &mut buf) {
        out.push(gathered(from, &buf[..t.len], payload));
    }
    out
}

/// The datagram `buf` holds, with `payload` (if gathered) put in its place.
fn gathered(e: &Engine, buf: &[u8], payload: Option<PayloadRef>) -> Vec<u8> {
    let Some(r) = payload else {
        return buf.to_vec();
    };
    let mut d = buf[..r.at()].to_vec();
    d.extend_from_slice(e.payload(r).unwrap());
    d.extend_from_slice(&buf[r.end()..]);
    d
}

/// The completions `e` has, as (kind, context).
fn completions(e: &mut Engine) -> Vec<(CompletionKind, u64)> {
    let mut out = Vec::new();
    while let Some(c) = e.poll_completion() {
        assert_eq!(c.error, None, "{c:?}");
        out.push((c.kind, c.context));
    }
    out
}

#[test]
fn held_ack_rides_at_the_end_of_the_reply() {
    let (addrs, mut a, mut b, held) = replying(64);
    assert_eq!(held.len(), 1, "one datagram for reply and ACK");
    let reply = &held[0];
    assert_eq!(reply.len(), DATA_HEADERS + 64 + ack_trailer::LEN);
    assert_ne!(flags_of(reply) & ack_trailer::FLAG, 0);
    let ack = AckRepr::parse(&reply[reply.len() - ack_trailer::LEN..]).unwrap();
    assert_eq!(ack.service_time_ns(), 6_400, "it reports its hold");
    // Nothing left to send once released.
    assert!(!b.has_queued_acks());
    assert!(drain(&mut b, 16_400).is_empty());
    assert_eq!(b.stats().acks_piggybacked, 1);
    assert_eq!(b.stats().acks_sent, 1);

    // a takes the reply and the ACK: both its operations complete, and
    // its congestion control sees the round trip less b's hold.
    let arrival = 19_400;
    a.handle_datagram(arrival, addrs[1], 0, reply);
    let mut done = completions(&mut a);
    done.sort_by_key(|&(_, ctx)| ctx);
    assert_eq!(
        done,
        vec![(CompletionKind::Send, 1), (CompletionKind::Recv, 10)]
    );
    assert_eq!(a.stats().piggybacked_acks_received, 1);
    assert_eq!(ack_rtts(&mut a), vec![arrival - 6_400]);
    // And it acknowledges the reply on its own (nothing to answer with).
    let out = drain(&mut a, arrival);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, PacketType::AckCc);
}

#[test]
fn a_delivery_response_carries_the_ack_of_the_message_it_answers() {
    // A delivery-complete send completes once its packets are acknowledged
    // and the receiver said it delivered the message: both leave the
    // receiver in one datagram, and that datagram alone completes the send.
    for piggyback in [true, false] {
        let cfg = Config {
            ack_piggyback: piggyback,
            ..Config::default()
        };
        let (addrs, mut a, mut b) = engine_pair_with(&cfg);
        b.post_recv(0, recv(8192, None, 20)).unwrap();
        let mut op = send(addrs[1], pattern(3, 8192), None, 1);
        op.level = uet::CompletionLevel::Delivery;
        a.post_send(0, op).unwrap();
        for (_, d) in drain(&mut a, 0) {
            b.handle_datagram(10_000, addrs[0], 0, &d);
        }
        assert_eq!(completions(&mut b), vec![(CompletionKind::Recv, 20)]);
        let answer = drain(&mut b, 10_000);
        let types: Vec<PacketType> = answer.iter().map(|(t, _)| *t).collect();
        if !piggyback {
            // The ACK, then the response in a datagram of its own.
            assert_eq!(types, vec![PacketType::AckCc, PacketType::RudRequest]);
            continue;
        }
        assert_eq!(types, vec![PacketType::RudRequest], "one datagram");
        let both = &answer[0].1;
        assert_ne!(flags_of(both) & ack_trailer::FLAG, 0);
        // Nothing at b waits for the response's own ACK (its message was
        // answered already): a may hold it for its next send.
        assert_eq!(flags_of(both) & AR_NO_WAIT, AR_NO_WAIT);
        assert_eq!(b.stats().acks_piggybacked, 1);
        a.handle_datagram(20_000, addrs[1], 0, both);
        assert_eq!(completions(&mut a), vec![(CompletionKind::Send, 1)]);
        // And a acknowledges the response.
        let out = drain(&mut a, 20_000);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, PacketType::AckCc);
        b.handle_datagram(30_000, addrs[0], 0, &out[0].1);
        assert!(drain(&mut b, 30_000).is_empty());
    }
}

#[test]
fn in_a_halo_exchange_the_response_leaves_its_ack_to_the_next_send() {
    // Both sides send a delivery-complete message at once, as MPI ranks
    // do in a halo exchange. b's own message still waits for its ACK
    // when b answers a's, but its last packet asked for that ACK at once:
    // the response asks for none (NO_WAIT), so a may hold it for its next
    // message to b.
    let cfg = Config {
        mtu: 9000,
        ..Config::default()
    };
    let (addrs, mut a, mut b) = engine_pair_with(&cfg);
    let mut first = Vec::new();
    for (e, to, ctx) in [(&mut a, addrs[1], 1), (&mut b, addrs[0], 2)] {
        e.post_recv(0, recv(8192, None, 10 + ctx)).unwrap();
        let mut op = send(to, pattern(ctx, 8192), None, ctx);
        op.level = uet::CompletionLevel::Delivery;
        e.post_send(0, op).unwrap();
        let out = drain(e, 0);
        assert_eq!(out.len(), 1);
        // The message's last packet asks for its ACK at once.
        assert_eq!(
            flags_of(&out[0].1) & AR_NO_WAIT,
            uet::wire::prologue::flags::AR
        );
        first.push(out[0].1.clone());
    }
    b.handle_datagram(10_000, addrs[0], 0, &first[0]);
    let answer = drain(&mut b, 10_000);
    assert_eq!(answer.len(), 1, "the response carrying the ACK");
    assert_ne!(flags_of(&answer[0].1) & ack_trailer::FLAG, 0);
    assert_eq!(flags_of(&answer[0].1) & AR_NO_WAIT, AR_NO_WAIT);
    // a takes b's message and then the answer to its own: both of its
    // operations complete.
    a.handle_datagram(11_000, addrs[1], 0, &first[1]);
    a.handle_datagram(12_000, addrs[1], 0, &answer[0].1);
    let mut done = completions(&mut a);
    done.sort_by_key(|&(_, ctx)| ctx);
    assert_eq!(
        done,
        vec![(CompletionKind::Send, 1), (CompletionKind::Recv, 11)]
    );
}

#[test]
fn a_deferred_ack_waits_for_the_answer_and_keeps_its_arrival_time() {
    // The ping was an inject: the ACK completes nothing the application
    // sees, so it can wait.
    let (addrs, mut a, _b, held) = replying_to(64, false);
    a.defer_trailer_acks(true);
    let arrival = 19_400;
    a.handle_datagram(arrival, addrs[1], 0, &held[0]);
    a.defer_trailer_acks(false);
    // The reply is there; the ACK waits.
    assert_eq!(completions(&mut a), vec![(CompletionKind::Recv, 10)]);
    assert!(a.has_trailer_acks());
    assert_eq!(a.stats().acks_received, 0);
    a.handle_trailer_acks();
    assert!(!a.has_trailer_acks());
    assert_eq!(a.stats().piggybacked_acks_received, 1);
    assert_eq!(
        ack_rtts(&mut a),
        vec![arrival - 6_400],
        "dated when it arrived"
    );
}

/// a sends its next message at `now` and then takes the ACKs waiting for
/// that answer; b takes the message 3 us later and acknowledges it, and
/// that ACK reaches a 400 us late (a host that stalled). Returns a's
/// congestion-control state towards b after it.
fn next_message_acknowledged_late(
    addrs: [SocketAddr; 2],
    a: &mut Engine,
    b: &mut Engine,
    now: u64,
) -> uet::cms::CcStats {
    a.post_send(now, send(addrs[1], vec![3; 64], None, 3))
        .unwrap();
    let out = drain(a, now);
    a.handle_trailer_acks();
    for (_, d) in &out {
        b.handle_datagram(now + 3_000, addrs[0], 0, d);
    }
    let acks: Vec<_> = drain(b, now + 3_000)
        .into_iter()
        .filter(|(t, _)| *t == PacketType::AckCc)
        .collect();
    assert_eq!(acks.len(), 1);
    a.handle_datagram(now + 403_000, addrs[1], 0, &acks[0].1);
    a.peer_stats(addrs[1]).unwrap().cc
}

#[test]
fn an_answer_posted_before_its_deferred_ack_starts_a_new_busy_period() {
    // a's pipe to b empties with the ACK riding on b's reply. Taken at
    // once or after a's next message has left, the ACK leaves congestion
    // control in the same state: that message starts a new busy period
    // (an application-limited restart), so QuickAdapt does not judge its
    // ACK, however late (a host that stalled), against the gap before it.
    for deferred in [false, true] {
        let (addrs, mut a, mut b, held) = replying_to(64, false);
        let before = a.peer_stats(addrs[1]).unwrap().cc;
        a.defer_trailer_acks(deferred);
        a.handle_datagram(19_400, addrs[1], 0, &held[0]);
        a.defer_trailer_acks(false);
        assert_eq!(a.has_trailer_acks(), deferred);
        let after = next_message_acknowledged_late(addrs, &mut a, &mut b, 20_000);
        assert_eq!(a.stats().acks_received, 2);
        let what = format!("deferred {deferred}: {after:?}");
        assert_eq!(after.acks, before.acks + 2, "{what}");
        assert_eq!(after.idle_restarts, before.idle_restarts + 1, "{what}");
        assert_eq!(after.quick_adapt_events, 0, "{what}");
    }
}

#[test]
fn the_restart_owed_waits_for_the_last_deferred_ack_of_a_peer() {
    // a sent two messages; b answered each, its ACK riding on the answer.
    // Both ACKs wait at a while a sends its third message; the second
    // (which empties the pipe) owes the restart, applied after both, so
    // the older one cannot reopen QuickAdapt's window.
    let (addrs, mut a, mut b) = engine_pair_with(&Config::default());
    let mut answers = Vec::new();
    for i in 1..=2u64 {
        a.post_recv(0, recv(64, None, 10 + i)).unwrap();
        b.post_recv(0, recv(64, None, 20 + i)).unwrap();
        let mut ping = send(addrs[1], vec![i as u8; 64], None, i);
        ping.signal = false;
        a.post_send(i * 1_000, ping).unwrap();
        for (_, d) in drain(&mut a, i * 1_000) {
            b.handle_datagram(i * 1_000 + 500, addrs[0], 0, &d);
        }
        b.hold_acks(true);
        b.post_send(i * 1_000 + 600, send(addrs[0], vec![9; 64], None, 30 + i))
            .unwrap();
        answers.extend(drain(&mut b, i * 1_000 + 600));
        b.hold_acks(false);
    }
    assert_eq!(answers.len(), 2);
    assert!(answers
        .iter()
        .all(|(_, d)| flags_of(d) & ack_trailer::FLAG != 0));
    let before = a.peer_stats(addrs[1]).unwrap().cc;
    a.defer_trailer_acks(true);
    for (_, d) in &answers {
        a.handle_datagram(5_000, addrs[1], 0, d);
    }
    a.defer_trailer_acks(false);
    let after = next_message_acknowledged_late(addrs, &mut a, &mut b, 6_000);
    assert_eq!(a.stats().acks_received, 3);
    assert_eq!(after.acks, before.acks + 3, "{after:?}");
    assert_eq!(after.idle_restarts, before.idle_restarts + 1, "{after:?}");
    assert_eq!(after.quick_adapt_events, 0, "{after:?}");
}

#[test]
fn an_ack_completing_a_send_the_application_sees_is_never_deferred() {
    // It may be waiting for that completion before it answers.
    let (addrs, mut a, _b, held) = replying_to(64, true);
    a.defer_trailer_acks(true);
    a.handle_datagram(19_400, addrs[1], 0, &held[0]);
    assert!(!a.has_trailer_acks());
    let mut done = completions(&mut a);
    done.sort_by_key(|&(_, ctx)| ctx);
    assert_eq!(
        done,
        vec![(CompletionKind::Send, 1), (CompletionKind::Recv, 10)]
    );
}

#[test]
fn timers_take_deferred_acks_first() {
    let (addrs, mut a, _b, held) = replying_to(64, false);
    a.defer_trailer_acks(true);
    a.handle_datagram(19_400, addrs[1], 0, &held[0]);
    a.defer_trailer_acks(false);
    // Long past the retransmission timeout of the ping: the ACK in hand
    // is taken before the timer could resend it.
    a.handle_timeout(500_000_000);
    assert_eq!(a.stats().retransmits, 0);
    assert_eq!(a.stats().timeouts, 0);
    assert_eq!(a.stats().piggybacked_acks_received, 1);
}

#[test]
fn a_sprayed_reply_still_delivers_its_ack() {
    let (addrs, mut a, _b, held) = replying(64);
    // Sprayed data leaves from another port of b's; the ACK counts as
    // coming from b's own address.
    let sprayed: SocketAddr = "10.0.0.2:4800".parse().unwrap();
    a.handle_datagram(19_400, sprayed, 0, &held[0]);
    assert_eq!(a.stats().acks_received, 1);
    assert_eq!(a.stats().unknown_pdc, 0);
    assert_eq!(completions(&mut a).len(), 2);
    let _ = addrs;
}

#[test]
fn a_full_datagram_leaves_the_ack_to_its_own() {
    let max = Engine::new(&Config::default(), "10.0.0.9:1".parse().unwrap(), 0).max_payload();
    let (addrs, mut a, mut b, held) = replying(max);
    assert_eq!(held.len(), 1);
    assert_eq!(flags_of(&held[0]) & ack_trailer::FLAG, 0);
    assert_eq!(held[0].len(), DATA_HEADERS + max);
    let acks = drain(&mut b, 20_000);
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].0, PacketType::AckCc);
    a.handle_datagram(23_000, addrs[1], 0, &held[0]);
    a.handle_datagram(23_000, addrs[1], 0, &acks[0].1);
    assert_eq!(completions(&mut a).len(), 2);
    assert_eq!(a.stats().piggybacked_acks_received, 0);
}

#[test]
fn a_gathered_reply_carries_the_ack_after_its_payload() {
    // The payload stays in message memory; the ACK rides behind it, except
    // in datagrams whose payload a receiver might land straight in the
    // application's buffer (16 KiB, headers included), which are better
    // sent without it. Copied payloads (no gathering) go by the same rule.
    let cfg = Config {
        mtu: 65000,
        ..Config::default()
    };
    let largest = LANDING_MIN_PAYLOAD - DATA_HEADERS - 1;
    for (len, rides, gather) in [
        (1000, true, true),
        (largest, true, true),
        (largest + 1, false, true),
        (largest, true, false),
        (largest + 1, false, false),
    ] {
        let (addrs, mut a, mut b, held) = replying_with(&cfg, len, true, gather);
        assert_eq!(held.len(), 1, "{len} B");
        let reply = &held[0];
        assert_eq!(flags_of(reply) & ack_trailer::FLAG != 0, rides, "{len} B");
        let trailer = if rides { ack_trailer::LEN } else { 0 };
        assert_eq!(reply.len(), DATA_HEADERS + len + trailer, "{len} B");
        assert!(reply[DATA_HEADERS..DATA_HEADERS + len]
            .iter()
            .all(|&x| x == 2));
        let mut datagrams = held.clone();
        datagrams.extend(drain(&mut b, 20_000).into_iter().map(|(_, d)| d));
        assert_eq!(datagrams.len(), if rides { 1 } else { 2 }, "{len} B");
        for d in &datagrams {
            a.handle_datagram(23_000, addrs[1], 0, d);
        }
        assert_eq!(completions(&mut a).len(), 2, "{len} B: send and reply");
        assert_eq!(a.stats().piggybacked_acks_received, rides as u64);
    }
}

#[test]
fn a_reply_in_pieces_carries_the_ack_in_the_first_with_room() {
    let max = Engine::new(&Config::default(), "10.0.0.9:1".parse().unwrap(), 0).max_payload();
    let (addrs, mut a, mut b, held) = replying(max + 100);
    let flagged: Vec<bool> = held
        .iter()
        .map(|d| flags_of(d) & ack_trailer::FLAG != 0)
        .collect();
    assert_eq!(flagged.iter().filter(|&&f| f).count(), 1, "{flagged:?}");
    assert!(drain(&mut b, 20_000).is_empty());
    for d in &held {
        a.handle_datagram(23_000, addrs[1], 0, d);
    }
    assert_eq!(completions(&mut a).len(), 2);
}

#[test]
fn a_trimmed_reply_keeps_its_ack_and_is_nacked() {
    let (addrs, mut a, _b, held) = replying(1000);
    let mut d = held[0].clone();
    let kept = ack_trailer::trim(&mut d, DATA_HEADERS);
    d.truncate(kept);
    assert_eq!(d.len(), DATA_HEADERS + ack_trailer::LEN);
    a.handle_datagram(19_400, addrs[1], ip::tos(DSCP_TRIMMED, Ecn::Ect0), &d);
    assert_eq!(a.stats().trimmed_received, 1);
    assert_eq!(a.stats().piggybacked_acks_received, 1);
    // The ping is acknowledged; the reply is not here yet.
    assert_eq!(completions(&mut a), vec![(CompletionKind::Send, 1)]);
    let out = drain(&mut a, 19_400);
    assert!(out.iter().any(|(t, _)| *t == PacketType::Nack), "{out:?}");
}

#[test]
fn a_reply_trimmed_without_its_ack_is_still_nacked() {
    let (addrs, mut a, _b, held) = replying(1000);
    // A switch that cuts at the headers: the trailer is gone.
    let d = &held[0][..DATA_HEADERS];
    assert_ne!(flags_of(d) & ack_trailer::FLAG, 0);
    a.handle_datagram(19_400, addrs[1], ip::tos(DSCP_TRIMMED, Ecn::Ect0), d);
    assert_eq!(a.stats().trimmed_received, 1);
    assert_eq!(a.stats().acks_received, 0);
    assert_eq!(a.stats().malformed, 0);
    assert!(completions(&mut a).is_empty());
    let out = drain(&mut a, 19_400);
    assert!(out.iter().any(|(t, _)| *t == PacketType::Nack), "{out:?}");
}

#[test]
fn a_flag_without_an_ack_is_dropped_untrimmed() {
    let (addrs, mut a, _b, held) = replying(64);
    let d = &held[0][..held[0].len() - ack_trailer::LEN];
    a.handle_datagram(19_400, addrs[1], 0, d);
    assert_eq!(a.stats().malformed, 1);
    assert_eq!(a.stats().packets_received, 0);
    assert!(completions(&mut a).is_empty());
}

/// `count` request-response rounds between a (client) and b (server) over
/// a channel that drops, duplicates (`dup`), delays (reorders) and trims, both
/// answering with their ACKs held the way an application progress call
/// holds them. Returns both engines' statistics.
fn ping_pong(
    seed: u64,
    sizes: &[usize],
    drop: f64,
    dup: f64,
    trim: f64,
) -> [uet::engine::Stats; 2] {
    ping_pong_at(uet::CompletionLevel::Transmit, seed, sizes, drop, dup, trim)
}

/// [`ping_pong`] with every send completing at `level`.
fn ping_pong_at(
    level: uet::CompletionLevel,
    seed: u64,
    sizes: &[usize],
    drop: f64,
    dup: f64,
    trim: f64,
) -> [uet::engine::Stats; 2] {
    let cfg = lossy_config();
    let send = |to, data, ctx| SendOp {
        level,
        ..send(to, data, None, ctx)
    };
    let addrs = addrs();
    let mut eng = [
        Engine::new(&cfg, addrs[0], seed),
        Engine::new(&cfg, addrs[1], seed ^ 0x5eed),
    ];
    let mut rng = SmallRng::seed_from_u64(seed);
    let rounds = sizes.len();
    // Receive buffers: a's for replies, b's for requests.
    let bufs: [Vec<Shared>; 2] = [0, 1].map(|_| {
        sizes
            .iter()
            .map(|&n| Shared(Arc::new(Mutex::new(vec![0u8; n]))))
            .collect()
    });
    let post = |e: &mut Engine, side: usize, i: usize, now: u64| {
        let op = RecvOp {
            src: None,
            tagged: false,
            tag: 0,
            ignore: 0,
            buffer: Box::new(bufs[side][i].clone()),
            context: 1_000_000 + i as u64,
            signal: true,
            probe: ProbeFlags::default(),
        };
        e.post_recv(now, op).unwrap();
    };
    // Request i carries pattern(i), reply i pattern(1000 + i).
    post(&mut eng[0], 0, 0, 0);
    post(&mut eng[1], 1, 0, 0);
    eng[0]
        .post_send(0, send(addrs[1], pattern(0, sizes[0]), 0))
        .unwrap();
    let mut net: BinaryHeap<InFlight> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut now = 0u64;
    let mut sends = [vec![0u32; rounds], vec![0u32; rounds]];
    let mut recvs = [vec![0u32; rounds], vec![0u32; rounds]];
    let mut buf = vec![0u8; 65536];
    // Odd seeds take datagrams as the provider's driver does, payloads
    // gathered from message memory (ACKs riding behind them), even seeds
    // whole from the engine's buffer.
    let gather = seed % 2 == 1;
    let mut transmit = |e: &mut Engine, from: usize, now: u64, net: &mut BinaryHeap<InFlight>| {
        loop {
            let (t, datagram) = if gather {
                let Some((t, payload)) = e.poll_transmit_ref(now, &mut buf) else {
                    break;
                };
                (t, gathered(e, &buf[..t.len], payload))
            } else {
                let Some(t) = e.poll_transmit(now, &mut buf) else {
                    break;
                };
                (t, buf[..t.len].to_vec())
            };
            if rng.gen_bool(drop) {
                continue;
            }
            let copies = if rng.gen_bool(dup) { 2 } else { 1 };
            for _ in 0..copies {
                let mut data = datagram.clone();
                let mut tos = ip::tos(0, t.ecn);
                let is_data = t.ecn == Ecn::Ect0 && t.len > DATA_HEADERS + ack_trailer::LEN;
                if is_data && rng.gen_bool(trim) {
                    // Half the switches keep the trailer, half cut it.
                    let kept = if rng.gen_bool(0.5) {
                        ack_trailer::trim(&mut data, DATA_HEADERS)
                    } else {
                        DATA_HEADERS
                    };
                    data.truncate(kept);
                    tos = ip::tos(DSCP_TRIMMED, t.ecn);
                }
                seq += 1;
                net.push(InFlight {
                    at: now + 2_000 + rng.gen_range(0..=3_000),
                    seq,
                    to: 1 - from,
                    from: addrs[from],
                    tos,
                    data,
                });
            }
        }
    };
    for _step in 0..1_000_000 {
        for side in 0..2 {
            let mut answer = Vec::new();
            while let Some(c) = eng[side].poll_completion() {
                assert_eq!(c.error, None, "error completion {c:?}");
                match c.kind {
                    CompletionKind::Send => sends[side][c.context as usize] += 1,
                    CompletionKind::Recv => {
                        let i = (c.context - 1_000_000) as usize;
                        recvs[side][i] += 1;
                        assert_eq!(c.len, sizes[i]);
                        answer.push(i);
                    }
                    other => panic!("no RMA here, got {other:?}"),
                }
            }
            // The application answers what it took, ACKs held meanwhile.
            eng[side].hold_acks(true);
            for i in answer {
                let (next, reply) = match side {
                    1 => (i + 1, Some((i, pattern(1000 + i as u64, sizes[i])))),
                    _ => (
                        i + 1,
                        (i + 1 < rounds).then(|| (i + 1, pattern(i as u64 + 1, sizes[i + 1]))),
                    ),
                };
                if next < rounds {
                    post(&mut eng[side], side, next, now);
                }
                if let Some((ctx, data)) = reply {
                    eng[side]
                        .post_send(now, send(addrs[1 - side], data, ctx as u64))
                        .unwrap();
                }
            }
            transmit(&mut eng[side], side, now, &mut net);
            eng[side].hold_acks(false);
            transmit(&mut eng[side], side, now, &mut net);
        }
        let done =
            (0..2).all(|s| sends[s].iter().all(|&n| n == 1) && recvs[s].iter().all(|&n| n == 1));
        if done && net.is_empty() {
            break;
        }
        now = advance(&mut eng, &mut net, now, None);
    }
    for i in 0..rounds {
        for side in 0..2 {
            assert_eq!(sends[side][i], 1, "side {side} send {i}");
            assert_eq!(recvs[side][i], 1, "side {side} recv {i}");
        }
        let seed = [1000 + i as u64, i as u64];
        for side in 0..2 {
            assert!(
                *bufs[side][i].0.lock().unwrap() == pattern(seed[side], sizes[i]),
                "side {side} message {i} corrupted"
            );
        }
    }
    [eng[0].stats(), eng[1].stats()]
}

#[test]
fn lossy_ping_pong_with_delivery_completion_delivers_everything_once() {
    // Every message draws a delivery response, which carries the ACK of
    // the message when both are due at once; loss, duplicates and
    // trimming still complete every send exactly once.
    let sizes = [64, 0, 1400, 3000, 1, 9000, 64, 64, 100_000, 500];
    let mut piggybacked = 0;
    for seed in 0..12 {
        let level = uet::CompletionLevel::Delivery;
        let [a, b] = ping_pong_at(level, seed, &sizes, 0.1, 0.05, 0.1);
        piggybacked += a.acks_piggybacked + b.acks_piggybacked;
    }
    assert!(piggybacked > 0);
}

#[test]
fn clean_ping_pong_sends_one_datagram_per_message() {
    // Payloads copied behind the headers and (from 256 B, seed 1) gathered
    // from message memory alike.
    for (seed, len) in [(1, 64), (2, 64), (1, 1000), (2, 1000)] {
        let sizes = [len; 20];
        let [a, b] = ping_pong(seed, &sizes, 0.0, 0.0, 0.0);
        // Every answer carried the ACK of what it answered; only the last
        // reply's ACK leaves alone.
        assert_eq!(b.acks_piggybacked, 20, "{len} B: {b:?}");
        assert_eq!(a.acks_piggybacked, 19, "{len} B: {a:?}");
        assert_eq!(a.acks_sent, 20);
        assert_eq!(a.piggybacked_acks_received, 20);
        assert_eq!(b.piggybacked_acks_received, 19);
    }
}

#[test]
fn lossy_ping_pong_delivers_everything_once() {
    let sizes = [64, 0, 1400, 3000, 1, 9000, 64, 64, 100_000, 500];
    let mut piggybacked = 0;
    let mut trimmed = 0;
    for seed in 0..12 {
        let [a, b] = ping_pong(seed, &sizes, 0.1, 0.05, 0.1);
        piggybacked += a.piggybacked_acks_received + b.piggybacked_acks_received;
        trimmed += a.trimmed_received + b.trimmed_received;
    }
    assert!(piggybacked > 0 && trimmed > 0, "{piggybacked} {trimmed}");
}
