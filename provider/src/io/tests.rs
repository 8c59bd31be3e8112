//! Driver tests over real loopback sockets: the entropy pool, the relay
//! client and transmit fault injection.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::*;
use crate::ops::{CompletionKind, CompletionLevel, MsgBuffer, Payload, ProbeFlags};
use crate::wire::{NextHeader, Prologue};

const LOOPBACK: &str = "127.0.0.1:0";

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64 * 31 + seed * 7) % 251) as u8)
        .collect()
}

#[derive(Clone)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl MsgBuffer for Shared {
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn read_at(&self, offset: usize, out: &mut [u8]) {
        out.copy_from_slice(&self.0.lock().unwrap()[offset..offset + out.len()]);
    }
    fn write_at(&mut self, offset: usize, data: &[u8]) {
        self.0.lock().unwrap()[offset..offset + data.len()].copy_from_slice(data);
    }
}

fn send_op(dest: SocketAddr, data: Vec<u8>, context: u64) -> SendOp {
    SendOp {
        dest,
        payload: Payload::Owned(data),
        tag: None,
        cq_data: None,
        context,
        level: CompletionLevel::Transmit,
        signal: true,
    }
}

fn recv_op(len: usize, context: u64) -> (RecvOp, Shared) {
    let buf = Shared(Arc::new(Mutex::new(vec![0u8; len])));
    (recv_into(Box::new(buf.clone()), context), buf)
}

/// An untagged receive from anyone into `buffer`.
fn recv_into(buffer: Box<dyn MsgBuffer>, context: u64) -> RecvOp {
    RecvOp {
        src: None,
        tagged: false,
        tag: 0,
        ignore: 0,
        buffer,
        context,
        signal: true,
        probe: ProbeFlags::default(),
    }
}

/// Two endpoints on loopback with `cfg`.
fn pair(cfg: &Config) -> (Endpoint, Endpoint) {
    let bind = || Endpoint::bind(cfg, LOOPBACK.parse().unwrap()).unwrap();
    (bind(), bind())
}

/// Send `sizes` from a to b (receives pre-posted) and check every message
/// arrives intact, from a's canonical address.
fn exchange(a: &mut Endpoint, b: &mut Endpoint, sizes: &[usize]) {
    let mut bufs = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let (op, buf) = recv_op(len, 100 + i as u64);
        b.recv(op).unwrap();
        bufs.push(buf);
        a.send(send_op(b.local_addr(), pattern(i as u64, len), i as u64))
            .unwrap();
    }
    complete(a, b, &bufs, sizes);
}

/// For tests of ACK holding, whose senders post one send after another
/// with no call between (a burst, were sends coalesced).
fn ack_config() -> Config {
    Config {
        send_burst_us: 0,
        ..config(1)
    }
}

/// The loopback defaults, with bursts that survive a test thread's
/// pauses on a loaded machine.
fn burst_config() -> Config {
    Config {
        send_burst_us: 1_000_000,
        ..Config::default()
    }
}

/// The loopback defaults (one path, no pool) with 4 KiB packets.
fn loopback_config() -> Config {
    Config {
        mtu: 4096,
        ..Config::default()
    }
}

fn config(entropies: u16) -> Config {
    Config {
        entropies,
        // Spreads every message over all entropies without feedback, a
        // pick per packet.
        lb: Some(crate::cms::LbAlgorithm::Oblivious),
        spray_bytes: 1,
        mtu: 4096,
        ..Config::default()
    }
}

#[test]
fn a_spray_unit_keeps_a_message_on_one_socket() {
    // The default unit (what one segmented send holds, 15 packets of 4 KiB):
    // a message of ten packets leaves from the socket of its first pick.
    assert_eq!(Config::GSO_SPRAY_BYTES as usize, sys::MAX_SEGMENTED_BYTES);
    let cfg = Config {
        spray_bytes: 0,
        ..config(4)
    };
    let (mut a, mut b) = pair(&cfg);
    exchange(&mut a, &mut b, &[40_000]);
    let used = a.stats().sent.iter().filter(|&&n| n > 0).count();
    assert_eq!(used, 1, "{:?}", a.stats());
    assert_eq!(a.stats().sent.iter().sum::<u64>(), 10);
    // A pick per packet spreads the same message over the pool.
    let (mut a, mut b) = pair(&config(4));
    exchange(&mut a, &mut b, &[40_000]);
    assert!(a.stats().sent.iter().all(|&n| n > 0), "{:?}", a.stats());
}

#[test]
fn pool_binds_consecutive_ports_and_sprays_data_only() {
    let cfg = config(4);
    let (mut a, mut b) = pair(&cfg);
    let ports: Vec<u16> = a.entropy_addrs().iter().map(|s| s.port()).collect();
    assert_eq!(ports.len(), 4);
    assert_eq!(ports[0], a.local_addr().port());
    // The pool is consecutive (it falls back to any ports only when 16
    // bases in a row are taken, which an idle loopback does not do).
    assert!(
        ports.windows(2).skip(1).all(|w| w[1] == w[0] + 1),
        "{ports:?}"
    );
    exchange(&mut a, &mut b, &[100_000, 1, 0, 50_000]);
    let (sa, sb) = (a.stats(), b.stats());
    // Data left from every pool socket; a's socket 0 carried nothing but
    // what is never sprayed (b sends ACKs only, from its socket 0).
    assert!(sa.sent[1..].iter().all(|&n| n > 0), "{sa:?}");
    assert!(
        sb.sent[0] > 0 && sb.sent[1..].iter().all(|&n| n == 0),
        "{sb:?}"
    );
    // Everything is addressed to socket 0.
    assert!(sb.received[0] > 0 && sb.received[1..].iter().all(|&n| n == 0));
    assert_eq!(b.engine_stats().unknown_pdc, 0);
}

#[test]
fn a_pool_leaves_the_ports_after_a_named_one_to_the_next_rank() {
    // Launchers give rank r the port base + r.
    let free = UdpSocket::bind(LOOPBACK).unwrap();
    let named = free.local_addr().unwrap();
    drop(free);
    let a = Endpoint::bind(&config(4), named).unwrap();
    assert_eq!(a.local_addr(), named);
    assert_eq!(a.entropy_addrs().len(), 4);
    let next = SocketAddr::new(named.ip(), named.port() + 1);
    assert!(
        !a.entropy_addrs().contains(&next),
        "{:?}",
        a.entropy_addrs()
    );
}

/// The default load balancer over loopback is one path: one socket, every
/// packet from it, and no pool to bind; asking for spraying brings the pool
/// back.
#[test]
fn loopback_defaults_to_one_path_without_a_pool() {
    let cfg = loopback_config();
    let (mut a, mut b) = pair(&cfg);
    assert_eq!(a.entropy_addrs().len(), 1);
    exchange(&mut a, &mut b, &[100_000, 1, 0, 50_000]);
    assert!(a.stats().sent[0] > 0);
    let reps = Config {
        lb: Some(crate::cms::LbAlgorithm::Reps),
        ..cfg
    };
    let c = Endpoint::bind(&reps, LOOPBACK.parse().unwrap()).unwrap();
    assert_eq!(c.entropy_addrs().len(), reps.entropies as usize);
}

/// Progress both until `a` completes something (b's completions are
/// dropped): its error, if any; `what` on a timeout.
fn first_completion(
    a: &mut Endpoint,
    b: &mut Endpoint,
    what: &str,
) -> Option<crate::ops::CompletionError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "{what}");
        a.progress();
        b.progress();
        while b.poll_completion().is_some() {}
        if let Some(c) = a.poll_completion() {
            return c.error;
        }
    }
}

/// Data to a peer leaves from the socket connected to it
/// (`FI_UET_CONNECTED_PEERS`), a port of its own, while ACKs keep socket
/// 0's address: both ways of an exchange complete only if the peer still
/// keys the data by its initiator and the ACKs by their source.
#[test]
fn data_leaves_from_a_connected_socket_and_acks_from_socket_0() {
    let cfg = loopback_config();
    let (mut a, mut b) = pair(&cfg);
    exchange(&mut a, &mut b, &[100_000, 1, 0, 50_000]);
    exchange(&mut b, &mut a, &[3, 70_000]);
    // Delivery completion takes b's SES response, which has no initiator
    // field: it must come from b's socket 0 for a to know whose it is.
    let (op, _buf) = recv_op(10, 9);
    b.recv(op).unwrap();
    a.send(SendOp {
        level: CompletionLevel::Delivery,
        ..send_op(b.local_addr(), pattern(0, 10), 9)
    })
    .unwrap();
    assert_eq!(
        first_completion(&mut a, &mut b, "no delivery completion"),
        None
    );
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!((sa.connected_opened, sb.connected_opened), (1, 1));
    assert!(sa.connected_sends > 0 && sb.connected_sends > 0, "{sa:?}");
    assert_eq!(sa.connected_failed + sb.connected_failed, 0);
    assert_eq!(
        a.engine_stats().unknown_pdc + b.engine_stats().unknown_pdc,
        0
    );
    // What a raw socket sees: a's data from the connected socket's port,
    // or from socket 0 with none.
    for (limit, connected) in [(32, true), (0, false)] {
        let cfg = Config {
            connected_peers: limit,
            ..cfg.clone()
        };
        let mut a = Endpoint::bind(&cfg, LOOPBACK.parse().unwrap()).unwrap();
        let raw = UdpSocket::bind(LOOPBACK).unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let to = raw.local_addr().unwrap();
        a.send(send_op(to, pattern(1, 10), 1)).unwrap();
        a.progress();
        let mut buf = [0u8; 4096];
        let (_, from) = raw.recv_from(&mut buf).unwrap();
        let expected = a.connected.local_addr_for(to).unwrap_or(a.local_addr());
        assert_eq!(from, expected);
        assert_eq!(from != a.local_addr(), connected, "{from}");
        assert_eq!(a.connected.len(), usize::from(connected));
    }
}

/// The same over IPv6 loopback: the connected sockets take the family
/// (and scope) of the endpoint's address.
#[test]
fn connected_sockets_serve_ipv6_peers() {
    let cfg = loopback_config();
    let bind = || Endpoint::bind(&cfg, "[::1]:0".parse().unwrap()).unwrap();
    let (mut a, mut b) = (bind(), bind());
    exchange(&mut a, &mut b, &[10, 100_000]);
    exchange(&mut b, &mut a, &[20]);
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!((sa.connected_opened, sb.connected_opened), (1, 1));
    assert_eq!(sa.connected_failed + sb.connected_failed, 0);
    let local = a.connected.local_addr_for(b.local_addr()).unwrap();
    assert!(local.is_ipv6() && local.port() != a.local_addr().port());
}

