//! RMA between two sans-IO engines over an in-memory channel that reorders
//! datagrams: writes and reads land where they should, refused accesses
//! fail at the initiator and leave the target's memory untouched, and RMA
//! interleaved with messages keeps the messages' matching order.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use rand::rngs::SmallRng;
use rand::SeedableRng;

use common::{pattern, recv, send, shuffled_round, Shared};
use uet::wire::{ControlRepr, ControlType, PacketType, Prologue};
use uet::{
    Completion, CompletionError, CompletionKind, Config, Engine, MemoryRegions, MsgBuffer, Payload,
    RmaKind, RmaOp,
};

const KEY: u64 = 7;
const BASE: u64 = 0x1000;
const REGION: usize = 8192;

/// One region at `BASE` with the given permissions.
struct Region {
    mem: Shared,
    read: bool,
    write: bool,
}

/// A window into the region's memory.
struct Window {
    mem: Shared,
    start: usize,
    len: usize,
}

impl MsgBuffer for Window {
    fn len(&self) -> usize {
        self.len
    }
    fn read_at(&self, offset: usize, out: &mut [u8]) {
        self.mem.read_at(self.start + offset, out);
    }
    fn write_at(&mut self, offset: usize, data: &[u8]) {
        self.mem.write_at(self.start + offset, data);
    }
}

impl MemoryRegions for Region {
    fn resolve(&self, key: u64, addr: u64, len: u64, write: bool) -> Option<Box<dyn MsgBuffer>> {
        let allowed = if write { self.write } else { self.read };
        let start = addr.checked_sub(BASE)?;
        if key != KEY || !allowed || start.checked_add(len)? > REGION as u64 {
            return None;
        }
        Some(Box::new(Window {
            mem: self.mem.clone(),
            start: start as usize,
            len: len as usize,
        }))
    }
}

struct Pair {
    eng: [Engine; 2],
    addrs: [SocketAddr; 2],
    now: u64,
    rng: SmallRng,
    done: [Vec<Completion>; 2],
}

impl Pair {
    fn config() -> Config {
        Config {
            mtu: 1500,
            window: 64,
            rto_min_us: 100,
            rto_max_us: 2000,
            ..Config::default()
        }
    }

    fn new(seed: u64, read: bool, write: bool) -> (Pair, Shared) {
        let cfg = Self::config();
        let addrs: [SocketAddr; 2] = [
            "10.0.0.1:4793".parse().unwrap(),
            "10.0.0.2:4793".parse().unwrap(),
        ];
        let mut eng = [
            Engine::new(&cfg, addrs[0], seed),
            Engine::new(&cfg, addrs[1], seed ^ 0x55),
        ];
        let mem = Shared(Arc::new(Mutex::new(pattern(99, REGION))));
        eng[1].set_memory_regions(Arc::new(Region {
            mem: mem.clone(),
            read,
            write,
        }));
        let pair = Pair {
            eng,
            addrs,
            now: 0,
            rng: SmallRng::seed_from_u64(seed),
            done: [Vec::new(), Vec::new()],
        };
        (pair, mem)
    }

    /// Move datagrams (in shuffled batches) until `until` holds or the
    /// engines go quiet for a simulated second.
    fn run(&mut self, until: impl Fn(&Pair) -> bool) {
        for _ in 0..100_000 {
            if until(self) {
                return;
            }
            self.step();
        }
        panic!("condition not reached");
    }

    /// One round: move a batch, then advance the clock.
    fn step(&mut self) {
        // Reorder: deliver the batch in a random order.
        let idle = shuffled_round(
            &mut self.eng,
            &self.addrs,
            self.now,
            &mut self.rng,
            [false; 2],
        );
        self.now += if idle { 100_000 } else { 1_000 };
        for i in 0..2 {
            if self.eng[i].next_timeout().is_some_and(|t| t <= self.now) {
                self.eng[i].handle_timeout(self.now);
            }
            while let Some(c) = self.eng[i].poll_completion() {
                self.done[i].push(c);
            }
        }
    }

    fn write(&mut self, data: Vec<u8>, addr: u64, key: u64, cq_data: Option<u64>, ctx: u64) {
        let op = RmaOp {
            dest: self.addrs[1],
            kind: RmaKind::Write {
                payload: Payload::Owned(data),
                cq_data,
            },
            addr,
            key,
            context: ctx,
            signal: true,
        };
        self.eng[0].post_rma(self.now, op).unwrap();
    }

