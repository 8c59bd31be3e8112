//! Rendezvous sends between two sans-IO engines over an in-memory channel
//! that reorders datagrams: the receiver pulls a large message's remainder
//! once it is matched (straight into the receive buffer), holds only the
//! eager part while it is not, and the sender completes only once the pull
//! is over. Peek, claim, discard, truncation and peer failure keep working.
//! Between engines given host memory, the receiver copies the remainder
//! from the sender's memory instead, and pulls when it cannot.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use rand::rngs::SmallRng;
use rand::SeedableRng;

use common::{drain, pattern, send, shuffled_round, Returned, Shared};
use uet::engine::{HostAccess, HostClaim, HostMemory};
use uet::io::ProcessMemory;
use uet::{
    Completion, CompletionError, CompletionKind, CompletionLevel, Config, Engine, MsgBuffer,
    ProbeFlags, RecvOp,
};

const THRESHOLD: usize = 64 * 1024;
const MTU: usize = 9000;
/// Bytes a rendezvous send carries itself.
const EAGER: usize = THRESHOLD;
/// The same to a peer seen copying in place (FI_UET_HOST_RENDEZVOUS_BYTES).
const HOST_EAGER: usize = 16 << 10;

struct Pair {
    eng: [Engine; 2],
    addrs: [SocketAddr; 2],
    now: u64,
    rng: SmallRng,
    done: [Vec<Completion>; 2],
    /// An engine that is dead: it neither sends nor receives any more.
    dead: [bool; 2],
    /// Most staged bytes seen at the receiver.
    max_staged: usize,
    /// Leave the engines' shares of same-host copies undone (a receiver
    /// whose driver has not got to them yet).
    hold_copies: bool,
    cfg: Config,
}

impl Pair {
    fn new(seed: u64) -> Pair {
        Pair::with(seed, |_| {})
    }

    fn with(seed: u64, tweak: impl Fn(&mut Config)) -> Pair {
        let mut cfg = Config {
            mtu: MTU,
            window: 64,
            rto_min_us: 100,
            rto_max_us: 2000,
            max_retries: 8,
            rendezvous_bytes: THRESHOLD,
            ..Config::default()
        };
        tweak(&mut cfg);
        let addrs: [SocketAddr; 2] = [
            "10.0.0.1:4793".parse().unwrap(),
            "10.0.0.2:4793".parse().unwrap(),
        ];
        Pair {
            eng: [
                Engine::new(&cfg, addrs[0], seed),
                Engine::new(&cfg, addrs[1], seed ^ 0x55),
            ],
            addrs,
            now: 0,
            rng: SmallRng::seed_from_u64(seed),
            done: [Vec::new(), Vec::new()],
            dead: [false; 2],
            max_staged: 0,
            hold_copies: false,
            cfg,
        }
    }

    /// Engine `side` restarts: a new process at the same address.
    fn restart(&mut self, side: usize, seed: u64) {
        self.eng[side] = Engine::new(&self.cfg, self.addrs[side], seed);
    }

    /// Move datagrams (shuffled batches) until `until` holds; panics when
    /// it does not within a simulated minute.
    fn run(&mut self, until: impl Fn(&Pair) -> bool) {
        for _ in 0..1_000_000 {
            if until(self) {
                return;
            }
            let idle = shuffled_round(
                &mut self.eng,
                &self.addrs,
                self.now,
                &mut self.rng,
                self.dead,
            );
            self.max_staged = self.max_staged.max(self.eng[1].staged_bytes());
            // As the driver does once the pulls are out.
            for e in &mut self.eng {
                if e.has_host_copies() && !self.hold_copies {
                    e.run_host_copies();
                }
            }
            self.now += if idle { 100_000 } else { 1_000 };
            for i in 0..2 {
                if self.dead[i] {
                    continue;
                }
                if self.eng[i].next_timeout().is_some_and(|t| t <= self.now) {
                    self.eng[i].handle_timeout(self.now);
                }
                while let Some(c) = self.eng[i].poll_completion() {
                    self.done[i].push(c);
                }
            }
            if self.now > 60_000_000_000 {
                break;
            }
        }
        panic!("condition not reached: {:?}", self.done);
    }

    /// Let the engines exchange everything they have (a simulated 50 ms).
    fn settle(&mut self) {
        let until = self.now + 50_000_000;
        self.run(|p| p.now >= until);
    }

    fn send(&mut self, len: usize, tag: u64, context: u64) {
        let now = self.now;
        let dest = self.addrs[1];
        self.eng[0]
            .post_send(now, send(dest, pattern(context, len), Some(tag), context))
            .unwrap();
    }

    fn recv(&mut self, len: usize, tag: u64, context: u64, probe: ProbeFlags) -> Shared {
        let buf = Shared(Arc::new(Mutex::new(vec![0u8; len])));
        self.post_recv(Box::new(buf.clone()), tag, context, probe);
        buf
    }

    fn post_recv(&mut self, buffer: Box<dyn MsgBuffer>, tag: u64, context: u64, probe: ProbeFlags) {
        let op = RecvOp {
            src: None,
            tagged: true,
            tag,
            ignore: 0,
            buffer,
            context,
            signal: true,
            probe,
        };
        let now = self.now;
        self.eng[1].post_recv(now, op).unwrap();
    }

    /// A receive into a buffer in one piece; its bytes come back once the
    /// engine lets go of it.
    fn recv_returned(&mut self, len: usize, tag: u64, context: u64) -> Arc<Mutex<Option<Vec<u8>>>> {
        let (buf, out) = Returned::new(len);
        self.post_recv(Box::new(buf), tag, context, plain());
        out
    }

    /// [`Pair::recv_returned`] for a waiting message of the same host,
    /// which the receiver copies whole at once (no share for the sender).
    #[track_caller]
    fn recv_copied_whole(
        &mut self,
        len: usize,
        tag: u64,
        context: u64,
    ) -> Arc<Mutex<Option<Vec<u8>>>> {
        let before = self.eng[1].stats().host_read_bytes;
        let out = self.recv_returned(len, tag, context);
        let copied = self.eng[1].stats().host_read_bytes - before;
        assert_eq!(copied, (len - EAGER) as u64);
        out
    }

    /// [`Pair::recv_returned`] for a waiting message of the same host
    /// whose copy is shared with its sender: a pull for its share waits.
    #[track_caller]
    fn recv_shared(&mut self, len: usize, tag: u64, context: u64) -> Arc<Mutex<Option<Vec<u8>>>> {
        let pulls = self.eng[1].pulls_pending();
        let out = self.recv_returned(len, tag, context);
        assert_eq!(self.eng[1].pulls_pending(), pulls + 1, "no share offered");
        out
    }

    /// Run until send `context` and receive `recv_context` have completed:
    /// both without error, the received bytes those sent (`len` of them).
    fn complete_intact(
        &mut self,
        context: u64,
        recv_context: u64,
        out: &Mutex<Option<Vec<u8>>>,
        len: usize,
    ) {
        self.run(|p| p.completion(1, recv_context).is_some() && p.completion(0, context).is_some());
        assert_eq!(self.completion(1, recv_context).unwrap().error, None);
        assert_eq!(self.completion(0, context).unwrap().error, None);
        let got = out.lock().unwrap().take().expect("buffer released");
        assert!(got == pattern(context, len), "payload differs ({len} B)");
    }

    fn completion(&self, side: usize, context: u64) -> Option<&Completion> {
        self.done[side].iter().find(|c| c.context == context)
    }

    /// Nothing left behind at either end.
    fn assert_clean(&self) {
        assert_eq!(self.eng[1].staged_bytes(), 0);
        assert_eq!(self.eng[1].pulls_pending(), 0);
        assert_eq!(self.eng[1].inbound_len(), 0);
        assert_eq!(self.eng[0].inbound_len(), 0);
    }
}

fn plain() -> ProbeFlags {
    ProbeFlags::default()
}

