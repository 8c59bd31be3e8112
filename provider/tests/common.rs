//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use uet::wire::{PacketType, Prologue};
use uet::{
    Completion, CompletionLevel, Config, Engine, MsgBuffer, Payload, ProbeFlags, RecvOp, SendOp,
};

/// Bytes that depend on the message and position, so misplacement shows.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            ((i as u64)
                .wrapping_mul(31)
                .wrapping_add(seed.wrapping_mul(7))
                % 251) as u8
        })
        .collect()
}

pub fn send(dest: SocketAddr, data: Vec<u8>, tag: Option<u64>, context: u64) -> SendOp {
    SendOp {
        dest,
        payload: Payload::Owned(data),
        tag,
        cq_data: None,
        context,
        level: CompletionLevel::Transmit,
        signal: true,
    }
}

pub fn recv(len: usize, tag: Option<u64>, context: u64) -> RecvOp {
    RecvOp {
        src: None,
        tagged: tag.is_some(),
        tag: tag.unwrap_or(0),
        ignore: 0,
        buffer: Box::new(vec![0u8; len]),
        context,
        signal: true,
        probe: ProbeFlags::default(),
    }
}

/// The receive buffer of a completion, recovered from its address. Tests
/// own the Vec through a side table instead: see `Receiver`.
pub fn ok(c: &Completion) -> bool {
    c.error.is_none()
}

/// A receive buffer the test can read after completion.
#[derive(Clone)]
pub struct Shared(pub Arc<Mutex<Vec<u8>>>);

impl MsgBuffer for Shared {
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn read_at(&self, offset: usize, out: &mut [u8]) {
        out.copy_from_slice(&self.0.lock().unwrap()[offset..offset + out.len()]);
    }
    fn write_at(&mut self, offset: usize, data: &[u8]) {
        self.0.lock().unwrap()[offset..offset + data.len()].copy_from_slice(data);
    }
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }
}

/// A receive buffer in one piece, so the engine may write into it in place
/// (`slice_at_mut`), that hands its bytes to the test when the engine drops
/// it (once the receive is over).
pub struct Returned {
    data: Vec<u8>,
    out: Arc<Mutex<Option<Vec<u8>>>>,
}

impl Returned {
    /// The buffer, and where its bytes will be once the engine is done.
    pub fn new(len: usize) -> (Returned, Arc<Mutex<Option<Vec<u8>>>>) {
        let out = Arc::new(Mutex::new(None));
        let data = vec![0u8; len];
        (
            Returned {
                data,
                out: out.clone(),
            },
            out,
        )
    }
}

impl MsgBuffer for Returned {
    fn len(&self) -> usize {
        self.data.len()
    }
    fn read_at(&self, offset: usize, out: &mut [u8]) {
        self.data.read_at(offset, out);
    }
    fn write_at(&mut self, offset: usize, data: &[u8]) {
        self.data.write_at(offset, data);
    }
    fn slice_at(&self, offset: usize, len: usize) -> Option<&[u8]> {
        self.data.slice_at(offset, len)
    }
    fn slice_at_mut(&mut self, offset: usize, len: usize) -> Option<&mut [u8]> {
        self.data.slice_at_mut(offset, len)
    }
}

impl Drop for Returned {
    fn drop(&mut self) {
        if let Ok(mut out) = self.out.lock() {
            *out = Some(std::mem::take(&mut self.data));
        }
    }
}

