//! A steady exchange of messages allocates nothing in the engine: the copy
//! of a small send and the box of a receive or of a large send's memory
//! come from finished operations (`engine/spares.rs`), and every queue has
//! grown to its working size during the warm-up. That holds for
//! rendezvous sends too, whose receiver pulls the rest of the message.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use common::{acquainted, Shared};
use uet::{CompletionKind, CompletionLevel, Engine, Payload, ProbeFlags, RecvOp, SendOp};

/// One hop of the simulated wire, in ns.
const HOP_NS: u64 = 5_000;

struct Side {
    engine: Engine,
    addr: SocketAddr,
    /// The application memory receives land in.
    inbox: Shared,
    received: u64,
}

impl Side {
    fn post_receive(&mut self, now: u64) {
        let buffer = self.engine.boxed_buffer(self.inbox.clone());
        let op = RecvOp {
            src: None,
            tagged: false,
            tag: 0,
            ignore: 0,
            buffer,
            context: 0,
            signal: true,
            probe: ProbeFlags::default(),
        };
        self.engine.post_recv(now, op).unwrap();
    }

    /// Send `message` the way the provider sends a small message (a copy
    /// the engine owns) or a large one (the application's memory, boxed).
    fn send(&mut self, now: u64, to: SocketAddr, message: &Shared, copy: bool) {
        let payload = if copy {
            let mut v = self.engine.payload_buffer();
            v.extend_from_slice(&message.0.lock().unwrap());
            Payload::Owned(v)
        } else {
            Payload::Borrowed(self.engine.boxed_buffer(message.clone()))
        };
        let op = SendOp {
            dest: to,
            payload,
            tag: None,
            cq_data: None,
            context: 1,
            level: CompletionLevel::Transmit,
            signal: true,
        };
        self.engine.post_send(now, op).unwrap();
    }

    fn take_completions(&mut self) {
        while let Some(c) = self.engine.poll_completion() {
            assert!(c.error.is_none(), "{c:?}");
            if c.kind == CompletionKind::Recv {
                self.received += 1;
            }
        }
    }
}

/// Move every datagram either side has ready to the other, one hop later,
/// and fire due timers, until both are quiet; returns the time.
fn settle(sides: &mut [Side; 2], mut now: u64, wire: &mut [u8]) -> u64 {
    loop {
        let mut moved = false;
        for i in 0..2 {
            let from = sides[i].addr;
            while let Some(t) = sides[i].engine.poll_transmit(now, wire) {
                sides[1 - i]
                    .engine
                    .handle_datagram(now + HOP_NS, from, 0, &wire[..t.len]);
                moved = true;
            }
        }
        now += HOP_NS;
        for s in sides.iter_mut() {
            if s.engine.next_timeout().is_some_and(|t| t <= now) {
                s.engine.handle_timeout(now);
                moved = true;
            }
            s.take_completions();
        }
        if !moved {
            return now;
        }
    }
}

/// `rounds` ping-pongs of `message` from a to b and back.
fn ping_pong(sides: &mut [Side; 2], now: u64, rounds: u64, message: &Shared, copy: bool) -> u64 {
    let mut wire = [0u8; 65536];
    let mut now = now;
    for _ in 0..rounds {
        for i in 0..2 {
            let to = sides[1 - i].addr;
            sides[1 - i].post_receive(now);
            sides[i].send(now, to, message, copy);
            now = settle(sides, now, &mut wire);
        }
    }
    now
}

fn sides() -> [Side; 2] {
    let (addrs, a, b) = acquainted();
    let side = |engine, addr| Side {
        engine,
        addr,
        inbox: Shared(Arc::new(Mutex::new(vec![0; 1 << 20]))),
        received: 0,
    };
    [side(a, addrs[0]), side(b, addrs[1])]
}

/// Asserts it for `size` B messages; returns how many rendezvous pulls
/// side 0 made in the measured rounds.
fn assert_steady_state_allocates_nothing(size: usize, copy: bool) -> u64 {
    let mut s = sides();
    let message = Shared(Arc::new(Mutex::new(
        (0..size).map(|i| (i * 7 + size) as u8).collect(),
    )));
    let now = ping_pong(&mut s, 1_000_000, 50, &message, copy);
    let before = [s[0].received, s[1].received];
    let pulls = s[0].engine.stats().rendezvous_pulls;
    let info = allocation_counter::measure(|| {
        ping_pong(&mut s, now, 200, &message, copy);
    });
    assert_eq!(
        [s[0].received - before[0], s[1].received - before[1]],
        [200, 200],
        "every message arrived"
    );
    for side in &s {
        assert_eq!(
            side.inbox.0.lock().unwrap()[..size],
            message.0.lock().unwrap()[..],
            "the last message arrived intact"
        );
    }
    assert_eq!(
        info.count_total, 0,
        "{size} B messages allocated {} times in 400",
        info.count_total
    );
    s[0].engine.stats().rendezvous_pulls - pulls
}

#[test]
fn small_copied_messages_allocate_nothing() {
    assert_eq!(assert_steady_state_allocates_nothing(64, true), 0);
}

#[test]
fn sends_from_application_memory_allocate_nothing() {
    assert_steady_state_allocates_nothing(64, false);
    assert_steady_state_allocates_nothing(60_000, false);
}

#[test]
fn rendezvous_sends_allocate_nothing() {
    // Past the default rendezvous threshold (256 KiB): side 0 pulls each
    // message it receives.
    assert_eq!(assert_steady_state_allocates_nothing(1 << 20, false), 200);
}