    fn read(&mut self, into: Shared, addr: u64, key: u64, ctx: u64) {
        let op = RmaOp {
            dest: self.addrs[1],
            kind: RmaKind::Read {
                buffer: Box::new(into),
            },
            addr,
            key,
            context: ctx,
            signal: true,
        };
        self.eng[0].post_rma(self.now, op).unwrap();
    }

    /// The target's process restarts: a fresh engine at its address, with
    /// the same memory, that knows nothing of the initiator.
    fn restart_target(&mut self, mem: &Shared) {
        self.replace_target(&Self::config(), mem);
    }

    /// A fresh target engine with `cfg`, exposing `mem` for reads.
    fn replace_target(&mut self, cfg: &Config, mem: &Shared) {
        self.eng[1] = Engine::new(cfg, self.addrs[1], 1234);
        self.eng[1].set_memory_regions(Arc::new(Region {
            mem: mem.clone(),
            read: true,
            write: false,
        }));
    }

    /// The read request (context `ctx`) reaches the target and is
    /// acknowledged, but the target's data never arrives.
    fn read_acked_but_unanswered(&mut self, ctx: u64) {
        let into = Shared(Arc::new(Mutex::new(vec![0u8; 6000])));
        self.read(into, BASE, KEY, ctx);
        self.acked_but_unanswered();
    }

    /// What the initiator posted reaches the target and is acknowledged,
    /// but nothing else of the target's (data, responses) arrives.
    fn acked_but_unanswered(&mut self) {
        use uet::wire::{PacketType, Prologue};
        let acks = self.eng[0].stats().acks_received;
        let mut buf = vec![0u8; 65536];
        while let Some(t) = self.eng[0].poll_transmit(self.now, &mut buf) {
            self.eng[1].handle_datagram(self.now, self.addrs[0], 0, &buf[..t.len]);
        }
        // Let the target's held ACK go (ACK coalescing).
        self.now += 100_000;
        if self.eng[1].next_timeout().is_some_and(|t| t <= self.now) {
            self.eng[1].handle_timeout(self.now);
        }
        while let Some(t) = self.eng[1].poll_transmit(self.now, &mut buf) {
            let datagram = &buf[..t.len];
            let ptype = Prologue::parse(datagram).map(|p| p.ptype);
            if matches!(
                ptype,
                Ok(PacketType::Ack | PacketType::AckCc | PacketType::AckCcx)
            ) {
                self.eng[0].handle_datagram(self.now, self.addrs[1], 0, datagram);
            } else if let Some((_, Some(ack))) = uet::wire::ack_trailer::split(datagram, false) {
                // An ACK riding at the end of a response: the ACK only.
                self.eng[0].handle_datagram(self.now, self.addrs[1], 0, ack);
            }
        }
        assert!(self.eng[0].stats().acks_received > acks, "nothing acked");
    }

    fn completion(&self, side: usize, kind: CompletionKind, ctx: u64) -> Option<&Completion> {
        self.done[side]
            .iter()
            .find(|c| c.kind == kind && c.context == ctx)
    }
}

#[test]
fn write_lands_at_the_address_with_remote_cq_data() {
    for seed in 0..8 {
        let (mut pair, mem) = Pair::new(seed, true, true);
        let data = pattern(seed, 5000);
        pair.write(data.clone(), BASE + 100, KEY, Some(0xfeed), 1);
        pair.run(|p| p.completion(0, CompletionKind::Write, 1).is_some());
        let c = pair.completion(0, CompletionKind::Write, 1).unwrap();
        assert_eq!((c.error, c.len), (None, 5000));
        let m = mem.0.lock().unwrap();
        assert_eq!(&m[100..5100], &data[..]);
        assert_eq!(
            &m[..100],
            &pattern(99, REGION)[..100],
            "bytes before touched"
        );
        assert_eq!(
            &m[5100..],
            &pattern(99, REGION)[5100..],
            "bytes after touched"
        );
        drop(m);
        let r = pair.done[1]
            .iter()
            .find(|c| c.kind == CompletionKind::RemoteWrite)
            .expect("no completion at the target");
        assert_eq!((r.data, r.len), (Some(0xfeed), 5000));
        assert_eq!(r.tag, KEY, "the target's event names the region's key");
    }
}

