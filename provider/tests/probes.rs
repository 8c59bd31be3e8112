//! Probes (control type 6) into silence: a peer that stops answering is
//! probed with growing pauses, and the answer to a probe is marked (ACK
//! flag P) so the sender takes no round trip from it.

mod common;

use uet::engine::{TraceEvent, TraceKind};
use uet::wire::prologue::flags;
use uet::wire::{AckRepr, ControlRepr, ControlType, PacketType};

use common::{acquainted, drain, recv, send};

fn is_probe(p: &(PacketType, Vec<u8>)) -> bool {
    p.0 == PacketType::Control
        && ControlRepr::parse(&p.1).is_ok_and(|c| c.ctl_type == ControlType::Probe)
}

#[test]
fn probes_into_silence_back_off() {
    let (addrs, mut a, _b) = acquainted();
    // Then b goes silent while a has a message out. Step a's clock through
    // 20 ms, firing its timers as a driver would.
    a.post_send(20_000, send(addrs[1], vec![2; 64], None, 2))
        .unwrap();
    let mut now = 20_000;
    let mut probes = 0;
    let end = 20_000_000;
    while now < end {
        probes += drain(&mut a, now).iter().filter(|p| is_probe(p)).count();
        now = a.next_timeout().map_or(end, |t| t.max(now + 1)).min(end);
        a.handle_timeout(now);
    }
    // Without backoff a probe would leave every three round trips (30 us):
    // hundreds in 20 ms. Doubling pauses make about a dozen.
    assert!((3..=20).contains(&probes), "{probes} probes in 20 ms");
}

#[test]
fn a_probe_answer_is_marked_and_gives_no_round_trip() {
    let (addrs, mut a, mut b) = acquainted();
    a.enable_trace();
    // Two packets leave; the first is lost, so the second arrives behind a
    // hole (unordered delivery keeps it and owes an ACK).
    b.post_recv(20_000, recv(64, None, 2)).unwrap();
    b.post_recv(20_000, recv(64, None, 3)).unwrap();
    a.post_send(20_000, send(addrs[1], vec![2; 64], None, 2))
        .unwrap();
    a.post_send(20_000, send(addrs[1], vec![3; 64], None, 3))
        .unwrap();
    let out = drain(&mut a, 20_000);
    assert_eq!(out.len(), 2);
    b.handle_datagram(25_000, addrs[0], 0, &out[1].1);
    // Its ACK is lost too. After three round trips of silence (well before
    // the retransmission timer) a probes.
    drain(&mut b, 25_000);
    let now = a.next_timeout().expect("a probe is due");
    assert!(now < 1_000_000, "{now}");
    a.handle_timeout(now);
    let probe: Vec<_> = drain(&mut a, now).into_iter().filter(is_probe).collect();
    assert_eq!(probe.len(), 1);
    let now = now + 5_000;
    b.handle_datagram(now, addrs[0], 0, &probe[0].1);
    let answer = drain(&mut b, now);
    assert_eq!(answer.len(), 1);
    let ack = AckRepr::parse(&answer[0].1).unwrap();
    assert_ne!(
        ack.flags & flags::ACK_P,
        0,
        "the answer to a probe is marked"
    );
    // Its trigger is the packet that arrived before the silence: congestion
    // control gets no sample of that, and its delay estimate stays put.
    let delay = a.peer_stats(addrs[1]).unwrap().cc.avg_delay_ns;
    let mut trace: Vec<TraceEvent> = Vec::new();
    a.take_trace(&mut trace);
    a.handle_datagram(now + 10_000, addrs[1], 0, &answer[0].1);
    trace.clear();
    a.take_trace(&mut trace);
    let acks: Vec<_> = trace.iter().filter(|e| e.kind == TraceKind::Ack).collect();
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].rtt_ns, 0, "{:?}", acks[0]);
    assert_eq!(a.peer_stats(addrs[1]).unwrap().cc.avg_delay_ns, delay);
    // A data arrival after a probe is an ordinary trigger again (here the
    // first packet, late).
    b.handle_datagram(now + 15_000, addrs[0], 0, &out[0].1);
    let later = b.next_timeout().unwrap_or(now + 15_000);
    b.handle_timeout(later);
    let acks = drain(&mut b, later);
    let last = AckRepr::parse(&acks.last().unwrap().1).unwrap();
    assert_eq!(last.flags & flags::ACK_P, 0);
}
