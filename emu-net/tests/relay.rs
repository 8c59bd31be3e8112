//! The relay over real loopback sockets, with small UDP clients standing in
//! for provider endpoints.

use std::io::IoSliceMut;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use emu_net::config::{FabricConfig, SwitchConfig, TopologyConfig, TRIM_KEEP};
use emu_net::relay::{Relay, RelayReport, RelaySettings};
use emu_net::Fabric;
use nix::sys::socket::{self, sockopt, ControlMessageOwned, MsgFlags, SockaddrStorage};
use uet::wire::ip::{self, Ecn, Trim};
use uet::wire::{NextHeader, PacketType, Prologue, RelayHeader};

/// Hosts at 127.0.0.{FIRST + i}; each test uses its own range so tests can
/// run in parallel.
fn fabric(hosts: usize, buffer: u64) -> Fabric {
    Fabric::new(FabricConfig {
        topology: TopologyConfig {
            hosts,
            link_gbps: 1.0,
            link_delay_ns: 1000,
            ..Default::default()
        },
        switch: SwitchConfig {
            buffer_bytes: Some(buffer),
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap()
}

fn start(hosts: usize, first: u8, buffer: u64) -> (Relay, Vec<IpAddr>) {
    let addrs = RelaySettings::loopback_hosts(hosts, first).unwrap();
    let relay = Relay::bind(
        fabric(hosts, buffer),
        RelaySettings {
            listen: "127.0.0.1:0".parse().unwrap(),
            hosts: addrs.clone(),
            max_lag_ns: 200_000,
            sockbuf: 4 << 20,
            realtime: false,
        },
    )
    .unwrap();
    (relay, addrs)
}

/// A client socket on a host address, sending ECT(0) and reading TOS.
fn client(ip: IpAddr) -> UdpSocket {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
    s.set_tos(ip::tos(0, Ecn::Ect0) as u32).unwrap();
    let _ = s.set_recv_buffer_size(4 << 20);
    s.bind(&SocketAddr::new(ip, 0).into()).unwrap();
    let s: UdpSocket = s.into();
    socket::setsockopt(&s, sockopt::IpRecvTos, &true).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    s
}

fn data_packet(len: usize, seq: u32) -> Vec<u8> {
    let mut b = vec![0u8; len];
    Prologue {
        ptype: PacketType::RudRequest,
        next: NextHeader::SesRequest,
        flags: 0,
    }
    .emit(&mut b);
    b[4..8].copy_from_slice(&seq.to_be_bytes());
    b
}

fn wrap(dst: SocketAddr, uet: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; RelayHeader::LEN];
    RelayHeader { addr: dst }.emit(&mut b);
    b.extend_from_slice(uet);
    b
}

/// (relay header address, UET bytes, TOS) of the next datagram, if any
/// arrives within the socket's timeout.
fn recv(s: &UdpSocket) -> Option<(SocketAddr, Vec<u8>, u8)> {
    let mut buf = vec![0u8; 70_000];
    let mut cmsg = nix::cmsg_space!(i32);
    let mut iov = [IoSliceMut::new(&mut buf)];
    let msg = socket::recvmsg::<SockaddrStorage>(
        s.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::empty(),
    )
    .ok()?;
    let n = msg.bytes;
    let mut tos = 0;
    for c in msg.cmsgs().unwrap() {
        if let ControlMessageOwned::Ipv4Tos(t) = c {
            tos = t;
        }
    }
    let h = RelayHeader::parse(&buf[..n]).unwrap();
    Some((h.addr, buf[RelayHeader::LEN..n].to_vec(), tos))
}

/// Run the relay while `f` drives the clients, then stop it.
fn with_relay(mut relay: Relay, f: impl FnOnce(SocketAddr)) -> RelayReport {
    let addr = relay.local_addr().unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            relay.run(&stop);
        });
        f(addr);
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    });
    relay.report()
}

#[test]
fn forwards_with_original_source_and_tos() {
    let (relay, addrs) = start(2, 20, 100_000);
    let a = client(addrs[0]);
    let b = client(addrs[1]);
    let b_addr = b.local_addr().unwrap();
    let mut got = Vec::new();
    let report = with_relay(relay, |relay_addr| {
        for i in 0..10 {
            a.send_to(&wrap(b_addr, &data_packet(1000, i)), relay_addr)
                .unwrap();
        }
        while got.len() < 10 {
            match recv(&b) {
                Some(x) => got.push(x),
                None => break,
            }
        }
    });
    assert_eq!(got.len(), 10);
    for (i, (src, bytes, tos)) in got.iter().enumerate() {
        assert_eq!(*src, a.local_addr().unwrap());
        assert_eq!(bytes, &data_packet(1000, i as u32), "in order, unchanged");
        assert_eq!(Ecn::from_tos(*tos), Ecn::Ect0, "no congestion, no mark");
        assert_eq!(ip::trim_of(*tos), None);
    }
    assert_eq!(report.relay.received, 10);
    assert_eq!(report.relay.delivered, 10);
    assert_eq!(report.relay.not_ect, 0);
    assert_eq!(
        report.fabric.marks + report.fabric.trims + report.fabric.drops,
        0
    );
}

