//! The rootless front-end: a UDP relay on loopback that runs the switch
//! model in real time between provider endpoints.
//!
//! Each host process binds its own loopback address (`127.0.0.<N>` and on
//! into 127.0.0.0/8, the provider's `FI_UET_SRC_ADDR`) and sends every datagram to the relay
//! wrapped in a [`RelayHeader`] naming its destination. The relay maps the
//! datagram's source IP to a host of the topology and the header's address to
//! the destination host, injects the UET bytes into the model at the kernel's
//! receive timestamp, and delivers what the model hands out when its time
//! comes: with a relay header naming the original source, the IP TOS byte set
//! per datagram (CE marks, trimmed DSCP) through an `IP_TOS` control message,
//! and truncated when trimmed.
//!
//! Real time is the model's clock, so the relay must keep up: it counts its
//! socket's receive-queue overflows (`SO_RXQ_OVFL`), failed sends, how late
//! it read each datagram after the kernel received it, and how late each
//! delivery left compared to its model time; [`RelayReport`] says whether
//! the run kept up.

use std::collections::{BTreeMap, HashMap};
use std::io::IoSliceMut;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::sys::socket::{
    self, sockopt, ControlMessage, ControlMessageOwned, MsgFlags, SockaddrStorage,
};
use serde::Serialize;
use uet::wire::RelayHeader;

use crate::model::{Delivery, Fabric, FabricTotals, Packet, PortCounters, Sample};

/// Largest datagram the relay accepts (relay header + UET bytes).
const MAX_DATAGRAM: usize = 65_536;

/// Lag histograms: 1 us buckets up to 10 ms, then one for everything later.
const LAG_BUCKETS: usize = 10_001;

fn record_lag(histogram: &mut [u64], lag_ns: u64) {
    let b = ((lag_ns / 1000) as usize).min(histogram.len() - 1);
    histogram[b] += 1;
}

/// The `q` quantile of a lag histogram, ns (rounded up to its bucket).
fn lag_percentile(histogram: &[u64], q: f64) -> u64 {
    let total: u64 = histogram.iter().sum();
    if total == 0 {
        return 0;
    }
    let want = (total as f64 * q).ceil() as u64;
    let mut acc = 0;
    for (i, c) in histogram.iter().enumerate() {
        acc += c;
        if acc >= want {
            return (i as u64 + 1) * 1000;
        }
    }
    histogram.len() as u64 * 1000
}

#[derive(Clone, Debug)]
pub struct RelaySettings {
    /// Where the relay listens (the provider's `FI_UET_FABRIC`).
    pub listen: SocketAddr,
    /// IP address of each host, in topology order.
    pub hosts: Vec<IpAddr>,
    /// A delivery leaving later than this after its model time counts as
    /// late; a run whose 99th percentile is later, or that read 1% of its
    /// datagrams later than this after they arrived, did not keep up.
    pub max_lag_ns: u64,
    /// Socket buffer requested for the relay socket, bytes.
    pub sockbuf: usize,
    /// Ask for SCHED_FIFO priority for the relay thread (through `chrt`,
    /// which needs root or CAP_SYS_NICE): on a loaded machine a relay at
    /// normal priority falls behind the clock.
    pub realtime: bool,
}

impl RelaySettings {
    /// Host `i` at the loopback address `first + i` places after
    /// `127.0.0.0`, carrying into the higher octets (`127.0.1.0` follows
    /// `127.0.0.255`): Linux answers on the whole of 127.0.0.0/8, and a
    /// fabric may have thousands of hosts, each needing its own address.
    pub fn loopback_hosts(n: usize, first: u8) -> Result<Vec<IpAddr>, RelayError> {
        let base = u32::from(Ipv4Addr::new(127, 0, 0, first));
        // 127.255.255.255 is loopback's broadcast address.
        let room = (u32::from(Ipv4Addr::new(127, 255, 255, 254)) - base) as usize + 1;
        if n > room {
            return Err(RelayError::TooManyHosts { hosts: n, first });
        }
        Ok((0..n)
            .map(|i| IpAddr::V4(Ipv4Addr::from(base + i as u32)))
            .collect())
    }
}

