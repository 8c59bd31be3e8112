//! Receive contexts of senders that went away: a receiver asks the sender
//! of a context silent for long to close it, and drops it when nobody
//! answers, so crashed clients do not hold a server's context IDs for ever.
//! A live sender closes its idle context when asked, and a busy one keeps
//! it.

mod common;

use common::{pattern, recv, send, Net};
use uet::{CompletionKind, Config};

fn config() -> Config {
    common::brisk_config()
}

impl Net {
    /// Engine `from` sends a 2000-byte message (context `ctx`) to engine
    /// `to`, which posts a receive for it.
    fn message(&mut self, from: usize, to: usize, ctx: u64) {
        let (dest, now) = (self.addrs[to], self.now);
        self.eng[to].post_recv(now, recv(2000, None, ctx)).unwrap();
        self.eng[from]
            .post_send(now, send(dest, pattern(ctx, 2000), None, ctx))
            .unwrap();
    }

    fn received(&self, at: usize, ctx: u64) -> bool {
        self.done[at]
            .iter()
            .any(|c| c.kind == CompletionKind::Recv && c.context == ctx && c.error.is_none())
    }
}

/// A server whose context IDs are all held by clients that crashed still
/// takes a new client: the dead clients' contexts are reclaimed.
#[test]
fn contexts_of_crashed_clients_are_reclaimed() {
    // Engine 0: the server, with room for two contexts; 1-3: clients.
    let server = Config {
        max_pdcs: 2,
        ..config()
    };
    let mut net = Net::new(&[server, config(), config(), config()]);
    net.message(1, 0, 1);
    net.message(2, 0, 2);
    net.run("first clients served", |n| {
        n.received(0, 1) && n.received(0, 2)
    });
    // Both crash before closing their contexts.
    net.dead[1] = true;
    net.dead[2] = true;
    net.message(3, 0, 3);
    net.run("third client served", |n| n.received(0, 3));
    let stats = net.eng[0].stats();
    assert!(stats.pdc_exhausted > 0, "the pool was never full");
    assert_eq!(stats.rx_pdcs_reclaimed, 2);
}

/// A receiver with context IDs to spare leaves a silent context alone: its
/// sender may be stopped for a while (a debugger) and still hold it.
#[test]
fn silent_contexts_stay_while_ids_are_plentiful() {
    let never = Config {
        pdc_idle_us: 0,
        ..config()
    };
    let mut net = Net::new(&[never, config()]);
    net.message(0, 1, 1);
    net.run("first message", |n| {
        n.received(1, 1) && n.done[0].iter().any(|c| c.context == 1)
    });
    net.dead[0] = true;
    let until = net.now + 20 * (2_000_000 + 6 * 2_000_000);
    net.run("time passed", |n| n.now >= until);
    net.dead[0] = false;
    net.message(0, 1, 2);
    net.run("second message", |n| n.received(1, 2));
    assert_eq!(net.eng[1].stats().rx_pdcs_reclaimed, 0);
    assert_eq!(net.eng[0].stats().peers_failed, 0);
}

/// A receiver short of context IDs (half or more in use).
fn pressed() -> Config {
    Config {
        max_pdcs: 2,
        ..config()
    }
}

/// A live sender that never closes idle contexts itself (its
/// FI_UET_PDC_IDLE_US is 0) closes one when its receiver, short of IDs,
/// asks, and its next message opens a new one.
#[test]
fn an_idle_sender_closes_its_context_when_asked() {
    let never = Config {
        pdc_idle_us: 0,
        ..config()
    };
    let mut net = Net::new(&[never, pressed()]);
    net.message(0, 1, 1);
    net.run("first message", |n| n.received(1, 1));
    net.run("closed on request", |n| n.eng[0].stats().pdcs_closed == 1);
    net.message(0, 1, 2);
    net.run("second message", |n| n.received(1, 2));
    assert_eq!(net.eng[1].stats().rx_pdcs_reclaimed, 0);
}

/// A sender with a message waiting to leave (the driver holds its data
/// back) answers the requests and keeps its context.
#[test]
fn a_busy_sender_keeps_its_context() {
    let mut net = Net::new(&[config(), pressed()]);
    net.message(0, 1, 1);
    net.run("first message", |n| n.received(1, 1));
    let to = net.addrs[1];
    net.eng[0].hold_data_for(to, true);
    net.message(0, 1, 2);
    // Long enough for the receiver to give up on a silent sender 20 times.
    let until = net.now + 20 * (2_000_000 + 6 * 2_000_000);
    net.run("time passed", |n| n.now >= until);
    assert_eq!(net.eng[1].stats().rx_pdcs_reclaimed, 0);
    assert_eq!(net.eng[0].stats().pdcs_closed, 0);
    net.eng[0].hold_data_for(to, false);
    net.run("second message", |n| n.received(1, 2));
}