#[test]
fn incast_through_relay_marks_and_trims() {
    let (relay, addrs) = start(4, 30, 40_000);
    let senders: Vec<UdpSocket> = addrs[..3].iter().map(|&a| client(a)).collect();
    let rx = client(addrs[3]);
    let rx_addr = rx.local_addr().unwrap();
    const N: usize = 40;
    let mut got = Vec::new();
    let report = with_relay(relay, |relay_addr| {
        for i in 0..N {
            for s in &senders {
                s.send_to(&wrap(rx_addr, &data_packet(4000, i as u32)), relay_addr)
                    .unwrap();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.len() < 3 * N && Instant::now() < deadline {
            match recv(&rx) {
                Some(x) => got.push(x),
                None => break,
            }
        }
    });
    assert_eq!(got.len(), 3 * N, "every packet arrives, whole or trimmed");
    let trimmed: Vec<_> = got.iter().filter(|g| ip::trim_of(g.2).is_some()).collect();
    assert!(!trimmed.is_empty(), "a 3:1 burst overflows a 40 kB queue");
    for (_, bytes, tos) in &trimmed {
        assert_eq!(bytes.len(), TRIM_KEEP, "payload cut, headers kept");
        assert_eq!(ip::trim_of(*tos), Some(Trim::LastHop));
    }
    let marked = got
        .iter()
        .filter(|g| ip::trim_of(g.2).is_none() && Ecn::from_tos(g.2) == Ecn::Ce)
        .count();
    assert!(marked > 0, "a queue above kmax marks");
    assert_eq!(report.fabric.trims as usize, trimmed.len());
    assert_eq!(report.relay.delivered as usize, 3 * N);
    let down = report.ports.iter().find(|p| p.name == "sw->h3").unwrap();
    assert_eq!(down.counters.trims as usize, trimmed.len());
    assert!(down.counters.max_queue_bytes <= 40_000);
    assert!(!down.series.is_empty());
}

#[test]
fn unknown_hosts_and_garbage_are_counted_not_forwarded() {
    let (relay, addrs) = start(2, 40, 100_000);
    let b = client(addrs[1]);
    let b_addr = b.local_addr().unwrap();
    let stranger = client("127.0.0.49".parse().unwrap());
    let a = client(addrs[0]);
    let report = with_relay(relay, |relay_addr| {
        stranger
            .send_to(&wrap(b_addr, &data_packet(100, 0)), relay_addr)
            .unwrap();
        a.send_to(
            &wrap("127.0.0.48:9".parse().unwrap(), &data_packet(100, 0)),
            relay_addr,
        )
        .unwrap();
        a.send_to(b"not a relay header", relay_addr).unwrap();
        // A marker that does cross, so the others were processed before it.
        a.send_to(&wrap(b_addr, &data_packet(100, 7)), relay_addr)
            .unwrap();
        let (_, bytes, _) = recv(&b).unwrap();
        assert_eq!(bytes, data_packet(100, 7));
    });
    assert_eq!(report.relay.unknown_source, 1);
    assert_eq!(report.relay.unknown_destination, 1);
    assert_eq!(report.relay.malformed, 1);
    assert_eq!(report.relay.delivered, 1);
}

#[test]
fn hundreds_of_hosts_get_an_address_each() {
    let addrs = RelaySettings::loopback_hosts(300, 2).unwrap();
    let distinct: std::collections::HashSet<_> = addrs.iter().collect();
    assert_eq!(distinct.len(), 300);
    // The fourth octet carries into the third past 127.0.0.255.
    assert_eq!(addrs[253], IpAddr::from([127, 0, 0, 255]));
    assert_eq!(addrs[254], IpAddr::from([127, 0, 1, 0]));
    assert_eq!(addrs[299], IpAddr::from([127, 0, 1, 45]));
    // Past 127.255.255.254 (loopback's broadcast is next): an error.
    assert!(RelaySettings::loopback_hosts(1 << 24, 2).is_err());
    // Two hosts on one address cannot be told apart by the relay.
    let mut shared = addrs[..2].to_vec();
    shared[1] = shared[0];
    let err = Relay::bind(
        fabric(2, 100_000),
        RelaySettings {
            listen: "127.0.0.1:0".parse().unwrap(),
            hosts: shared,
            max_lag_ns: 200_000,
            sockbuf: 1 << 16,
            realtime: false,
        },
    );
    assert!(err.is_err());
}