/// Ordered delivery keeps a context's data and SES responses on one path:
/// it uses no connected sockets. Same-host copies trust the peer's address
/// and token, not the port a datagram left from: they do.
#[test]
fn ordered_delivery_sends_from_socket_0_and_host_copies_need_not() {
    for (cfg, connected) in [
        (
            Config {
                ordered: true,
                ..Config::default()
            },
            false,
        ),
        (
            Config {
                host_read: true,
                ..Config::default()
            },
            true,
        ),
    ] {
        let (mut a, mut b) = pair(&cfg);
        exchange(&mut a, &mut b, &[10, 100_000]);
        assert_eq!(a.connected.len(), usize::from(connected));
        assert_eq!(a.stats().connected_sends > 0, connected);
    }
}

/// A receiver that restarted NACKs the old context to the sender's
/// canonical address, not to the connected socket the data came from
/// (which nobody reads): the sender hears it and starts afresh.
#[test]
fn a_restarted_receiver_is_heard_through_connected_sockets() {
    let cfg = loopback_config();
    let (mut a, mut b) = pair(&cfg);
    exchange(&mut a, &mut b, &[10]);
    let at = b.local_addr();
    drop(b);
    let mut b = Endpoint::bind(&cfg, at).unwrap();
    // The send in flight fails as the restart is heard (a send of the old
    // context's).
    a.send(send_op(at, pattern(1, 20), 7)).unwrap();
    let failed = first_completion(&mut a, &mut b, "the restart went unheard");
    assert_eq!(failed, Some(crate::ops::CompletionError::PeerUnreachable));
    let (ea, eb) = (a.engine_stats(), b.engine_stats());
    assert!(eb.unknown_pdc > 0 && ea.nacks_received > 0, "{ea:?} {eb:?}");
    // And the next messages reach the new receiver.
    exchange(&mut a, &mut b, &[20, 30_000]);
    assert!(a.stats().connected_sends > 0);
}

/// A relay like emu-net's: forwards between endpoints, rewriting the
/// header's address to the original source, and setting the TOS byte of
/// every `ce_every`-th packet to CE and every `trim_every`-th to the
/// trimmed DSCP (not cut: the engine's trimmed-packet handling is separate).
struct TestRelay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    ce: Arc<AtomicU64>,
    trimmed: Arc<AtomicU64>,
    pool_ports_seen: Arc<Mutex<std::collections::BTreeSet<u16>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestRelay {
    fn start(ce_every: u64, trim_every: u64) -> TestRelay {
        let socket = UdpSocket::bind(LOOPBACK).unwrap();
        sys::set_default_tos(&socket, false).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(10)))
            .unwrap();
        let addr = socket.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let ce = Arc::new(AtomicU64::new(0));
        let trimmed = Arc::new(AtomicU64::new(0));
        let ports = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
        let (stop2, ce2, trimmed2, ports2) = (
            Arc::clone(&stop),
            Arc::clone(&ce),
            Arc::clone(&trimmed),
            Arc::clone(&ports),
        );
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; MAX_DATAGRAM];
            let mut n = 0u64;
            while !stop2.load(Ordering::Relaxed) {
                let Ok((len, from)) = socket.recv_from(&mut buf) else {
                    continue;
                };
                let Ok(h) = RelayHeader::parse(&buf[..len]) else {
                    continue;
                };
                ports2.lock().unwrap().insert(from.port());
                RelayHeader { addr: from }.emit(&mut buf);
                n += 1;
                let data = Prologue::parse(&buf[RelayHeader::LEN..len])
                    .is_ok_and(|p| p.next == NextHeader::SesRequest);
                let mut tos = ip::tos(0, Ecn::Ect0);
                if data && n.checked_rem(trim_every) == Some(0) {
                    tos = ip::tos(ip::DSCP_TRIMMED, Ecn::Ect0);
                    trimmed2.fetch_add(1, Ordering::Relaxed);
                } else if n.checked_rem(ce_every) == Some(0) {
                    tos = ip::tos(0, Ecn::Ce);
                    ce2.fetch_add(1, Ordering::Relaxed);
                }
                let _ = sys::send_with_tos(&socket, h.addr, tos, &buf[..len]);
            }
        });
        TestRelay {
            addr,
            stop,
            ce,
            trimmed,
            pool_ports_seen: ports,
            thread: Some(thread),
        }
    }
}

impl Drop for TestRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn relay_carries_traffic_and_delivers_ce_and_trimmed_dscp() {
    let relay = TestRelay::start(3, 7);
    let cfg = Config {
        fabric: relay.addr.to_string(),
        ..config(4)
    };
    let (mut a, mut b) = pair(&cfg);
    // A stray datagram straight to b (not through the relay) is dropped.
    let stray = UdpSocket::bind(LOOPBACK).unwrap();
    stray.send_to(&[0u8; 64], b.local_addr()).unwrap();
    exchange(&mut a, &mut b, &[200_000, 10, 30_000]);
    // Late ACKs may still be crossing the relay: progress until every
    // mark the relay made has arrived (or give up and report).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !relay_marks_arrived(&relay, &a.stats(), &b.stats()) && Instant::now() < deadline {
        a.progress();
        b.progress();
    }
    relay_stats_check(&relay, &a.stats(), &b.stats());
    // The relay saw a's pool ports as sources: entropy survives the relay.
    let seen = relay.pool_ports_seen.lock().unwrap().clone();
    for p in a.entropy_addrs().into_iter().skip(1) {
        assert!(
            seen.contains(&p.port()),
            "{p} not seen by the relay: {seen:?}"
        );
    }
    // The stray may still be in flight when the exchange ends; progress
    // until it is counted.
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.stats().fabric_dropped == 0 {
        assert!(Instant::now() < deadline, "stray datagram not dropped");
        b.progress();
    }
    assert_eq!(b.stats().fabric_dropped, 1);
}

fn relay_marks_arrived(relay: &TestRelay, sa: &DriverStats, sb: &DriverStats) -> bool {
    sa.ecn_ce_received + sb.ecn_ce_received == relay.ce.load(Ordering::Relaxed)
        && sa.trimmed_received + sb.trimmed_received == relay.trimmed.load(Ordering::Relaxed)
}

fn relay_stats_check(relay: &TestRelay, sa: &DriverStats, sb: &DriverStats) {
    let ce = relay.ce.load(Ordering::Relaxed);
    let trimmed = relay.trimmed.load(Ordering::Relaxed);
    assert!(ce > 0 && trimmed > 0, "relay marked nothing");
    // Every mark the relay made reached one of the two engines.
    assert_eq!(sa.ecn_ce_received + sb.ecn_ce_received, ce);
    assert_eq!(sa.trimmed_received + sb.trimmed_received, trimmed);
    // Trimmed marks only go to data packets, which only b receives.
    assert_eq!(sb.trimmed_received, trimmed);
}

/// An endpoint with `faults` sending one message of `len` bytes (within
/// what the sink's receive buffer holds at once) to a bare socket that
/// records every datagram with its TOS byte.
fn impaired_datagrams(faults: Config, len: usize, wait: Duration) -> (Endpoint, Vec<(usize, u8)>) {
    let sink = UdpSocket::bind(LOOPBACK).unwrap();
    sink.set_nonblocking(true).unwrap();
    sys::enable_recv_tos(&sink, false).unwrap();
    let mut a = Endpoint::bind(&faults, LOOPBACK.parse().unwrap()).unwrap();
    a.send(send_op(sink.local_addr().unwrap(), pattern(1, len), 1))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let end = Instant::now() + wait;
    while Instant::now() < end {
        a.progress();
        while let Ok(r) = sys::recv_with_tos(&sink, &mut buf) {
            assert_eq!(PacketClass::of(&buf[..r.len]), PacketClass::Data);
            got.push((r.len, r.tos));
        }
    }
    // Loopback may defer delivery to a softirq thread on a busy host: wait
    // for everything the endpoint sent.
    let sent: u64 = a.stats().sent.iter().sum();
    let deadline = Instant::now() + Duration::from_secs(5);
    while (got.len() as u64) < sent && Instant::now() < deadline {
        while let Ok(r) = sys::recv_with_tos(&sink, &mut buf) {
            got.push((r.len, r.tos));
        }
    }
    (a, got)
}

#[test]
fn fault_trim_and_ecn_arrive_as_described() {
    let faults = Config {
        fault_trim: 1000,
        fault_ecn: 1000,
        ..config(1)
    };
    let (a, got) = impaired_datagrams(faults, 20_000, Duration::from_millis(50));
    // 20 000 bytes in 4096-byte packets: 5 packets, each cut to its headers
    // and carrying DSCP TRIMMED with CE.
    assert!(got.len() >= 5, "{got:?}");
    for &(len, tos) in &got {
        assert_eq!(len, TRIMMED_LEN);
        assert_eq!(tos, ip::tos(ip::DSCP_TRIMMED, Ecn::Ce));
    }
    let s = a.stats();
    assert_eq!(s.fault_trimmed as usize, got.len());
    assert_eq!(s.fault_ce_marked as usize, got.len());
}

#[test]
fn fault_drop_dup_and_reorder_arrive_as_described() {
    // Untouched: ECT(0), full size.
    let (_, plain) = impaired_datagrams(config(1), 20_000, Duration::from_millis(20));
    assert!(!plain.is_empty());
    assert!(plain
        .iter()
        .all(|&(len, tos)| len > TRIMMED_LEN && tos == ip::tos(0, Ecn::Ect0)));
    // Dropped: nothing leaves.
    let drop = Config {
        fault_drop: 1000,
        ..config(1)
    };
    let (a, got) = impaired_datagrams(drop, 20_000, Duration::from_millis(20));
    assert!(got.is_empty(), "{got:?}");
    assert!(a.stats().fault_dropped > 0);
    // Duplicated: every datagram twice.
    let dup = Config {
        fault_dup: 1000,
        ..config(1)
    };
    let (a, got) = impaired_datagrams(dup, 20_000, Duration::from_millis(20));
    assert_eq!(got.len() as u64, 2 * a.stats().fault_duplicated);
    assert_eq!(got.len() as u64, a.stats().sent[0]);
    // Held: nothing before the delay, everything after it.
    let hold = Config {
        fault_reorder: 1000,
        fault_delay_us: 100_000,
        ..config(1)
    };
    let (mut a, early) = impaired_datagrams(hold, 20_000, Duration::from_millis(20));
    assert!(early.is_empty(), "{early:?}");
    assert!(a.stats().fault_delayed >= 5);
    std::thread::sleep(Duration::from_millis(100));
    a.progress();
    assert!(a.stats().sent[0] >= 5);
}

