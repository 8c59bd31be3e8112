//! Landing (engine/landing.rs): large payloads received straight into the
//! posted buffer. In the engine tests the driver's part is played the way
//! the kernel does it: the datagram's headers go to a scratch area and its
//! payload into the offered region, whatever the datagram turns out to be.
//! The last tests run whole endpoints over loopback sockets.

mod common;

use std::net::SocketAddr;
use std::sync::mpsc;

use common::{drain, pattern, send};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::time::{Duration, Instant};
use uet::wire::PacketType;

use uet::{Config, Endpoint, Engine, MsgBuffer, ProbeFlags, RecvOp};

/// A receive buffer that hands its bytes (with its context) to the test
/// when the engine lets go of it (at completion), and lends them out as one
/// writable slice.
struct Returned {
    data: Vec<u8>,
    context: u64,
    back: mpsc::Sender<(u64, Vec<u8>)>,
}

impl MsgBuffer for Returned {
    fn len(&self) -> usize {
        self.data.len()
    }
    fn read_at(&self, offset: usize, out: &mut [u8]) {
        out.copy_from_slice(&self.data[offset..offset + out.len()]);
    }
    fn write_at(&mut self, offset: usize, data: &[u8]) {
        self.data[offset..offset + data.len()].copy_from_slice(data);
    }
    fn slice_at_mut(&mut self, offset: usize, len: usize) -> Option<&mut [u8]> {
        self.data.get_mut(offset..offset + len)
    }
}

impl Drop for Returned {
    fn drop(&mut self) {
        let _ = self
            .back
            .send((self.context, std::mem::take(&mut self.data)));
    }
}

/// A receive of `len` bytes into a [`Returned`] buffer that reports to `back`.
fn lent_recv(len: usize, context: u64, back: &mpsc::Sender<(u64, Vec<u8>)>) -> RecvOp {
    RecvOp {
        src: None,
        tagged: false,
        tag: 0,
        ignore: 0,
        // Stale bytes a wrong landing could leave would not match the pattern.
        buffer: Box::new(Returned {
            data: vec![0xee; len],
            context,
            back: back.clone(),
        }),
        context,
        signal: true,
        probe: ProbeFlags::default(),
    }
}

/// [`lent_recv`] with a channel of its own, which yields the bytes.
fn returned_recv(len: usize, context: u64) -> (RecvOp, ReturnedBytes) {
    let (tx, rx) = mpsc::channel();
    (lent_recv(len, context, &tx), ReturnedBytes(rx))
}

struct ReturnedBytes(mpsc::Receiver<(u64, Vec<u8>)>);

impl ReturnedBytes {
    fn recv(&self) -> Result<Vec<u8>, mpsc::RecvError> {
        self.0.recv().map(|(_, data)| data)
    }
}

/// Large datagrams, as on loopback.
fn config(rendezvous_bytes: usize) -> Config {
    Config {
        mtu: 65000,
        rendezvous_bytes,
        ..Config::default()
    }
}

fn addr(i: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, i], 4793))
}

/// What the landings offered to a receiver came to.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    landed: u64,
    refused: u64,
}

/// Deliver `datagram` to `to` as the driver does with a landing on offer:
/// the kernel writes its bytes past the headers into the region, then the
/// engine is asked whether that was the packet; if not, the same landing
/// must still be on offer (the driver reads the bytes back from it), and
/// the datagram goes the usual way.
fn deliver(to: &mut Engine, now: u64, from: SocketAddr, datagram: &[u8], c: &mut Counts) {
    if let Some((landing, region)) = to.landing() {
        let h = landing.header_len;
        if datagram.len() > h {
            let n = (datagram.len() - h).min(region.len());
            region[..n].copy_from_slice(&datagram[h..h + n]);
            let fits = datagram.len() - h <= landing.payload_len;
            if fits && to.handle_landed(now, from, 0, &landing, &datagram[..h], n) {
                c.landed += 1;
                return;
            }
            c.refused += 1;
            let again = to.landing().map(|(l, _)| l);
            assert_eq!(again, Some(landing), "a refusal changed the landing");
        }
    }
    to.handle_datagram(now, from, 0, datagram);
}

