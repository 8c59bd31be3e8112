//! A peer that stops answering: the sender probes it with growing pauses
//! (not every few round trips) until its retransmission timer gives up.

mod common;

use std::net::SocketAddr;

use uet::wire::{ControlRepr, ControlType, PacketType, Prologue};
use uet::{Config, Engine};

use common::{recv, send};

/// Everything `from` has ready at `now`, as (packet type, bytes).
fn drain(from: &mut Engine, now: u64) -> Vec<(PacketType, Vec<u8>)> {
    let mut buf = vec![0u8; 65536];
    let mut out = Vec::new();
    while let Some(t) = from.poll_transmit(now, &mut buf) {
        let ptype = Prologue::parse(&buf[..t.len]).unwrap().ptype;
        out.push((ptype, buf[..t.len].to_vec()));
    }
    out
}

fn is_probe(p: &(PacketType, Vec<u8>)) -> bool {
    p.0 == PacketType::Control
        && ControlRepr::parse(&p.1).is_ok_and(|c| c.ctl_type == ControlType::Probe)
}

#[test]
fn probes_into_silence_back_off() {
    let addrs: [SocketAddr; 2] = [
        "10.0.0.1:4793".parse().unwrap(),
        "10.0.0.2:4793".parse().unwrap(),
    ];
    let cfg = Config::default();
    let mut a = Engine::new(&cfg, addrs[0], 1);
    let mut b = Engine::new(&cfg, addrs[1], 2);
    // One exchange with 10 us round trips: a knows b and the RTT.
    b.post_recv(0, recv(64, None, 1)).unwrap();
    a.post_send(0, send(addrs[1], vec![1; 64], None, 1))
        .unwrap();
    for (_, d) in drain(&mut a, 0) {
        b.handle_datagram(5_000, addrs[0], 0, &d);
    }
    for (_, d) in drain(&mut b, 5_000) {
        a.handle_datagram(10_000, addrs[1], 0, &d);
    }
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