/// Fault injection touches single packets of a segmented batch: the rest
/// of the batch still leaves in runs, and what arrives is exactly what the
/// counters say was trimmed and marked.
#[test]
fn faults_within_a_segmented_batch_touch_only_their_packets() {
    let faults = Config {
        fault_trim: 200,
        fault_ecn: 200,
        ..config(1)
    };
    let (a, got) = impaired_datagrams(faults, 60_000, Duration::from_millis(50));
    let s = a.stats();
    assert!(s.gso_sends > 0, "{s:?}");
    assert_eq!(got.len() as u64, s.sent[0]);
    for &(len, tos) in &got {
        assert_eq!(
            len == TRIMMED_LEN,
            ip::trim_of(tos).is_some(),
            "{len} {tos}"
        );
    }
    let trimmed = got.iter().filter(|g| ip::trim_of(g.1).is_some()).count();
    let marked = got.iter().filter(|g| Ecn::from_tos(g.1) == Ecn::Ce).count();
    assert_eq!(trimmed as u64, s.fault_trimmed);
    assert_eq!(marked as u64, s.fault_ce_marked);
    assert!(trimmed > 0 && marked > 0 && trimmed + marked < got.len());
}

#[test]
fn faulty_links_still_deliver() {
    let faults = Config {
        fault_drop: 50,
        fault_dup: 50,
        fault_reorder: 100,
        fault_delay_us: 300,
        fault_ecn: 300,
        fault_trim: 50,
        rto_min_us: 200,
        ..config(4)
    };
    let mut a = Endpoint::bind(&faults, LOOPBACK.parse().unwrap()).unwrap();
    let mut b = Endpoint::bind(
        &Config {
            fault_seed: 2,
            ..faults.clone()
        },
        LOOPBACK.parse().unwrap(),
    )
    .unwrap();
    exchange(&mut a, &mut b, &[300_000, 5, 70_000]);
    let (sa, sb) = (a.stats(), b.stats());
    // Faults are applied within GSO batches, which still leave segmented.
    assert!(sa.gso_sends > 0, "{sa:?}");
    assert!(sa.fault_dropped + sb.fault_dropped > 0);
    assert!(sa.fault_duplicated > 0 && sa.fault_delayed > 0 && sa.fault_trimmed > 0);
    // Marked packets that were not dropped reach b with CE (some may still
    // be held when the exchange ends, duplicates count twice).
    assert!(sa.fault_ce_marked > 0 && sb.ecn_ce_received > 0);
}

#[test]
fn unnamed_port_means_the_uet_port_when_free() {
    // An address of its own, so no other test holds the port.
    let any: SocketAddr = "127.0.0.77:0".parse().unwrap();
    let cfg = Config::default();
    let first = Endpoint::bind(&cfg, any).unwrap();
    assert_eq!(first.local_addr().port(), crate::wire::UET_UDP_PORT);
    // Taken: the next endpoint on the host gets another port.
    let second = Endpoint::bind(&cfg, any).unwrap();
    assert_ne!(second.local_addr().port(), crate::wire::UET_UDP_PORT);
    // A port named explicitly is bound or refused, never substituted.
    let named: SocketAddr = "127.0.0.77:4793".parse().unwrap();
    assert!(Endpoint::bind(&cfg, named).is_err());
}

/// Progress both until every datagram either sent has been received (the
/// engines quiet), then return the stats.
fn settle(a: &mut Endpoint, b: &mut Endpoint) -> (DriverStats, DriverStats) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        a.progress();
        b.progress();
        let (sa, sb) = (a.stats(), b.stats());
        let sum = |v: &[u64]| v.iter().sum::<u64>();
        if sum(&sa.sent) == sum(&sb.received) && sum(&sb.sent) == sum(&sa.received) {
            return (sa, sb);
        }
        assert!(Instant::now() < deadline, "{sa:?} {sb:?}");
    }
}

#[test]
fn gso_batches_sprayed_packets_and_gro_arrivals_are_cut_back() {
    // Four entropies sprayed per packet: runs form by grouping per socket.
    let cfg = config(4);
    let (mut a, mut b) = pair(&cfg);
    exchange(&mut a, &mut b, &[2_000_000, 4097, 1, 0, 123_457, 70_000]);
    let (sa, sb) = settle(&mut a, &mut b);
    assert!(!sa.gso_disabled && sa.gso_fallbacks == 0, "{sa:?}");
    assert!(sa.gso_sends > 0, "{sa:?}");
    assert!(sa.gso_segments >= 2 * sa.gso_sends, "{sa:?}");
    // The coalesced arrivals were cut into exactly the datagrams sent, each
    // of which parsed.
    assert!(sb.gro_receives > 0 && sb.gro_segments >= 2 * sb.gro_receives);
    assert!(sb.gro_segments <= sa.gso_segments);
    assert_eq!(b.engine_stats().malformed, 0);
    assert_eq!(a.engine_stats().malformed, 0);
    // (A retransmission after a spurious timeout arrives as a duplicate.)
    let rb = b.engine_stats();
    assert_eq!(
        rb.packets_received + rb.duplicates,
        a.engine_stats().packets_sent
    );
}

#[test]
fn gro_waits_for_the_first_burst_and_stays_on() {
    let (mut a, mut b) = pair(&config(1));
    // Short messages one at a time never fill a receive call: no GRO, and
    // a pair of packets (a message and an ACK) is never segmented.
    for seed in 0..20 {
        exchange(&mut a, &mut b, &[64]);
        exchange(&mut b, &mut a, &[64 + seed as usize]);
    }
    let (sa, sb) = settle(&mut a, &mut b);
    assert!(!sa.gro_enabled && !sb.gro_enabled, "{sb:?}");
    assert_eq!(sb.gro_receives, 0);
    // A large message arrives as a burst of 4 KiB packets: the receiver
    // turns GRO on and later bursts arrive coalesced, cut back intact.
    exchange(&mut a, &mut b, &[1_000_000, 1_000_000]);
    let (sa, sb) = settle(&mut a, &mut b);
    assert!(sb.gro_enabled, "{sb:?}");
    assert!(sa.gso_sends > 0, "{sa:?}");
    assert!(sb.gro_receives > 0, "{sb:?}");
    assert_eq!(b.engine_stats().malformed, 0);
    // Back to single messages, GRO stays on (see GRO_AFTER_BURST).
    exchange(&mut a, &mut b, &[64]);
    assert!(b.stats().gro_enabled);
}

#[test]
fn gro_turns_on_at_the_first_message_of_several_packets() {
    // A 4 KiB message takes two 4 KiB packets, which the sender segments
    // into one call: the receiver takes arrivals coalesced from the first
    // such message on, and the message arrives intact.
    let (mut a, mut b) = pair(&config(1));
    for seed in 0..5 {
        exchange(&mut a, &mut b, &[64 + seed]);
    }
    settle(&mut a, &mut b);
    assert!(!b.stats().gro_enabled);
    exchange(&mut a, &mut b, &[4096]);
    let (_, sb) = settle(&mut a, &mut b);
    assert!(sb.gro_enabled, "{sb:?}");
    assert_eq!(b.engine_stats().malformed, 0);
    // With 65000 B packets no two fit in one segmented send: a message of
    // two packets leaves GRO off.
    let cfg = Config {
        mtu: 65000,
        ..config(1)
    };
    let (mut a, mut b) = pair(&cfg);
    exchange(&mut a, &mut b, &[70_000]);
    let (_, sb) = settle(&mut a, &mut b);
    assert!(!sb.gro_enabled, "{sb:?}");
    assert!(b.engine_stats().continuations_received > 0);
}

#[test]
fn gso_keeps_the_order_of_ordered_delivery() {
    let cfg = Config {
        ordered: true,
        ..config(4)
    };
    let (mut a, mut b) = pair(&cfg);
    exchange(&mut a, &mut b, &[1_000_000, 3, 200_000]);
    let (sa, _) = settle(&mut a, &mut b);
    assert!(sa.gso_sends > 0, "{sa:?}");
    // One path, sent in PSN order: the receiver never saw a gap.
    assert_eq!(b.engine_stats().rod_out_of_order, 0);
}

#[test]
fn gso_sender_and_plain_receiver_interoperate() {
    let on = config(4);
    let off = Config {
        gso: false,
        ..config(4)
    };
    for (ca, cb) in [(&on, &off), (&off, &on)] {
        let mut a = Endpoint::bind(ca, LOOPBACK.parse().unwrap()).unwrap();
        let mut b = Endpoint::bind(cb, LOOPBACK.parse().unwrap()).unwrap();
        exchange(&mut a, &mut b, &[600_000, 7, 9_000]);
        let (sa, sb) = settle(&mut a, &mut b);
        // Without GRO the kernel cuts segmented sends itself.
        assert_eq!(sb.gro_receives, 0);
        assert_eq!(sa.gso_sends > 0, ca.gso, "{sa:?}");
        assert_eq!(b.engine_stats().malformed, 0);
    }
}

#[test]
fn gso_refused_by_the_kernel_falls_back_without_losing_a_packet() {
    // Data leaves from the sockets whose checksums go off below.
    let cfg = Config {
        connected_peers: 0,
        ..config(4)
    };
    let (mut a, mut b) = pair(&cfg);
    // Without UDP checksums the kernel refuses every segmented send (EINVAL).
    for s in &a.sockets {
        sys::disable_checksums(s).unwrap();
    }
    exchange(&mut a, &mut b, &[800_000, 2, 50_000]);
    let (sa, _) = settle(&mut a, &mut b);
    assert!(sa.gso_disabled, "{sa:?}");
    assert_eq!(sa.gso_fallbacks, 1, "{sa:?}");
    assert_eq!(sa.gso_sends, 0);
    // The refused batch left datagram by datagram: every data packet the
    // engine produced arrived once.
    // (A retransmission after a spurious timeout arrives as a duplicate.)
    let rb = b.engine_stats();
    assert_eq!(
        rb.packets_received + rb.duplicates,
        a.engine_stats().packets_sent
    );
    // Later traffic goes without GSO.
    exchange(&mut a, &mut b, &[300_000]);
    assert_eq!(a.stats().gso_fallbacks, 1);
}

#[test]
fn the_call_that_finds_gso_refused_sends_everything_it_could() {
    let cfg = Config {
        cc: crate::cms::CcAlgorithm::None,
        // Data leaves from the socket whose checksums go off below.
        connected_peers: 0,
        ..config(1)
    };
    let (mut a, b) = pair(&cfg);
    for s in &a.sockets {
        sys::disable_checksums(s).unwrap();
    }
    // Messages queued behind a one-packet window, which then opens: more
    // packets than one batch are ready for the next call.
    a.engine.set_window(1);
    for i in 0..4 {
        a.send(send_op(b.local_addr(), pattern(i, 128 << 10), i))
            .unwrap();
    }
    a.engine.set_window(4 * GSO_BATCH);
    a.engine.hold_data_for(b.local_addr(), true);
    a.engine.hold_data_for(b.local_addr(), false);
    a.progress();
    let sa = a.stats();
    assert!(sa.gso_disabled, "{sa:?}");
    assert!(sa.sent[0] > GSO_BATCH as u64, "{sa:?}");
    assert!(
        !a.engine.has_queued_data(),
        "packets left for a later call: {sa:?}"
    );
}

