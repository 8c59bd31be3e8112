//! The close handshake of an idle context against a receiver that first
//! refuses (it still holds an unmatched message) and then confirms a
//! retransmitted close (or a late copy of an earlier one): the sender must
//! not keep using a context the receiver has dropped.

mod common;

use common::{brisk_config, drain, engine_pair_with, recv, send};
use uet::wire::PacketType;
use uet::{Completion, CompletionKind, Engine};

fn deliver(to: &mut Engine, now: u64, from: std::net::SocketAddr, pkts: &[(PacketType, Vec<u8>)]) {
    for (_, d) in pkts {
        to.handle_datagram(now, from, 0, d);
    }
}

/// Fire `e`'s timers until `now`.
fn timers(e: &mut Engine, now: u64) {
    while e.next_timeout().is_some_and(|t| t <= now) {
        e.handle_timeout(now);
    }
}

/// Two engines (`a` sends, `b` receives) exchanging packets by hand.
struct Two {
    addrs: [std::net::SocketAddr; 2],
    a: Engine,
    b: Engine,
    now: u64,
}

impl Two {
    /// `a` sends `b` a message no receive waits for: `b` stages it, so it
    /// refuses a close for now. Then `a` idles past `pdc_idle` and starts
    /// the close; returns that first close packet.
    fn unexpected_then_close() -> (Two, Vec<(PacketType, Vec<u8>)>) {
        let (addrs, a, b) = engine_pair_with(&brisk_config());
        let mut t = Two {
            addrs,
            a,
            b,
            now: 0,
        };
        t.a.post_send(0, send(addrs[1], vec![7; 64], None, 1))
            .unwrap();
        let sent = t.exchange(4);
        assert!(sent.iter().all(|c| c.error.is_none()), "{sent:?}");
        t.now += 2_000_000;
        timers(&mut t.a, t.now);
        let close1 = drain(&mut t.a, t.now);
        assert!(
            close1.iter().any(|(t, _)| *t == PacketType::Control),
            "{close1:?}"
        );
        (t, close1)
    }

    /// `a` hears no answer and resends the close: that packet.
    fn resent_close(&mut self) -> Vec<(PacketType, Vec<u8>)> {
        for _ in 0..100 {
            self.now += 100_000;
            timers(&mut self.a, self.now);
            let close2 = drain(&mut self.a, self.now);
            if !close2.is_empty() {
                return close2;
            }
        }
        panic!("no close resent");
    }

    /// `b` hands `close` to itself and returns its answer.
    fn answer(&mut self, close: &[(PacketType, Vec<u8>)]) -> Vec<(PacketType, Vec<u8>)> {
        deliver(&mut self.b, self.now, self.addrs[0], close);
        drain(&mut self.b, self.now)
    }

    /// `b`'s application takes the staged message.
    fn take_message(&mut self) {
        self.b.post_recv(self.now, recv(64, None, 2)).unwrap();
        let got: Vec<_> = std::iter::from_fn(|| self.b.poll_completion()).collect();
        assert!(
            got.iter()
                .any(|c| c.kind == CompletionKind::Recv && c.error.is_none()),
            "{got:?}"
        );
    }

    /// `rounds` lossless round trips, 5 us each way; the completions of
    /// both engines.
    fn exchange(&mut self, rounds: usize) -> Vec<Completion> {
        let mut done = Vec::new();
        for _ in 0..rounds {
            self.now += 5_000;
            let out = drain(&mut self.a, self.now);
            deliver(&mut self.b, self.now, self.addrs[0], &out);
            self.now += 5_000;
            let back = drain(&mut self.b, self.now);
            deliver(&mut self.a, self.now, self.addrs[1], &back);
            timers(&mut self.a, self.now);
            timers(&mut self.b, self.now);
            done.extend(std::iter::from_fn(|| self.a.poll_completion()));
            done.extend(std::iter::from_fn(|| self.b.poll_completion()));
        }
        done
    }

    /// `b`'s answers reach `a` in the order `b` sent them; a new message
    /// posted right away must arrive, and nothing may fail.
    fn answers_then_new_message(&mut self, answers: &[&[(PacketType, Vec<u8>)]]) {
        self.now += 5_000;
        for answer in answers {
            deliver(&mut self.a, self.now, self.addrs[1], answer);
        }
        self.b.post_recv(self.now, recv(64, None, 3)).unwrap();
        self.a
            .post_send(self.now, send(self.addrs[1], vec![8; 64], None, 4))
            .unwrap();
        let done = self.exchange(200);
        assert!(
            done.iter().all(|c| c.error.is_none()),
            "{done:?}\n{:?}",
            self.a.stats()
        );
        assert!(done
            .iter()
            .any(|c| c.kind == CompletionKind::Recv && c.context == 3));
    }
}

#[test]
fn a_stale_refusal_does_not_hide_the_confirmation_of_a_resent_close() {
    let (mut t, close1) = Two::unexpected_then_close();
    // b refuses it (message still unmatched); the refusal is delayed.
    t.now += 5_000;
    let refusal = t.answer(&close1);
    assert!(!refusal.is_empty());
    let close2 = t.resent_close();
    // Meanwhile b's application takes the message; now b confirms.
    t.take_message();
    let confirm = t.answer(&close2);
    t.answers_then_new_message(&[&refusal, &confirm]);
}