/// Whole messages waiting for receives keep their context, also short of
/// IDs and with their sender gone: the reclaim timer looks, finds nothing
/// unfinished, and looks again a quiet period later (no timer is left
/// due), and the receives posted at last take the messages.
#[test]
fn unexpected_messages_keep_their_context() {
    let mut net = Net::new(&[config(), pressed()]);
    let dest = net.addrs[1];
    for ctx in 1..=3 {
        let now = net.now;
        net.eng[0]
            .post_send(now, send(dest, pattern(ctx, 2000), None, ctx))
            .unwrap();
    }
    net.run("sent", |n| {
        n.done[0].iter().filter(|c| c.error.is_none()).count() == 3
    });
    net.dead[0] = true;
    let until = net.now + 20 * (2_000_000 + 6 * 2_000_000);
    net.run("time passed", |n| n.now >= until);
    assert_eq!(net.eng[1].stats().rx_pdcs_reclaimed, 0);
    let now = net.now;
    assert!(
        net.eng[1].next_timeout().is_none_or(|t| t > now),
        "a timer left due"
    );
    for ctx in 1..=3 {
        net.eng[1].post_recv(now, recv(2000, None, ctx)).unwrap();
    }
    net.run("received", |n| (1..=3).all(|c| n.received(1, c)));
}

/// A server that served many short-lived clients keeps entries only for
/// those of the last while: the entries of clients gone quiet (their
/// contexts closed) are reused by new ones, and a client that returns
/// after its entry went is served as a new one.
#[test]
fn entries_of_quiet_peers_are_reused() {
    let clients = 40;
    let mut net = Net::new(&vec![config(); 1 + 2 * clients]);
    for c in 1..=clients {
        net.message(c, 0, c as u64);
    }
    net.run("first clients served", |n| {
        (1..=clients).all(|c| n.received(0, c as u64))
    });
    // Their contexts close, and the entries linger a while after.
    net.run("contexts closed", |n| {
        (1..=clients).all(|c| n.eng[c].stats().pdcs_closed == 1)
    });
    let linger = 2 * 2_000_000;
    let until = net.now + 2 * linger;
    net.run("quiet", |n| n.now >= until);
    assert_eq!(net.eng[0].peer_count(), clients);
    for c in clients + 1..=2 * clients {
        net.message(c, 0, c as u64);
    }
    net.run("second clients served", |n| {
        (clients + 1..=2 * clients).all(|c| n.received(0, c as u64))
    });
    let server = &net.eng[0];
    assert_eq!(server.peer_count(), clients, "entries not reused");
    assert_eq!(server.stats().peers_evicted, clients as u64);
    // An evicted client comes back.
    net.message(1, 0, 1000);
    net.run("returning client served", |n| n.received(0, 1000));
}

impl Net {
    /// Engine `from` starts a `len`-byte message (context `ctx`) to `to`
    /// and dies once its first packet is out: the rest never leaves.
    fn dies_mid_message(&mut self, from: usize, to: usize, ctx: u64, len: usize) {
        let (dest, now) = (self.addrs[to], self.now);
        self.eng[from]
            .post_send(now, send(dest, pattern(ctx, len), None, ctx))
            .unwrap();
        let mut buf = vec![0u8; 65536];
        let first = self.eng[from]
            .poll_transmit(now, &mut buf)
            .expect("a first packet");
        let src = self.addrs[from];
        self.eng[to].handle_datagram(now, src, 0, &buf[..first.len]);
        self.dead[from] = true;
    }
}

/// A sender that crashes in the middle of a message does not hold the
/// receive matched to it for ever, whatever the context IDs: its silence
/// is asked about as for an idle context, and when nobody answers the
/// receive fails and the context goes.
#[test]
fn a_sender_dead_mid_message_fails_the_receive_matched_to_it() {
    let mut net = Net::new(&[config(), config()]);
    let now = net.now;
    net.eng[1].post_recv(now, recv(8000, None, 7)).unwrap();
    net.dies_mid_message(0, 1, 7, 6000);
    net.run("the receive ends", |n| {
        n.done[1].iter().any(|c| c.context == 7)
    });
    // On the schedule: the first ask after twice the larger of rto_max
    // (2 ms) and pdc_idle (1 ms) of silence, then max_retries (5) asks
    // rto_max apart, the last unanswered: 14 ms, within a step of the
    // test's clock (100 us when idle).
    let took = net.now - now;
    assert!((14_000_000..14_100_000).contains(&took), "took {took} ns");
    let c = net.done[1].iter().find(|c| c.context == 7).unwrap();
    assert_eq!(c.error, Some(uet::CompletionError::PeerUnreachable));
    let stats = net.eng[1].stats();
    assert_eq!((stats.rx_pdcs_reclaimed, stats.messages_abandoned), (1, 1));
    assert_eq!(net.eng[1].inbound_len(), 0);
}