/// Progress `b` for the application until a completion is waiting.
fn progress_app_until_completion(b: &mut Endpoint) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !b.has_completions() {
        assert!(Instant::now() < deadline, "nothing arrived");
        b.progress_app();
    }
}

/// One message a -> b, completed by b's application progress (a receive
/// completes; others b sees on the way, such as its last send's, are
/// taken and dropped); returns the ACKs b had sent before the message's arrival and
/// after the call that completed it.
fn deliver(a: &mut Endpoint, b: &mut Endpoint, seed: u64) -> (u64, u64) {
    let (op, _buf) = recv_op(64, seed);
    b.recv(op).unwrap();
    let before = b.engine_stats().acks_sent;
    a.send(send_op(b.local_addr(), pattern(seed, 64), seed))
        .unwrap();
    take_message(b, &format!("message {seed}"));
    (before, b.engine_stats().acks_sent)
}

/// b answers a, and a takes the answer and acknowledges it at once
/// (nothing is known of a's application), as in a request-response
/// exchange.
fn answer(a: &mut Endpoint, b: &mut Endpoint, seed: u64) {
    let acks = a.engine_stats().acks_sent;
    b.send(send_op(a.local_addr(), pattern(seed, 64), seed))
        .unwrap();
    acknowledge(a, acks);
}

/// Progress `a` until it has sent more than `acks` ACKs.
fn acknowledge(a: &mut Endpoint, acks: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.engine_stats().acks_sent == acks {
        assert!(Instant::now() < deadline, "the answer was not acknowledged");
        a.progress();
    }
}

#[test]
fn application_progress_holds_acks_once_it_sees_replies() {
    for piggyback in [false, true] {
        holds_acks_once_it_sees_replies(piggyback);
    }
}

/// With `piggyback`, the held ACK rides in the reply's datagram; without,
/// it follows the reply in its own.
fn holds_acks_once_it_sees_replies(piggyback: bool) {
    let cfg = Config {
        ack_piggyback: piggyback,
        ..medium_hold_config()
    };
    let (mut a, mut b) = pair(&cfg);
    // Nothing known of the application yet: the ACK leaves at once.
    let (before, after) = deliver(&mut a, &mut b, 1);
    assert_eq!(after, before + 1);
    // It answers; from now on the ACK waits for the answer.
    answer(&mut a, &mut b, 2);
    let (before, after) = deliver(&mut a, &mut b, 3);
    assert_eq!(
        after, before,
        "ACK held while the application holds the message"
    );
    assert_eq!(b.idle_budget(), Some(Duration::ZERO));
    // Posting the next receive keeps it waiting; the reply releases it,
    // after the reply's data.
    let (op, _buf) = recv_op(64, 4);
    b.recv(op).unwrap();
    assert_eq!(b.engine_stats().acks_sent, after);
    // a takes what b sent so far (all in its socket already), so what
    // arrives next is the reply.
    for _ in 0..100 {
        a.progress();
    }
    let sent = b.stats().sent[0];
    let gso_sends = b.stats().gso_sends;
    let a_received = a.stats().received[0];
    let a_acks = a.engine_stats().acks_received;
    b.send(send_op(a.local_addr(), pattern(5, 64), 5)).unwrap();
    assert_eq!(b.engine_stats().acks_sent, after + 1);
    let datagrams = if piggyback { 1 } else { 2 };
    assert_eq!(b.stats().sent[0], sent + datagrams);
    assert_eq!(b.engine_stats().acks_piggybacked, piggyback as u64);
    // Plain sends (a pair is no run worth segmenting), reply first.
    assert_eq!(b.stats().gso_sends, gso_sends);
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.stats().received[0] < a_received + datagrams
        || a.engine_stats().acks_received < a_acks + 1
    {
        assert!(Instant::now() < deadline, "reply and ACK did not arrive");
        a.progress();
    }
    assert_eq!(a.engine_stats().piggybacked_acks_received, piggyback as u64);

    // Held, then no reply: the first call past the hold
    // (FI_UET_ACK_HOLD_US) sends it whatever it finds, and the endpoint
    // stops holding (a receiver that only polls).
    let (_, held) = deliver(&mut a, &mut b, 6);
    std::thread::sleep(Duration::from_micros(cfg.ack_hold_us + 50));
    b.progress_app();
    assert_eq!(b.engine_stats().acks_sent, held + 1);
    let (before, after) = deliver(&mut a, &mut b, 7);
    assert_eq!(after, before + 1);
}

/// [`ack_config`] with ACKs held for a reply as long as a test takes.
fn long_hold_config() -> Config {
    Config {
        ack_hold_us: 1_000_000,
        ..ack_config()
    }
}

/// [`ack_config`] with a hold no pause of a test thread outlasts, short
/// enough to sleep past.
fn medium_hold_config() -> Config {
    Config {
        ack_hold_us: 200_000,
        ..ack_config()
    }
}

/// Two endpoints with `cfg` once b has been seen answering (a takes the
/// answer) and holds the ACK of a's next message for the next answer.
/// Returns them and the ACKs b has sent.
fn holding_an_ack(cfg: &Config) -> (Endpoint, Endpoint, u64) {
    let (mut a, mut b) = pair(cfg);
    deliver(&mut a, &mut b, 1);
    let (op, _answer) = recv_op(64, 20);
    a.recv(op).unwrap();
    answer(&mut a, &mut b, 2);
    let (_, held) = deliver(&mut a, &mut b, 3);
    (a, b, held)
}

#[test]
fn held_acks_outlast_calls_made_before_the_answer() {
    // An application that reads its CQs more than once between taking a
    // message and answering it (its send's completion, then the
    // message's): within the hold, those calls keep the ACK back, and the
    // answer carries it.
    let (mut a, mut b, held) = holding_an_ack(&long_hold_config());
    for _ in 0..3 {
        b.progress_app();
    }
    assert_eq!(
        b.engine_stats().acks_sent,
        held,
        "released before the answer"
    );
    let sent = b.stats().sent[0];
    let acks = a.engine_stats().acks_sent;
    b.send(send_op(a.local_addr(), pattern(4, 64), 4)).unwrap();
    assert_eq!(b.stats().sent[0], sent + 1, "one datagram: answer and ACK");
    assert_eq!(b.engine_stats().acks_piggybacked, 1);
    // And once a has taken the answer, the endpoint still holds for the
    // next message.
    acknowledge(&mut a, acks);
    let (before, after) = deliver(&mut a, &mut b, 5);
    assert_eq!(after, before);
}

/// The first half of a halo exchange round: b, whose application has been
/// seen answering (it would hold the next ACK of a request-response
/// exchange), has message 6 in flight to a, unacknowledged.
fn b_sends_first_in_a_halo_round() -> (Endpoint, Endpoint) {
    let (mut a, mut b, _) = holding_an_ack(&long_hold_config());
    let acks = a.engine_stats().acks_sent;
    b.send(send_op(a.local_addr(), pattern(4, 64), 4)).unwrap();
    acknowledge(&mut a, acks);
    b.send(send_op(a.local_addr(), pattern(6, 64), 6)).unwrap();
    (a, b)
}

#[test]
fn a_request_that_crossed_ours_is_acknowledged_at_once() {
    // A halo exchange: both ends send before either takes the other's
    // message. b's application has been seen answering, but a's message
    // answers nothing of b's (b's own is still unacknowledged): a waits
    // for this ACK to complete its send, so b does not hold it.
    let (mut a, mut b) = b_sends_first_in_a_halo_round();
    let (before, after) = deliver(&mut a, &mut b, 7);
    assert_eq!(after, before + 1, "ACK of a crossing request held");
}

/// `send_op` as `fi_inject` posts it: nothing reports but failure.
fn inject_op(dest: SocketAddr, seed: u64) -> SendOp {
    SendOp {
        signal: false,
        ..send_op(dest, pattern(seed, 64), seed)
    }
}

/// a injects message `seed` to b, which has a message of its own in flight
/// to a (the two crossed): b takes it and holds its ACK, which rides on
/// b's next send, one datagram for both.
fn crossing_inject_rides_on_the_next_send(a: &mut Endpoint, b: &mut Endpoint, seed: u64) {
    let (op, _buf) = recv_op(64, seed);
    b.recv(op).unwrap();
    let before = b.engine_stats().acks_sent;
    a.send(inject_op(b.local_addr(), seed)).unwrap();
    take_message(b, "the inject");
    assert_eq!(
        b.engine_stats().acks_sent,
        before,
        "crossing inject's ACK sent alone"
    );
    let sent = b.stats().sent[0];
    let piggybacked = b.engine_stats().acks_piggybacked;
    b.send(send_op(a.local_addr(), pattern(seed + 1, 64), seed + 1))
        .unwrap();
    assert_eq!(
        b.stats().sent[0],
        sent + 1,
        "one datagram: the send and the ACK"
    );
    assert_eq!(b.engine_stats().acks_piggybacked, piggybacked + 1);
}

#[test]
fn a_crossing_inject_is_acknowledged_with_the_next_send() {
    // The same halo exchange with an fi_inject on a's side: nothing there
    // waits for the ACK (NO_WAIT), so b holds it for its next send
    // instead of spending a system call on it between taking the message
    // and handing it to the application.
    let (mut a, mut b) = b_sends_first_in_a_halo_round();
    crossing_inject_rides_on_the_next_send(&mut a, &mut b, 7);
}

#[test]
fn a_crossing_inject_waits_for_the_next_send_even_before_any_answer() {
    // Ranks that compute between exchanges never answer within the hold,
    // so nothing marks b's application as one that answers; a's inject
    // crossing b's message waits for b's next send all the same (nothing
    // at a waits for its ACK), however long b takes to post it.
    let (mut a, mut b) = pair(&long_hold_config());
    b.send(send_op(a.local_addr(), pattern(2, 64), 2)).unwrap();
    crossing_inject_rides_on_the_next_send(&mut a, &mut b, 10);
}

/// Progress `to` (as its application) until a receive completes; the
/// other completions of that call (such as its last send's) are taken and
/// dropped.
fn take_message(to: &mut Endpoint, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "{what} did not arrive");
        to.progress_app();
        let mut arrived = false;
        while let Some(c) = to.poll_completion() {
            arrived |= c.kind == CompletionKind::Recv;
        }
        if arrived {
            return;
        }
    }
}