#[test]
fn expected_large_message_is_pulled_into_the_posted_buffer() {
    let mut p = Pair::new(1);
    let len = 1 << 20;
    let buf = p.recv(len, 5, 100, plain());
    p.send(len, 5, 1);
    p.run(|p| p.completion(1, 100).is_some() && p.completion(0, 1).is_some());
    let r = p.completion(1, 100).unwrap().clone();
    assert_eq!((r.error, r.len, r.tag), (None, len, 5));
    assert_eq!(p.completion(0, 1).unwrap().error, None);
    assert!(*buf.0.lock().unwrap() == pattern(1, len), "payload differs");
    assert_eq!(p.eng[1].stats().rendezvous_pulls, 1);
    assert_eq!(p.max_staged, 0, "an expected message staged nothing");
    p.settle();
    p.assert_clean();
}

#[test]
fn sends_up_to_the_threshold_stay_eager() {
    let mut p = Pair::new(2);
    let buf = p.recv(THRESHOLD, 5, 100, plain());
    p.send(THRESHOLD, 5, 1);
    p.run(|p| p.completion(1, 100).is_some() && p.completion(0, 1).is_some());
    assert!(*buf.0.lock().unwrap() == pattern(1, THRESHOLD));
    assert_eq!(p.eng[1].stats().rendezvous_pulls, 0);
}

#[test]
fn unexpected_large_message_waits_then_is_pulled() {
    let mut p = Pair::new(3);
    let len = 16 << 20;
    p.send(len, 9, 1);
    p.settle();
    // Unmatched: only the eager packet is held, and the sender waits.
    assert!(
        p.max_staged > 0 && p.max_staged <= EAGER,
        "{}",
        p.max_staged
    );
    assert_eq!(p.eng[1].staged_bytes(), EAGER);
    assert!(
        p.completion(0, 1).is_none(),
        "send completed before the pull"
    );
    let buf = p.recv(len, 9, 100, plain());
    p.run(|p| p.completion(1, 100).is_some() && p.completion(0, 1).is_some());
    let r = p.completion(1, 100).unwrap().clone();
    assert_eq!((r.error, r.len), (None, len));
    assert_eq!(p.completion(0, 1).unwrap().error, None);
    assert!(*buf.0.lock().unwrap() == pattern(1, len), "payload differs");
    assert!(p.max_staged <= EAGER, "staged {} bytes", p.max_staged);
    p.settle();
    p.assert_clean();
}

#[test]
fn matching_order_holds_across_eager_and_rendezvous_sends() {
    let mut p = Pair::new(4);
    let sizes = [200_000, 10, 300_000, 70_000, 0, 1 << 20];
    for (i, &len) in sizes.iter().enumerate() {
        p.send(len, 7, i as u64);
    }
    p.settle();
    let bufs: Vec<Shared> = sizes
        .iter()
        .enumerate()
        .map(|(i, &len)| p.recv(len, 7, 100 + i as u64, plain()))
        .collect();
    p.run(|p| p.done[1].len() == sizes.len() && p.done[0].len() == sizes.len());
    for (i, b) in bufs.iter().enumerate() {
        let r = p.completion(1, 100 + i as u64).unwrap();
        assert_eq!((r.error, r.len), (None, sizes[i]));
        assert!(*b.0.lock().unwrap() == pattern(i as u64, sizes[i]), "{i}");
    }
    p.settle();
    p.assert_clean();
}

#[test]
fn peek_then_claim_pulls_into_the_claiming_buffer() {
    let mut p = Pair::new(5);
    let len = 500_000;
    p.send(len, 11, 1);
    p.settle();
    let peek = ProbeFlags {
        peek: true,
        claim: true,
        discard: false,
    };
    p.recv(0, 11, 100, peek);
    p.settle();
    let c = p.completion(1, 100).unwrap().clone();
    assert_eq!((c.error, c.len, c.tag), (None, len, 11));
    // Reserved: a plain receive does not take it, nothing is pulled yet.
    p.recv(len, 11, 101, plain());
    p.settle();
    assert!(p.completion(1, 101).is_none());
    assert_eq!(p.eng[1].stats().rendezvous_pulls, 0);
    assert!(p.completion(0, 1).is_none());
    let claim = ProbeFlags {
        peek: false,
        claim: true,
        discard: false,
    };
    let buf = p.recv(len, 11, 100, claim);
    p.run(|p| p.done[1].len() == 2 && p.completion(0, 1).is_some());
    let r = p.done[1][1].clone();
    assert_eq!((r.context, r.error, r.len), (100, None, len));
    assert!(*buf.0.lock().unwrap() == pattern(1, len));
    // The plain receive is still posted for the next message.
    let buf2 = {
        p.send(len, 11, 2);
        p.run(|p| p.completion(1, 101).is_some());
        p.completion(1, 101).unwrap().clone()
    };
    assert_eq!((buf2.error, buf2.len), (None, len));
    p.settle();
    p.assert_clean();
}

#[test]
fn discard_releases_the_sender_without_pulling() {
    // Also between engines that copy on one host: nothing is copied.
    for mut p in [Pair::new(6), same_host_pair(22)] {
        let len = 2 << 20;
        p.send(len, 3, 1);
        p.settle();
        let sent_before = p.eng[0].stats().packets_sent;
        let discard = ProbeFlags {
            peek: true,
            claim: false,
            discard: true,
        };
        p.recv(0, 3, 100, discard);
        p.run(|p| p.completion(0, 1).is_some());
        assert_eq!(p.completion(0, 1).unwrap().error, None);
        assert_eq!(p.completion(1, 100).unwrap().len, len);
        assert_eq!(p.eng[1].stats().rendezvous_pulls, 1);
        assert_eq!(p.eng[1].stats().host_reads, 0);
        assert_eq!(p.eng[0].stats().host_writes, 0);
        p.settle();
        // No data went out after the eager packet (only ACKs and such).
        let sent = p.eng[0].stats().packets_sent - sent_before;
        assert!(sent < 5, "{sent} packets sent for a discarded message");
        p.assert_clean();
    }
}

#[test]
fn claimed_then_discarded_message_releases_the_sender() {
    let mut p = Pair::new(7);
    let len = 300_000;
    p.send(len, 3, 1);
    p.settle();
    let peek_claim = ProbeFlags {
        peek: true,
        claim: true,
        discard: false,
    };
    p.recv(0, 3, 100, peek_claim);
    p.settle();
    let claim_discard = ProbeFlags {
        peek: false,
        claim: true,
        discard: true,
    };
    p.recv(0, 3, 100, claim_discard);
    p.run(|p| p.completion(0, 1).is_some());
    assert_eq!(p.completion(0, 1).unwrap().error, None);
    p.settle();
    p.assert_clean();
}

#[test]
fn truncated_receive_pulls_only_what_fits() {
    let mut p = Pair::new(8);
    let len = 1 << 20;
    let cap = 200_000;
    for (context, posted_first) in [(1u64, true), (2, false)] {
        let buf = if posted_first {
            let b = p.recv(cap, 4, 100 + context, plain());
            p.send(len, 4, context);
            b
        } else {
            p.send(len, 4, context);
            p.settle();
            p.recv(cap, 4, 100 + context, plain())
        };
        let sent_before = p.eng[0].stats().packets_sent;
        p.run(|p| p.completion(1, 100 + context).is_some() && p.completion(0, context).is_some());
        let r = p.completion(1, 100 + context).unwrap().clone();
        assert_eq!(r.len, cap);
        assert_eq!(
            r.error,
            Some(CompletionError::Truncated {
                overflow: len - cap
            })
        );
        assert!(*buf.0.lock().unwrap() == pattern(context, len)[..cap]);
        assert_eq!(p.completion(0, context).unwrap().error, None);
        // About the buffer's worth of data packets, not the message's.
        let sent = p.eng[0].stats().packets_sent - sent_before;
        assert!(
            sent < (len / MTU) as u64 / 2,
            "{sent} packets for {cap} bytes"
        );
    }
    // A buffer no longer than the eager part pulls nothing.
    let buf = p.recv(100, 4, 200, plain());
    p.send(len, 4, 3);
    p.run(|p| p.completion(1, 200).is_some() && p.completion(0, 3).is_some());
    assert_eq!(p.completion(1, 200).unwrap().len, 100);
    assert!(*buf.0.lock().unwrap() == pattern(3, len)[..100]);
    p.settle();
    p.assert_clean();
}

