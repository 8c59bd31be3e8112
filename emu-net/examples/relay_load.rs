//! How much traffic the relay keeps up with on this machine: `senders`
//! clients pace 8 KiB packets to one receiver at an aggregate `gbps`
//! (the receiver's link rate) for a second; prints the relay's verdict.
//!
//!   cargo run --release -p emu-net --example relay_load -- [gbps] [senders]

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use emu_net::config::{FabricConfig, TopologyConfig};
use emu_net::relay::{Relay, RelaySettings};
use emu_net::Fabric;
use uet::wire::{NextHeader, PacketType, Prologue, RelayHeader};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let gbps: f64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(2.0);
    let senders: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(8);
    let hosts = senders + 1;
    let fabric = Fabric::new(FabricConfig {
        topology: TopologyConfig {
            hosts,
            link_gbps: gbps,
            link_delay_ns: 25_000,
            ..Default::default()
        },
        ..Default::default()
    })
    .expect("fabric");
    let addrs = match RelaySettings::loopback_hosts(hosts, 100) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("relay_load: {e}");
            return;
        }
    };
    let mut relay = Relay::bind(
        fabric,
        RelaySettings {
            listen: "127.0.0.1:0".parse().expect("addr"),
            hosts: addrs.clone(),
            max_lag_ns: 100_000,
            sockbuf: 16 << 20,
            realtime: true,
        },
    )
    .expect("relay");
    let relay_addr = relay.local_addr().expect("addr");
    let rx = UdpSocket::bind(SocketAddr::new(addrs[senders], 0)).expect("rx");
    rx.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let rx_addr = rx.local_addr().expect("addr");
    let mut pkt = vec![0u8; RelayHeader::LEN + 8192];
    RelayHeader { addr: rx_addr }.emit(&mut pkt);
    Prologue {
        ptype: PacketType::RudRequest,
        next: NextHeader::SesRequest,
        flags: 0,
    }
    .emit(&mut pkt[RelayHeader::LEN..]);
    let stop = AtomicBool::new(false);
    let per_pkt = Duration::from_nanos(((8192 + 42) as f64 * 8.0 / gbps) as u64 * senders as u64);
    let mut received = 0u64;
    std::thread::scope(|s| {
        s.spawn(|| relay.run(&stop));
        let txs: Vec<UdpSocket> = addrs[..senders]
            .iter()
            .map(|&a| UdpSocket::bind(SocketAddr::new(a, 0)).expect("tx"))
            .collect();
        let pkt = &pkt;
        s.spawn(move || {
            let t0 = Instant::now();
            let mut next = t0;
            while t0.elapsed() < Duration::from_secs(1) {
                for t in &txs {
                    let _ = t.send_to(pkt, relay_addr);
                }
                next += per_pkt;
                while Instant::now() < next {
                    std::hint::spin_loop();
                }
            }
        });
        let mut buf = vec![0u8; 70_000];
        while rx.recv_from(&mut buf).is_ok() {
            received += 1;
        }
        stop.store(true, Ordering::Relaxed);
    });
    let r = relay.report();
    println!(
        "{gbps} Gb/s, {senders} senders: received {} delivered {} at rx {received}; lag p50 {} us p99 {} us max {} us; ingress lag max {} us; socket drops {}; kept up: {} {:?} realtime {}",
        r.relay.received,
        r.relay.delivered,
        r.lag_p50_ns / 1000,
        r.lag_p99_ns / 1000,
        r.relay.max_lag_ns / 1000,
        r.relay.max_ingress_lag_ns / 1000,
        r.relay.socket_drops,
        r.kept_up,
        r.problems,
        r.relay.realtime
    );
}