#[test]
fn a_trailer_for_only_some_of_ours_makes_no_reply() {
    // Both applications answer. a injects a5, which b takes and holds
    // the ACK of for its answer; a injects a6 meanwhile. b's answer b7 is
    // a send whose completion b waits for, carrying the ACK of a5 only:
    // it crossed a6, so it is no reply, and a acknowledges it at once
    // rather than holding that ACK for a send it may post much later.
    let (mut a, mut b) = pair(&long_hold_config());
    deliver(&mut b, &mut a, 1);
    answer(&mut b, &mut a, 2);
    deliver(&mut a, &mut b, 3);
    answer(&mut a, &mut b, 4);
    for seed in [5, 6] {
        let (op, _buf) = recv_op(64, seed);
        b.recv(op).unwrap();
    }
    let (op, _buf) = recv_op(64, 7);
    a.recv(op).unwrap();
    a.send(inject_op(b.local_addr(), 5)).unwrap();
    take_message(&mut b, "a5");
    a.send(inject_op(b.local_addr(), 6)).unwrap();
    let piggybacked = b.engine_stats().acks_piggybacked;
    b.send(send_op(a.local_addr(), pattern(7, 64), 7)).unwrap();
    assert_eq!(
        b.engine_stats().acks_piggybacked,
        piggybacked + 1,
        "b7 carries a5's ACK"
    );
    let before = a.engine_stats().acks_sent;
    take_message(&mut a, "b7");
    assert_eq!(
        a.engine_stats().acks_sent,
        before + 1,
        "ACK b waits for held"
    );
}

#[test]
fn a_duplicate_makes_the_ack_awaited_whatever_the_flags() {
    // A crossing inject as in a_crossing_inject_waits_for_the_next_send_
    // even_before_any_answer, delivered twice (a resend): its sender is
    // retransmitting, so it waits for this ACK, which leaves at once.
    let cfg = long_hold_config();
    let dup = Config {
        fault_dup: 1000,
        ..cfg.clone()
    };
    let mut a = Endpoint::bind(&dup, LOOPBACK.parse().unwrap()).unwrap();
    let mut b = Endpoint::bind(&cfg, LOOPBACK.parse().unwrap()).unwrap();
    let (op, _buf) = recv_op(64, 1);
    b.recv(op).unwrap();
    b.send(send_op(a.local_addr(), pattern(2, 64), 2)).unwrap();
    let before = b.engine_stats().acks_sent;
    a.send(inject_op(b.local_addr(), 1)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.engine_stats().duplicates == 0 {
        assert!(Instant::now() < deadline, "no duplicate arrived");
        b.progress_app();
    }
    b.progress_app();
    assert!(
        b.engine_stats().acks_sent > before,
        "ACK of a resent packet held"
    );
}

#[test]
fn an_answer_after_the_hold_answers_nothing() {
    // b takes a message, goes elsewhere past the hold without calling in,
    // then sends to its sender: a waited for its ACK all that time, so b
    // stops holding. The same when the idle-progress thread looked in
    // meanwhile (and sent the held ACK).
    for background in [false, true] {
        let cfg = Config {
            ack_hold_us: 100_000,
            ..ack_config()
        };
        let (mut a, mut b, held) = holding_an_ack(&cfg);
        std::thread::sleep(Duration::from_millis(150));
        if background {
            b.progress();
            assert_eq!(b.engine_stats().acks_sent, held + 1, "background call");
        }
        let acks = a.engine_stats().acks_sent;
        b.send(send_op(a.local_addr(), pattern(4, 64), 4)).unwrap();
        assert_eq!(b.engine_stats().acks_sent, held + 1);
        acknowledge(&mut a, acks);
        let (before, after) = deliver(&mut a, &mut b, 5);
        assert_eq!(after, before + 1, "held after a late answer ({background})");
    }
}

#[test]
fn an_answer_sent_with_its_burst_counts() {
    // A reply posted with FI_MORE leaves with the burst's end, and counts
    // as an answer all the same: judged when posted, so the hold running
    // out afterwards does not turn it into none.
    let cfg = Config {
        send_burst_us: 1_000_000,
        ..medium_hold_config()
    };
    let (mut a, mut b, held) = holding_an_ack(&cfg);
    let acks = a.engine_stats().acks_sent;
    b.expect_more_sends();
    b.send(send_op(a.local_addr(), pattern(4, 64), 4)).unwrap();
    assert_eq!(b.engine_stats().acks_sent, held, "the burst waits");
    b.progress_app();
    assert_eq!(b.engine_stats().acks_sent, held + 1, "with the burst's end");
    std::thread::sleep(Duration::from_micros(cfg.ack_hold_us + 50_000));
    b.progress_app();
    acknowledge(&mut a, acks);
    let (before, after) = deliver(&mut a, &mut b, 5);
    assert_eq!(after, before, "held again");
}

#[test]
fn a_send_to_another_peer_answers_nothing() {
    // A shift pattern: b takes a's message and sends to c. Holding a's
    // ACK for b's next send to a would stall a.
    let cfg = long_hold_config();
    let (mut a, mut b, held) = holding_an_ack(&cfg);
    let c = Endpoint::bind(&cfg, LOOPBACK.parse().unwrap()).unwrap();
    b.send(send_op(c.local_addr(), pattern(4, 64), 4)).unwrap();
    assert_eq!(b.engine_stats().acks_sent, held + 1, "held ACK released");
    let (before, after) = deliver(&mut a, &mut b, 5);
    assert_eq!(after, before + 1, "held after an answer elsewhere");
}

#[test]
fn an_application_answering_after_a_few_calls_is_seen_answering() {
    // Not holding yet (nothing known of the application), b takes a
    // message, reads its CQs a few more times, then answers: that answer
    // counts, so the next message's ACK waits for the next answer. (A
    // ping-pong that waits for each send's completion does exactly this;
    // were those calls to hide the answer, the endpoint would never hold.)
    let (mut a, mut b) = pair(&long_hold_config());
    let (before, after) = deliver(&mut a, &mut b, 1);
    assert_eq!(after, before + 1, "not holding yet");
    for _ in 0..3 {
        b.progress_app();
    }
    answer(&mut a, &mut b, 2);
    let (before, after) = deliver(&mut a, &mut b, 3);
    assert_eq!(after, before, "held for the answer");
}

#[test]
fn answers_gathered_from_application_memory_carry_the_held_ack() {
    // From 256 B a payload leaves from the message's memory in a gather
    // list; the held ACK still rides at the end of its datagram, with
    // segmentation offload (batched sends) and without it. With a
    // 4096-byte MTU an answer of several packets leaves in one segmented
    // send, ACK and all: 4096 B as two 2048 B packets, the first carrying
    // the ACK (a segment may be followed by a shorter one); 8192 B as
    // three and 16000 B as four packets of one size but for a shorter
    // last one, which carries the ACK (on the first, it would make that
    // one longer than the rest and split the send).
    for gso in [true, false] {
        for (len, packets) in [
            (64, 1),
            (1024, 1),
            (3000, 1),
            (4096, 2),
            (8192, 3),
            (16000, 4),
        ] {
            let cfg = Config {
                gso,
                ..long_hold_config()
            };
            let (mut a, mut b, held) = holding_an_ack(&cfg);
            let (op, buf) = recv_op(len, 40);
            a.recv(op).unwrap();
            let before = b.stats();
            b.send(send_op(a.local_addr(), pattern(4, len), 4)).unwrap();
            let what = format!("{len} B, gso {gso}");
            let after = b.stats();
            assert_eq!(
                after.sent[0],
                before.sent[0] + packets,
                "{what}: no ACK datagram"
            );
            let segmented = gso && packets > 1;
            assert_eq!(
                after.gso_sends,
                before.gso_sends + u64::from(segmented),
                "{what}"
            );
            let segments = if segmented { packets } else { 0 };
            assert_eq!(after.gso_segments, before.gso_segments + segments, "{what}");
            assert_eq!(b.engine_stats().acks_sent, held + 1, "{what}");
            assert_eq!(b.engine_stats().acks_piggybacked, 1, "{what}");
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut arrived = false;
            while !arrived {
                assert!(Instant::now() < deadline, "{what}: no answer");
                a.progress();
                while let Some(c) = a.poll_completion() {
                    arrived |= c.kind == CompletionKind::Recv && c.context == 40;
                }
            }
            assert!(*buf.0.lock().unwrap() == pattern(4, len), "{what}");
            assert_eq!(a.engine_stats().piggybacked_acks_received, 1, "{what}");
        }
    }
}

#[test]
fn background_progress_and_the_knob_never_hold_acks() {
    for (defer_acks, app) in [(true, false), (false, true)] {
        let cfg = Config {
            defer_acks,
            ..ack_config()
        };
        let (mut a, mut b) = pair(&cfg);
        for seed in [1, 3] {
            let (op, _buf) = recv_op(64, seed);
            b.recv(op).unwrap();
            let acks = b.engine_stats().acks_sent;
            a.send(send_op(b.local_addr(), pattern(seed, 64), seed))
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            while !b.has_completions() {
                assert!(Instant::now() < deadline, "nothing arrived");
                if app {
                    b.progress_app();
                } else {
                    b.progress();
                }
            }
            while b.poll_completion().is_some() {}
            assert_eq!(
                b.engine_stats().acks_sent,
                acks + 1,
                "defer_acks {defer_acks}"
            );
            // An answer, which would make application progress hold.
            b.send(send_op(a.local_addr(), pattern(seed + 1, 64), seed + 1))
                .unwrap();
        }
    }
}

#[test]
fn held_acks_leave_when_the_endpoint_closes() {
    let cfg = long_hold_config();
    let (mut a, mut b) = pair(&cfg);
    deliver(&mut a, &mut b, 1);
    answer(&mut a, &mut b, 2);
    let (before, after) = deliver(&mut a, &mut b, 3);
    assert_eq!(after, before);
    drop(b);
    // The ACK reached a: its send completes.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "send never acknowledged");
        a.progress();
        if let Some(c) = a.poll_completion() {
            assert_eq!(c.error, None);
            if (c.kind, c.context) == (CompletionKind::Send, 3) {
                assert_eq!(a.engine_stats().retransmits, 0);
                break;
            }
        }
    }
}

/// Datagrams `a` has put on the wire so far.
fn sent(a: &Endpoint) -> u64 {
    a.stats().sent.iter().sum()
}

/// Post `count` sends of `len` bytes a -> b back to back (b's receives
/// posted first); returns their payloads.
fn send_burst(a: &mut Endpoint, b: &mut Endpoint, count: usize, len: usize) -> Vec<Shared> {
    let mut bufs = Vec::new();
    for i in 0..count {
        let (op, buf) = recv_op(len, 100 + i as u64);
        b.recv(op).unwrap();
        bufs.push(buf);
    }
    for i in 0..count {
        a.send(send_op(b.local_addr(), pattern(i as u64, len), i as u64))
            .unwrap();
    }
    bufs
}