#[test]
fn refused_writes_fail_and_leave_memory_untouched() {
    // Wrong key, past the end, no write permission.
    for (key, addr, writable) in [
        (KEY + 1, BASE, true),
        (KEY, BASE + 8000, true),
        (KEY, BASE, false),
    ] {
        let (mut pair, mem) = Pair::new(3, true, writable);
        pair.write(pattern(1, 3000), addr, key, None, 5);
        pair.run(|p| p.completion(0, CompletionKind::Write, 5).is_some());
        let c = pair.completion(0, CompletionKind::Write, 5).unwrap();
        assert_eq!(c.error, Some(CompletionError::AccessDenied));
        assert_eq!(*mem.0.lock().unwrap(), pattern(99, REGION));
        assert!(pair.done[1].is_empty(), "target reported a refused write");
    }
}

#[test]
fn read_returns_the_target_memory() {
    for seed in 0..8 {
        let (mut pair, _mem) = Pair::new(seed, true, false);
        let into = Shared(Arc::new(Mutex::new(vec![0u8; 6000])));
        pair.read(into.clone(), BASE + 1000, KEY, 2);
        pair.run(|p| p.completion(0, CompletionKind::Read, 2).is_some());
        let c = pair.completion(0, CompletionKind::Read, 2).unwrap();
        assert_eq!((c.error, c.len), (None, 6000));
        assert_eq!(*into.0.lock().unwrap(), pattern(99, REGION)[1000..7000]);
    }
}

#[test]
fn refused_reads_fail() {
    for (key, addr, readable) in [
        (KEY ^ 1, BASE, true),
        (KEY, BASE + 8190, true),
        (KEY, BASE, false),
    ] {
        let (mut pair, _mem) = Pair::new(4, readable, true);
        let into = Shared(Arc::new(Mutex::new(vec![0u8; 16])));
        pair.read(into.clone(), addr, key, 3);
        pair.run(|p| p.completion(0, CompletionKind::Read, 3).is_some());
        let c = pair.completion(0, CompletionKind::Read, 3).unwrap();
        assert_eq!(c.error, Some(CompletionError::AccessDenied));
        assert_eq!(*into.0.lock().unwrap(), vec![0u8; 16]);
    }
}

#[test]
fn rma_between_messages_keeps_matching_order() {
    let (mut pair, mem) = Pair::new(9, true, true);
    let into = Shared(Arc::new(Mutex::new(vec![0u8; 300])));
    for round in 0..20u64 {
        let dest = pair.addrs[1];
        pair.eng[0]
            .post_send(
                pair.now,
                send(dest, pattern(round, 2000), Some(1), 100 + round),
            )
            .unwrap();
        pair.write(
            pattern(round, 64),
            BASE + round * 64,
            KEY,
            None,
            200 + round,
        );
        if round % 5 == 0 {
            pair.read(into.clone(), BASE, KEY, 300 + round);
        }
    }
    // Every second receive is posted after the traffic started.
    for round in 0..20u64 {
        pair.eng[1]
            .post_recv(pair.now, recv(2000, Some(1), 100 + round))
            .unwrap();
        if round % 2 == 0 {
            pair.run(|p| p.done[1].iter().any(|c| c.context == 100 + round));
        }
    }
    pair.run(|p| {
        p.done[1]
            .iter()
            .filter(|c| c.kind == CompletionKind::Recv)
            .count()
            == 20
            && p.done[0]
                .iter()
                .filter(|c| c.kind == CompletionKind::Write)
                .count()
                == 20
            && p.done[0]
                .iter()
                .filter(|c| c.kind == CompletionKind::Read)
                .count()
                == 4
    });
    let recvs: Vec<u64> = pair.done[1]
        .iter()
        .filter(|c| c.kind == CompletionKind::Recv)
        .map(|c| c.context)
        .collect();
    assert_eq!(recvs, (100..120).collect::<Vec<_>>());
    assert!(pair.done[1]
        .iter()
        .filter(|c| c.kind == CompletionKind::Recv)
        .all(|c| c.error.is_none() && c.len == 2000));
    assert_eq!(
        pair.eng[1].inbound_len(),
        0,
        "finished RMA left inbound state behind"
    );
    let m = mem.0.lock().unwrap();
    for round in 0..20u64 {
        let at = (round * 64) as usize;
        assert_eq!(&m[at..at + 64], &pattern(round, 64)[..]);
    }
}