#[test]
fn a_late_earlier_close_attempt_is_not_confirmed_after_a_refusal() {
    let (mut t, close1) = Two::unexpected_then_close();
    // The network holds it back; a resends the close.
    let close2 = t.resent_close();
    // b refuses the resent close (message still unmatched); then its
    // application takes the message, and the first close arrives late:
    // confirming it would drop the context a's latest answer keeps.
    t.now += 5_000;
    let refusal = t.answer(&close2);
    assert!(!refusal.is_empty());
    t.take_message();
    let confirm = t.answer(&close1);
    t.answers_then_new_message(&[&refusal, &confirm]);
}

/// Datagrams an engine made, each with its packet type (see `drain`).
type Datagrams = Vec<(PacketType, Vec<u8>)>;

/// `a` sends `b` one 64 B message into a posted receive at 0 ns; it
/// arrives at 5 us, and what `b` answers then (its ACK) is returned
/// instead of delivered: lost.
fn one_message_whose_ack_is_lost() -> ([std::net::SocketAddr; 2], Engine, Engine, Datagrams) {
    let (addrs, mut a, mut b) = engine_pair_with(&brisk_config());
    b.post_recv(0, recv(64, None, 100)).unwrap();
    a.post_send(0, send(addrs[1], vec![7; 64], None, 1))
        .unwrap();
    deliver(&mut b, 5_000, addrs[0], &drain(&mut a, 0));
    let lost = drain(&mut b, 5_000);
    (addrs, a, b, lost)
}

/// A receiver that closes asks its senders to close their contexts. A
/// sender whose ACKs were all lost (it never learned the receiver's
/// context) is busy: it learns the context from the request and answers
/// with an ACK request, whose ACK completes its send without a resend.
/// Asked again once idle, it closes the context, and the receiver then
/// receives from nobody: it need not wait for resends.
#[test]
fn a_closing_receiver_settles_a_sender_whose_acks_were_lost() {
    let (addrs, mut a, mut b, lost) = one_message_whose_ack_is_lost();
    assert!(
        lost.iter()
            .any(|(t, _)| matches!(t, PacketType::Ack | PacketType::AckCc)),
        "{lost:?}"
    );
    let got: Vec<Completion> = std::iter::from_fn(|| b.poll_completion()).collect();
    assert_eq!(got.len(), 1);
    assert!(b.receiving_from_peers());
    // b closes: it asks a, which answers with an ACK request.
    assert_eq!(b.ask_senders_to_close(), 1);
    deliver(&mut a, 10_000, addrs[1], &drain(&mut b, 10_000));
    let answer = drain(&mut a, 10_000);
    assert!(
        answer.iter().all(|(t, _)| *t == PacketType::Control) && !answer.is_empty(),
        "{answer:?}"
    );
    deliver(&mut b, 15_000, addrs[0], &answer);
    deliver(&mut a, 20_000, addrs[1], &drain(&mut b, 15_000));
    let done: Vec<Completion> = std::iter::from_fn(|| a.poll_completion()).collect();
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(
        (done[0].kind, done[0].context, done[0].error),
        (CompletionKind::Send, 1, None)
    );
    assert_eq!(a.stats().retransmits, 0);
    // Asked again, the now idle sender closes its context.
    assert_eq!(b.ask_senders_to_close(), 1);
    deliver(&mut a, 25_000, addrs[1], &drain(&mut b, 25_000));
    deliver(&mut b, 30_000, addrs[0], &drain(&mut a, 25_000));
    deliver(&mut a, 35_000, addrs[1], &drain(&mut b, 30_000));
    assert!(!b.receiving_from_peers());
    assert_eq!(a.stats().pdcs_closed, 1);
    assert_eq!(b.ask_senders_to_close(), 0);
}

/// A close request whose PSN lies outside what the sender's context sent
/// (stale, or forged) does not teach that context a receiver ID it has
/// not learned yet: it is counted as unknown and not answered.
#[test]
fn a_close_request_outside_the_sent_range_teaches_nothing() {
    use uet::wire::ControlRepr;
    let (addrs, mut a, mut b, _) = one_message_whose_ack_is_lost();
    assert_eq!(b.ask_senders_to_close(), 1);
    let asks = drain(&mut b, 10_000);
    let (_, real) = asks
        .iter()
        .find(|(t, _)| *t == PacketType::Control)
        .expect("a close request");
    let mut ask = ControlRepr::parse(real).unwrap();
    ask.psn = ask.psn.wrapping_add(1 << 20);
    let mut forged = vec![0u8; ControlRepr::LEN];
    ask.emit(&mut forged);
    let unknown = a.stats().unknown_pdc;
    a.handle_datagram(10_000, addrs[1], 0, &forged);
    assert_eq!(a.stats().unknown_pdc, unknown + 1);
    assert!(drain(&mut a, 10_000).is_empty());
    // The real one is answered.
    deliver(&mut a, 12_000, addrs[1], &asks);
    assert!(!drain(&mut a, 12_000).is_empty());
}