/// Progress both until every send and receive completed (each message
/// from a's canonical address) and check message `i` holds `pattern(i)`.
fn complete(a: &mut Endpoint, b: &mut Endpoint, bufs: &[Shared], sizes: &[usize]) {
    let (mut sends, mut recvs) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while sends < sizes.len() || recvs < sizes.len() {
        assert!(
            Instant::now() < deadline,
            "hung: {sends} sends, {recvs} recvs"
        );
        a.progress();
        b.progress();
        while let Some(c) = a.poll_completion() {
            assert_eq!(c.error, None);
            sends += 1;
        }
        while let Some(c) = b.poll_completion() {
            assert_eq!(c.error, None);
            assert_eq!(c.kind, CompletionKind::Recv);
            assert_eq!(c.src, Some(a.local_addr()), "FI_SOURCE is canonical");
            recvs += 1;
        }
    }
    for (i, b) in bufs.iter().enumerate() {
        assert!(
            *b.0.lock().unwrap() == pattern(i as u64, sizes[i]),
            "message {i} corrupted"
        );
    }
}

/// [`complete`] for `bufs.len()` messages of `len` bytes.
fn complete_burst(a: &mut Endpoint, b: &mut Endpoint, bufs: &[Shared], len: usize) {
    complete(a, b, bufs, &vec![len; bufs.len()]);
}

#[test]
fn a_burst_of_sends_leaves_together_at_its_end() {
    // The loopback defaults: 64 KB MTU, one path; short messages still
    // segment together.
    let cfg = burst_config();
    let (mut a, mut b) = pair(&cfg);
    let bufs = send_burst(&mut a, &mut b, 10, 1000);
    // The first send left at once; the rest wait for the burst's end, and
    // nobody may sleep meanwhile.
    assert_eq!(sent(&a), 1);
    assert_eq!(a.idle_budget(), Some(Duration::ZERO));
    let before = a.stats();
    a.progress_app();
    let after = a.stats();
    assert_eq!(sent(&a), 10);
    assert_eq!(after.gso_sends - before.gso_sends, 1, "{after:?}");
    assert_eq!(after.gso_segments - before.gso_segments, 9, "{after:?}");
    complete_burst(&mut a, &mut b, &bufs, 1000);
    // The run asked for one ACK (its last packet), the first send another.
    assert!(b.engine_stats().acks_sent <= 3, "{:?}", b.engine_stats());
}

#[test]
fn any_other_call_ends_a_burst_and_the_knob_turns_it_off() {
    let cfg = burst_config();
    let (mut a, mut b) = pair(&cfg);
    let bufs = send_burst(&mut a, &mut b, 3, 64);
    assert_eq!(sent(&a), 1);
    // Posting a receive is another kind of call.
    let (op, _spare) = recv_op(64, 999);
    a.recv(op).unwrap();
    assert_eq!(sent(&a), 3);
    complete_burst(&mut a, &mut b, &bufs, 64);

    // A send after a pause longer than FI_UET_SEND_BURST_US leaves at
    // once, with what waited.
    let paced = Config {
        send_burst_us: 100_000,
        ..Config::default()
    };
    let (mut a, mut b) = pair(&paced);
    let mut bufs = send_burst(&mut a, &mut b, 3, 64);
    assert_eq!(sent(&a), 1);
    std::thread::sleep(Duration::from_millis(150));
    let (op, buf) = recv_op(64, 103);
    b.recv(op).unwrap();
    bufs.push(buf);
    a.send(send_op(b.local_addr(), pattern(3, 64), 3)).unwrap();
    assert_eq!(sent(&a), 4);
    complete_burst(&mut a, &mut b, &bufs, 64);

    let off = Config {
        send_burst_us: 0,
        ..Config::default()
    };
    let (mut a, mut b) = pair(&off);
    let bufs = send_burst(&mut a, &mut b, 3, 64);
    assert_eq!(sent(&a), 3);
    complete_burst(&mut a, &mut b, &bufs, 64);
}

#[test]
fn a_full_batch_leaves_without_waiting_for_the_burst_to_end() {
    let cfg = Config {
        mtu: 4096,
        ..burst_config()
    };
    let (mut a, mut b) = pair(&cfg);
    // Far more than a batch of 4 KiB packets (128), posted without a
    // progress call: what the window allows left before the burst ended.
    let bufs = send_burst(&mut a, &mut b, 200, 4000);
    assert!(a.stats().gso_sends > 0, "{:?}", a.stats());
    complete_burst(&mut a, &mut b, &bufs, 4000);
}

#[test]
fn more_hint_holds_even_the_first_send_and_close_sends_what_waits() {
    let cfg = burst_config();
    let (mut a, mut b) = pair(&cfg);
    let (op, buf) = recv_op(64, 1);
    b.recv(op).unwrap();
    a.expect_more_sends();
    a.send(send_op(b.local_addr(), pattern(0, 64), 0)).unwrap();
    assert_eq!(sent(&a), 0);
    // Closing the endpoint sends it.
    drop(a);
    progress_app_until_completion(&mut b);
    assert!(*buf.0.lock().unwrap() == pattern(0, 64));
}

#[test]
fn a_closing_endpoint_acknowledges_the_retransmission_of_a_lost_ack() {
    // A long minimum timeout leaves the test threads ample slack: the
    // sender resends after 50 ms, the receiver lingers up to 100 ms.
    let cfg = Config {
        rto_min_us: 50_000,
        ..ack_config()
    };
    let (a, mut b) = pair(&cfg);
    // As with a sender that never answers a close request (a process
    // that stopped progressing, or another implementation): only its
    // resend tells b that its ACK was lost.
    b.ask_senders_on_close = false;
    let (error, stats) = send_with_lost_acks_then_close(a, b);
    assert_eq!(error, None);
    assert!(stats.retransmits > 0);
}

/// a sends b one message; every ACK b sends is lost until b closes.
/// Returns how a's send ended and a's engine counters then.
fn send_with_lost_acks_then_close(
    mut a: Endpoint,
    mut b: Endpoint,
) -> (Option<crate::ops::CompletionError>, crate::engine::Stats) {
    b.impairer = Some(Impairer::new(FaultConfig {
        drop: 1000,
        seed: 7,
        ..FaultConfig::default()
    }));
    let (op, buf) = recv_op(64, 100);
    b.recv(op).unwrap();
    a.send(send_op(b.local_addr(), pattern(5, 64), 5)).unwrap();
    let sender = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            a.progress();
            if let Some(c) = a.poll_completion() {
                assert_eq!(c.context, 5);
                return (c.error, a.engine_stats());
            }
        }
        panic!("the send never completed");
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "the message never arrived");
        b.progress();
        if let Some(c) = b.poll_completion() {
            assert_eq!((c.context, c.error), (100, None));
            break;
        }
    }
    assert_eq!(*buf.0.lock().unwrap(), pattern(5, 64));
    assert!(b.stats().fault_dropped > 0, "b's ACK was not dropped");
    b.impairer = None;
    drop(b);
    sender.join().unwrap()
}

/// A receiver that never sent to its peer has no round trip to go by and
/// waits for silence only twice its own minimum timeout; a sender whose
/// timeout is longer would resend its last packet (its ACK lost) to a
/// closed port and fail a send that arrived. Closing asks the sender to
/// close instead: it answers at once, and learns that everything arrived.
#[test]
fn a_closing_receiver_asks_its_sender_to_close_instead_of_waiting_for_a_resend() {
    // The receiver's quiet wait (40 ms) leaves a busy machine ample time
    // to answer; the sender would resend only after 150 ms.
    let sender_cfg = Config {
        rto_min_us: 150_000,
        rto_max_us: 300_000,
        max_retries: 2,
        ..ack_config()
    };
    let receiver_cfg = Config {
        rto_min_us: 20_000,
        ..ack_config()
    };
    let a = Endpoint::bind(&sender_cfg, LOOPBACK.parse().unwrap()).unwrap();
    let b = Endpoint::bind(&receiver_cfg, LOOPBACK.parse().unwrap()).unwrap();
    let (error, stats) = send_with_lost_acks_then_close(a, b);
    assert_eq!(error, None);
    // Not by a resend: the answer to the close request carried the news.
    assert_eq!(stats.retransmits, 0);
}

#[test]
fn a_closing_endpoint_waits_longer_than_its_peers_resend() {
    const MS: u64 = 1_000_000;
    // A quiet path: the floor (twice the minimum timeout).
    assert_eq!(linger_quiet_ns(2 * MS, MS, 0), 2 * MS);
    // After a long transfer the peers' timeout grew: twice that.
    assert_eq!(linger_quiet_ns(2 * MS, 7 * MS, 0), 14 * MS);
    // Each round of resends of what we had shows our answer lost again,
    // and the peer's next wait doubles: so does ours.
    assert_eq!(linger_quiet_ns(2 * MS, 7 * MS, 1), 28 * MS);
    assert_eq!(linger_quiet_ns(2 * MS, 7 * MS, 2), 56 * MS);
    // Never past the bound, however long the timeout or many the resends.
    assert_eq!(linger_quiet_ns(2 * MS, 7 * MS, 3), LINGER_MAX_NS);
    assert_eq!(linger_quiet_ns(2 * MS, u64::MAX, u32::MAX), LINGER_MAX_NS);
}

#[test]
fn a_closing_endpoint_sends_what_fault_injection_holds_back() {
    let cfg = Config {
        fault_reorder: 1000,
        fault_delay_us: 10_000_000,
        ..ack_config()
    };
    let (mut a, _) = pair(&cfg);
    let mut b = Endpoint::bind(&ack_config(), LOOPBACK.parse().unwrap()).unwrap();
    let (op, buf) = recv_op(64, 100);
    b.recv(op).unwrap();
    a.send(send_op(b.local_addr(), pattern(6, 64), 6)).unwrap();
    a.progress();
    assert!(a.stats().fault_delayed > 0);
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "the held packet never left");
        b.progress();
        if let Some(c) = b.poll_completion() {
            assert_eq!((c.context, c.error), (100, None));
            break;
        }
    }
    assert_eq!(*buf.0.lock().unwrap(), pattern(6, 64));
}