/// A lossy, duplicating, reordering channel from sender to receiver (loss
/// both ways), with strays: foreign bytes scattered into whatever landing
/// is on offer, as a datagram of another peer would be.
#[derive(Clone, Copy, Debug, Default)]
struct Channel {
    seed: u64,
    loss: f64,
    dup: f64,
    /// Chance that a datagram swaps places with the one before it.
    swap: f64,
    /// Chance of a whole round arriving shuffled.
    shuffle: f64,
    strays: f64,
}

/// Run a sender (engine 1) and a receiver (engine 0) over `ch` until
/// nothing moves.
fn pump(engines: &mut [Engine; 2], addrs: &[SocketAddr; 2], ch: Channel) -> Counts {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(ch.seed);
    let mut c = Counts::default();
    let mut now = 0;
    let mut again: Vec<Vec<u8>> = Vec::new();
    for _ in 0..200_000 {
        now += 20_000;
        let mut arrivals: Vec<Vec<u8>> = drain(&mut engines[1], now)
            .into_iter()
            .map(|(_, d)| d)
            .collect();
        arrivals.append(&mut again);
        for i in 1..arrivals.len() {
            if rng.gen_bool(ch.swap) {
                arrivals.swap(i - 1, i);
            }
        }
        if rng.gen_bool(ch.shuffle) {
            arrivals.shuffle(&mut rng);
        }
        let mut moved = !arrivals.is_empty();
        for d in arrivals {
            if rng.gen_bool(ch.strays) {
                if let Some((_, region)) = engines[0].landing() {
                    rng.fill(region);
                }
            }
            if rng.gen_bool(ch.loss) {
                continue;
            }
            if rng.gen_bool(ch.dup) {
                again.push(d.clone());
            }
            deliver(&mut engines[0], now, addrs[1], &d, &mut c);
        }
        for (_, d) in drain(&mut engines[0], now) {
            moved = true;
            if !rng.gen_bool(ch.loss) {
                engines[1].handle_datagram(now, addrs[0], 0, &d);
            }
        }
        if !moved {
            engines.iter_mut().for_each(|e| e.handle_timeout(now));
            if engines.iter().all(|e| e.next_timeout().is_none()) {
                break;
            }
        }
    }
    c
}

/// One message of `len` bytes into a receive of `buf_len` over `ch`: the
/// bytes the buffer can hold arrive intact (the rest is truncated).
fn transfer(cfg: &Config, len: usize, buf_len: usize, ch: Channel) -> Counts {
    let addrs = [addr(1), addr(2)];
    let mut engines = [Engine::new(cfg, addrs[0], 1), Engine::new(cfg, addrs[1], 2)];
    let (op, back) = returned_recv(buf_len, 7);
    engines[0].post_recv(0, op).unwrap();
    engines[1]
        .post_send(0, send(addrs[0], pattern(ch.seed, len), None, 1))
        .unwrap();
    let c = pump(&mut engines, &addrs, ch);
    let done = engines[0].poll_completion().expect("receive completes");
    assert_eq!(done.len, len.min(buf_len), "{ch:?}");
    let got = back.recv().unwrap();
    let n = len.min(buf_len);
    assert!(got[..n] == pattern(ch.seed, len)[..n], "{ch:?} {c:?}");
    c
}

#[test]
fn eager_packets_land_in_the_posted_buffer_and_the_data_is_intact() {
    let len = 1 << 20;
    let c = transfer(&config(0), len, len, Channel::default());
    // Every packet but the first (which sets the expectation) landed.
    let packets = len.div_ceil(65000 - 56) as u64;
    assert_eq!((c.landed, c.refused), (packets - 1, 0));
}

#[test]
fn pulled_data_lands_in_the_rendezvous_receive() {
    let len = 4 << 20;
    let eager = 256 << 10;
    let c = transfer(&config(eager), len, len, Channel::default());
    // The eager part and the pull each start one expectation.
    let packets = eager.div_ceil(64944) + (len - eager).div_ceil(64944);
    assert_eq!((c.landed as usize, c.refused), (packets - 2, 0));
}

