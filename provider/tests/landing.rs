//! Landing (engine/landing.rs): large payloads received straight into the
//! posted buffer. The driver's part is played here the way the kernel does
//! it: the datagram's headers go to a scratch area and its payload into the
//! offered region, whatever the datagram turns out to be.

mod common;

use std::net::SocketAddr;
use std::sync::mpsc;

use common::{drain, pattern, send};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use uet::wire::PacketType;
use uet::{Config, Engine, MsgBuffer, ProbeFlags, RecvOp};

/// A receive buffer that hands its bytes to the test when the engine lets
/// go of it (at completion), and lends them out as one writable slice.
struct Returned {
    data: Vec<u8>,
    back: mpsc::Sender<Vec<u8>>,
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
        let _ = self.back.send(std::mem::take(&mut self.data));
    }
}

fn returned_recv(len: usize, context: u64) -> (RecvOp, mpsc::Receiver<Vec<u8>>) {
    let (tx, rx) = mpsc::channel();
    let op = RecvOp {
        src: None,
        tagged: false,
        tag: 0,
        ignore: 0,
        // Stale bytes a wrong landing could leave would not match the pattern.
        buffer: Box::new(Returned {
            data: vec![0xee; len],
            back: tx,
        }),
        context,
        signal: true,
        probe: ProbeFlags::default(),
    };
    (op, rx)
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

/// Deliver `datagram` to `to` as the driver does with a landing on offer:
/// the kernel writes its bytes past the headers into the region, then the
/// engine is asked whether that was the packet; if not, the datagram goes
/// the usual way (the driver would have put it back together first).
/// Returns whether it landed.
fn deliver(to: &mut Engine, now: u64, from: SocketAddr, datagram: &[u8]) -> bool {
    if let Some((landing, region)) = to.landing() {
        let h = landing.header_len;
        if datagram.len() > h {
            let n = (datagram.len() - h).min(region.len());
            region[..n].copy_from_slice(&datagram[h..h + n]);
            let fits = datagram.len() - h <= landing.payload_len;
            if fits && to.handle_landed(now, from, 0, &landing, &datagram[..h], n) {
                return true;
            }
        }
    }
    to.handle_datagram(now, from, 0, datagram);
    false
}

/// Run a sender (engine 1) and a receiver (engine 0) until nothing moves;
/// the receiver's arrivals are shuffled within each round when `shuffle`
/// names a seed. Returns how many datagrams landed.
fn pump(engines: &mut [Engine; 2], addrs: &[SocketAddr; 2], shuffle: Option<u64>) -> u64 {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(shuffle.unwrap_or(0));
    let mut landed = 0;
    let mut now = 0;
    for _ in 0..10_000 {
        now += 20_000;
        let mut arrivals = drain(&mut engines[1], now);
        if shuffle.is_some() {
            arrivals.shuffle(&mut rng);
        }
        let mut moved = !arrivals.is_empty();
        for (_, d) in arrivals {
            landed += deliver(&mut engines[0], now, addrs[1], &d) as u64;
        }
        for (_, d) in drain(&mut engines[0], now) {
            moved = true;
            engines[1].handle_datagram(now, addrs[0], 0, &d);
        }
        if !moved {
            engines.iter_mut().for_each(|e| e.handle_timeout(now));
            if engines.iter().all(|e| e.next_timeout().is_none()) {
                break;
            }
        }
    }
    landed
}

#[test]
fn eager_packets_land_in_the_posted_buffer_and_the_data_is_intact() {
    let cfg = config(0);
    let addrs = [addr(1), addr(2)];
    let mut engines = [
        Engine::new(&cfg, addrs[0], 1),
        Engine::new(&cfg, addrs[1], 2),
    ];
    let len = 1 << 20;
    let (op, back) = returned_recv(len, 7);
    engines[0].post_recv(0, op).unwrap();
    engines[1]
        .post_send(0, send(addrs[0], pattern(3, len), None, 1))
        .unwrap();
    let landed = pump(&mut engines, &addrs, None);
    let c = engines[0].poll_completion().expect("receive completes");
    assert!(c.error.is_none() && c.len == len);
    assert_eq!(back.recv().unwrap(), pattern(3, len));
    // Every packet but the first (which sets the expectation) landed.
    let packets = len.div_ceil(65000 - 56) as u64;
    assert_eq!(landed, packets - 1);
    assert_eq!(engines[0].stats().landed, landed);
}

#[test]
fn pulled_data_lands_in_the_rendezvous_receive() {
    let cfg = config(256 << 10);
    let addrs = [addr(1), addr(2)];
    let mut engines = [
        Engine::new(&cfg, addrs[0], 1),
        Engine::new(&cfg, addrs[1], 2),
    ];
    let len = 4 << 20;
    let (op, back) = returned_recv(len, 7);
    engines[0].post_recv(0, op).unwrap();
    engines[1]
        .post_send(0, send(addrs[0], pattern(5, len), None, 1))
        .unwrap();
    let landed = pump(&mut engines, &addrs, None);
    let c = engines[0].poll_completion().expect("receive completes");
    assert!(c.error.is_none() && c.len == len);
    assert_eq!(back.recv().unwrap(), pattern(5, len));
    assert!(engines[0].stats().rendezvous_pulls >= 1);
    // The eager part and the pull each start one expectation.
    let packets = ((256 << 10) as usize).div_ceil(64944) + (len - (256 << 10)).div_ceil(64944);
    assert!(
        landed as usize >= packets - 3,
        "{landed} of {packets} landed"
    );
}

#[test]
fn reordered_packets_never_land_on_data_already_there() {
    // Shuffled arrivals: most guesses are wrong, and every wrong guess
    // writes a foreign payload into the buffer. Only bytes still to come
    // may be overwritten, so the message must still arrive intact.
    for seed in 1..6 {
        let cfg = config(0);
        let addrs = [addr(1), addr(2)];
        let mut engines = [
            Engine::new(&cfg, addrs[0], 1),
            Engine::new(&cfg, addrs[1], 2),
        ];
        let len = 2 << 20;
        let (op, back) = returned_recv(len, 7);
        engines[0].post_recv(0, op).unwrap();
        engines[1]
            .post_send(0, send(addrs[0], pattern(seed, len), None, 1))
            .unwrap();
        pump(&mut engines, &addrs, Some(seed));
        let c = engines[0].poll_completion().expect("receive completes");
        assert!(c.error.is_none(), "seed {seed}");
        assert_eq!(back.recv().unwrap(), pattern(seed, len), "seed {seed}");
    }
}

#[test]
fn two_messages_interleaved_land_only_in_their_own_buffers() {
    // Two senders' large messages arrive interleaved at one receiver: the
    // expectation alternates between them, and every datagram of the other
    // message is written into the expected one's buffer before it is
    // refused.
    let cfg = config(0);
    let addrs = [addr(1), addr(2), addr(3)];
    let mut rx = Engine::new(&cfg, addrs[0], 1);
    let mut senders = [
        Engine::new(&cfg, addrs[1], 2),
        Engine::new(&cfg, addrs[2], 3),
    ];
    let len = 1 << 20;
    let (op_a, back_a) = returned_recv(len, 1);
    let (op_b, back_b) = returned_recv(len, 2);
    rx.post_recv(0, op_a).unwrap();
    rx.post_recv(0, op_b).unwrap();
    for (k, s) in senders.iter_mut().enumerate() {
        s.post_send(0, send(addrs[0], pattern(10 + k as u64, len), None, 1))
            .unwrap();
    }
    let mut buf = vec![0u8; 65536];
    let mut landed = 0;
    let mut refused_guesses = 0;
    let mut now = 0;
    for _ in 0..10_000 {
        now += 20_000;
        let mut moved = false;
        // One packet of each sender in turn.
        loop {
            let mut any = false;
            for (k, s) in senders.iter_mut().enumerate() {
                if let Some(t) = s.poll_transmit(now, &mut buf) {
                    any = true;
                    let offered = rx.landing().is_some();
                    let ok = deliver(&mut rx, now, addrs[k + 1], &buf[..t.len]);
                    landed += ok as u64;
                    refused_guesses += (offered && !ok) as u64;
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
    assert!(
        refused_guesses > 0,
        "the interleaving produced no wrong guess"
    );
    let _ = landed;
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
    pump(&mut engines, &addrs, None);
    let c = engines[0].poll_completion().expect("receive completes");
    assert!(c.error.is_none());
    assert_eq!(back.recv().unwrap(), pattern(9, len));
}