/// Counters of the relay itself.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RelayCounters {
    pub received: u64,
    pub delivered: u64,
    pub malformed: u64,
    pub unknown_source: u64,
    pub unknown_destination: u64,
    /// Datagrams the kernel dropped before the relay read them.
    pub socket_drops: u64,
    pub send_errors: u64,
    /// Datagrams that arrived without an ECN-capable codepoint (never
    /// marked; the provider sends data as ECT(0)).
    pub not_ect: u64,
    /// Deliveries later than `max_lag_ns`.
    pub late: u64,
    pub max_lag_ns: u64,
    /// Largest delay between the kernel's receive timestamp and the time
    /// the relay read the datagram and handed it to the model.
    pub max_ingress_lag_ns: u64,
    /// The relay thread ran at real-time (SCHED_FIFO) priority.
    pub realtime: bool,
}

/// One port in the report.
#[derive(Clone, Debug, Serialize)]
pub struct PortReport {
    pub name: String,
    pub gbps: f64,
    pub buffer_bytes: u64,
    pub kmin_bytes: u64,
    pub kmax_bytes: u64,
    pub counters: PortCounters,
    pub series: Vec<Sample>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RelayReport {
    pub kept_up: bool,
    /// CLOCK_REALTIME ns of model time 0 (aligns the series with host times).
    pub epoch_realtime_ns: u64,
    /// Why the run did not keep up (empty when it did).
    pub problems: Vec<String>,
    pub duration_ns: u64,
    pub lag_p50_ns: u64,
    pub lag_p99_ns: u64,
    /// 99th percentile of the delay between the kernel's receive
    /// timestamp of a datagram and the relay reading it.
    pub ingress_lag_p99_ns: u64,
    pub relay: RelayCounters,
    pub fabric: FabricTotals,
    pub base_rtt_ns: u64,
    pub bdp_bytes: u64,
    pub sample_ns: u64,
    pub ports: Vec<PortReport>,
    pub pairs: Vec<PairSeries>,
}

pub struct Relay {
    socket: UdpSocket,
    fabric: Fabric,
    settings: RelaySettings,
    hosts: HashMap<IpAddr, usize>,
    /// Wall-clock origin of model time (CLOCK_REALTIME, the clock of the
    /// kernel's receive timestamps).
    epoch: SystemTime,
    counters: RelayCounters,
    /// Delivery lag histogram in microsecond buckets (last bucket:
    /// everything later).
    lag_us: Vec<u64>,
    /// Ingress lag (kernel receive timestamp to the relay reading the
    /// datagram), in the same buckets.
    ingress_lag_us: Vec<u64>,
    pairs: PairBytes,
}

/// Delivered data bytes of one host pair over time.
#[derive(Clone, Debug, Serialize)]
pub struct PairSeries {
    pub src: usize,
    pub dst: usize,
    /// (bucket start ns, bytes delivered in the bucket)
    pub bytes: Vec<(u64, u64)>,
}

#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("relay socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("relay socket option: {0}")]
    Sys(#[from] nix::Error),
    #[error("relay needs one address per host: {hosts} hosts, {addrs} addresses")]
    Hosts { hosts: usize, addrs: usize },
    #[error("hosts {a} and {b} share the address {addr}")]
    SharedAddress { a: usize, b: usize, addr: IpAddr },
    #[error("{hosts} hosts do not fit in 127.0.0.0/8 from 127.0.0.{first}")]
    TooManyHosts { hosts: usize, first: u8 },
}

/// Move the calling thread to SCHED_FIFO priority 20 with `chrt` (no
/// unsafe code needed); true when it worked.
fn set_realtime_priority() -> bool {
    let tid = nix::unistd::gettid();
    std::process::Command::new("chrt")
        .args(["-f", "-p", "20", &tid.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn ns_since(epoch: SystemTime, t: SystemTime) -> u64 {
    t.duration_since(epoch).unwrap_or(Duration::ZERO).as_nanos() as u64
}

impl Relay {
    pub fn bind(fabric: Fabric, settings: RelaySettings) -> Result<Relay, RelayError> {
        if settings.hosts.len() != fabric.hosts.len() {
            return Err(RelayError::Hosts {
                hosts: fabric.hosts.len(),
                addrs: settings.hosts.len(),
            });
        }
        let mut hosts = HashMap::new();
        for (i, a) in settings.hosts.iter().enumerate() {
            // One address per host: the source address is all the relay
            // has to tell hosts apart.
            if let Some(j) = hosts.insert(*a, i) {
                return Err(RelayError::SharedAddress {
                    a: j,
                    b: i,
                    addr: *a,
                });
            }
        }
        let s = socket2::Socket::new(
            socket2::Domain::for_address(settings.listen),
            socket2::Type::DGRAM,
            None,
        )?;
        s.bind(&settings.listen.into())?;
        s.set_nonblocking(true)?;
        let socket: UdpSocket = s.into();
        // Bursts of every sender's window arrive at once: ask for the
        // buffer past rmem_max when privileged, else as much as allowed. A
        // smaller buffer only shows up as socket drops in the report.
        let size = settings.sockbuf;
        if socket::setsockopt(&socket, sockopt::RcvBufForce, &size).is_err() {
            let _ = socket::setsockopt(&socket, sockopt::RcvBuf, &size);
        }
        if socket::setsockopt(&socket, sockopt::SndBufForce, &size).is_err() {
            let _ = socket::setsockopt(&socket, sockopt::SndBuf, &size);
        }
        socket::setsockopt(&socket, sockopt::RxqOvfl, &1)?;
        socket::setsockopt(&socket, sockopt::ReceiveTimestampns, &true)?;
        if settings.listen.is_ipv4() {
            socket::setsockopt(&socket, sockopt::IpRecvTos, &true)?;
        }
        Ok(Relay {
            socket,
            fabric,
            settings,
            hosts,
            epoch: SystemTime::now(),
            counters: RelayCounters::default(),
            lag_us: vec![0; LAG_BUCKETS],
            ingress_lag_us: vec![0; LAG_BUCKETS],
            pairs: PairBytes::default(),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    pub fn fabric_mut(&mut self) -> &mut Fabric {
        &mut self.fabric
    }

    fn now_ns(&self) -> u64 {
        ns_since(self.epoch, SystemTime::now())
    }

    /// Relay until `stop` is set. Model time starts now.
    pub fn run(&mut self, stop: &AtomicBool) {
        self.run_from(stop, &AtomicU64::new(0));
    }

    /// As [`Relay::run`], and once `origin` holds a CLOCK_REALTIME time
    /// (ns, non-zero) schedule the fabric's link events relative to it
    /// (after [`Fabric::hold_link_events`]): the hosts' common start.
    pub fn run_from(&mut self, stop: &AtomicBool, origin: &AtomicU64) {
        let mut scheduled = false;
        // Wake-ups within a microsecond of the requested time, not the
        // default 50 us slack.
        let _ = nix::sys::prctl::set_timerslack(1_000);
        if self.settings.realtime {
            self.counters.realtime = set_realtime_priority();
        }
        self.epoch = SystemTime::now();
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let mut cmsg = nix::cmsg_space!(u32, nix::sys::time::TimeSpec, i32);
        while !stop.load(Ordering::Relaxed) {
            if !scheduled {
                let at = origin.load(Ordering::Acquire);
                if at != 0 {
                    scheduled = true;
                    let t = UNIX_EPOCH + Duration::from_nanos(at);
                    self.fabric.schedule_link_events(ns_since(self.epoch, t));
                }
            }
            let now = self.now_ns();
            for d in self.fabric.advance(now) {
                self.deliver(d);
            }
            // Read what waits, but stop as soon as a delivery falls due so
            // a burst of arrivals does not delay departures.
            let mut got = 0;
            while got < 64 {
                match self.receive(&mut buf, &mut cmsg) {
                    Ok(true) => got += 1,
                    Ok(false) | Err(_) => break,
                }
                if self
                    .fabric
                    .next_event_time()
                    .is_some_and(|t| t <= self.now_ns())
                {
                    break;
                }
            }
            if got > 0 {
                continue;
            }
            self.wait();
        }
        self.fabric.finish();
    }

    /// Sleep until a datagram arrives or the model's next event is due.
    /// Only the last few microseconds are spun: a relay at real-time
    /// priority that spins holds its core, and host processes woken on that
    /// core then wait for the scheduler to move them (milliseconds), which
    /// shows up as RTT the fabric did not add. With a 1 us timer slack a
    /// real-time thread's ppoll overshoots by a few microseconds.
    fn wait(&self) {
        const SPIN_NS: u64 = 3_000;
        const MAX_SLEEP_NS: u64 = 2_000_000;
        let now = self.now_ns();
        let until_next = self
            .fabric
            .next_event_time()
            .map(|t| t.saturating_sub(now))
            .unwrap_or(MAX_SLEEP_NS)
            .min(MAX_SLEEP_NS);
        if until_next <= SPIN_NS {
            std::hint::spin_loop();
            return;
        }
        let sleep = until_next - SPIN_NS;
        let mut fds = [nix::poll::PollFd::new(
            self.socket.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        let ts = nix::sys::time::TimeSpec::from_duration(Duration::from_nanos(sleep));
        let _ = nix::poll::ppoll(&mut fds, Some(ts), None);
    }

    /// Read one datagram and hand it to the model; false when none waits.
    fn receive(&mut self, buf: &mut [u8], cmsg: &mut [u8]) -> nix::Result<bool> {
        let (n, from, overflow, stamp, tos) = {
            let mut iov = [IoSliceMut::new(buf)];
            let msg = match socket::recvmsg::<SockaddrStorage>(
                self.socket.as_raw_fd(),
                &mut iov,
                Some(cmsg),
                MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(m) => m,
                Err(nix::errno::Errno::EAGAIN) => return Ok(false),
                Err(e) => return Err(e),
            };
            let mut overflow = None;
            let mut stamp = None;
            let mut tos = 0u8;
            if let Ok(it) = msg.cmsgs() {
                for c in it {
                    match c {
                        ControlMessageOwned::RxqOvfl(d) => overflow = Some(d),
                        ControlMessageOwned::Ipv4Tos(t) => tos = t,
                        ControlMessageOwned::ScmTimestampns(ts) => {
                            stamp = Some(
                                UNIX_EPOCH + Duration::new(ts.tv_sec() as u64, ts.tv_nsec() as u32),
                            )
                        }
                        _ => {}
                    }
                }
            }
            let from = msg.address.and_then(|a| {
                a.as_sockaddr_in()
                    .map(|v| SocketAddr::V4((*v).into()))
                    .or_else(|| a.as_sockaddr_in6().map(|v| SocketAddr::V6((*v).into())))
            });
            (msg.bytes, from, overflow, stamp, tos)
        };
        if let Some(d) = overflow {
            // The kernel reports its cumulative count of drops.
            self.counters.socket_drops = self.counters.socket_drops.max(d as u64);
        }
        self.counters.received += 1;
        // A datagram read late enters the model late (at the kernel's
        // timestamp if the model has not passed it, else now): part of
        // keeping up, as the delivery lag is.
        let now = self.now_ns();
        let at = stamp
            .map(|t| ns_since(self.epoch, t))
            .unwrap_or(now)
            .min(now);
        self.counters.max_ingress_lag_ns = self.counters.max_ingress_lag_ns.max(now - at);
        record_lag(&mut self.ingress_lag_us, now - at);
        let Some(from) = from else {
            self.counters.malformed += 1;
            return Ok(true);
        };
        let Ok(header) = RelayHeader::parse(&buf[..n]) else {
            self.counters.malformed += 1;
            return Ok(true);
        };
        let Some(&src_host) = self.hosts.get(&from.ip()) else {
            self.counters.unknown_source += 1;
            return Ok(true);
        };
        let Some(&dst_host) = self.hosts.get(&header.addr.ip()) else {
            self.counters.unknown_destination += 1;
            return Ok(true);
        };
        if !uet::wire::Ecn::from_tos(tos).is_ect() {
            self.counters.not_ect += 1;
        }
        let packet = Packet {
            src: from,
            dst: header.addr,
            dst_host,
            tos,
            data: buf[RelayHeader::LEN..n].to_vec(),
            tag: 0,
        };
        self.fabric.send(at, src_host, packet);
        Ok(true)
    }

    fn deliver(&mut self, d: Delivery) {
        let mut out = Vec::with_capacity(RelayHeader::LEN + d.packet.data.len());
        out.resize(RelayHeader::LEN, 0);
        RelayHeader { addr: d.packet.src }.emit(&mut out);
        out.extend_from_slice(&d.packet.data);
        let dst = SockaddrStorage::from(d.packet.dst);
        let tos = d.packet.tos;
        let cmsgs = [ControlMessage::Ipv4Tos(&tos)];
        let iov = [std::io::IoSlice::new(&out)];
        let sent = socket::sendmsg(
            self.socket.as_raw_fd(),
            &iov,
            if d.packet.dst.is_ipv4() { &cmsgs } else { &[] },
            MsgFlags::MSG_DONTWAIT,
            Some(&dst),
        );
        if sent.is_err() {
            self.counters.send_errors += 1;
            return;
        }
        self.counters.delivered += 1;
        if let Some(&src) = self.hosts.get(&d.packet.src.ip()) {
            self.pairs
                .record(src, &d, self.fabric.config.switch.sample_ns);
        }
        let lag = self.now_ns().saturating_sub(d.time);
        self.counters.max_lag_ns = self.counters.max_lag_ns.max(lag);
        if lag > self.settings.max_lag_ns {
            self.counters.late += 1;
        }
        record_lag(&mut self.lag_us, lag);
    }

    /// Counters, lag, per-port series and the verdict on keeping up.
    pub fn report(&self) -> RelayReport {
        let c = self.counters.clone();
        let p99 = lag_percentile(&self.lag_us, 0.99);
        let ingress_p99 = lag_percentile(&self.ingress_lag_us, 0.99);
        let mut problems = Vec::new();
        if c.socket_drops > 0 {
            problems.push(format!(
                "the kernel dropped {} datagrams at the relay socket",
                c.socket_drops
            ));
        }
        if c.send_errors > 0 {
            problems.push(format!("{} deliveries failed to send", c.send_errors));
        }
        if p99 > self.settings.max_lag_ns {
            problems.push(format!(
                "99% of deliveries left within {} us of their model time, above the {} us limit",
                p99 / 1000,
                self.settings.max_lag_ns / 1000
            ));
        }
        if ingress_p99 > self.settings.max_lag_ns {
            problems.push(format!(
                "99% of datagrams were read within {} us of their arrival, above the {} us \
                 limit (they entered the model late)",
                ingress_p99 / 1000,
                self.settings.max_lag_ns / 1000
            ));
        }
        let f = &self.fabric;
        RelayReport {
            kept_up: problems.is_empty(),
            epoch_realtime_ns: ns_since(UNIX_EPOCH, self.epoch),
            problems,
            duration_ns: self.now_ns(),
            lag_p50_ns: lag_percentile(&self.lag_us, 0.5),
            lag_p99_ns: p99,
            ingress_lag_p99_ns: ingress_p99,
            relay: c,
            fabric: f.totals().clone(),
            base_rtt_ns: f.max_base_rtt_ns(),
            bdp_bytes: f.bdp_bytes(),
            sample_ns: f.config.switch.sample_ns,
            ports: port_reports(f),
            pairs: self.pairs.series(),
        }
    }
}

/// Bytes of whole data packets delivered per (source host, destination
/// host) and time bucket: the throughput plot, for both front-ends. The
/// UET datagram counts whole (its headers and an ACK riding on it
/// included), and so does each retransmission; trimmed headers do not
/// count.
#[derive(Clone, Debug, Default)]
pub struct PairBytes {
    pairs: BTreeMap<(usize, usize), BTreeMap<u64, u64>>,
    /// Bucket width of what is recorded, ns.
    width: u64,
}

impl PairBytes {
    /// Count delivery `d` from host `src` in buckets of `bucket_ns`, the
    /// fabric's current sample width: when the fabric has coarsened its
    /// series (a multiple of the old width), the buckets so far merge
    /// into the wider ones, so the pairs' series stay as long as a port's.
    pub fn record(&mut self, src: usize, d: &Delivery, bucket_ns: u64) {
        let tos = d.packet.tos;
        if uet::wire::ip::trim_of(tos).is_some()
            || crate::model::classify(&d.packet.data, tos) != crate::model::Class::Data
        {
            return;
        }
        let width = bucket_ns.max(1);
        if width != self.width {
            for buckets in self.pairs.values_mut() {
                let old = std::mem::take(buckets);
                for (t, n) in old {
                    *buckets.entry(t - t % width).or_default() += n;
                }
            }
            self.width = width;
        }
        let bucket = d.time - d.time % width;
        *self
            .pairs
            .entry((src, d.host))
            .or_default()
            .entry(bucket)
            .or_default() += d.packet.data.len() as u64;
    }

    pub fn series(&self) -> Vec<PairSeries> {
        self.pairs
            .iter()
            .map(|(&(src, dst), b)| PairSeries {
                src,
                dst,
                bytes: b.iter().map(|(&t, &n)| (t, n)).collect(),
            })
            .collect()
    }
}

/// Counters and time series of every port that carried a packet or lost
/// one to a failed link.
pub fn port_reports(f: &Fabric) -> Vec<PortReport> {
    f.ports
        .iter()
        .enumerate()
        .filter(|(_, p)| p.counters.tx_packets > 0 || p.counters.drops_down > 0)
        .map(|(i, p)| PortReport {
            name: f.port_name(i),
            gbps: p.base_gbps,
            buffer_bytes: p.buffer_bytes,
            kmin_bytes: p.kmin_bytes,
            kmax_bytes: p.kmax_bytes,
            counters: p.counters.clone(),
            series: p.series.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FabricConfig;

    #[test]
    fn pair_buckets_follow_the_fabric_when_it_widens_them() {
        let delivery = |time: u64| {
            let mut data = vec![0u8; 100];
            uet::wire::Prologue {
                ptype: uet::wire::PacketType::RudRequest,
                next: uet::wire::NextHeader::SesRequest,
                flags: 0,
            }
            .emit(&mut data);
            let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
            Delivery {
                time,
                host: 1,
                packet: Packet {
                    src: addr,
                    dst: addr,
                    dst_host: 1,
                    tos: 0,
                    data,
                    tag: 0,
                },
            }
        };
        let mut pairs = PairBytes::default();
        for t in [500, 1500, 2500] {
            pairs.record(0, &delivery(t), 1000);
        }
        pairs.record(0, &delivery(3500), 2000);
        let s = pairs.series();
        assert_eq!(s[0].bytes, vec![(0, 200), (2000, 200)]);
    }

    #[test]
    fn reading_late_fails_the_verdict() {
        let hosts = RelaySettings::loopback_hosts(2, 90).unwrap();
        let mut relay = Relay::bind(
            Fabric::new(FabricConfig::default()).unwrap(),
            RelaySettings {
                listen: "127.0.0.1:0".parse().unwrap(),
                hosts: hosts.clone(),
                max_lag_ns: 1_000_000,
                sockbuf: 1 << 16,
                realtime: false,
            },
        )
        .unwrap();
        let client = UdpSocket::bind(SocketAddr::new(hosts[0], 0)).unwrap();
        let mut datagram = vec![0u8; RelayHeader::LEN + 100];
        RelayHeader {
            addr: SocketAddr::new(hosts[1], 9),
        }
        .emit(&mut datagram);
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let mut cmsg = nix::cmsg_space!(u32, nix::sys::time::TimeSpec, i32);
        // Each datagram waits in the socket 20 times the limit before the
        // relay reads it; nothing is delivered, so only reading is late.
        // Linux turns receive timestamps on a moment after the first
        // socket asks (a deferred static key): until then it stamps a
        // datagram when it is read, so send again until one carries its
        // arrival time.
        const WAIT_NS: u64 = 20_000_000;
        for _ in 0..50 {
            client
                .send_to(&datagram, relay.local_addr().unwrap())
                .unwrap();
            std::thread::sleep(Duration::from_nanos(WAIT_NS));
            assert!(relay.receive(&mut buf, &mut cmsg).unwrap());
            if relay.counters.max_ingress_lag_ns >= WAIT_NS {
                break;
            }
        }
        assert!(relay.counters.max_ingress_lag_ns >= WAIT_NS);
        let report = relay.report();
        assert_eq!(report.relay.delivered, 0);
        assert!(!report.kept_up, "{:?}", report.problems);
        assert!(report.ingress_lag_p99_ns > 1_000_000);
    }
}