#[test]
fn delivery_complete_waits_for_the_pull() {
    let mut p = Pair::new(9);
    let len = 400_000;
    let dest = p.addrs[1];
    let mut op = send(dest, pattern(1, len), Some(2), 1);
    op.level = CompletionLevel::Delivery;
    p.eng[0].post_send(0, op).unwrap();
    p.settle();
    assert!(p.completion(0, 1).is_none(), "delivered before the pull");
    let buf = p.recv(len, 2, 100, plain());
    p.run(|p| p.completion(0, 1).is_some());
    assert_eq!(p.completion(0, 1).unwrap().error, None);
    assert!(*buf.0.lock().unwrap() == pattern(1, len));
    p.settle();
    p.assert_clean();
}

#[test]
fn receiver_killed_mid_pull_fails_the_send() {
    let mut p = Pair::with(10, |c| c.window = 8);
    let len = 4 << 20;
    p.recv(len, 1, 100, plain());
    p.send(len, 1, 1);
    // Kill the receiver once some of the pulled data is in.
    p.run(|p| p.eng[1].pulls_pending() > 0 && p.eng[0].stats().packets_sent > 40);
    p.dead[1] = true;
    p.run(|p| p.completion(0, 1).is_some());
    let c = p.completion(0, 1).unwrap();
    assert_eq!(c.kind, CompletionKind::Send);
    assert_eq!(c.error, Some(CompletionError::PeerUnreachable));
    assert_eq!(p.eng[0].stats().peers_failed, 1);
}

#[test]
fn sender_killed_mid_pull_fails_the_receive() {
    let mut p = Pair::with(11, |c| c.window = 8);
    let len = 4 << 20;
    p.recv(len, 1, 100, plain());
    p.send(len, 1, 1);
    p.run(|p| p.eng[1].pulls_pending() > 0 && p.eng[0].stats().packets_sent > 40);
    p.dead[0] = true;
    p.run(|p| p.completion(1, 100).is_some());
    let c = p.completion(1, 100).unwrap();
    assert_eq!(c.error, Some(CompletionError::PeerUnreachable));
    assert_eq!(p.eng[1].pulls_pending(), 0);
    assert_eq!(p.eng[1].stats().peers_failed, 1);
}

#[test]
fn receiver_killed_before_matching_fails_the_waiting_send() {
    let mut p = Pair::new(12);
    p.send(1 << 20, 1, 1);
    p.settle();
    assert!(p.completion(0, 1).is_none());
    p.dead[1] = true;
    p.run(|p| p.completion(0, 1).is_some());
    assert_eq!(
        p.completion(0, 1).unwrap().error,
        Some(CompletionError::PeerUnreachable)
    );
}

#[test]
fn a_live_receiver_that_posts_late_keeps_the_send_alive() {
    let mut p = Pair::new(13);
    let len = 1 << 20;
    p.send(len, 1, 1);
    // Far longer than the probe budget (8 retries of at most 2 ms).
    for _ in 0..20 {
        p.settle();
    }
    assert!(p.completion(0, 1).is_none());
    let buf = p.recv(len, 1, 100, plain());
    p.run(|p| p.completion(0, 1).is_some() && p.completion(1, 100).is_some());
    assert_eq!(p.completion(0, 1).unwrap().error, None);
    assert!(*buf.0.lock().unwrap() == pattern(1, len));
    assert_eq!(p.eng[0].stats().peers_failed, 0);
}

#[test]
fn zero_threshold_means_every_send_is_eager() {
    let mut p = Pair::with(14, |c| c.rendezvous_bytes = 0);
    let len = 1 << 20;
    p.send(len, 1, 1);
    p.run(|p| p.completion(0, 1).is_some());
    assert!(p.eng[1].staged_bytes() == len);
    assert_eq!(p.eng[1].stats().rendezvous_pulls, 0);
}

// ----- same host ---------------------------------------------------------------

/// Host memory that names a host of its own choosing and copies nothing
/// (the kernel refused), counting the copies it was asked for.
struct Refusing {
    host: u64,
    asked: Arc<Mutex<u32>>,
}

impl HostMemory for Refusing {
    fn this_process(&self) -> (u64, u32) {
        (self.host, 1)
    }
    fn offer(&self, _peer: SocketAddr, _pid: u32) -> u64 {
        0
    }
    fn read(&self, _claim: &HostClaim, _address: u64, _dst: &mut [u8]) -> HostAccess {
        *self.asked.lock().unwrap() += 1;
        HostAccess::Failed
    }
    fn write(&self, _claim: &HostClaim, _address: u64, _src: &[u8]) -> HostAccess {
        *self.asked.lock().unwrap() += 1;
        HostAccess::Failed
    }
    fn clock_ms(&self) -> u32 {
        0
    }
}

/// The real copy, without the socket-owner check (the engines' addresses
/// here are made up) or tokens (it offers none and wants none back);
/// `claims` records what the engine named.
struct Trusting {
    memory: ProcessMemory,
    claims: Arc<Mutex<Vec<HostClaim>>>,
}

impl Trusting {
    fn new() -> Trusting {
        Trusting {
            memory: ProcessMemory::new().expect("a boot ID"),
            claims: Arc::default(),
        }
    }
}

impl HostMemory for Trusting {
    fn this_process(&self) -> (u64, u32) {
        self.memory.this_process()
    }
    fn offer(&self, _peer: SocketAddr, _pid: u32) -> u64 {
        0
    }
    fn read(&self, claim: &HostClaim, address: u64, dst: &mut [u8]) -> HostAccess {
        self.claims.lock().unwrap().push(*claim);
        done_if(self.memory.copy(claim.pid, address, dst))
    }
    fn write(&self, claim: &HostClaim, address: u64, src: &[u8]) -> HostAccess {
        self.claims.lock().unwrap().push(*claim);
        done_if(self.memory.copy_to(claim.pid, address, src))
    }
    fn clock_ms(&self) -> u32 {
        self.memory.clock_ms()
    }
}

fn done_if(copied: bool) -> HostAccess {
    match copied {
        true => HostAccess::Done,
        false => HostAccess::Failed,
    }
}

/// The real copy for a claim that returns the token offered for its peer
/// and process, as the driver's memory wants: `salt` stands for the
/// holding the driver found, and a new one for a socket that changed
/// hands.
struct Tokened {
    inner: Trusting,
    salt: Arc<Mutex<u64>>,
}

impl Tokened {
    fn new(salt: u64) -> Tokened {
        Tokened {
            inner: Trusting::new(),
            salt: Arc::new(Mutex::new(salt)),
        }
    }
    fn token(&self, peer: SocketAddr, pid: u32) -> u64 {
        let salt = *self.salt.lock().unwrap();
        (salt ^ (u64::from(peer.port()) << 32) ^ u64::from(pid)) | 1
    }
}

impl HostMemory for Tokened {
    fn this_process(&self) -> (u64, u32) {
        self.inner.this_process()
    }
    fn offer(&self, peer: SocketAddr, pid: u32) -> u64 {
        self.token(peer, pid)
    }
    fn read(&self, claim: &HostClaim, address: u64, dst: &mut [u8]) -> HostAccess {
        match claim.echo == self.token(claim.peer, claim.pid) {
            true => self.inner.read(claim, address, dst),
            false => HostAccess::Unproven,
        }
    }
    fn write(&self, claim: &HostClaim, address: u64, src: &[u8]) -> HostAccess {
        match claim.echo == self.token(claim.peer, claim.pid) {
            true => self.inner.write(claim, address, src),
            false => HostAccess::Unproven,
        }
    }
    fn clock_ms(&self) -> u32 {
        self.inner.clock_ms()
    }
}

/// A pair whose engines both copy on this host (they share one process).
fn same_host_pair(seed: u64) -> Pair {
    let mut p = Pair::new(seed);
    for e in &mut p.eng {
        e.enable_host_read(Box::new(Trusting::new()));
    }
    p
}

