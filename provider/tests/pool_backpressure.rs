//! Liveness under delivery-context backpressure: a receiver whose context
//! ID pool (FI_UET_MAX_PDCS) is full cannot open a send context to a
//! rendezvous sender it must pull from, so it cannot probe that sender
//! either. Probes it never sent must not count against the sender: the
//! pull waits for an ID (as packets NACKed with 0x07 wait), and goes out
//! once one frees. A sender that died meanwhile is still failed, by the
//! pull's retransmissions once it can leave.

mod common;

use std::sync::{Arc, Mutex};

use common::{pattern, send, Net, Shared};
use uet::{Completion, CompletionError, CompletionKind, Config, ProbeFlags, RecvOp};

/// The server: engine 0, with room for two contexts.
const SERVER: usize = 0;
/// A client with a rendezvous send to the server.
const BIG: usize = 1;
/// A client with a small send to the server.
const SMALL: usize = 2;
const BIG_LEN: usize = 20_000;
const SMALL_LEN: usize = 100;

fn config() -> Config {
    Config {
        rendezvous_bytes: 4096,
        ..common::brisk_config()
    }
}

impl Net {
    /// Client `from` sends `len` bytes tagged `from` to the server.
    fn send(&mut self, from: usize, len: usize) {
        let (dest, now) = (self.addrs[SERVER], self.now);
        let data = pattern(from as u64, len);
        self.eng[from]
            .post_send(now, send(dest, data, Some(from as u64), from as u64))
            .unwrap();
    }

    /// The server posts a receive for client `from`'s message.
    fn recv(&mut self, from: usize, len: usize) -> Shared {
        let buf = Shared(Arc::new(Mutex::new(vec![0u8; len])));
        let op = RecvOp {
            src: None,
            tagged: true,
            tag: from as u64,
            ignore: 0,
            buffer: Box::new(buf.clone()),
            context: from as u64,
            signal: true,
            probe: ProbeFlags::default(),
        };
        let now = self.now;
        self.eng[SERVER].post_recv(now, op).unwrap();
        buf
    }

    fn completed(&self, at: usize, kind: CompletionKind, ctx: u64) -> Option<&Completion> {
        self.done[at]
            .iter()
            .find(|c| c.kind == kind && c.context == ctx)
    }

    /// Both clients' messages wait unmatched at the server, whose two
    /// context IDs their contexts hold; then the server posts the receive
    /// for the rendezvous send, whose pull cannot get a context ID.
    fn pool_full_with_pull_queued() -> (Net, Shared) {
        let server = Config {
            max_pdcs: 2,
            ..config()
        };
        let mut net = Net::new(&[server, config(), config()]);
        net.send(BIG, BIG_LEN);
        net.send(SMALL, SMALL_LEN);
        net.run("small send acknowledged", |n| {
            n.completed(SMALL, CompletionKind::Send, SMALL as u64)
                .is_some()
        });
        net.wait(1_000_000);
        let exhausted = net.eng[SERVER].stats().pdc_exhausted;
        let big = net.recv(BIG, BIG_LEN);
        net.wait(1_000_000);
        assert!(
            net.eng[SERVER].stats().pdc_exhausted > exhausted,
            "the pull found a context ID"
        );
        assert!(net.done[SERVER].is_empty(), "{:?}", net.done[SERVER]);
        (net, big)
    }
}

/// A live rendezvous sender whose pull waits for a context ID at the
/// receiver, far longer than `max_retries` probes would take, is not
/// failed; once an ID frees, every message arrives intact.
#[test]
fn a_pull_waiting_for_a_context_id_does_not_fail_its_live_sender() {
    let (mut net, big) = Net::pool_full_with_pull_queued();
    // Twenty times what max_retries probes of the sender would take.
    net.wait(20 * 6 * 2_000_000);
    assert!(net.done[SERVER].is_empty(), "{:?}", net.done[SERVER]);
    assert!(net.done[BIG].is_empty(), "{:?}", net.done[BIG]);
    assert_eq!(net.eng[SERVER].stats().peers_failed, 0);
    // The small message is matched: its sender's context can close, and
    // its ID goes to the pull.
    let small = net.recv(SMALL, SMALL_LEN);
    net.run("both receives and the rendezvous send complete", |n| {
        n.completed(SERVER, CompletionKind::Recv, BIG as u64)
            .is_some()
            && n.completed(SERVER, CompletionKind::Recv, SMALL as u64)
                .is_some()
            && n.completed(BIG, CompletionKind::Send, BIG as u64).is_some()
    });
    for (at, c) in net.done.iter().enumerate() {
        for c in c {
            assert_eq!(c.error, None, "error completion at {at}: {c:?}");
        }
    }
    assert_eq!(*big.0.lock().unwrap(), pattern(BIG as u64, BIG_LEN));
    assert_eq!(*small.0.lock().unwrap(), pattern(SMALL as u64, SMALL_LEN));
    for e in &net.eng {
        assert_eq!(e.stats().peers_failed, 0);
    }
}

/// A rendezvous sender that dies while the receiver's pull waits for a
/// context ID is failed once the pull can leave and goes unanswered.
#[test]
fn a_dead_sender_fails_once_the_waiting_pull_leaves() {
    let (mut net, _big) = Net::pool_full_with_pull_queued();
    net.dead[BIG] = true;
    net.wait(4 * 6 * 2_000_000);
    assert!(net.done[SERVER].is_empty(), "{:?}", net.done[SERVER]);
    let _small = net.recv(SMALL, SMALL_LEN);
    net.run("the receive fails", |n| {
        n.completed(SERVER, CompletionKind::Recv, BIG as u64)
            .is_some()
    });
    let c = net.completed(SERVER, CompletionKind::Recv, BIG as u64);
    assert_eq!(
        c.and_then(|c| c.error),
        Some(CompletionError::PeerUnreachable)
    );
    assert!(net
        .completed(SERVER, CompletionKind::Recv, SMALL as u64)
        .is_some_and(|c| c.error.is_none()));
    assert_eq!(net.eng[SERVER].stats().peers_failed, 1);
}