/// A datagram on its way through a simulated network, delivered at `at`
/// (ties broken by `seq`, the order it was sent in). A `BinaryHeap` of them
/// pops the earliest first.
pub struct InFlight {
    pub at: u64,
    pub seq: u64,
    /// Index of the receiving engine.
    pub to: usize,
    pub from: SocketAddr,
    /// IP TOS byte it arrives with (ECN, DSCP).
    pub tos: u8,
    pub data: Vec<u8>,
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

/// Advance virtual time from `now` to the next event (a datagram due in
/// `net`, an engine's timer, or `also`), by at least 1 ns and at most
/// 10 us, then deliver the datagrams due and fire the timers due. Returns
/// the new time.
pub fn advance(
    eng: &mut [Engine],
    net: &mut BinaryHeap<InFlight>,
    now: u64,
    also: Option<u64>,
) -> u64 {
    let next_net = net.peek().map(|p| p.at);
    let next_timer = eng.iter().filter_map(|e| e.next_timeout()).min();
    let next = [next_net, next_timer, also].into_iter().flatten().min();
    let now = next.unwrap_or(now + 10_000).clamp(now + 1, now + 10_000);
    while net.peek().is_some_and(|p| p.at <= now) {
        let p = net.pop().expect("peeked");
        eng[p.to].handle_datagram(now, p.from, p.tos, &p.data);
    }
    for e in eng.iter_mut() {
        if e.next_timeout().is_some_and(|t| t <= now) {
            e.handle_timeout(now);
        }
    }
    now
}

/// One exchange between two engines: every datagram both have ready,
/// delivered in a random order (reordering) at `now`; an engine marked dead
/// neither sends nor receives. Returns whether nothing was sent.
pub fn shuffled_round(
    eng: &mut [uet::Engine; 2],
    addrs: &[SocketAddr; 2],
    now: u64,
    rng: &mut impl rand::Rng,
    dead: [bool; 2],
) -> bool {
    let mut buf = vec![0u8; 65536];
    let mut batch = Vec::new();
    for i in 0..2 {
        if dead[i] {
            continue;
        }
        while let Some(t) = eng[i].poll_transmit(now, &mut buf) {
            batch.push((1 - i, addrs[i], buf[..t.len].to_vec()));
        }
    }
    for k in (1..batch.len()).rev() {
        let j = rng.gen_range(0..=k);
        batch.swap(k, j);
    }
    let idle = batch.is_empty();
    for (to, from, data) in batch {
        if !dead[to] {
            eng[to].handle_datagram(now, from, 0, &data);
        }
    }
    idle
}

/// Everything `from` has ready at `now`, as (packet type, bytes).
pub fn drain(from: &mut Engine, now: u64) -> Vec<(PacketType, Vec<u8>)> {
    let mut buf = vec![0u8; 65536];
    let mut out = Vec::new();
    while let Some(t) = from.poll_transmit(now, &mut buf) {
        let ptype = Prologue::parse(&buf[..t.len]).unwrap().ptype;
        out.push((ptype, buf[..t.len].to_vec()));
    }
    out
}

/// The prologue flags of a datagram.
pub fn flags_of(datagram: &[u8]) -> u8 {
    Prologue::parse(datagram).unwrap().flags
}

/// Settings for engines over a simulated lossy network: 1500-byte
/// packets, a 64-packet window, retransmission timeouts of 100 us to 2 ms
/// (virtual time) and retries enough to outlast any loss rate used.
pub fn lossy_config() -> Config {
    Config {
        mtu: 1500,
        window: 64,
        rto_min_us: 100,
        rto_max_us: 2000,
        max_retries: 1000,
        ..Config::default()
    }
}

/// Settings for tests of peers that come and go: 1500-byte packets, idle
/// contexts closed after 1 ms and a silent peer failed after 5 timeouts of
/// at most 2 ms (virtual time).
pub fn brisk_config() -> Config {
    Config {
        mtu: 1500,
        rto_min_us: 100,
        rto_max_us: 2000,
        max_retries: 5,
        pdc_idle_us: 1000,
        ..Config::default()
    }
}

/// The addresses the two-engine tests give their engines.
pub fn addrs() -> [SocketAddr; 2] {
    [
        "10.0.0.1:4793".parse().unwrap(),
        "10.0.0.2:4793".parse().unwrap(),
    ]
}

/// The round-trip samples (ns) of the ACKs `e` took since the last call
/// (its trace must be on).
pub fn ack_rtts(e: &mut Engine) -> Vec<u64> {
    let mut trace = Vec::new();
    e.take_trace(&mut trace);
    trace
        .iter()
        .filter(|t| t.kind == uet::engine::TraceKind::Ack)
        .map(|t| t.rtt_ns)
        .collect()
}

/// Two engines with default settings and their addresses.
pub fn engine_pair() -> ([SocketAddr; 2], Engine, Engine) {
    engine_pair_with(&Config::default())
}

/// Two engines with settings `cfg` and their addresses.
pub fn engine_pair_with(cfg: &Config) -> ([SocketAddr; 2], Engine, Engine) {
    let addrs = addrs();
    let a = Engine::new(cfg, addrs[0], 1);
    let b = Engine::new(cfg, addrs[1], 2);
    (addrs, a, b)
}

/// [`engine_pair`] after one 64 B message from a to b and b's ACK back,
/// 5 us each way: the delivery context is open (no more SYN) and a knows
/// the round trip.
pub fn acquainted() -> ([SocketAddr; 2], Engine, Engine) {
    let (addrs, mut a, mut b) = engine_pair();
    b.post_recv(0, recv(64, None, 1)).unwrap();
    a.post_send(0, send(addrs[1], vec![1; 64], None, 1))
        .unwrap();
    for (_, d) in drain(&mut a, 0) {
        b.handle_datagram(5_000, addrs[0], 0, &d);
    }
    for (_, d) in drain(&mut b, 5_000) {
        a.handle_datagram(10_000, addrs[1], 0, &d);
    }
    while a.poll_completion().is_some() {}
    while b.poll_completion().is_some() {}
    (addrs, a, b)
}

/// A datagram of a hand-made peer: the packet `index` of the delivery
/// context that starts at PSN `start` (SYN, so the receiver opens the
/// context on whichever arrives first), with SES header `ses` and
/// `payload`.
pub fn raw_request(
    start: u32,
    index: u16,
    ses: &uet::wire::SesRequestRepr,
    payload: &[u8],
) -> Vec<u8> {
    use uet::wire::{NextHeader, RequestRepr, SesRequestRepr};
    let mut d = vec![0u8; RequestRepr::LEN + SesRequestRepr::LEN + payload.len()];
    RequestRepr {
        ptype: PacketType::RudRequest,
        next: NextHeader::SesRequest,
        flags: uet::wire::prologue::flags::SYN,
        clear_psn_offset: 0,
        psn: start.wrapping_add(index as u32),
        spdcid: 77,
        dpdcid: index,
    }
    .emit(&mut d);
    ses.emit(&mut d[RequestRepr::LEN..]);
    d[RequestRepr::LEN + SesRequestRepr::LEN..].copy_from_slice(payload);
    d
}

/// Engines on one lossless network, each at its own address (10.0.0.1,
/// 10.0.0.2, ...); a dead one neither sends nor receives.
pub struct Net {
    pub eng: Vec<Engine>,
    pub addrs: Vec<SocketAddr>,
    pub dead: Vec<bool>,
    pub now: u64,
    pub done: Vec<Vec<Completion>>,
}

impl Net {
    pub fn new(cfgs: &[Config]) -> Net {
        let addrs: Vec<SocketAddr> = (0..cfgs.len())
            .map(|i| format!("10.0.0.{}:4793", i + 1).parse().unwrap())
            .collect();
        Net {
            eng: (cfgs.iter().zip(&addrs))
                .enumerate()
                .map(|(i, (c, &a))| Engine::new(c, a, i as u64 + 1))
                .collect(),
            addrs,
            dead: vec![false; cfgs.len()],
            now: 0,
            done: vec![Vec::new(); cfgs.len()],
        }
    }