#[test]
fn same_host_receiver_copies_the_remainder_instead_of_pulling() {
    let mut p = Pair::new(20);
    let (receiver, sender) = (Trusting::new(), Trusting::new());
    let (read_from, written_from) = (receiver.claims.clone(), sender.claims.clone());
    p.eng[1].enable_host_read(Box::new(receiver));
    p.eng[0].enable_host_read(Box::new(sender));
    // Below the split size the receiver copies it all; above, the sender
    // writes the back half while the receiver reads the front. Once the
    // receiver has copied, the sender's eager part to it is shorter.
    for (context, len, split, eager) in [
        (1u64, 200_000, false, EAGER),
        (2, 1 << 20, true, HOST_EAGER),
    ] {
        let before = (p.eng[1].stats(), p.eng[0].stats());
        let out = p.recv_returned(len, 5, 100 + context);
        p.send(len, 5, context);
        p.run(|p| p.completion(1, 100 + context).is_some() && p.completion(0, context).is_some());
        let r = p.completion(1, 100 + context).unwrap().clone();
        assert_eq!((r.error, r.len, r.tag), (None, len, 5));
        assert_eq!(p.completion(0, context).unwrap().error, None);
        let got = out.lock().unwrap().take().expect("buffer released");
        assert!(got == pattern(context, len), "payload differs ({len} B)");
        let (rs, ss) = (p.eng[1].stats(), p.eng[0].stats());
        let read = rs.host_read_bytes - before.0.host_read_bytes;
        let written = ss.host_write_bytes - before.1.host_write_bytes;
        assert_eq!(read + written, (len - eager) as u64, "{len} B");
        assert_eq!(rs.host_reads - before.0.host_reads, 1);
        assert_eq!(ss.host_writes - before.1.host_writes, split as u64);
        if split {
            assert!(
                read >= written && written > 0,
                "read {read}, written {written}"
            );
        }
        assert_eq!((rs.host_read_failures, ss.host_write_failures), (0, 0));
        // The eager part and the pull's answer travel, nothing else.
        let sent = ss.packets_sent - before.1.packets_sent;
        assert!(sent <= (eager / MTU + 4) as u64, "{sent} packets sent");
    }
    // Each copy names the socket the other side's datagram came from.
    assert!(read_from
        .lock()
        .unwrap()
        .iter()
        .all(|c| c.peer == p.addrs[0]));
    let written_from: Vec<SocketAddr> = written_from
        .lock()
        .unwrap()
        .iter()
        .map(|c| c.peer)
        .collect();
    assert_eq!(written_from, [p.addrs[1]]);
    p.settle();
    p.assert_clean();
}

/// One message of `len` bytes (tag 5) from engine 0 to 1, checked
/// through; `between` runs after the send is posted. Returns what the
/// receiver and the sender count of their copies since: (reads, writes,
/// not proven at the receiver, not proven at the sender).
fn one_message(p: &mut Pair, len: usize, context: u64, between: impl FnOnce()) -> [u64; 4] {
    let before = (p.eng[1].stats(), p.eng[0].stats());
    let out = p.recv_returned(len, 5, 100 + context);
    p.send(len, 5, context);
    between();
    p.run(|p| p.completion(1, 100 + context).is_some() && p.completion(0, context).is_some());
    let r = p.completion(1, 100 + context).unwrap().clone();
    assert_eq!((r.error, r.len), (None, len));
    assert_eq!(p.completion(0, context).unwrap().error, None);
    let got = out.lock().unwrap().take().expect("buffer released");
    assert!(
        got == pattern(context, len),
        "payload differs (message {context})"
    );
    let (rs, ss) = (p.eng[1].stats(), p.eng[0].stats());
    assert_eq!((rs.host_read_failures, ss.host_write_failures), (0, 0));
    [
        rs.host_reads - before.0.host_reads,
        ss.host_writes - before.1.host_writes,
        rs.host_unproven - before.0.host_unproven,
        ss.host_unproven - before.1.host_unproven,
    ]
}

#[test]
fn same_host_copies_wait_for_the_peer_to_return_the_token() {
    let mut p = Pair::new(31);
    let (receiver, sender) = (Tokened::new(0x5eed << 40), Tokened::new(0xfeed << 40));
    let (receiver_salt, sender_salt) = (receiver.salt.clone(), sender.salt.clone());
    p.eng[1].enable_host_read(Box::new(receiver));
    p.eng[0].enable_host_read(Box::new(sender));
    // Shared copies: the receiver reads the front half, the sender writes
    // the back half.
    let len = 1 << 20;
    // The first descriptor returns nothing of the receiver's: it is pulled
    // over the network, and the pull offers the receiver's token.
    assert_eq!(one_message(&mut p, len, 1, || ()), [0, 0, 1, 0]);
    // Each side now returns the other's token: both copy.
    assert_eq!(one_message(&mut p, len, 2, || ()), [1, 1, 0, 0]);
    assert_eq!(one_message(&mut p, len, 3, || ()), [1, 1, 0, 0]);
    // The receiver's memory found the sender's address in other hands
    // (a new holding, a new token): the next copy waits for it.
    *receiver_salt.lock().unwrap() ^= 0x77 << 40;
    assert_eq!(one_message(&mut p, len, 4, || ()), [0, 0, 1, 0]);
    assert_eq!(one_message(&mut p, len, 5, || ()), [1, 1, 0, 0]);
    // The sender's token changes after its descriptor left: the pull
    // returns the old one, so the sender sends its half instead of writing.
    let rotate = || *sender_salt.lock().unwrap() ^= 0x99 << 40;
    assert_eq!(one_message(&mut p, len, 6, rotate), [1, 0, 0, 1]);
    assert_eq!(one_message(&mut p, len, 7, || ()), [1, 1, 0, 0]);
    p.settle();
    p.assert_clean();
}

/// The real copy for reads, and writes that fail after `writes` of them,
/// reads after `reads` (both counted per engine).
struct Failing {
    inner: Trusting,
    reads: Mutex<u32>,
    writes: Mutex<u32>,
}

impl Failing {
    fn new(reads: u32, writes: u32) -> Failing {
        Failing {
            inner: Trusting::new(),
            reads: Mutex::new(reads),
            writes: Mutex::new(writes),
        }
    }
}

impl HostMemory for Failing {
    fn this_process(&self) -> (u64, u32) {
        self.inner.this_process()
    }
    fn offer(&self, peer: SocketAddr, pid: u32) -> u64 {
        self.inner.offer(peer, pid)
    }
    fn read(&self, claim: &HostClaim, address: u64, dst: &mut [u8]) -> HostAccess {
        let mut left = self.reads.lock().unwrap();
        if *left == 0 {
            return HostAccess::Failed;
        }
        *left -= 1;
        self.inner.read(claim, address, dst)
    }
    fn write(&self, claim: &HostClaim, address: u64, src: &[u8]) -> HostAccess {
        let mut left = self.writes.lock().unwrap();
        if *left == 0 {
            return HostAccess::Failed;
        }
        *left -= 1;
        self.inner.write(claim, address, src)
    }
    fn clock_ms(&self) -> u32 {
        self.inner.clock_ms()
    }
}

#[test]
fn a_sender_that_cannot_write_sends_its_half() {
    let mut p = Pair::new(27);
    p.eng[1].enable_host_read(Box::new(Trusting::new()));
    p.eng[0].enable_host_read(Box::new(Failing::new(u32::MAX, 0)));
    let len = 1 << 20;
    let out = p.recv_returned(len, 5, 100);
    p.send(len, 5, 1);
    p.complete_intact(1, 100, &out, len);
    let (rs, ss) = (p.eng[1].stats(), p.eng[0].stats());
    assert_eq!((ss.host_writes, ss.host_write_failures), (0, 1));
    // The sender's half went as read response data.
    let pulled = (len - EAGER) as u64 - rs.host_read_bytes;
    assert!(pulled > 0 && ss.packets_sent >= pulled / MTU as u64);
    p.settle();
    p.assert_clean();
}