#[test]
fn loss_duplicates_reordering_and_strays_never_corrupt_a_message() {
    // Every wrong guess writes foreign bytes into the buffer; only bytes
    // still to come may be overwritten, so each message must still arrive
    // intact, eager or pulled, unordered or ordered.
    let mut total = Counts::default();
    for seed in 1..13 {
        let ch = Channel {
            seed,
            loss: 0.04,
            dup: 0.03,
            swap: 0.1,
            shuffle: 0.02,
            strays: 0.3,
        };
        let cfg = match seed % 3 {
            0 => config(0),
            1 => config(256 << 10),
            _ => Config {
                ordered: true,
                ..config(256 << 10)
            },
        };
        let c = transfer(&cfg, (3 << 20) + 17, (3 << 20) + 17, ch);
        total.landed += c.landed;
        total.refused += c.refused;
    }
    assert!(total.landed > 0 && total.refused > 0, "{total:?}");
}

#[test]
fn truncated_and_oversized_receives_keep_their_bytes() {
    // A landing never reaches past the buffer (truncation) nor past the
    // message (a larger buffer).
    let ch = |seed| Channel {
        seed,
        loss: 0.03,
        dup: 0.03,
        swap: 0.1,
        strays: 0.3,
        ..Channel::default()
    };
    let mut landed = 0;
    for seed in 1..4 {
        for (eager, buf) in [(0, 700_001), (256 << 10, 700_001), (256 << 10, 100_000)] {
            landed += transfer(&config(eager), 1 << 20, buf, ch(seed)).landed;
        }
        for eager in [0, 256 << 10] {
            landed += transfer(&config(eager), (1 << 20) + 17, 3 << 20, ch(seed)).landed;
        }
    }
    assert!(landed > 0);
}

#[test]
fn two_messages_interleaved_land_only_in_their_own_buffers() {
    // Two senders' large messages arrive interleaved, a few packets of one
    // then a few of the other: the expectation follows whichever came last,
    // and the first packet of each run is written into the other message's
    // buffer before it is refused.
    let cfg = config(0);
    let addrs = [addr(1), addr(2), addr(3)];
    let mut rx = Engine::new(&cfg, addrs[0], 1);
    let mut senders = [
        Engine::new(&cfg, addrs[1], 2),
        Engine::new(&cfg, addrs[2], 3),
    ];
    let len = 2 << 20;
    let (op_a, back_a) = returned_recv(len, 1);
    let (op_b, back_b) = returned_recv(len, 2);
    rx.post_recv(0, op_a).unwrap();
    rx.post_recv(0, op_b).unwrap();
    for (k, s) in senders.iter_mut().enumerate() {
        s.post_send(0, send(addrs[0], pattern(10 + k as u64, len), None, 1))
            .unwrap();
    }
    let mut buf = vec![0u8; 65536];
    let mut c = Counts::default();
    let mut now = 0;
    for _ in 0..10_000 {
        now += 20_000;
        let mut moved = false;
        // Up to three packets of each sender in turn.
        loop {
            let mut any = false;
            for (k, s) in senders.iter_mut().enumerate() {
                for _ in 0..3 {
                    let Some(t) = s.poll_transmit(now, &mut buf) else {
                        break;
                    };
                    any = true;
                    deliver(&mut rx, now, addrs[k + 1], &buf[..t.len], &mut c);
                }
            }
            moved |= any;
            if !any {
                break;
            }
        }
        while let Some(t) = rx.poll_transmit(now, &mut buf) {
            moved = true;
            let k = addrs[1..].iter().position(|a| *a == t.dest).unwrap();
            senders[k].handle_datagram(now, addrs[0], 0, &buf[..t.len]);
        }
        if !moved {
            rx.handle_timeout(now);
            senders.iter_mut().for_each(|s| s.handle_timeout(now));
            if rx.next_timeout().is_none() && senders.iter().all(|s| s.next_timeout().is_none()) {
                break;
            }
        }
    }
    let mut done = 0;
    while let Some(c) = rx.poll_completion() {
        assert!(c.error.is_none());
        done += 1;
    }
    assert_eq!(done, 2);
    assert_eq!(back_a.recv().unwrap(), pattern(10, len));
    assert_eq!(back_b.recv().unwrap(), pattern(11, len));
    assert!(c.landed > 0 && c.refused > 0, "{c:?}");
}