#[test]
fn host_copies_on_loopback_never_through_a_relay() {
    let relay = TestRelay::start(1 << 40, 1 << 40);
    for through_relay in [false, true] {
        let cfg = Config {
            host_read: true,
            rendezvous_bytes: 16 << 10,
            fabric: if through_relay {
                relay.addr.to_string()
            } else {
                String::new()
            },
            ..config(1)
        };
        let (mut a, mut b) = pair(&cfg);
        let len = 1 << 20;
        let mut copied = Vec::new();
        for context in 1..=3u64 {
            let before = b.engine_stats().host_read_bytes + a.engine_stats().host_write_bytes;
            // A receive buffer in one piece, so the copy can land in it.
            b.recv(recv_into(Box::new(vec![0u8; len]), context))
                .unwrap();
            a.send(send_op(b.local_addr(), pattern(context, len), 10 + context))
                .unwrap();
            let (mut sent, mut received) = (false, false);
            let deadline = Instant::now() + Duration::from_secs(60);
            while !(sent && received) {
                assert!(Instant::now() < deadline, "hung");
                a.progress();
                b.progress();
                while let Some(c) = a.poll_completion() {
                    assert_eq!(c.error, None);
                    sent = true;
                }
                while let Some(c) = b.poll_completion() {
                    assert_eq!((c.error, c.len), (None, len));
                    received = true;
                }
            }
            let after = b.engine_stats().host_read_bytes + a.engine_stats().host_write_bytes;
            copied.push(after - before);
        }
        if through_relay {
            assert_eq!(copied, [0, 0, 0], "copied past the relay");
        } else {
            // The first message proves the sender to the receiver (its
            // pull offers a token the next descriptor returns) and lets the
            // sender find the receiver's holding (its next descriptor offers
            // a token the next pull returns): from the second on, both copy.
            let (b_stats, a_stats) = (b.engine_stats(), a.engine_stats());
            let rest = (len - (16 << 10)) as u64;
            assert_eq!(copied, [0, rest, rest]);
            assert!(a_stats.host_writes > 0 && b_stats.host_reads > 0);
            assert_eq!((b_stats.host_unproven, a_stats.host_unproven), (1, 0));
            // The descriptors left from the sender's connected socket, not
            // its endpoint's: the claim is the peer's address, not a port.
            assert!(a.stats().connected_sends > 0);
        }
    }
}

fn ring_config() -> Config {
    Config {
        host_ring: true,
        ..burst_config()
    }
}

#[test]
fn same_host_rings_carry_every_datagram_intact() {
    let (mut a, mut b) = pair(&ring_config());
    // Small, gathered, several-packet and larger-than-a-lane messages.
    let sizes = [1, 64, 300, 4000, 70_000, 3 << 20];
    exchange(&mut a, &mut b, &sizes);
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sent(&a) + sent(&b), 0, "UDP used: {sa:?} {sb:?}");
    assert!(sa.ring_sent > 0 && sb.ring_sent > 0, "{sa:?} {sb:?}");
    assert_eq!(sa.ring_refused + sb.ring_refused, 0);
}

#[test]
fn a_full_lane_holds_its_sender_back_without_losing_a_datagram() {
    let cfg = Config {
        host_ring: true,
        ..ack_config()
    };
    let (mut a, mut b) = pair(&cfg);
    exchange(&mut a, &mut b, &[64]);
    // More than a lane holds, sent while b takes nothing.
    let count = 3 * host_ring::DEPTH;
    let bufs = send_burst(&mut a, &mut b, count, 1000);
    assert!(a.stats().ring_full > 0, "{:?}", a.stats());
    complete_burst(&mut a, &mut b, &bufs, 1000);
    assert_eq!(sent(&a), 0);
}

#[test]
fn a_receiver_that_does_not_take_holds_up_only_what_goes_to_it() {
    let cfg = Config {
        host_ring: true,
        ..ack_config()
    };
    let (mut a, mut b) = pair(&cfg);
    let mut c = Endpoint::bind(&cfg, LOOPBACK.parse().unwrap()).unwrap();
    exchange(&mut a, &mut b, &[64]);
    exchange(&mut a, &mut c, &[64]);
    // b stops taking: more than its lane holds goes its way.
    let count = 3 * host_ring::DEPTH;
    let bufs = send_burst(&mut a, &mut b, count, 1000);
    let deadline = Instant::now() + Duration::from_secs(60);
    while a.stats().ring_full == 0 {
        assert!(Instant::now() < deadline, "b's lane never filled");
        a.progress();
    }
    // A blocking wait on a may sleep meanwhile (briefly: nothing tells it
    // when b takes), rather than spin.
    loop {
        assert!(Instant::now() < deadline, "no sleep while b's lane is full");
        a.progress();
        if let Some(budget) = a.idle_budget().filter(|b| !b.is_zero()) {
            assert!(budget <= Duration::from_micros(100), "{budget:?}");
            break;
        }
    }
    // A message to c still gets through while b takes nothing.
    let (op, buf) = recv_op(5000, 7);
    c.recv(op).unwrap();
    a.send(send_op(c.local_addr(), pattern(9, 5000), 999))
        .unwrap();
    loop {
        assert!(Instant::now() < deadline, "held up behind b's full lane");
        a.progress();
        c.progress();
        if let Some(done) = c.poll_completion() {
            assert_eq!((done.context, done.error), (7, None));
            break;
        }
    }
    assert!(*buf.0.lock().unwrap() == pattern(9, 5000));
    // b's messages, held meanwhile, all arrive intact once it takes.
    complete_burst(&mut a, &mut b, &bufs, 1000);
    let sa = a.stats();
    assert_eq!((sent(&a), sa.ring_backlog_dropped), (0, 0), "{sa:?}");
}

#[test]
fn rings_need_both_ends_and_stay_off_where_every_datagram_must_cross_the_network() {
    let plain = Endpoint::bind(&burst_config(), LOOPBACK.parse().unwrap()).unwrap();
    let mut a = Endpoint::bind(&ring_config(), LOOPBACK.parse().unwrap()).unwrap();
    let mut plain = plain;
    exchange(&mut a, &mut plain, &[64, 5000]);
    assert_eq!(a.stats().ring_sent, 0);
    assert!(sent(&a) > 0);
    for off in [
        Config {
            ordered: true,
            ..ring_config()
        },
        Config {
            fault_drop: 100,
            ..ring_config()
        },
    ] {
        let (mut a, mut b) = pair(&off);
        exchange(&mut a, &mut b, &[64, 5000]);
        assert_eq!(a.stats().ring_sent + b.stats().ring_sent, 0, "{off:?}");
    }
}

/// Sleep as a blocking wait would, on `ep`'s wait descriptors, for at most
/// `timeout_ms`; poll(2)'s answer (descriptors ready, 0 on timeout).
fn poll_wait_fds(ep: &Endpoint, timeout_ms: libc::c_int) -> libc::c_int {
    let mut fds: Vec<libc::pollfd> = ep
        .wait_fds()
        .into_iter()
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: fds is a live array of fds.len() pollfd structs.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) }
}

#[test]
fn a_sleeping_receiver_is_woken_by_the_doorbell() {
    let (mut a, mut b) = pair(&ring_config());
    exchange(&mut a, &mut b, &[64]);
    // b sleeps on its sockets; a's next message must wake it.
    let (op, buf) = recv_op(64, 7);
    b.recv(op).unwrap();
    assert!(b.begin_sleep());
    a.send(send_op(b.local_addr(), pattern(0, 64), 8)).unwrap();
    let ready = poll_wait_fds(&b, 10_000);
    b.end_sleep();
    assert_eq!(ready, 1, "no doorbell");
    assert_eq!(a.stats().doorbells_sent, 1);
    complete(&mut a, &mut b, &[buf], &[64]);
    assert_eq!(b.stats().doorbells_received, 1);
    // Awake, nobody rings.
    exchange(&mut a, &mut b, &[64]);
    assert_eq!(a.stats().doorbells_sent, 1);
}

#[test]
fn an_endpoint_with_input_in_its_lanes_does_not_sleep() {
    let (mut a, mut b) = pair(&ring_config());
    a.send(send_op(b.local_addr(), pattern(0, 64), 1)).unwrap();
    assert!(!b.begin_sleep());
    assert_eq!(b.idle_budget(), Some(Duration::ZERO));
    let (op, buf) = recv_op(64, 2);
    b.recv(op).unwrap();
    complete(&mut a, &mut b, &[buf], &[64]);
    assert!(b.begin_sleep());
    b.end_sleep();
}

#[test]
fn a_doorbell_that_could_not_be_sent_rings_again() {
    let (mut a, mut b) = pair(&ring_config());
    exchange(&mut a, &mut b, &[64]);
    // a's next send from socket 0 fails once, as a full send buffer or a
    // firewall would fail it: an ICMP error, which IP_RECVERR makes the
    // socket report to that send.
    sys::set_int_option(&a.sockets[0], libc::IPPROTO_IP, libc::IP_RECVERR, 1).unwrap();
    let closed = UdpSocket::bind(LOOPBACK).unwrap().local_addr().unwrap();
    a.sockets[0].send_to(b"x", closed).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let (op, buf) = recv_op(64, 7);
    b.recv(op).unwrap();
    assert!(b.begin_sleep());
    // The doorbell for this message is the send that fails. A lane that
    // is not empty rings no more, so unless a rings again, b sleeps on
    // (a's retransmissions wait in the lane behind the first datagram).
    a.send(send_op(b.local_addr(), pattern(0, 64), 8)).unwrap();
    for _ in 0..8 {
        a.progress();
    }
    let ready = poll_wait_fds(&b, 2_000);
    b.end_sleep();
    assert_eq!(ready, 1, "the sleeper was never woken");
    complete(&mut a, &mut b, &[buf], &[64]);
}

#[test]
fn a_closing_endpoint_resends_what_its_peer_has_not_acknowledged() {
    // The first transmission meets a port nobody holds yet (lost, as on a
    // lossy link); the sender closes right after posting, as an
    // application does after an inject it gets no completion for. The
    // receiver binds that port: the closing sender's retransmission must
    // still reach it.
    let cfg = Config::default();
    let data = pattern(5, 300);
    // A port free a moment ago; another test may take it before b binds
    // it, and then the whole setup is tried again.
    let (a, mut b) = (0..100)
        .find_map(|_| {
            let port = UdpSocket::bind(LOOPBACK).unwrap().local_addr().unwrap();
            let mut a = Endpoint::bind(&cfg, LOOPBACK.parse().unwrap()).unwrap();
            a.send(SendOp {
                level: CompletionLevel::Inject,
                ..send_op(port, data.clone(), 1)
            })
            .unwrap();
            a.progress();
            assert!(sent(&a) > 0);
            Endpoint::bind(&cfg, port).ok().map(|b| (a, b))
        })
        .expect("a free port");
    let (op, buf) = recv_op(300, 2);
    b.recv(op).unwrap();
    let closing = std::thread::spawn(move || drop(a));
    receive_from_closing(&mut b, &buf, &data, closing);
}

/// `b` receives `data` into `buf` from a peer whose close runs in
/// `closing`, without error; returns the receive's completion once the
/// close is over.
fn receive_from_closing(
    b: &mut Endpoint,
    buf: &Shared,
    data: &[u8],
    closing: std::thread::JoinHandle<()>,
) -> Completion {
    let deadline = Instant::now() + Duration::from_secs(10);
    let c = loop {
        assert!(Instant::now() < deadline, "the message never arrived");
        b.progress();
        if let Some(c) = b.poll_completion() {
            assert_eq!((c.kind, c.error), (CompletionKind::Recv, None));
            break c;
        }
    };
    assert_eq!(*buf.0.lock().unwrap(), data);
    closing.join().unwrap();
    c
}