    /// Deliver everything ready, then advance the clock (by 1 us after
    /// traffic, 100 us when quiet) and fire the timers due.
    pub fn step(&mut self) {
        let mut buf = vec![0u8; 65536];
        let mut batch = Vec::new();
        for i in 0..self.eng.len() {
            while let Some(t) = self.eng[i].poll_transmit(self.now, &mut buf) {
                if !self.dead[i] {
                    batch.push((self.addrs[i], t.dest, buf[..t.len].to_vec()));
                }
            }
        }
        let idle = batch.is_empty();
        for (from, to, data) in batch {
            if let Some(j) = self.addrs.iter().position(|&a| a == to) {
                if !self.dead[j] {
                    self.eng[j].handle_datagram(self.now, from, 0, &data);
                }
            }
        }
        self.now += if idle { 100_000 } else { 1_000 };
        for i in 0..self.eng.len() {
            if self.eng[i].next_timeout().is_some_and(|t| t <= self.now) {
                self.eng[i].handle_timeout(self.now);
            }
            while let Some(c) = self.eng[i].poll_completion() {
                self.done[i].push(c);
            }
        }
    }

    pub fn run(&mut self, what: &str, until: impl Fn(&Net) -> bool) {
        for _ in 0..100_000 {
            if until(self) {
                return;
            }
            self.step();
        }
        panic!("{what}: not reached: {:?}", self.done);
    }

    /// Let `ns` of virtual time pass.
    pub fn wait(&mut self, ns: u64) {
        let until = self.now + ns;
        self.run("time passed", |n| n.now >= until);
    }
}