#[test]
fn the_sender_keeps_its_memory_until_the_receiver_has_copied_its_share() {
    // The sender writes its half at once; the receiver copies its own half
    // out of the sender's memory later (here: much later). Completing the
    // send on the write would hand that memory back to the application
    // while it is still being read.
    let mut p = same_host_pair(31);
    let len = 1 << 20;
    let out = p.recv_returned(len, 5, 100);
    p.hold_copies = true;
    p.send(len, 5, 1);
    p.run(|p| p.eng[0].stats().host_writes == 1);
    p.settle();
    assert!(p.eng[1].has_host_copies());
    assert!(
        p.completion(0, 1).is_none(),
        "the send completed while the receiver still reads its payload"
    );
    // Nor may a close of the sending endpoint go ahead, whatever else it
    // has to send (here a probe, lost): the application would free the
    // memory the receiver reads.
    let (now, mut buf) = (p.now, vec![0u8; 65536]);
    while p.eng[0].poll_transmit(now, &mut buf).is_some() {}
    assert!(p.eng[0].owes_peers());
    assert!(p.completion(1, 100).is_none());
    p.hold_copies = false;
    p.complete_intact(1, 100, &out, len);
    p.settle();
    p.assert_clean();
}

#[test]
fn pulled_data_is_taken_only_after_the_receivers_share_is_copied() {
    // The sender cannot write, so its half travels; the send completes
    // once that data is acknowledged, so the receiver makes its own copy
    // from the sender's memory before it takes the data in.
    let mut p = Pair::new(32);
    p.eng[1].enable_host_read(Box::new(Trusting::new()));
    p.eng[0].enable_host_read(Box::new(Failing::new(u32::MAX, 0)));
    let len = 1 << 20;
    let out = p.recv_returned(len, 5, 100);
    p.hold_copies = true;
    p.send(len, 5, 1);
    p.run(|p| p.completion(0, 1).is_some());
    assert!(
        !p.eng[1].has_host_copies(),
        "the send completed before the receiver copied its share"
    );
    p.hold_copies = false;
    p.complete_intact(1, 100, &out, len);
    p.settle();
    p.assert_clean();
}

#[test]
fn a_failed_share_fails_the_receive() {
    // The probe read works, the receiver's share after the pull does not
    // (the sender unmapped what it described, say).
    let mut p = Pair::new(28);
    p.eng[1].enable_host_read(Box::new(Failing::new(1, 0)));
    p.eng[0].enable_host_read(Box::new(Trusting::new()));
    let len = 1 << 20;
    let _out = p.recv_returned(len, 5, 100);
    p.send(len, 5, 1);
    p.run(|p| p.completion(1, 100).is_some() && p.completion(0, 1).is_some());
    assert_eq!(
        p.completion(1, 100).unwrap().error,
        Some(CompletionError::PeerUnreachable)
    );
    assert_eq!(p.eng[1].stats().host_read_failures, 1);
    p.settle();
    p.assert_clean();
}

/// Post a send of 1 MiB (tag 5, context 1) to a receiver whose share of
/// the same-host copy fails; only the send's first datagram reaches it
/// until the receive has failed (engine time standing still, so nothing
/// is resent). `reverse`: the receiver's datagrams of each round go out in
/// reverse order. Returns the datagrams held back.
fn fail_receive_with_packets_held(
    p: &mut Pair,
    level: CompletionLevel,
    reverse: bool,
) -> Vec<Vec<u8>> {
    p.eng[1].enable_host_read(Box::new(Failing::new(1, 0)));
    p.eng[0].enable_host_read(Box::new(Trusting::new()));
    let len = 1 << 20;
    let _out = p.recv_returned(len, 5, 100);
    let mut op = send(p.addrs[1], pattern(1, len), Some(5), 1);
    op.level = level;
    let now = p.now;
    p.eng[0].post_send(now, op).unwrap();
    let mut held: Vec<Vec<u8>> = drain(&mut p.eng[0], now)
        .into_iter()
        .map(|(_, d)| d)
        .collect();
    assert!(held.len() > 1, "the eager part fits one packet");
    let first = held.remove(0);
    p.eng[1].handle_datagram(now, p.addrs[0], 0, &first);
    // The pull, its answer and what follows; a few rounds more once the
    // receive has failed, so that any answer to that reaches the sender.
    let mut after = 0;
    for _ in 0..100 {
        if p.completion(1, 100).is_some() {
            after += 1;
            if after > 4 {
                break;
            }
        }
        for (from, to) in [(1, 0), (0, 1)] {
            let mut out = drain(&mut p.eng[from], now);
            if reverse && from == 1 {
                out.reverse();
            }
            for (_, d) in out {
                let src = p.addrs[from];
                p.eng[to].handle_datagram(now, src, 0, &d);
            }
        }
        for e in &mut p.eng {
            e.run_host_copies();
        }
        for i in 0..2 {
            while let Some(c) = p.eng[i].poll_completion() {
                p.done[i].push(c);
            }
        }
    }
    assert_eq!(
        p.completion(1, 100).map(|c| c.error),
        Some(Some(CompletionError::PeerUnreachable))
    );
    held
}

#[test]
fn eager_packets_after_a_failed_receive_leave_nothing_behind() {
    // The send's own packets but the first arrive after the receive has
    // failed. They are dropped on arrival: none may open a record of its
    // own, which would hold staging memory and, its message ID having
    // wrapped, take the place of the message 65536 sends later.
    let mut p = Pair::new(29);
    let held = fail_receive_with_packets_held(&mut p, CompletionLevel::Transmit, false);
    let now = p.now;
    for d in held {
        p.eng[1].handle_datagram(now, p.addrs[0], 0, &d);
    }
    p.run(|p| p.completion(0, 1).is_some());
    p.settle();
    p.assert_clean();
    // The next message is whole.
    let len = 1 << 20;
    let out = p.recv_returned(len, 6, 101);
    p.send(len, 6, 2);
    p.complete_intact(2, 101, &out, len);
}

#[test]
fn a_failed_delivery_completes_only_once_its_packets_are_in() {
    // The target reports the failure before the send's own packets are
    // all in: the send keeps its buffer (it may resend from it) until they
    // are acknowledged, and only then completes with the error, whether
    // the report comes before the receiver's release of the send's memory
    // or after it.
    for reverse in [false, true] {
        let mut p = Pair::new(33);
        let held = fail_receive_with_packets_held(&mut p, CompletionLevel::Delivery, reverse);
        assert!(
            p.completion(0, 1).is_none(),
            "the send completed with packets still unacknowledged (reverse {reverse})"
        );
        let now = p.now;
        for d in held {
            p.eng[1].handle_datagram(now, p.addrs[0], 0, &d);
        }
        p.run(|p| p.completion(0, 1).is_some());
        assert_eq!(
            p.completion(0, 1).unwrap().error,
            Some(CompletionError::PeerUnreachable)
        );
        p.settle();
        p.assert_clean();
    }
}

#[test]
fn same_host_copy_of_an_unexpected_message_and_a_truncated_one() {
    let mut p = same_host_pair(21);
    let len = 600_000;
    p.send(len, 3, 1);
    p.settle();
    assert!(
        p.completion(0, 1).is_none(),
        "send completed before the copy"
    );
    let out = p.recv_returned(len, 3, 100);
    p.run(|p| p.completion(1, 100).is_some() && p.completion(0, 1).is_some());
    assert!(out.lock().unwrap().take().unwrap() == pattern(1, len));
    // A buffer shorter than the message takes what fits.
    let cap = 200_000;
    let out = p.recv_returned(cap, 3, 101);
    p.send(len, 3, 2);
    p.run(|p| p.completion(1, 101).is_some() && p.completion(0, 2).is_some());
    let r = p.completion(1, 101).unwrap();
    assert_eq!(
        (r.len, r.error),
        (
            cap,
            Some(CompletionError::Truncated {
                overflow: len - cap
            })
        )
    );
    assert!(out.lock().unwrap().take().unwrap() == pattern(2, len)[..cap]);
    // The first is shared with the sender, the truncated one is not.
    let (rs, ss) = (p.eng[1].stats(), p.eng[0].stats());
    assert_eq!((rs.host_reads, ss.host_writes), (2, 1));
    assert_eq!(
        rs.host_read_bytes + ss.host_write_bytes,
        (len - EAGER + cap - HOST_EAGER) as u64
    );
    p.settle();
    p.assert_clean();
}