/// A read that fails because the peer is declared dead gives its buffer
/// back: data of that read still arriving afterwards (the peer's own
/// context to us outlived ours to it) must not be written into it.
#[test]
fn read_data_after_the_read_failed_stays_out_of_the_buffer() {
    let (mut pair, _mem) = Pair::new(5, true, false);
    pair.eng[0] = Engine::new(
        &Config {
            mtu: 1500,
            window: 64,
            rto_min_us: 100,
            rto_max_us: 2000,
            max_retries: 3,
            ..Config::default()
        },
        pair.addrs[0],
        5,
    );
    let into = Shared(Arc::new(Mutex::new(vec![0u8; 6000])));
    pair.read(into.clone(), BASE, KEY, 4);
    let mut buf = vec![0u8; 65536];
    // The read request reaches the target; nothing else of ours does.
    while let Some(t) = pair.eng[0].poll_transmit(pair.now, &mut buf) {
        pair.eng[1].handle_datagram(pair.now, pair.addrs[0], 0, &buf[..t.len]);
    }
    let mut data = Vec::new();
    while let Some(t) = pair.eng[1].poll_transmit(pair.now, &mut buf) {
        data.push(buf[..t.len].to_vec());
    }
    // The data packets (ACKs are short).
    data.retain(|d| d.len() > 100);
    assert!(data.len() >= 3, "the data takes several packets");
    // The first data packet arrives; the rest is held up.
    pair.eng[0].handle_datagram(pair.now, pair.addrs[1], 0, &data[0]);
    // Our request is never acknowledged: the peer is declared dead.
    for _ in 0..10_000 {
        if pair.completion(0, CompletionKind::Read, 4).is_some() {
            break;
        }
        pair.now = pair.eng[0].next_timeout().unwrap_or(pair.now + 1_000);
        pair.eng[0].handle_timeout(pair.now);
        while pair.eng[0].poll_transmit(pair.now, &mut buf).is_some() {}
        while let Some(c) = pair.eng[0].poll_completion() {
            pair.done[0].push(c);
        }
    }
    let c = pair.completion(0, CompletionKind::Read, 4).unwrap();
    assert_eq!(c.error, Some(CompletionError::PeerUnreachable));
    // The buffer is the application's again.
    let before = into.0.lock().unwrap().clone();
    for d in &data[1..] {
        pair.eng[0].handle_datagram(pair.now, pair.addrs[1], 0, d);
    }
    let changed = (into.0.lock().unwrap().iter())
        .zip(&before)
        .filter(|(a, b)| a != b)
        .count();
    assert_eq!(
        changed, 0,
        "read data written into a buffer whose read had failed"
    );
}

/// A peer whose RMA request reuses the message ID of its own unexpected
/// message, still incomplete, must not take that message away or write
/// into it: the message stays for the receive that comes for it.
#[test]
fn rma_request_reusing_a_message_id_leaves_the_message_alone() {
    use uet::wire::ses::flags as sflags;
    use uet::wire::{SesOpcode, SesRequestRepr};
    for opcode in [
        SesOpcode::Read,
        SesOpcode::Write,
        SesOpcode::Atomic,
        SesOpcode::FetchingAtomic,
        SesOpcode::ReadResponse,
    ] {
        let (mut pair, mem) = Pair::new(6, true, true);
        let peer: SocketAddr = "10.0.0.9:4793".parse().unwrap();
        let start = 1000;
        let data = pattern(3, 100);
        // Its first 92 bytes.
        let message = SesRequestRepr {
            opcode: SesOpcode::Send as u8,
            flags: sflags::SOM,
            message_id: 0,
            header_data: 92 << 32,
            request_length: 100,
            ..SesRequestRepr::default()
        };
        let d = common::raw_request(start, 0, &message, &data[..92]);
        pair.eng[1].handle_datagram(0, peer, 0, &d);
        // The same message ID again, as an RMA request of 8 bytes.
        let rma = SesRequestRepr {
            opcode: opcode as u8,
            flags: sflags::SOM | sflags::EOM,
            message_id: 0,
            buffer_offset: if opcode == SesOpcode::ReadResponse {
                0
            } else {
                BASE
            },
            match_bits: KEY,
            job_id: 2 << 8 | 7, // FI_SUM on u64
            header_data: 8 << 32,
            request_length: if opcode == SesOpcode::Read { 0 } else { 8 },
            ..SesRequestRepr::default()
        };
        let d = common::raw_request(start, 1, &rma, &[0xee; 8]);
        pair.eng[1].handle_datagram(0, peer, 0, &d);
        // The rest of the message.
        let rest = SesRequestRepr {
            flags: sflags::EOM,
            buffer_offset: 92,
            header_data: 8 << 32 | 92,
            ..message
        };
        let d = common::raw_request(start, 2, &rest, &data[92..]);
        pair.eng[1].handle_datagram(0, peer, 0, &d);
        let into = Shared(Arc::new(Mutex::new(vec![0u8; 100])));
        let mut r = recv(0, None, 9);
        r.buffer = Box::new(into.clone());
        pair.eng[1].post_recv(0, r).unwrap();
        let mut done = Vec::new();
        while let Some(c) = pair.eng[1].poll_completion() {
            done.push(c);
        }
        let c = done.iter().find(|c| c.kind == CompletionKind::Recv);
        assert!(
            c.is_some_and(|c| c.context == 9 && c.len == 100 && c.error.is_none()),
            "{opcode:?}: the receive got {c:?}"
        );
        assert_eq!(*into.0.lock().unwrap(), data, "{opcode:?}");
        assert_eq!(*mem.0.lock().unwrap(), pattern(99, REGION), "{opcode:?}");
    }
}