#[test]
fn a_sender_that_restarts_mid_message_fails_the_old_receive_and_lands_the_new_message() {
    // The old context's message is gone with it; the landing offered for
    // it must not take the new context's packets.
    for cut in [2usize, 5, 9] {
        let cfg = config(0);
        let addrs = [addr(1), addr(2)];
        let mut rx = Engine::new(&cfg, addrs[0], 1);
        let mut tx = Engine::new(&cfg, addrs[1], 2);
        let (op1, _back1) = returned_recv(1 << 20, 1);
        let (op2, back2) = returned_recv(1 << 20, 2);
        rx.post_recv(0, op1).unwrap();
        rx.post_recv(0, op2).unwrap();
        tx.post_send(0, send(addrs[0], pattern(1, 1 << 20), None, 1))
            .unwrap();
        let mut c = Counts::default();
        for (_, d) in drain(&mut tx, 0).iter().take(cut) {
            deliver(&mut rx, 0, addrs[1], d, &mut c);
        }
        assert!(rx.landing().is_some());
        let mut tx = Engine::new(&cfg, addrs[1], 99);
        tx.post_send(0, send(addrs[0], pattern(2, 1 << 20), None, 1))
            .unwrap();
        let mut engines = [rx, tx];
        pump(&mut engines, &addrs, Channel::default());
        assert_eq!(back2.recv().unwrap(), pattern(2, 1 << 20), "cut {cut}");
        // The receive the old message was matched to fails; it does not
        // wait forever.
        let mut done = Vec::new();
        while let Some(c) = engines[0].poll_completion() {
            done.push((c.context, c.error));
        }
        assert_eq!(
            done,
            vec![(1, Some(uet::CompletionError::PeerUnreachable)), (2, None)],
            "cut {cut}"
        );
    }
}

#[test]
fn a_refused_landing_leaves_no_trace() {
    let cfg = config(0);
    let addrs = [addr(1), addr(2)];
    let mut rx = Engine::new(&cfg, addrs[0], 1);
    let mut tx = Engine::new(&cfg, addrs[1], 2);
    let len = 1 << 20;
    let (op, back) = returned_recv(len, 7);
    rx.post_recv(0, op).unwrap();
    tx.post_send(0, send(addrs[0], pattern(9, len), None, 1))
        .unwrap();
    let packets: Vec<Vec<u8>> = drain(&mut tx, 0)
        .into_iter()
        .filter(|(t, _)| *t == PacketType::RudRequest)
        .map(|(_, d)| d)
        .collect();
    assert!(packets.len() >= 3);
    rx.handle_datagram(0, addrs[1], 0, &packets[0]);
    let (landing, _) = rx.landing().expect("the second packet is expected");
    let before = rx.stats();
    // The third packet where the second is expected, and the second from
    // the wrong source: both refused, nothing counted or acknowledged.
    let h = landing.header_len;
    let third = &packets[2];
    assert!(!rx.handle_landed(0, addrs[1], 0, &landing, &third[..h], third.len() - h));
    let second = &packets[1];
    assert!(!rx.handle_landed(0, addr(9), 0, &landing, &second[..h], second.len() - h));
    // Longer than the region: refused.
    assert!(!rx.handle_landed(
        0,
        addrs[1],
        0,
        &landing,
        &second[..h],
        landing.payload_len + 1
    ));
    assert_eq!(rx.stats(), before);
    assert_eq!(rx.landing().map(|(l, _)| l), Some(landing));
    // The usual path still takes every packet, and the message completes.
    for p in &packets[1..] {
        rx.handle_datagram(0, addrs[1], 0, p);
    }
    let mut engines = [rx, tx];
    pump(&mut engines, &addrs, Channel::default());
    let c = engines[0].poll_completion().expect("receive completes");
    assert!(c.error.is_none());
    assert_eq!(back.recv().unwrap(), pattern(9, len));
}

// ----- through the driver, over loopback sockets -----