#[test]
fn a_buffer_in_pieces_is_pulled_over_the_network() {
    // `Shared` offers no slice to copy into: the copy fails, the pull runs.
    let mut p = same_host_pair(23);
    let len = 1 << 20;
    let buf = p.recv(len, 5, 100, plain());
    p.send(len, 5, 1);
    p.run(|p| p.completion(1, 100).is_some() && p.completion(0, 1).is_some());
    assert_eq!(p.completion(1, 100).unwrap().error, None);
    assert!(*buf.0.lock().unwrap() == pattern(1, len));
    let s = p.eng[1].stats();
    assert_eq!((s.host_reads, s.host_read_failures), (0, 1));
    assert!(p.eng[0].stats().packets_sent > (len / MTU) as u64);
    p.settle();
    p.assert_clean();
}

#[test]
fn refused_or_foreign_host_copies_fall_back_to_the_pull() {
    // (sender's host, receiver's host, copies the receiver tries)
    for (seed, receiver_host, tries) in [(24, 7, 1), (25, 8, 0)] {
        let mut p = Pair::new(seed);
        let asked = Arc::new(Mutex::new(0));
        p.eng[0].enable_host_read(Box::new(Refusing {
            host: 7,
            asked: asked.clone(),
        }));
        p.eng[1].enable_host_read(Box::new(Refusing {
            host: receiver_host,
            asked: asked.clone(),
        }));
        let len = 1 << 20;
        let out = p.recv_returned(len, 5, 100);
        p.send(len, 5, 1);
        p.run(|p| p.completion(1, 100).is_some() && p.completion(0, 1).is_some());
        assert_eq!(p.completion(1, 100).unwrap().error, None);
        assert!(out.lock().unwrap().take().unwrap() == pattern(1, len));
        assert_eq!(*asked.lock().unwrap(), tries, "host {receiver_host}");
        let s = p.eng[1].stats();
        assert_eq!((s.host_reads, s.host_read_failures), (0, tries as u64));
        p.settle();
        p.assert_clean();
    }
}

#[test]
fn only_a_sender_with_host_memory_offers_the_copy() {
    let mut p = Pair::new(26);
    p.eng[1].enable_host_read(Box::new(Trusting::new()));
    let len = 1 << 20;
    let out = p.recv_returned(len, 5, 100);
    p.send(len, 5, 1);
    p.run(|p| p.completion(1, 100).is_some() && p.completion(0, 1).is_some());
    assert!(out.lock().unwrap().take().unwrap() == pattern(1, len));
    let s = p.eng[1].stats();
    assert_eq!((s.host_reads, s.host_read_failures), (0, 0));
    assert_eq!(s.rendezvous_pulls, 1);
}

#[test]
fn a_restarted_senders_old_pull_leaves_its_new_messages_alone() {
    // The receive waits on a pull that offered the sender its share of
    // the copy when the sender restarts at the same address. Its new
    // process's first message takes the old one's message ID; the old
    // pull, dropped with the old context, must not touch it later.
    let mut p = same_host_pair(34);
    let len = 1 << 20;
    let _out = p.recv_returned(len, 5, 100);
    p.send(len, 5, 1);
    p.run(|p| p.eng[1].pulls_pending() > 0);
    p.restart(0, 99);
    p.eng[0].enable_host_read(Box::new(Trusting::new()));
    p.send(100, 7, 2);
    p.run(|p| p.completion(1, 100).is_some());
    assert_eq!(
        p.completion(1, 100).unwrap().error,
        Some(CompletionError::PeerUnreachable)
    );
    // Past the time the old sender could have written into the buffer.
    for _ in 0..60 {
        p.settle();
    }
    let out = p.recv_returned(100, 7, 101);
    p.complete_intact(2, 101, &out, 100);
    p.settle();
    p.assert_clean();
}

#[test]
fn a_receive_offered_to_a_writer_fails_only_once_it_cannot_write() {
    let mut p = same_host_pair(29);
    let len = 1 << 20;
    let _out = p.recv_returned(len, 5, 100);
    p.send(len, 5, 1);
    // The pull offering the sender its share is queued, not yet out: the
    // sender dies before it sees it.
    p.run(|p| p.eng[1].pulls_pending() > 0);
    let offered = p.now;
    p.dead[0] = true;
    p.run(|p| p.completion(1, 100).is_some());
    let c = p.completion(1, 100).unwrap();
    assert_eq!(c.error, Some(CompletionError::PeerUnreachable));
    assert_eq!(p.eng[1].stats().peers_failed, 1);
    // The peer was given up on long before; its receive waited until the
    // sender could no longer have been writing into the buffer.
    let waited = p.now - offered;
    assert!(waited >= 2_000_000_000, "failed after {waited} ns");
    assert_eq!(p.eng[1].pulls_pending(), 0);
}

#[test]
fn receives_offered_to_a_dead_writer_at_different_times_fail_in_turn() {
    // Two receives offer the same sender its share of their messages,
    // half a second apart. The sender dies before it sees the first offer
    // and is given up on after the second: each receive fails once the
    // sender could no longer write into its own buffer (2 s after its
    // offer), not at the other's time. Contexts stay open longer than the
    // test, so that no other timer falls at the first one's deadline;
    // retransmissions back off slowly enough for the give-up to come
    // between the second offer and the first deadline.
    let mut p = Pair::with(33, |c| {
        c.pdc_idle_us = 10_000_000;
        c.rto_min_us = 50_000;
        c.rto_max_us = 200_000;
    });
    for e in &mut p.eng {
        e.enable_host_read(Box::new(Trusting::new()));
    }
    let len = 1 << 20;
    let hold = 2_000_000_000;
    let slack = 10_000_000;
    p.send(len, 6, 2);
    p.run(|p| p.eng[1].staged_bytes() >= EAGER);
    let _early = p.recv_returned(len, 5, 100);
    p.send(len, 5, 1);
    p.run(|p| p.eng[1].pulls_pending() > 0);
    let first_offer = p.now;
    p.dead[0] = true;
    let second_offer = first_offer + 500_000_000;
    p.run(|p| p.now >= second_offer);
    assert_eq!(p.eng[1].stats().peers_failed, 0);
    let _late = p.recv_returned(len, 6, 101);
    assert_eq!(p.eng[1].pulls_pending(), 2);
    // Nothing else is due meanwhile: the timer question names the
    // earlier deadline of the two.
    let before = first_offer + hold - slack;
    p.run(|p| p.now >= before);
    assert_eq!(p.eng[1].stats().peers_failed, 1);
    let due = p.eng[1].next_timeout();
    assert!(
        due.is_some_and(|t| t > before && t <= first_offer + hold),
        "next timeout {due:?}"
    );
    p.run(|p| p.completion(1, 100).is_some());
    let first = p.now;
    assert!(p.completion(1, 101).is_none());
    p.run(|p| p.completion(1, 101).is_some());
    let second = p.now;
    for (c, failed, offered) in [(100, first, first_offer), (101, second, second_offer)] {
        assert_eq!(
            p.completion(1, c).unwrap().error,
            Some(CompletionError::PeerUnreachable)
        );
        let waited = failed - offered;
        assert!(
            (hold..hold + slack).contains(&waited),
            "receive {c} failed {waited} ns after its offer"
        );
    }
    assert_eq!(p.eng[1].pulls_pending(), 0);
}

#[test]
fn a_sender_given_up_on_is_offered_no_share_until_it_is_heard_from() {
    // A message waits unmatched while its sender goes silent (hung, not
    // gone: its memory can still be read) and is given up on. A receive
    // that matches it then copies the whole remainder itself: a share
    // offered to the silent sender would hold the receive for 2 s and then
    // fail it. Once the sender is heard from again, it is offered shares.
    let mut p = same_host_pair(34);
    let len = 1 << 20;
    p.send(len, 6, 2);
    p.run(|p| p.eng[1].staged_bytes() >= EAGER);
    // A pull under way makes the receiver wait on the sender, so that its
    // silence is noticed.
    let _failing = p.recv_returned(len, 5, 100);
    p.send(len, 5, 1);
    p.run(|p| p.eng[1].pulls_pending() > 0);
    p.dead[0] = true;
    p.run(|p| p.eng[1].stats().peers_failed == 1);
    let posted = p.now;
    // Copied in place at once: no pull of the remainder waits.
    let out = p.recv_copied_whole(len, 6, 101);
    p.run(|p| p.completion(1, 101).is_some());
    assert!(
        p.now - posted < 10_000_000,
        "completed {} ns after",
        p.now - posted
    );
    assert_eq!(p.completion(1, 101).unwrap().error, None);
    let got = out.lock().unwrap().take().expect("buffer released");
    assert!(got == pattern(2, len), "payload differs");
    // The sender comes back and sends again: its next message is shared.
    p.dead[0] = false;
    p.send(len, 7, 3);
    p.run(|p| p.eng[1].staged_bytes() >= EAGER);
    let out = p.recv_shared(len, 7, 102);
    p.complete_intact(3, 102, &out, len);
}