impl Net {
    /// Engine 0 sends engine 1 a whole 3000-byte message nobody receives
    /// yet (context 1), dies in the middle of a 6000-byte one (context 2),
    /// and engine 1 drops its context.
    fn whole_message_then_death_mid_message(&mut self) {
        let (dest, now) = (self.addrs[1], self.now);
        self.eng[0]
            .post_send(now, send(dest, pattern(1, 3000), None, 1))
            .unwrap();
        self.run("the first message is sent", |n| {
            n.done[0].iter().any(|c| c.context == 1)
        });
        self.dies_mid_message(0, 1, 2, 6000);
        assert!(self.eng[1].staged_bytes() > 3000);
        self.run("the context is dropped", |n| {
            n.eng[1].stats().rx_pdcs_reclaimed == 1
        });
    }
    /// Engine 1 receives a message of `len` bytes, the last it holds:
    /// nothing of it is left behind.
    fn receive_the_last_message(&mut self, len: usize) {
        let now = self.now;
        self.eng[1].post_recv(now, recv(8000, None, 11)).unwrap();
        self.run("the message is received", |n| n.received(1, 11));
        let c = self.done[1].iter().find(|c| c.context == 11).unwrap();
        assert_eq!(c.len, len);
        assert_eq!(self.eng[1].staged_bytes(), 0);
        assert_eq!(self.eng[1].inbound_len(), 0);
    }
}

/// Unmatched, the bytes a crashed sender staged are given back; a whole
/// message it sent before stays for the application.
#[test]
fn a_sender_dead_mid_message_leaves_its_whole_messages_and_no_stage() {
    let mut net = Net::new(&[config(), config()]);
    net.whole_message_then_death_mid_message();
    assert_eq!(net.eng[1].staged_bytes(), 3000);
    assert_eq!(net.eng[1].stats().messages_abandoned, 1);
    net.receive_the_last_message(3000);
}

/// A whole message whose turn waited for an earlier one that will never
/// come (lost, and its sender died) was delivered all the same: it takes
/// its turn when the context goes, with the sender's unfinished message.
#[test]
fn a_whole_message_behind_a_lost_one_stays_when_its_sender_dies() {
    let mut net = Net::new(&[config(), config()]);
    let (dest, src, now) = (net.addrs[1], net.addrs[0], net.now);
    for (ctx, len) in [(2, 500), (3, 1000), (4, 6000)] {
        net.eng[0]
            .post_send(now, send(dest, pattern(ctx, len), None, ctx))
            .unwrap();
    }
    // The first message's one packet is lost, the second arrives, and so
    // does the first packet of the third; then the sender dies.
    let mut buf = vec![0u8; 65536];
    for delivered in [false, true, true] {
        let t = net.eng[0].poll_transmit(now, &mut buf).expect("a packet");
        if delivered {
            net.eng[1].handle_datagram(now, src, 0, &buf[..t.len]);
        }
    }
    net.dead[0] = true;
    net.run("the context is dropped", |n| {
        n.eng[1].stats().rx_pdcs_reclaimed == 1
    });
    assert_eq!(net.eng[1].stats().messages_abandoned, 1);
    net.receive_the_last_message(1000);
}

/// A whole message stays for the application when its sender comes back
/// after its context was reclaimed: the sender's new context (its IDs
/// start again from 0) neither drops it nor takes its place in the order.
#[test]
fn a_sender_back_after_its_context_was_reclaimed_leaves_its_whole_messages() {
    let mut net = Net::new(&[config(), config()]);
    net.whole_message_then_death_mid_message();
    net.dead[0] = false;
    // The sender comes back and sends a message whose receive is posted.
    let (dest, now) = (net.addrs[1], net.now);
    net.eng[1].post_recv(now, recv(8000, Some(7), 13)).unwrap();
    net.eng[0]
        .post_send(now, send(dest, pattern(3, 1000), Some(7), 3))
        .unwrap();
    net.run("the sender is done", |n| {
        [2, 3]
            .iter()
            .all(|&ctx| n.done[0].iter().any(|c| c.context == ctx))
            && n.received(1, 13)
    });
    // The old message, parked, keeps no context: the new one, idle,
    // closes.
    let closed = net.eng[0].stats().pdcs_closed;
    net.run("the new context closes", |n| {
        n.eng[0].stats().pdcs_closed > closed
    });
    net.receive_the_last_message(3000);
}

/// A sender cut off in the middle of a message for less than the
/// receiver's questions take keeps its message (its own retries outlast
/// the cut here).
#[test]
fn a_sender_cut_off_mid_message_for_a_while_keeps_its_message() {
    let patient = Config {
        max_retries: 30,
        ..config()
    };
    let mut net = Net::new(&[patient, config()]);
    let now = net.now;
    net.eng[1].post_recv(now, recv(8000, None, 7)).unwrap();
    net.dies_mid_message(0, 1, 7, 6000);
    // Longer than the receiver waits before it asks (twice rto_max), and
    // its first question is lost; shorter than all of them.
    net.wait(3 * 2_000_000);
    net.dead[0] = false;
    net.run("the message is received", |n| n.received(1, 7));
    assert_eq!(net.eng[1].stats().messages_abandoned, 0);
}