/// Two endpoints on 127.0.0.1.
fn loopback_pair(cfg: &Config) -> (Endpoint, Endpoint) {
    let bind = || Endpoint::bind(cfg, "127.0.0.1:0".parse().unwrap()).unwrap();
    (bind(), bind())
}

/// Every sender streams `count` messages of `len` bytes (seeded by sender
/// and index) to `rx` at once, into receives of [`Lent`] buffers; returns
/// when all completed, after checking every byte.
fn stream_into_lent(senders: &mut [Endpoint], rx: &mut Endpoint, count: usize, len: usize) {
    let (tx, back) = std::sync::mpsc::channel();
    let total = senders.len() * count;
    for context in 0..total as u64 {
        let mut op = lent_recv(len, context, &tx);
        // Each receive takes one sender's messages, in order.
        op.src = Some(senders[context as usize % senders.len()].local_addr());
        rx.recv(op).unwrap();
    }
    for i in 0..count {
        for (k, s) in senders.iter_mut().enumerate() {
            let seed = (i * 10 + k) as u64;
            s.send(send(rx.local_addr(), pattern(seed, len), None, seed))
                .unwrap();
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut sends, mut recvs) = (0, 0);
    while sends < total || recvs < total {
        assert!(
            Instant::now() < deadline,
            "hung: {sends} sends, {recvs} recvs"
        );
        for s in senders.iter_mut() {
            s.progress();
            while let Some(c) = s.poll_completion() {
                assert_eq!(c.error, None);
                sends += 1;
            }
        }
        rx.progress();
        while let Some(c) = rx.poll_completion() {
            assert_eq!(c.error, None);
            assert_eq!(c.len, len);
            recvs += 1;
        }
    }
    drop(tx);
    let mut checked = 0;
    for (context, data) in back.iter() {
        let (i, k) = (
            context as usize / senders.len(),
            context as usize % senders.len(),
        );
        assert!(
            data == pattern((i * 10 + k) as u64, len),
            "message {context} corrupted"
        );
        checked += 1;
    }
    assert_eq!(checked, total);
}

#[test]
fn large_payloads_land_in_posted_buffers_and_arrive_intact() {
    // The loopback defaults: 65000-byte datagrams, rendezvous past 256 KiB.
    let cfg = Config::default();
    let (mut a, mut b) = loopback_pair(&cfg);
    stream_into_lent(std::slice::from_mut(&mut a), &mut b, 4, (3 << 20) + 5);
    let landed = b.engine_stats().landed;
    let received = b.engine_stats().packets_received;
    // Everything but the first packets of each eager part and each pull.
    assert!(landed * 10 >= received * 8, "{landed} of {received} landed");
    assert_eq!(b.stats().landing_lost, 0);

    let cfg = Config {
        direct_rx: false,
        ..Config::default()
    };
    let (mut a, mut b) = loopback_pair(&cfg);
    stream_into_lent(std::slice::from_mut(&mut a), &mut b, 2, 1 << 20);
    assert_eq!(b.engine_stats().landed, 0);
}

#[test]
fn interleaved_senders_keep_every_byte_where_it_belongs() {
    // Two senders' large messages meet at one socket: a datagram of one
    // lands where the other's next packet was expected, and is put back
    // together and copied. Small packets (4 KiB) never land.
    for mtu in [0, 4096] {
        let cfg = Config {
            mtu,
            rendezvous_bytes: 0,
            ..Config::default()
        };
        let bind = || Endpoint::bind(&cfg, "127.0.0.1:0".parse().unwrap()).unwrap();
        let mut senders = [bind(), bind()];
        let mut rx = bind();
        stream_into_lent(&mut senders, &mut rx, 3, 1 << 20);
        assert_eq!(rx.stats().landing_lost, 0);
        if mtu == 4096 {
            assert_eq!(rx.engine_stats().landed, 0);
        } else {
            // One thread drives all three and loopback delivers within the
            // sender's system call: the arrivals interleave the same way
            // every run.
            assert!(rx.stats().landing_restored > 0, "{:?}", rx.stats());
            assert!(rx.engine_stats().landed > 0);
        }
    }
}