#[test]
fn a_probe_from_a_sender_given_up_on_brings_its_shares_back() {
    // Two messages wait unmatched when their sender goes silent, with all
    // its packets acknowledged, and is given up on (the receiver waited
    // for it to pull a message of its own). The first is copied whole by
    // the receiver; the release that follows it is given up on too, so
    // nothing is left in flight either way. The sender comes back and,
    // waiting for the second message's pull, probes the receiver: that
    // alone shows it is alive, and the second message is shared with it.
    let mut p = same_host_pair(36);
    let len = 1 << 20;
    p.send(len, 6, 2);
    p.send(len, 7, 3);
    p.run(|p| p.eng[1].staged_bytes() >= 2 * EAGER);
    let (now, to) = (p.now, p.addrs[0]);
    p.eng[1]
        .post_send(now, send(to, pattern(9, len), Some(9), 9))
        .unwrap();
    p.run(|p| p.eng[0].staged_bytes() >= EAGER);
    p.settle();
    p.dead[0] = true;
    p.run(|p| p.eng[1].stats().peers_failed == 1);
    assert_eq!(
        p.completion(1, 9).unwrap().error,
        Some(CompletionError::PeerUnreachable)
    );
    let _first = p.recv_copied_whole(len, 6, 101);
    p.run(|p| p.eng[1].stats().peers_failed == 2);
    let (packets, acks) = (
        p.eng[1].stats().packets_received,
        p.eng[1].stats().acks_received,
    );
    p.dead[0] = false;
    let answered = p.eng[1].stats().acks_sent;
    p.run(|p| p.eng[1].stats().acks_sent > answered);
    // Only the sender's probe came.
    assert_eq!(p.eng[1].stats().packets_received, packets);
    assert_eq!(p.eng[1].stats().acks_received, acks);
    let out = p.recv_shared(len, 7, 102);
    p.complete_intact(3, 102, &out, len);
}

/// What a host clock reads against the real one.
enum ClockReading {
    /// This many milliseconds ahead.
    Ahead(u32),
    /// Always this.
    Stopped(u32),
}

/// Host memory whose clock reads otherwise than the real one.
struct OtherClock {
    inner: Trusting,
    reading: ClockReading,
}

impl HostMemory for OtherClock {
    fn this_process(&self) -> (u64, u32) {
        self.inner.this_process()
    }
    fn offer(&self, peer: SocketAddr, pid: u32) -> u64 {
        self.inner.offer(peer, pid)
    }
    fn read(&self, claim: &HostClaim, address: u64, dst: &mut [u8]) -> HostAccess {
        self.inner.read(claim, address, dst)
    }
    fn write(&self, claim: &HostClaim, address: u64, src: &[u8]) -> HostAccess {
        self.inner.write(claim, address, src)
    }
    fn clock_ms(&self) -> u32 {
        match self.reading {
            ClockReading::Ahead(ms) => self.inner.clock_ms().wrapping_add(ms),
            ClockReading::Stopped(ms) => ms,
        }
    }
}

#[test]
fn a_sender_past_the_offer_sends_its_half_instead_of_writing() {
    let mut p = Pair::new(30);
    p.eng[1].enable_host_read(Box::new(Trusting::new()));
    p.eng[0].enable_host_read(Box::new(OtherClock {
        inner: Trusting::new(),
        reading: ClockReading::Ahead(5000),
    }));
    let len = 1 << 20;
    let out = p.recv_returned(len, 5, 100);
    p.send(len, 5, 1);
    p.run(|p| p.completion(1, 100).is_some() && p.completion(0, 1).is_some());
    assert_eq!(p.completion(1, 100).unwrap().error, None);
    assert!(out.lock().unwrap().take().unwrap() == pattern(1, len));
    let ss = p.eng[0].stats();
    assert_eq!((ss.host_writes, ss.host_write_failures), (0, 0));
    assert!(ss.packets_sent > ((len / 2 - EAGER) / MTU) as u64);
    p.settle();
    p.assert_clean();
}

#[test]
fn a_peer_seen_copying_gets_the_host_threshold() {
    // Between engines that copy on one host, and between engines that do
    // not: a first large send, then one between the two thresholds.
    for same_host in [true, false] {
        let mut p = if same_host {
            same_host_pair(31)
        } else {
            Pair::new(31)
        };
        let out = p.recv_returned(1 << 20, 5, 100);
        p.send(1 << 20, 5, 1);
        p.run(|p| p.completion(1, 100).is_some() && p.completion(0, 1).is_some());
        drop(out);
        let len = 40_000;
        assert!(len > HOST_EAGER && len < THRESHOLD);
        let out = p.recv_returned(len, 5, 101);
        p.send(len, 5, 2);
        p.run(|p| p.completion(1, 101).is_some() && p.completion(0, 2).is_some());
        assert!(out.lock().unwrap().take().unwrap() == pattern(2, len));
        let pulls = p.eng[1].stats().rendezvous_pulls;
        assert_eq!(
            pulls,
            if same_host { 2 } else { 1 },
            "same host: {same_host}"
        );
        p.settle();
        p.assert_clean();
    }
}

#[test]
fn a_receive_posted_after_a_long_idle_fails_only_once_the_sender_cannot_write() {
    // The receiver's probe read works, its share after the pull does not;
    // it heard nothing for ten seconds before it posts the receive.
    let mut p = Pair::new(32);
    p.eng[1].enable_host_read(Box::new(Failing::new(1, u32::MAX)));
    p.eng[0].enable_host_read(Box::new(Trusting::new()));
    let len = 1 << 20;
    p.send(len, 5, 1);
    p.settle();
    let idle_until = p.now + 10_000_000_000;
    p.run(|p| p.now >= idle_until);
    let _out = p.recv_returned(len, 5, 100);
    // Our share fails before the sender has seen the pull, which lets it
    // write its own share into the buffer: the receive must wait.
    p.hold_copies = true;
    p.eng[1].run_host_copies();
    let now = p.now;
    if p.eng[1].next_timeout().is_some_and(|t| t <= now) {
        p.eng[1].handle_timeout(now);
    }
    assert!(
        p.eng[1].poll_completion().is_none(),
        "the receive failed while the sender could still write into it"
    );
    p.hold_copies = false;
    p.run(|p| p.completion(1, 100).is_some() && p.completion(0, 1).is_some());
    assert_eq!(
        p.completion(1, 100).unwrap().error,
        Some(CompletionError::PeerUnreachable)
    );
    assert_eq!(p.eng[0].stats().host_writes, 1);
    p.settle();
    p.assert_clean();
}

#[test]
fn a_sender_whose_answer_comes_too_late_still_gets_its_release() {
    // The receiver's share fails; the sender stalls until after the
    // receiver gave the pull up, then writes its share and answers. Its
    // send waits for a release, which the receiver must send when it gives
    // the pull up.
    // Retransmissions that outlast the two seconds a sender may write.
    let mut p = Pair::with(33, |c| {
        c.rto_max_us = 500_000;
        c.max_retries = 30;
    });
    p.eng[1].enable_host_read(Box::new(Failing::new(1, u32::MAX)));
    // Its clock stands still: it never sees its offer to write run out.
    let inner = Trusting::new();
    let reading = ClockReading::Stopped(inner.clock_ms());
    p.eng[0].enable_host_read(Box::new(OtherClock { inner, reading }));
    let len = 1 << 20;
    let _out = p.recv_returned(len, 5, 100);
    p.send(len, 5, 1);
    p.run(|p| p.eng[1].pulls_pending() > 0);
    p.dead[0] = true;
    p.run(|p| p.completion(1, 100).is_some());
    assert_eq!(
        p.completion(1, 100).unwrap().error,
        Some(CompletionError::PeerUnreachable)
    );
    p.dead[0] = false;
    p.run(|p| p.completion(0, 1).is_some());
    assert_eq!(p.eng[1].stats().peers_failed, 0);
    p.settle();
    p.assert_clean();
}