/// A read holds the message ID of its request until its data is in: a
/// later operation that came round to that ID would otherwise be taken
/// for it (here a write, whose response failed the read, and never
/// completed itself).
#[test]
fn a_read_keeps_its_message_id_until_its_data_is_in() {
    use uet::wire::{NextHeader, RequestRepr, SesOpcode, SesRequestRepr};
    let (mut pair, _mem) = Pair::new(8, true, true);
    let read_data = |d: &[u8]| {
        RequestRepr::parse(d).is_ok_and(|r| r.next == NextHeader::SesRequest)
            && SesRequestRepr::parse(&d[RequestRepr::LEN..])
                .is_ok_and(|s| s.opcode() == Ok(SesOpcode::ReadResponse))
    };
    // Move everything but, while `hold`, the target's read data.
    let step = |pair: &mut Pair, hold: bool| {
        let mut buf = vec![0u8; 65536];
        while let Some(t) = pair.eng[0].poll_transmit(pair.now, &mut buf) {
            pair.eng[1].handle_datagram(pair.now, pair.addrs[0], 0, &buf[..t.len]);
        }
        while let Some(t) = pair.eng[1].poll_transmit(pair.now, &mut buf) {
            if !(hold && read_data(&buf[..t.len])) {
                pair.eng[0].handle_datagram(pair.now, pair.addrs[1], 0, &buf[..t.len]);
            }
        }
        pair.now += 1_000;
        for i in 0..2 {
            if pair.eng[i].next_timeout().is_some_and(|t| t <= pair.now) {
                pair.eng[i].handle_timeout(pair.now);
            }
            while let Some(c) = pair.eng[i].poll_completion() {
                if c.kind != CompletionKind::Send && c.kind != CompletionKind::Recv {
                    pair.done[i].push(c);
                }
            }
        }
    };
    let first = Shared(Arc::new(Mutex::new(vec![0u8; 100])));
    pair.read(first.clone(), BASE, KEY, 1);
    // Messages go by while the read's data is held up: a full round of
    // message IDs, unless the application is told to wait.
    let mut sent = 0u64;
    'stream: while sent < 65_535 {
        for _ in 0..4096.min(65_535 - sent) {
            let dest = pair.addrs[1];
            let now = pair.now;
            if pair.eng[0]
                .post_send(now, send(dest, vec![1; 8], Some(2), 10 + sent))
                .is_err()
            {
                break 'stream;
            }
            pair.eng[1]
                .post_recv(now, recv(8, Some(2), 10 + sent))
                .unwrap();
            sent += 1;
        }
        for _ in 0..200 {
            step(&mut pair, true);
        }
    }
    for _ in 0..200 {
        step(&mut pair, true);
    }
    let mut wrote = false;
    for round in 0..5_000 {
        if !wrote {
            let op = RmaOp {
                dest: pair.addrs[1],
                kind: RmaKind::Write {
                    payload: Payload::Owned(vec![9; 8]),
                    cq_data: None,
                },
                addr: BASE + 8000,
                key: KEY,
                context: 2,
                signal: true,
            };
            wrote = pair.eng[0].post_rma(pair.now, op).is_ok();
        }
        step(&mut pair, round < 100);
        let done = |k, ctx| pair.completion(0, k, ctx).is_some();
        if done(CompletionKind::Read, 1) && done(CompletionKind::Write, 2) {
            break;
        }
    }
    let read = pair.completion(0, CompletionKind::Read, 1);
    assert!(read.is_some_and(|c| c.error.is_none()), "read: {read:?}");
    assert_eq!(*first.0.lock().unwrap(), pattern(99, REGION)[..100]);
    let write = pair.completion(0, CompletionKind::Write, 2);
    assert!(write.is_some_and(|c| c.error.is_none()), "write: {write:?}");
}

