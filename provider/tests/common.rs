//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use uet::{Completion, CompletionLevel, MsgBuffer, Payload, ProbeFlags, RecvOp, SendOp};

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