#[test]
fn a_closing_endpoint_serves_the_pull_of_an_inject_complete_rendezvous_send() {
    // An inject-complete send above the rendezvous threshold completes at
    // posting; once its eager part is acknowledged nothing of it is in
    // flight, yet its receiver has still to pull the rest. The sender
    // closes before the receive is posted: the pull must still be served.
    let cfg = Config {
        rendezvous_bytes: 4 << 10,
        // The close lingers for at most 2 x 200 ms: far longer than the
        // receiver below takes to post its receive.
        rto_max_us: 200_000,
        ..Config::default()
    };
    let (mut a, mut b) = pair(&cfg);
    let data = pattern(9, 64 << 10);
    a.send(SendOp {
        level: CompletionLevel::Inject,
        ..send_op(b.local_addr(), data.clone(), 1)
    })
    .unwrap();
    // Until the eager part (one packet) is in at b, unexpected, and
    // acknowledged.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut completed = false;
    while !completed || a.engine_stats().acks_received == 0 {
        assert!(Instant::now() < deadline, "the eager part never went");
        a.progress();
        b.progress();
        if let Some(c) = a.poll_completion() {
            assert_eq!((c.kind, c.error), (CompletionKind::Send, None));
            completed = true;
        }
    }
    let closing = std::thread::spawn(move || drop(a));
    // Long enough for a close that owed nothing to be over.
    std::thread::sleep(Duration::from_millis(50));
    let (op, buf) = recv_op(data.len(), 2);
    b.recv(op).unwrap();
    let c = receive_from_closing(&mut b, &buf, &data, closing);
    assert_eq!(c.len, data.len());
}

/// Large datagrams (the loopback default) leave with their payloads
/// spliced and arrive whole, eager and pulled, and with held and
/// duplicated copies of them in flight; with FI_UET_SPLICE_BYTES=0 they
/// are copied.
#[test]
fn large_payloads_leave_spliced_and_arrive_whole() {
    let (mut a, mut b) = pair(&Config::default());
    exchange(&mut a, &mut b, &[4 << 20, 100, 1 << 20, 70_000]);
    let s = a.stats();
    assert!(s.spliced > 0 && s.splice_fallbacks == 0, "{s:?}");
    let faults = Config {
        fault_dup: 100,
        fault_reorder: 100,
        fault_delay_us: 300,
        ..Config::default()
    };
    let (mut a, mut b) = pair(&faults);
    exchange(&mut a, &mut b, &[1 << 20, 300_000]);
    let s = a.stats();
    assert!(
        s.spliced > 0 && s.fault_duplicated > 0 && s.fault_delayed > 0,
        "{s:?}"
    );
    let copied = Config {
        splice_bytes: 0,
        ..Config::default()
    };
    let (mut a, mut b) = pair(&copied);
    exchange(&mut a, &mut b, &[1 << 20]);
    assert_eq!(a.stats().spliced, 0);
}

/// Two endpoints with the defaults; the receiver throws away what waited
/// unread for more than `stale_ms` (the defaults: 200 ms).
fn stall_pair(stale_ms: u64) -> (Endpoint, Endpoint) {
    let (a, mut b) = pair(&Config::default());
    b.stale_after_ns = stale_ms * 1_000_000;
    (a, b)
}

/// Post a receive of `len` bytes at `b` and send `a` message of
/// `pattern(seed, len)` to it; the receive's buffer.
fn post_message(a: &mut Endpoint, b: &mut Endpoint, len: usize, seed: u64) -> Shared {
    let (op, buf) = recv_op(len, 1 + 2 * seed);
    b.recv(op).unwrap();
    a.send(send_op(b.local_addr(), pattern(seed, len), 2 + 2 * seed))
        .unwrap();
    buf
}

/// Progress `a` alone for `time`.
fn progress_for(a: &mut Endpoint, time: Duration) {
    let until = Instant::now() + time;
    while Instant::now() < until {
        a.progress();
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Send `len` bytes from `a` to `b`, let `b` neither progress nor sleep on
/// its sockets for `stall`, then complete the exchange.
fn send_across_a_stall(a: &mut Endpoint, b: &mut Endpoint, len: usize, stall: Duration) {
    b.progress();
    let buf = post_message(a, b, len, 0);
    progress_for(a, stall);
    complete(a, b, &[buf], &[len]);
}

/// A peer that splices its payloads and gave up on a stalled receiver may
/// have reused the memory its queued datagrams refer to: what waited
/// longer than half that peer's resending is thrown away, and the message
/// still arrives, resent.
#[test]
fn arrivals_that_waited_out_a_long_stall_are_thrown_away_and_resent() {
    let (mut a, mut b) = stall_pair(35);
    send_across_a_stall(&mut a, &mut b, 200_000, Duration::from_millis(100));
    assert!(b.stats().stale_discarded > 0, "{:?}", b.stats());
}

/// A sleep on the sockets watches them: the same gap spent mostly asleep
/// (as in fi_cq_sread) throws nothing away.
#[test]
fn a_gap_spent_asleep_on_the_sockets_throws_nothing_away() {
    let (mut a, mut b) = stall_pair(350);
    b.progress();
    let buf = post_message(&mut a, &mut b, 200_000, 0);
    a.progress();
    assert!(b.begin_sleep());
    std::thread::sleep(Duration::from_millis(200));
    b.end_sleep();
    std::thread::sleep(Duration::from_millis(200));
    complete(&mut a, &mut b, &[buf], &[200_000]);
    assert_eq!(b.stats().stale_discarded, 0);
}

/// Poll `b` every `every` until `a`'s 200 KB message has arrived whole.
fn receive_polling_every(a: &mut Endpoint, b: &mut Endpoint, every: Duration) {
    let buf = post_message(a, b, 200_000, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut sent, mut received) = (false, false);
    while !(sent && received) {
        assert!(
            Instant::now() < deadline,
            "hung: sent {sent}, received {received}"
        );
        let until = Instant::now() + every;
        while Instant::now() < until {
            a.progress();
            sent |= a.poll_completion().is_some_and(|c| c.error.is_none());
            std::thread::sleep(Duration::from_millis(1));
        }
        b.progress();
        received |= b.poll_completion().is_some_and(|c| c.error.is_none());
    }
    assert!(*buf.0.lock().unwrap() == pattern(0, 200_000));
}

/// An endpoint that always polls seldom throws arrivals away after its
/// first long gap only, so it still receives; a gap that outlasts a peer's
/// resending (the give-up) throws them away again.
#[test]
fn an_endpoint_that_always_polls_seldom_still_receives() {
    let (mut a, mut b) = stall_pair(35);
    receive_polling_every(&mut a, &mut b, Duration::from_millis(60));
    let first = b.stats().stale_discarded;
    assert!(first > 0, "the first gap of 60 ms throws what waited away");
    receive_polling_every(&mut a, &mut b, Duration::from_millis(60));
    assert_eq!(
        b.stats().stale_discarded,
        first,
        "60 ms gaps are a habit now"
    );
    // A gap past the give-up of a peer with b's timers: a peer may have
    // given up meanwhile, habit or not.
    b.give_up_ns = 100_000_000;
    post_message(&mut a, &mut b, 200_000, 1);
    progress_for(&mut a, Duration::from_millis(150));
    b.progress();
    assert!(b.stats().stale_discarded > first, "gaps past the give-up");
}

/// Only a packet's first send is spliced: a resend (RETX) leaves copied.
#[test]
fn resends_leave_copied() {
    let rx = UdpSocket::bind(LOOPBACK).unwrap();
    let tx = UdpSocket::bind(LOOPBACK).unwrap();
    tx.set_nonblocking(true).unwrap();
    let mut splicer = Splicer::new(32768).unwrap();
    let payload = pattern(9, 60000);
    let mut buf = vec![0u8; 65536];
    for (flags, spliced) in [(0, 1), (crate::wire::prologue::flags::RETX, 1)] {
        let mut head = [0u8; 56];
        Prologue {
            ptype: crate::wire::PacketType::RudRequest,
            next: NextHeader::SesRequest,
            flags,
        }
        .emit(&mut head);
        let to = rx.local_addr().unwrap();
        let pieces = (&head[..], &payload[..], &[][..]);
        let pool = [tx.try_clone().unwrap()];
        let mut none = ConnectedSockets::new(to, 0, 1 << 20);
        send_datagram(
            &mut SendSockets::new(&pool, &mut none, 0),
            &mut None,
            Some(&mut splicer),
            0,
            to,
            sys::DEFAULT_TOS,
            pieces,
        )
        .unwrap();
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &[&head[..], &payload[..]].concat()[..]);
        assert_eq!(splicer.spliced, spliced, "flags {flags:#x}");
    }
}

/// Wait (up to a few seconds) until `socket` holds an error to report.
fn error_pending(socket: &UdpSocket) -> bool {
    use std::os::fd::AsRawFd;
    let mut poll = libc::pollfd {
        fd: socket.as_raw_fd(),
        events: 0,
        revents: 0,
    };
    // SAFETY: one pollfd of ours, for the call; POLLERR is always reported.
    let n = unsafe { libc::poll(&mut poll, 1, 3000) };
    n == 1 && poll.revents & libc::POLLERR != 0
}

#[test]
fn a_connected_send_after_an_icmp_error_still_leaves() {
    let rx = UdpSocket::bind(LOOPBACK).unwrap();
    let peer = rx.local_addr().unwrap();
    drop(rx);
    let mut table = ConnectedSockets::new(peer, 4, 1 << 20);
    let socket = table.socket_for(peer, 0).unwrap();
    let dest = sys::Dest::Connected(peer);
    let send = |bytes: &[u8]| sys::send_parts(socket, dest, sys::DEFAULT_TOS, &[bytes]);
    // A closed port answers with an ICMP error, which fails the next send
    // whatever it carries...
    send(b"a").unwrap();
    assert!(error_pending(socket));
    let stale = send(b"b").unwrap_err();
    assert_eq!(stale.raw_os_error(), Some(libc::ECONNREFUSED), "{stale}");
    send(b"c").unwrap();
    assert!(error_pending(socket));
    // ...even once the peer is back.
    let Ok(rx) = UdpSocket::bind(peer) else {
        return; // the port was taken meanwhile
    };
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    once_more_if_connected(dest, || send(b"d")).unwrap();
    let mut got = [0u8; 8];
    let (n, _) = rx.recv_from(&mut got).unwrap();
    assert_eq!(&got[..n], b"d");
    // Named destinations are not sent twice.
    let mut calls = 0;
    let named = once_more_if_connected(sys::Dest::Named(peer), || {
        calls += 1;
        Err(std::io::Error::from_raw_os_error(libc::EMSGSIZE))
    });
    assert!(named.is_err());
    assert_eq!(calls, 1);
}