/// A read whose request the target acknowledged, and whose target then
/// restarted before answering, fails: the restarted target opening a
/// context to us is taken as the hint to check whether it still knows ours.
#[test]
fn a_read_fails_when_its_target_restarts_and_talks_to_us() {
    let (mut pair, mem) = Pair::new(11, true, false);
    pair.read_acked_but_unanswered(3);
    pair.restart_target(&mem);
    // The new process keeps sending to us (a new context from the same
    // address), so we never go a round trip without hearing from it.
    let mut sent = 0;
    while pair.completion(0, CompletionKind::Read, 3).is_none() && sent < 1000 {
        let (dest, now) = (pair.addrs[0], pair.now);
        pair.eng[1]
            .post_send(now, send(dest, pattern(sent, 100), None, 100 + sent))
            .unwrap();
        pair.eng[0]
            .post_recv(now, recv(100, None, 100 + sent))
            .unwrap();
        sent += 1;
        pair.step();
    }
    let c = pair.completion(0, CompletionKind::Read, 3);
    assert_eq!(
        c.map(|c| c.error),
        Some(Some(CompletionError::PeerUnreachable)),
        "after {sent} sends from the restarted target"
    );
}

/// The same when the restarted target stays silent: the initiator's
/// liveness watch asks, and the answer is that our context is unknown.
#[test]
fn a_read_fails_when_its_target_restarts_silently() {
    let (mut pair, mem) = Pair::new(12, true, false);
    pair.read_acked_but_unanswered(3);
    pair.restart_target(&mem);
    pair.run(|p| p.completion(0, CompletionKind::Read, 3).is_some());
    let c = pair.completion(0, CompletionKind::Read, 3).unwrap();
    assert_eq!(c.error, Some(CompletionError::PeerUnreachable));
    // Told by the target's NACK of the probe, not by giving up on it.
    assert_eq!(pair.eng[0].stats().nacks_received, 1);
}

/// The check must not fail a read answered on a fresh context: the
/// target's context to us closed while idle, and its answer opens a new
/// one.
#[test]
fn a_read_answered_on_a_reopened_context_succeeds() {
    for seed in 0..4 {
        let (mut pair, _mem) = Pair::new(seed, true, false);
        // The target talks to us first, so it has a context to close.
        let (dest, now) = (pair.addrs[0], pair.now);
        pair.eng[1]
            .post_send(now, send(dest, pattern(1, 100), None, 50))
            .unwrap();
        pair.eng[0].post_recv(now, recv(100, None, 51)).unwrap();
        pair.run(|p| p.completion(0, CompletionKind::Recv, 51).is_some());
        let closes = pair.eng[1].stats().pdcs_closed;
        // Idle long enough for the target to close its context to us.
        pair.run(|p| p.eng[1].stats().pdcs_closed > closes);
        let into = Shared(Arc::new(Mutex::new(vec![0u8; 6000])));
        pair.read(into.clone(), BASE, KEY, 3);
        pair.run(|p| p.completion(0, CompletionKind::Read, 3).is_some());
        let c = pair.completion(0, CompletionKind::Read, 3).unwrap();
        assert_eq!((c.error, c.len), (None, 6000), "seed {seed}");
        assert_eq!(*into.0.lock().unwrap(), pattern(99, REGION)[..6000]);
    }
}