/// Send and receive `count` 8-byte messages of tag 2 (contexts from
/// `first`), receives posted ahead, and run until all have arrived.
fn stream_small(p: &mut Pair, first: u64, count: u64) {
    const BATCH: u64 = 4096;
    let mut at = first;
    while at < first + count {
        let end = (at + BATCH).min(first + count);
        for c in at..end {
            p.recv(8, 2, c, plain());
            p.send(8, 2, c);
        }
        p.run(|p| p.completion(1, end - 1).is_some());
        at = end;
    }
}

#[test]
fn a_message_waiting_for_its_receive_makes_way_for_a_later_one_with_its_id() {
    // An eager message nobody receives yet (ID 0), then 65535 more: the
    // next one comes round to ID 0. It is taken at once (an application
    // may receive the later messages first, as MPI allows with other
    // tags), and the old one waits, parked, for its receive.
    let mut p = Pair::new(34);
    p.send(1000, 1, 1);
    p.settle();
    stream_small(&mut p, 1_000_000, 65_535);
    p.done[1].clear();
    let late = p.recv(8, 2, 2_000_000, plain());
    p.send(8, 2, 2_000_000);
    p.run(|p| p.completion(1, 2_000_000).is_some());
    assert_eq!(p.completion(1, 2_000_000).unwrap().error, None);
    assert_eq!(*late.0.lock().unwrap(), pattern(2_000_000, 8));
    let stats = p.eng[1].stats();
    assert_eq!((stats.messages_parked, stats.message_id_waits), (1, 0));
    // The old message is received intact.
    let out = p.recv_returned(1000, 1, 100);
    p.run(|p| p.completion(1, 100).is_some());
    assert_eq!(p.completion(1, 100).unwrap().error, None);
    assert!(out.lock().unwrap().take().unwrap() == pattern(1, 1000));
    p.settle();
    p.assert_clean();
}

#[test]
fn parked_messages_keep_the_senders_order_through_several_rounds_of_ids() {
    // Three unexpected messages of one tag (IDs 0-2), then well over two
    // rounds of the ID space of another tag. The three are parked when
    // their IDs come round, and still match in the order they were sent:
    // a peek sees the first, a claim and a plain receive take them in
    // turn, and a discard drops the third.
    let mut p = Pair::new(36);
    for c in 1..=3 {
        p.send(100 * c as usize, 1, c);
    }
    p.settle();
    stream_small(&mut p, 1_000_000, 2 * 65_536 + 100);
    assert_eq!(p.eng[1].stats().messages_parked, 3);
    assert_eq!(p.eng[1].inbound_len(), 3);
    p.done[1].clear();
    let peek_claim = ProbeFlags {
        peek: true,
        claim: true,
        discard: false,
    };
    p.recv(0, 1, 50, peek_claim);
    p.run(|p| p.completion(1, 50).is_some());
    let peeked = p.completion(1, 50).unwrap();
    assert_eq!((peeked.error, peeked.len), (None, 100));
    p.done[1].clear();
    // Unclaimed, the second is next for a plain receive.
    let second = p.recv_returned(200, 1, 60);
    // The claimed first goes to the receive that claimed it.
    let (buf, first) = Returned::new(100);
    let claim = ProbeFlags {
        peek: false,
        claim: true,
        discard: false,
    };
    p.post_recv(Box::new(buf), 1, 50, claim);
    let discard = ProbeFlags {
        peek: true,
        claim: false,
        discard: true,
    };
    p.recv(0, 1, 70, discard);
    p.run(|p| {
        p.completion(1, 50).is_some()
            && p.completion(1, 60).is_some()
            && p.completion(1, 70).is_some()
    });
    assert_eq!(p.completion(1, 50).unwrap().error, None);
    assert!(first.lock().unwrap().take().unwrap() == pattern(1, 100));
    assert_eq!(p.completion(1, 60).unwrap().error, None);
    assert!(second.lock().unwrap().take().unwrap() == pattern(2, 200));
    assert_eq!(p.completion(1, 70).unwrap().len, 300);
    p.settle();
    p.assert_clean();
}

#[test]
fn messages_parked_on_one_id_in_two_rounds_are_told_apart() {
    // A (ID 0) waits; 65536 messages later B takes ID 0 and waits too,
    // and 65536 later C: A and B are both parked, and C holds ID 0 while
    // they are received.
    let mut p = Pair::new(37);
    p.send(100, 1, 1);
    p.settle();
    stream_small(&mut p, 1_000_000, 65_535);
    p.send(200, 1, 2);
    p.settle();
    stream_small(&mut p, 2_000_000, 65_535);
    p.send(300, 3, 3);
    p.settle();
    assert_eq!(p.eng[1].stats().messages_parked, 2);
    p.done[1].clear();
    let a = p.recv_returned(100, 1, 10);
    let b = p.recv_returned(200, 1, 20);
    let c = p.recv_returned(300, 3, 30);
    p.run(|p| {
        [10, 20, 30]
            .iter()
            .all(|&ctx| p.completion(1, ctx).is_some())
    });
    for (ctx, out, len) in [(1, &a, 100), (2, &b, 200), (3, &c, 300)] {
        assert_eq!(p.completion(1, ctx * 10).unwrap().error, None);
        let got = out.lock().unwrap().take().expect("buffer released");
        assert!(got == pattern(ctx, len), "message {ctx} differs");
    }
    p.settle();
    p.assert_clean();
}

#[test]
fn a_send_whose_id_a_waiting_rendezvous_send_holds_is_refused_for_now() {
    let mut p = Pair::new(35);
    let big = 1 << 20;
    p.send(big, 1, 1);
    p.settle();
    // ID 0 is the rendezvous send's, which waits for its receive: half
    // the IDs later, the application's sends wait.
    stream_small(&mut p, 1_000_000, 32_767);
    let dest = p.addrs[1];
    let now = p.now;
    let again = p.eng[0].post_send(now, send(dest, pattern(7, 8), Some(2), 7));
    assert!(matches!(again, Err(uet::Error::Again)), "{again:?}");
    let out = p.recv_returned(big, 1, 100);
    p.complete_intact(1, 100, &out, big);
    // Done with it: the ID is free again.
    let late = p.recv(8, 2, 7, plain());
    p.send(8, 2, 7);
    p.run(|p| p.completion(1, 7).is_some());
    assert_eq!(*late.0.lock().unwrap(), pattern(7, 8));
    p.settle();
    p.assert_clean();
}

#[test]
fn a_delivery_complete_send_hears_that_its_receive_failed() {
    // As in a_failed_share_fails_the_receive, for a send that waits for
    // delivery: the target reports the failure instead of leaving the send
    // to wait for a confirmation that will never come.
    let mut p = Pair::new(30);
    p.eng[1].enable_host_read(Box::new(Failing::new(1, 0)));
    p.eng[0].enable_host_read(Box::new(Trusting::new()));
    let len = 1 << 20;
    let _out = p.recv_returned(len, 5, 100);
    let mut op = send(p.addrs[1], pattern(1, len), Some(5), 1);
    op.level = CompletionLevel::Delivery;
    p.eng[0].post_send(0, op).unwrap();
    p.run(|p| p.completion(1, 100).is_some() && p.completion(0, 1).is_some());
    let failed = Some(CompletionError::PeerUnreachable);
    assert_eq!(p.completion(1, 100).unwrap().error, failed);
    assert_eq!(p.completion(0, 1).unwrap().error, failed);
    p.settle();
    p.assert_clean();
    // The next one is delivered.
    let out = p.recv_returned(len, 6, 101);
    let mut op = send(p.addrs[1], pattern(2, len), Some(6), 2);
    op.level = CompletionLevel::Delivery;
    let now = p.now;
    p.eng[0].post_send(now, op).unwrap();
    p.complete_intact(2, 101, &out, len);
}