/// A target holds at most `FI_UET_ANSWER_BYTES` of read data for its
/// peers: reads past it are refused for now (NACK 0x07) and resent, and
/// every read still completes with the right bytes.
#[test]
fn read_answers_beyond_the_budget_wait_their_turn() {
    let (mut pair, mem) = Pair::new(21, true, false);
    let budget = 10_000;
    let cfg = Config {
        answer_bytes: budget,
        ..Pair::config()
    };
    pair.replace_target(&cfg, &mem);
    let into: Vec<Shared> = (0..8)
        .map(|_| Shared(Arc::new(Mutex::new(vec![0u8; 3000]))))
        .collect();
    for (i, buf) in into.iter().enumerate() {
        pair.read(buf.clone(), BASE + 500 * i as u64, KEY, 10 + i as u64);
    }
    let all_done =
        |p: &Pair| (0..8).all(|i| p.completion(0, CompletionKind::Read, 10 + i).is_some());
    let mut most = 0;
    for _ in 0..100_000 {
        if all_done(&pair) {
            break;
        }
        pair.step();
        most = most.max(pair.eng[1].answer_bytes());
    }
    assert!(all_done(&pair), "reads left waiting");
    for (i, buf) in into.iter().enumerate() {
        let c = pair
            .completion(0, CompletionKind::Read, 10 + i as u64)
            .unwrap();
        assert_eq!((c.error, c.len), (None, 3000), "read {i}");
        let at = 500 * i;
        assert_eq!(*buf.0.lock().unwrap(), pattern(99, REGION)[at..at + 3000]);
    }
    assert!(most > 0 && most <= budget, "held {most} bytes of answers");
    assert!(pair.eng[1].stats().backpressure > 0, "no read was refused");
    // Everything is let go once acknowledged.
    pair.run(|p| p.eng[1].answer_bytes() == 0);
}

/// Everything engine `i` has ready now, each datagram with its control
/// type when it is a control packet.
fn drain_side(pair: &mut Pair, i: usize) -> Vec<(Option<ControlType>, Vec<u8>)> {
    let mut buf = vec![0u8; 65536];
    let mut out = Vec::new();
    while let Some(t) = pair.eng[i].poll_transmit(pair.now, &mut buf) {
        let d = buf[..t.len].to_vec();
        let ctl = match Prologue::parse(&d).map(|p| p.ptype) {
            Ok(PacketType::Control) => ControlRepr::parse(&d).ok().map(|c| c.ctl_type),
            _ => None,
        };
        out.push((ctl, d));
    }
    out
}

fn deliver(pair: &mut Pair, to: usize, datagrams: &[(Option<ControlType>, Vec<u8>)]) {
    for (_, d) in datagrams {
        pair.eng[to].handle_datagram(pair.now, pair.addrs[1 - to], 0, d);
    }
}

/// A read posted while the initiator closes its idle context to the
/// target is sent on the next context, and completes: the liveness check
/// the target's new context to us triggers, asked on the context being
/// closed, is answered "unknown context" by a target that has just closed
/// it, and that answer must not fail the read (the close went through,
/// nothing of that context is outstanding).
#[test]
fn a_read_posted_while_the_context_closes_survives_the_liveness_check() {
    let cfg = Config {
        pdc_idle_us: 1000,
        ..Pair::config()
    };
    let (mut pair, mem) = Pair::new(5, true, false);
    pair.eng[0] = Engine::new(&cfg, pair.addrs[0], 5);
    pair.replace_target(&cfg, &mem);
    // Both contexts open: a read and its answer.
    let into = Shared(Arc::new(Mutex::new(vec![0u8; 100])));
    pair.read(into, BASE, KEY, 1);
    pair.run(|p| p.completion(0, CompletionKind::Read, 1).is_some());
    // Everything owed delivered (ACKs held for coalescing included).
    for _ in 0..3 {
        pair.now += 100_000;
        for i in 0..2 {
            if pair.eng[i].next_timeout().is_some_and(|t| t <= pair.now) {
                pair.eng[i].handle_timeout(pair.now);
            }
        }
        for i in 0..2 {
            let out = drain_side(&mut pair, i);
            deliver(&mut pair, 1 - i, &out);
        }
    }
    // Both go idle; let each side's close timer fire, then complete the
    // target's close of its context to us.
    pair.now += 2_000_000;
    for i in 0..2 {
        pair.eng[i].handle_timeout(pair.now);
    }
    let from_a = drain_side(&mut pair, 0);
    let from_b = drain_side(&mut pair, 1);
    assert!(from_a.iter().any(|(c, _)| *c == Some(ControlType::Close)));
    assert!(from_b.iter().any(|(c, _)| *c == Some(ControlType::Close)));
    deliver(&mut pair, 0, &from_b);
    let confirm_to_b = drain_side(&mut pair, 0);
    deliver(&mut pair, 1, &confirm_to_b);
    // Our close reaches the target, which closes; its confirmation is
    // late.
    deliver(&mut pair, 1, &from_a);
    let late_confirm = drain_side(&mut pair, 1);
    // Meanwhile we post a read (it waits for the close), and the target
    // sends to us on a fresh context.
    let into = Shared(Arc::new(Mutex::new(vec![0u8; 100])));
    pair.read(into.clone(), BASE, KEY, 2);
    let (dest, now) = (pair.addrs[0], pair.now);
    pair.eng[1]
        .post_send(now, send(dest, pattern(1, 100), None, 50))
        .unwrap();
    pair.eng[0].post_recv(now, recv(100, None, 51)).unwrap();
    let syn = drain_side(&mut pair, 1);
    deliver(&mut pair, 0, &syn);
    pair.now += 1_000;
    pair.eng[0].handle_timeout(pair.now);
    // Whatever we ask, the target answers before its late confirmation.
    let asked = drain_side(&mut pair, 0);
    assert!(asked
        .iter()
        .any(|(c, _)| *c == Some(ControlType::AckRequest)));
    deliver(&mut pair, 1, &asked);
    let answer = drain_side(&mut pair, 1);
    deliver(&mut pair, 0, &answer);
    deliver(&mut pair, 0, &late_confirm);
    pair.run(|p| p.completion(0, CompletionKind::Read, 2).is_some());
    let c = pair.completion(0, CompletionKind::Read, 2).unwrap();
    assert_eq!((c.error, c.len), (None, 100));
    assert_eq!(*into.0.lock().unwrap(), pattern(99, REGION)[..100]);
}

/// Under ordered delivery, two endpoints reading from each other past
/// their answer budgets: each one's answers travel behind its own
/// refused read requests, so neither budget may wait on the other's.
#[test]
fn ordered_reads_both_ways_beyond_the_budget_complete() {
    for seed in 0..4 {
        let (mut pair, mem) = Pair::new(60 + seed, true, false);
        let cfg = Config {
            answer_bytes: 6000,
            ordered: true,
            ..Pair::config()
        };
        pair.eng[0] = Engine::new(&cfg, pair.addrs[0], 60 + seed);
        pair.replace_target(&cfg, &mem);
        pair.eng[0].set_memory_regions(Arc::new(Region {
            mem: mem.clone(),
            read: true,
            write: false,
        }));
        let n = 8u64;
        for i in 0..n {
            for side in 0..2 {
                let op = RmaOp {
                    dest: pair.addrs[1 - side],
                    kind: RmaKind::Read {
                        buffer: Box::new(Shared(Arc::new(Mutex::new(vec![0u8; 3000])))),
                    },
                    addr: BASE + 500 * i,
                    key: KEY,
                    context: 10 + i,
                    signal: true,
                };
                pair.eng[side].post_rma(pair.now, op).unwrap();
            }
        }
        let all_done = |p: &Pair| {
            (0..2).all(|side| {
                (0..n).all(|i| p.completion(side, CompletionKind::Read, 10 + i).is_some())
            })
        };
        for _ in 0..20_000 {
            if all_done(&pair) {
                break;
            }
            pair.step();
        }
        assert!(
            all_done(&pair),
            "seed {seed}: reads left waiting, answers held {} / {}",
            pair.eng[0].answer_bytes(),
            pair.eng[1].answer_bytes()
        );
        for side in 0..2 {
            for i in 0..n {
                let c = pair.completion(side, CompletionKind::Read, 10 + i).unwrap();
                assert_eq!(
                    (c.error, c.len),
                    (None, 3000),
                    "seed {seed} side {side} read {i}"
                );
            }
        }
    }
}

/// A write (which completes on the target's response) whose target
/// restarts after acknowledging it but before responding fails instead of
/// waiting for ever.
#[test]
fn a_write_fails_when_its_target_restarts_before_responding() {
    let (mut pair, mem) = Pair::new(13, true, true);
    pair.write(pattern(3, 3000), BASE, KEY, None, 6);
    pair.acked_but_unanswered();
    pair.restart_target(&mem);
    pair.run(|p| p.completion(0, CompletionKind::Write, 6).is_some());
    let c = pair.completion(0, CompletionKind::Write, 6).unwrap();
    assert_eq!(c.error, Some(CompletionError::PeerUnreachable));
}
