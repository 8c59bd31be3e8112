//! The switch model: a deterministic discrete-event fabric in virtual time.
//!
//! Sans-IO like the provider's core: the caller hands packets in with
//! [`Fabric::send`] at a time `now` (ns), asks for everything due up to a time
//! with [`Fabric::advance`], and learns when the next thing happens from
//! [`Fabric::next_event_time`]. No sockets, no clocks; randomness (ECN marks,
//! loss, ECMP salts) comes from the configured seed, so a run is a function
//! of its inputs.
//!
//! Every directed link is an egress [`Port`] of the node it leaves: a data
//! queue of bounded size with RED ECN marking at dequeue, a strict-priority
//! control queue (ACK, NACK, control, trimmed headers), a line rate and a
//! propagation delay. A data packet that finds its data queue full is trimmed
//! to its UET headers (one no longer than them is only marked trimmed) and
//! moved to the control queue, or dropped when trimming is off. Switches
//! choose among equal-cost next hops by hashing the 5-tuple with a
//! per-switch salt, so the UDP source port (the sender's entropy) picks the
//! spine.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::net::{IpAddr, SocketAddr};

use serde::Serialize;
use uet::wire::ip::{self, Ecn};
use uet::wire::{ack_trailer, PacketType, Prologue};

use crate::config::{FabricConfig, LinkAction, TopologyKind, FRAME_OVERHEAD, TRIM_KEEP};

/// A packet handed to the fabric: the UET bytes of one datagram, its IP TOS
/// byte and its addresses. `tag` is the front-end's, carried unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    /// Index of the destination host in the topology.
    pub dst_host: usize,
    pub tos: u8,
    pub data: Vec<u8>,
    pub tag: u64,
}

impl Packet {
    /// Bytes the packet occupies on a link.
    pub fn wire_len(&self) -> usize {
        self.data.len() + FRAME_OVERHEAD
    }
}

/// A packet leaving the fabric at a host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Virtual time the last bit arrived at the host, ns.
    pub time: u64,
    pub host: usize,
    pub packet: Packet,
}

/// How a switch treats a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// A request carrying payload: data queue, may be marked and trimmed.
    Data,
    /// ACK, NACK, control, or a header already trimmed: control queue.
    Control,
}

/// Classify UET bytes plus TOS. Bytes that do not parse as UET are data
/// (never trimmed: the switch cannot know where their headers end).
pub fn classify(data: &[u8], tos: u8) -> Class {
    if ip::trim_of(tos).is_some() {
        return Class::Control;
    }
    match Prologue::parse(data) {
        Ok(p) => match p.ptype {
            PacketType::Ack
            | PacketType::AckCc
            | PacketType::AckCcx
            | PacketType::Nack
            | PacketType::NackCcx
            | PacketType::Control => Class::Control,
            _ => Class::Data,
        },
        Err(_) => Class::Data,
    }
}

/// Whether `data` is a request flagged as a retransmission.
pub fn is_retransmission(data: &[u8]) -> bool {
    match Prologue::parse(data) {
        Ok(p) => {
            classify(data, 0) == Class::Data && p.flags & uet::wire::prologue::flags::RETX != 0
        }
        Err(_) => false,
    }
}

/// RED marking probability for a data-queue occupancy `q` (bytes) between
/// thresholds `kmin` and `kmax`: 0 at or below kmin, 1 at or above kmax,
/// linear in between.
pub fn mark_probability(q: u64, kmin: u64, kmax: u64) -> f64 {
    if q <= kmin {
        0.0
    } else if q >= kmax {
        1.0
    } else {
        (q - kmin) as f64 / (kmax - kmin) as f64
    }
}

/// Time to put `bytes` on a link of `gbps` (1 Gb/s = 1 bit/ns), ps.
fn ser_ps(bytes: usize, gbps: f64) -> u64 {
    (bytes as f64 * 8000.0 / gbps).round() as u64
}

/// Deterministic 64-bit mixer (SplitMix64 finaliser).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn ip_bits(a: IpAddr) -> u64 {
    match a {
        IpAddr::V4(v) => u32::from(v) as u64,
        IpAddr::V6(v) => {
            let x = u128::from(v);
            (x as u64) ^ ((x >> 64) as u64)
        }
    }
}

/// ECMP hash of the UDP 5-tuple with a switch's salt.
pub fn flow_hash(src: SocketAddr, dst: SocketAddr, salt: u64) -> u64 {
    const UDP: u64 = 17;
    let mut h = mix(salt ^ UDP);
    for v in [
        ip_bits(src.ip()),
        ip_bits(dst.ip()),
        ((src.port() as u64) << 16) | dst.port() as u64,
    ] {
        h = mix(h ^ v);
    }
    h
}

/// Small deterministic generator for marking and loss decisions.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeKind {
    Host,
    Switch,
}

#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub kind: NodeKind,
    /// Egress ports of this node (indices into the fabric's ports).
    pub ports: Vec<usize>,
    salt: u64,
    /// Per destination host: the equal-cost egress ports toward it.
    routes: Vec<Vec<usize>>,
}

/// Counters of one egress port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PortCounters {
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub marks: u64,
    pub trims: u64,
    /// Data packets dropped because the queue was full (trimming off, or a
    /// host NIC queue) and control packets dropped for a full control queue.
    pub drops_full: u64,
    /// Packets lost to a link that was down.
    pub drops_down: u64,
    /// Packets lost to a flaky link.
    pub drops_loss: u64,
    pub max_queue_bytes: u64,
}

/// One time-series bucket of a port.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Sample {
    /// Start of the bucket, ns.
    pub t_ns: u64,
    /// Largest data-queue occupancy seen in the bucket, bytes.
    pub max_queue_bytes: u64,
    pub tx_bytes: u64,
    pub marks: u64,
    pub trims: u64,
    pub drops: u64,
}

/// Most time-series samples a port keeps, and all ports together: past
/// either every port's buckets double in width (`switch.sample_ns`), so a
/// relay left running or a sim of thousands of hosts keeps a coarser
/// series instead of an ever longer one. 2^16 buckets of the default
/// 100 us are 6.5 s of traffic.
pub const MAX_PORT_SAMPLES: usize = 1 << 16;
pub const MAX_SAMPLES: usize = 1 << 22;

impl Sample {
    /// Fold `o` (another bucket's counts) into this one.
    fn merge(&mut self, o: &Sample) {
        self.max_queue_bytes = self.max_queue_bytes.max(o.max_queue_bytes);
        self.tx_bytes += o.tx_bytes;
        self.marks += o.marks;
        self.trims += o.trims;
        self.drops += o.drops;
    }
}

/// Append `s` to `series` in buckets `width` wide, merged into the last
/// sample when it falls in the same bucket.
fn push_merged(series: &mut Vec<Sample>, mut s: Sample, width: u64) {
    s.t_ns -= s.t_ns % width;
    match series.last_mut() {
        Some(last) if last.t_ns == s.t_ns => last.merge(&s),
        _ => series.push(s),
    }
}

#[derive(Clone, Debug)]
pub struct Port {
    /// Node the port belongs to and the node at the far end.
    pub from: usize,
    pub to: usize,
    /// Configured rate, Gb/s (1 Gb/s = 1 bit/ns), and the current one.
    pub base_gbps: f64,
    pub gbps: f64,
    pub delay_ns: u64,
    /// Switch port (marks and trims) or host NIC (neither).
    pub is_switch: bool,
    /// Its far end is a host: a trim here is at the last hop.
    pub to_host: bool,
    pub buffer_bytes: u64,
    pub control_buffer_bytes: u64,
    pub kmin_bytes: u64,
    pub kmax_bytes: u64,
    pub up: bool,
    /// Down long enough that routing no longer uses it.
    pub routed_around: bool,
    pub loss: f64,
    data: VecDeque<Packet>,
    data_bytes: u64,
    control: VecDeque<Packet>,
    control_bytes: u64,
    busy: bool,
    /// When the last bit of the last packet left, ps: back-to-back
    /// packets start there, not at the whole ns its event was rounded up
    /// to, so the port runs at exactly its rate however the packet sizes
    /// divide into it.
    free_ps: u64,
    pub counters: PortCounters,
    pub series: Vec<Sample>,
    bucket: Sample,
}

impl Port {
    pub fn queue_bytes(&self) -> u64 {
        self.data_bytes
    }
    pub fn control_queue_bytes(&self) -> u64 {
        self.control_bytes
    }

    /// Move the time-series bucket forward to the one holding `now`; true
    /// when that closed a bucket into the series.
    fn roll(&mut self, now: u64, width: u64) -> bool {
        let start = now - now % width;
        if start != self.bucket.t_ns {
            let done = std::mem::take(&mut self.bucket);
            let pushed = done.tx_bytes + done.marks + done.trims + done.drops > 0
                || done.max_queue_bytes > 0;
            if pushed {
                self.series.push(done);
            }
            self.bucket.t_ns = start;
            self.bucket.max_queue_bytes = self.data_bytes;
            return pushed;
        }
        false
    }

    /// Re-bucket the series (and the open bucket) into buckets `width`
    /// wide, a multiple of the old width.
    fn coarsen(&mut self, width: u64) {
        for s in std::mem::take(&mut self.series) {
            push_merged(&mut self.series, s, width);
        }
        self.bucket.t_ns -= self.bucket.t_ns % width;
        if self
            .series
            .last()
            .is_some_and(|l| l.t_ns == self.bucket.t_ns)
        {
            if let Some(l) = self.series.pop() {
                self.bucket.merge(&l);
            }
        }
    }

    fn note_queue(&mut self) {
        self.bucket.max_queue_bytes = self.bucket.max_queue_bytes.max(self.data_bytes);
        self.counters.max_queue_bytes = self.counters.max_queue_bytes.max(self.data_bytes);
    }

    fn drop_all(&mut self) -> u64 {
        let n = (self.data.len() + self.control.len()) as u64;
        self.data.clear();
        self.control.clear();
        self.data_bytes = 0;
        self.control_bytes = 0;
        n
    }
}

#[derive(Debug)]
enum EventKind {
    /// A packet's last bit reaches a node.
    Arrive { node: usize, packet: Packet },
    /// A port finished sending and may start the next packet.
    PortFree { port: usize },
    /// A scheduled link event (index into the configured events).
    Link { index: usize },
    /// Routing converged around a failed link: switches stop choosing
    /// these ports (if they are still down).
    Reroute { ports: Vec<usize> },
}

#[derive(Debug)]
struct Event {
    time: u64,
    /// Orders events of the same instant: seeded random, so no sender
    /// systematically comes first (hosts hand in their packets in index
    /// order, and a synchronized incast's first sender would win every
    /// freed queue slot); `seq` only breaks a tie of keys.
    key: u64,
    seq: u64,
    kind: EventKind,
}

impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        (self.time, self.key, self.seq) == (o.time, o.key, o.seq)
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    // Reversed: BinaryHeap is a max-heap and the earliest event goes first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.time, o.key, o.seq).cmp(&(self.time, self.key, self.seq))
    }
}

/// Totals over the whole fabric.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FabricTotals {
    pub injected: u64,
    pub retransmissions: u64,
    pub delivered: u64,
    pub marks: u64,
    pub trims: u64,
    pub drops: u64,
}

#[derive(Debug)]
pub struct Fabric {
    pub config: FabricConfig,
    pub nodes: Vec<Node>,
    pub ports: Vec<Port>,
    /// Node index of each host, in host order.
    pub hosts: Vec<usize>,
    now: u64,
    seq: u64,
    events: BinaryHeap<Event>,
    rng: Rng,
    /// Draws the events' tie-break keys (apart from `rng`, so marking and
    /// loss draw the same sequence whatever the event count).
    tie: Rng,
    out: Vec<Delivery>,
    totals: FabricTotals,
    /// Samples in all ports' series.
    samples: usize,
    /// The series outgrew [`MAX_PORT_SAMPLES`] or [`MAX_SAMPLES`]:
    /// coarsen before returning to the caller.
    coarsen_due: bool,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ModelError {
    #[error("topology: {0}")]
    Topology(String),
    #[error("link event {index}: no link between {a} and {b}")]
    UnknownLink { index: usize, a: String, b: String },
    #[error("switch settings: {0}")]
    Settings(String),
    #[error("link event {index}: {why}")]
    Event { index: usize, why: String },
}

impl Fabric {
    pub fn new(config: FabricConfig) -> Result<Fabric, ModelError> {
        let t = &config.topology;
        if !(t.link_gbps > 0.0 && t.link_gbps.is_finite()) {
            return Err(ModelError::Topology("link_gbps must be positive".into()));
        }
        let s = &config.switch;
        if !(0.0..=1.0).contains(&s.kmin) || !(0.0..=1.0).contains(&s.kmax) || s.kmin > s.kmax {
            return Err(ModelError::Settings("need 0 <= kmin <= kmax <= 1".into()));
        }
        if s.sample_ns == 0 {
            return Err(ModelError::Settings("sample_ns must be positive".into()));
        }
        if s.reroute_us
            .is_some_and(|us| !(us.is_finite() && us >= 0.0))
        {
            return Err(ModelError::Settings(
                "reroute_us must be a finite number of microseconds, 0 or more".into(),
            ));
        }
        for (index, e) in config.events.iter().enumerate() {
            let why = if !(e.at_us.is_finite() && e.at_us >= 0.0) {
                "at_us must be a finite number of microseconds, 0 or more"
            } else {
                match e.action {
                    LinkAction::Rate { factor } if !(factor.is_finite() && factor > 0.0) => {
                        "a rate factor must be above 0 (a link at no rate is \"down\")"
                    }
                    LinkAction::Loss { loss } if !(0.0..=1.0).contains(&loss) => {
                        "loss must be a probability, 0 to 1"
                    }
                    _ => continue,
                }
            };
            return Err(ModelError::Event {
                index,
                why: why.into(),
            });
        }
        let mut f = Fabric {
            nodes: Vec::new(),
            ports: Vec::new(),
            hosts: Vec::new(),
            now: 0,
            seq: 0,
            events: BinaryHeap::new(),
            rng: Rng(mix(config.seed ^ 0x5eed)),
            tie: Rng(mix(config.seed ^ 0x71e)),
            out: Vec::new(),
            totals: FabricTotals::default(),
            samples: 0,
            coarsen_due: false,
            config: config.clone(),
        };
        f.build()?;
        f.route();
        let buffer = f.data_buffer_bytes();
        let control = s.control_buffer_bytes.unwrap_or(buffer);
        for p in &mut f.ports {
            if p.is_switch {
                p.buffer_bytes = buffer;
                p.control_buffer_bytes = control;
                p.kmin_bytes = (buffer as f64 * s.kmin) as u64;
                p.kmax_bytes = (buffer as f64 * s.kmax) as u64;
            } else {
                p.buffer_bytes = s.host_buffer_bytes;
                p.control_buffer_bytes = s.host_buffer_bytes;
                p.kmin_bytes = u64::MAX;
                p.kmax_bytes = u64::MAX;
            }
        }
        for (index, e) in config.events.iter().enumerate() {
            let [a, b] = &e.link;
            if f.link_ports(a, b).is_empty() {
                return Err(ModelError::UnknownLink {
                    index,
                    a: a.clone(),
                    b: b.clone(),
                });
            }
            f.push(e.at_ns(), EventKind::Link { index });
        }
        Ok(f)
    }

    fn add_node(&mut self, name: String, kind: NodeKind) -> usize {
        let salt = mix(self.config.seed ^ mix(self.nodes.len() as u64 + 1));
        self.nodes.push(Node {
            name,
            kind,
            ports: Vec::new(),
            salt,
            routes: Vec::new(),
        });
        self.nodes.len() - 1
    }

    fn add_link(&mut self, a: usize, b: usize, gbps: f64, delay_ns: u64) {
        for (from, to) in [(a, b), (b, a)] {
            let port = Port {
                from,
                to,
                base_gbps: gbps,
                gbps,
                delay_ns,
                is_switch: self.nodes[from].kind == NodeKind::Switch,
                to_host: self.nodes[to].kind == NodeKind::Host,
                buffer_bytes: 0,
                control_buffer_bytes: 0,
                kmin_bytes: 0,
                kmax_bytes: 0,
                up: true,
                routed_around: false,
                loss: 0.0,
                data: VecDeque::new(),
                data_bytes: 0,
                control: VecDeque::new(),
                control_bytes: 0,
                busy: false,
                free_ps: 0,
                counters: PortCounters::default(),
                series: Vec::new(),
                bucket: Sample::default(),
            };
            self.ports.push(port);
            let id = self.ports.len() - 1;
            self.nodes[from].ports.push(id);
        }
    }

    fn build(&mut self) -> Result<(), ModelError> {
        let t = self.config.topology.clone();
        let n = t.host_count();
        if n < 2 {
            return Err(ModelError::Topology("need at least 2 hosts".into()));
        }
        for h in 0..n {
            let id = self.add_node(format!("h{h}"), NodeKind::Host);
            self.hosts.push(id);
        }
        match t.kind {
            TopologyKind::Single => {
                let sw = self.add_node("sw".into(), NodeKind::Switch);
                for h in 0..n {
                    self.add_link(self.hosts[h], sw, t.link_gbps, t.link_delay_ns);
                }
            }
            TopologyKind::LeafSpine => {
                if t.leaves == 0 || t.hosts_per_leaf == 0 {
                    return Err(ModelError::Topology(
                        "leaf-spine needs leaves and hosts_per_leaf".into(),
                    ));
                }
                if t.leaves > 1 && t.spines == 0 {
                    return Err(ModelError::Topology("several leaves need spines".into()));
                }
                if !(t.oversubscription > 0.0 && t.oversubscription.is_finite()) {
                    return Err(ModelError::Topology(
                        "oversubscription must be positive".into(),
                    ));
                }
                let leaves: Vec<usize> = (0..t.leaves)
                    .map(|l| self.add_node(format!("leaf{l}"), NodeKind::Switch))
                    .collect();
                let spines: Vec<usize> = (0..t.spines)
                    .map(|s| self.add_node(format!("spine{s}"), NodeKind::Switch))
                    .collect();
                for h in 0..n {
                    self.add_link(
                        self.hosts[h],
                        leaves[h / t.hosts_per_leaf],
                        t.link_gbps,
                        t.link_delay_ns,
                    );
                }
                let up = t.uplink_gbps();
                for &l in &leaves {
                    for &s in &spines {
                        self.add_link(l, s, up, t.link_delay_ns);
                    }
                }
            }
        }
        Ok(())
    }

    /// Shortest-path next hops from every node to every host (breadth-first
    /// from each host); hosts themselves only use their uplink.
    fn route(&mut self) {
        let nn = self.nodes.len();
        for node in &mut self.nodes {
            node.routes = vec![Vec::new(); self.hosts.len()];
        }
        for (h, &hn) in self.hosts.iter().enumerate() {
            let mut dist = vec![usize::MAX; nn];
            dist[hn] = 0;
            let mut q = VecDeque::from([hn]);
            while let Some(v) = q.pop_front() {
                // Paths run through switches only.
                if v != hn && self.nodes[v].kind == NodeKind::Host {
                    continue;
                }
                for &p in &self.nodes[v].ports {
                    let u = self.ports[p].to;
                    if dist[u] == usize::MAX {
                        dist[u] = dist[v] + 1;
                        q.push_back(u);
                    }
                }
            }
            for v in 0..nn {
                if v == hn || dist[v] == usize::MAX {
                    continue;
                }
                let hops: Vec<usize> = self.nodes[v]
                    .ports
                    .iter()
                    .copied()
                    .filter(|&p| {
                        let u = self.ports[p].to;
                        dist[u] + 1 == dist[v]
                            && (u == hn || self.nodes[u].kind == NodeKind::Switch)
                    })
                    .collect();
                self.nodes[v].routes[h] = hops;
            }
        }
    }

    /// Egress ports (both directions) of the link joining nodes `a` and `b`.
    pub fn link_ports(&self, a: &str, b: &str) -> Vec<usize> {
        self.ports
            .iter()
            .enumerate()
            .filter(|(_, p)| {
                let (f, t) = (&self.nodes[p.from].name, &self.nodes[p.to].name);
                (f == a && t == b) || (f == b && t == a)
            })
            .map(|(i, _)| i)
            .collect()
    }

    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    pub fn port_name(&self, p: usize) -> String {
        let port = &self.ports[p];
        format!(
            "{}->{}",
            self.nodes[port.from].name, self.nodes[port.to].name
        )
    }

    /// Host-side one-way path from host `src` to host `dst`, as port indices
    /// (the first equal-cost choice at each hop).
    pub fn path(&self, src: usize, dst: usize) -> Vec<usize> {
        let mut v = self.hosts[src];
        let target = self.hosts[dst];
        let mut out = Vec::new();
        while v != target {
            let next = if self.nodes[v].kind == NodeKind::Host {
                self.nodes[v].ports.first().copied()
            } else {
                self.nodes[v].routes[dst].first().copied()
            };
            match next {
                Some(p) if out.len() <= self.nodes.len() => {
                    out.push(p);
                    v = self.ports[p].to;
                }
                _ => return Vec::new(),
            }
        }
        out
    }

    /// Unloaded round trip between two hosts: `bytes` (UET) out, an ACK of
    /// `ack_bytes` back, each serialised at every hop, plus propagation.
    pub fn base_rtt_ns(&self, src: usize, dst: usize, bytes: usize, ack_bytes: usize) -> u64 {
        let one_way = |a, b, n: usize| -> u64 {
            self.path(a, b)
                .iter()
                .map(|&p| {
                    let port = &self.ports[p];
                    ser_ps(n + FRAME_OVERHEAD, port.base_gbps).div_ceil(1000) + port.delay_ns
                })
                .sum()
        };
        one_way(src, dst, bytes) + one_way(dst, src, ack_bytes)
    }

    /// The largest base RTT between any two hosts, for an MTU-sized packet.
    pub fn max_base_rtt_ns(&self) -> u64 {
        let n = self.hosts.len();
        // Host 0 to the last host crosses the most hops in the shipped
        // topologies (they are symmetric); check all pairs from host 0 and
        // from the last host to be safe without quadratic cost.
        let mut best = 0;
        for a in [0, n - 1] {
            for b in 0..n {
                if a != b {
                    best = best.max(self.base_rtt_ns(a, b, self.config.switch.mtu, 64));
                }
            }
        }
        best
    }

    /// Bandwidth-delay product of a host link over the longest base RTT.
    pub fn bdp_bytes(&self) -> u64 {
        (self.config.topology.link_gbps * self.max_base_rtt_ns() as f64 / 8.0) as u64
    }

    /// The data queue size of a switch port.
    pub fn data_buffer_bytes(&self) -> u64 {
        let s = &self.config.switch;
        s.buffer_bytes.unwrap_or_else(|| {
            let bdp = self.bdp_bytes().max(2 * (s.mtu + FRAME_OVERHEAD) as u64);
            if s.trimming {
                bdp
            } else {
                5 * bdp
            }
        })
    }

    pub fn now(&self) -> u64 {
        self.now
    }

    pub fn totals(&self) -> &FabricTotals {
        &self.totals
    }

    /// Unschedule the configured link events, to schedule them later
    /// from a start time not known yet (see [`Fabric::schedule_link_events`]).
    pub fn hold_link_events(&mut self) {
        let events = std::mem::take(&mut self.events);
        self.events = events
            .into_iter()
            .filter(|e| !matches!(e.kind, EventKind::Link { .. }))
            .collect();
    }

    /// Schedule the configured link events relative to `origin_ns` (model
    /// time): a run's "20 ms in" counts from when its traffic starts.
    pub fn schedule_link_events(&mut self, origin_ns: u64) {
        for index in 0..self.config.events.len() {
            // Saturating: an event far enough out to pass u64::MAX ns is
            // never, not at once.
            let at = origin_ns.saturating_add(self.config.events[index].at_ns());
            self.push(at, EventKind::Link { index });
        }
    }

    fn push(&mut self, time: u64, kind: EventKind) {
        self.seq += 1;
        self.events.push(Event {
            time,
            key: self.tie.next_u64(),
            seq: self.seq,
            kind,
        });
    }

    /// Time of the next internal event, if any.
    pub fn next_event_time(&self) -> Option<u64> {
        self.events.peek().map(|e| e.time)
    }

    /// Host `host` sends `packet` at `now` (clamped to the fabric's time).
    /// It queues at the host's NIC first.
    pub fn send(&mut self, now: u64, host: usize, packet: Packet) {
        self.run_until(now);
        let now = now.max(self.now);
        self.now = now;
        let Some(&node) = self.hosts.get(host) else {
            return;
        };
        if packet.dst_host >= self.hosts.len() {
            return;
        }
        self.totals.injected += 1;
        if is_retransmission(&packet.data) {
            self.totals.retransmissions += 1;
        }
        self.forward(node, packet);
        self.coarsen_if_due();
    }

    /// Process everything due at or before `until` and return the packets
    /// that reached hosts, in time order.
    pub fn advance(&mut self, until: u64) -> Vec<Delivery> {
        self.run_until(until);
        self.now = self.now.max(until);
        self.coarsen_if_due();
        std::mem::take(&mut self.out)
    }

    fn run_until(&mut self, until: u64) {
        while let Some(e) = self.events.peek() {
            if e.time > until {
                break;
            }
            let Some(e) = self.events.pop() else { break };
            self.now = self.now.max(e.time);
            match e.kind {
                EventKind::Arrive { node, packet } => {
                    if self.nodes[node].kind == NodeKind::Host {
                        self.totals.delivered += 1;
                        let host = self.hosts.iter().position(|&h| h == node).unwrap_or(0);
                        self.out.push(Delivery {
                            time: e.time,
                            host,
                            packet,
                        });
                    } else {
                        self.forward(node, packet);
                    }
                }
                EventKind::PortFree { port } => {
                    self.ports[port].busy = false;
                    self.start_next(port);
                }
                EventKind::Link { index } => self.apply_link_event(index),
                EventKind::Reroute { ports } => {
                    for p in ports {
                        if !self.ports[p].up {
                            self.ports[p].routed_around = true;
                        }
                    }
                }
            }
        }
    }

    fn apply_link_event(&mut self, index: usize) {
        let e = self.config.events[index].clone();
        let now = self.now;
        if e.action == LinkAction::Down {
            if let Some(us) = self.config.switch.reroute_us {
                let ports = self.link_ports(&e.link[0], &e.link[1]);
                // The float-to-int cast saturates, and so does the sum.
                let at = now.saturating_add((us.max(0.0) * 1000.0) as u64);
                self.push(at, EventKind::Reroute { ports });
            }
        }
        for p in self.link_ports(&e.link[0], &e.link[1]) {
            self.roll(p, now);
            let port = &mut self.ports[p];
            match e.action {
                LinkAction::Down => {
                    port.up = false;
                    let n = port.drop_all();
                    port.counters.drops_down += n;
                    port.bucket.drops += n;
                    self.totals.drops += n;
                }
                LinkAction::Up => {
                    port.up = true;
                    port.routed_around = false;
                    port.gbps = port.base_gbps;
                    port.loss = 0.0;
                }
                LinkAction::Rate { factor } => {
                    if factor > 0.0 && factor.is_finite() {
                        port.gbps = port.base_gbps * factor;
                    }
                }
                LinkAction::Loss { loss } => port.loss = loss.clamp(0.0, 1.0),
            }
        }
    }

    /// Choose the egress port of `node` for `packet` and enqueue it there.
    fn forward(&mut self, node: usize, packet: Packet) {
        let n = &self.nodes[node];
        let port = if n.kind == NodeKind::Host {
            n.ports.first().copied()
        } else {
            let hops = &n.routes[packet.dst_host];
            // After routing converged around failed links, hash over the
            // remaining next hops only (all of them if none remains). A
            // next hop whose own routes to the destination all cross a
            // failed link is withdrawn too (leaf1 stops sending leaf0's
            // traffic to the spine whose link to leaf0 is down).
            let dst_host = packet.dst_host;
            let usable = |p: &&usize| {
                let port = &self.ports[**p];
                let next = &self.nodes[port.to];
                !port.routed_around
                    && (next.kind == NodeKind::Host
                        || next.routes[dst_host]
                            .iter()
                            .any(|&q| !self.ports[q].routed_around))
            };
            let k = match hops.iter().filter(usable).count() {
                0 => hops.len(),
                k => k,
            };
            let all = k == hops.len();
            match k {
                0 => None,
                1 if all => Some(hops[0]),
                k => {
                    let h = flow_hash(packet.src, packet.dst, n.salt);
                    let i = (h % k as u64) as usize;
                    if all {
                        Some(hops[i])
                    } else {
                        hops.iter().filter(usable).nth(i).copied()
                    }
                }
            }
        };
        if let Some(p) = port {
            self.enqueue(p, packet);
        }
    }

    fn enqueue(&mut self, p: usize, mut packet: Packet) {
        let now = self.now;
        let trimming = self.config.switch.trimming;
        self.roll(p, now);
        let port = &mut self.ports[p];
        if !port.up {
            port.counters.drops_down += 1;
            port.bucket.drops += 1;
            self.totals.drops += 1;
            return;
        }
        let len = packet.wire_len() as u64;
        let class = classify(&packet.data, packet.tos);
        let to_control = match class {
            Class::Control => true,
            Class::Data if port.data_bytes + len <= port.buffer_bytes => false,
            Class::Data => {
                // Full data queue: trim at a switch (when on and the bytes
                // are UET), otherwise drop. A packet with nothing past its
                // headers (a zero-byte send, a read request) is marked
                // trimmed uncut, so its receiver NACKs it at once as it
                // would a cut one instead of waiting for a timeout.
                let can_trim = port.is_switch && trimming && Prologue::parse(&packet.data).is_ok();
                if !can_trim {
                    port.counters.drops_full += 1;
                    port.bucket.drops += 1;
                    self.totals.drops += 1;
                    return;
                }
                // A trailing ACK stays (uet::wire::ack_trailer).
                let kept = ack_trailer::trim(&mut packet.data, TRIM_KEEP);
                packet.data.truncate(kept);
                let dscp = if port.to_host {
                    ip::DSCP_TRIMMED_LASTHOP
                } else {
                    ip::DSCP_TRIMMED
                };
                packet.tos = ip::tos(dscp, Ecn::from_tos(packet.tos));
                port.counters.trims += 1;
                port.bucket.trims += 1;
                self.totals.trims += 1;
                true
            }
        };
        let len = packet.wire_len() as u64;
        if to_control {
            if port.control_bytes + len > port.control_buffer_bytes {
                port.counters.drops_full += 1;
                port.bucket.drops += 1;
                self.totals.drops += 1;
                return;
            }
            port.control_bytes += len;
            port.control.push_back(packet);
        } else {
            port.data_bytes += len;
            port.data.push_back(packet);
            port.note_queue();
        }
        if !port.busy {
            self.start_next(p);
        }
    }

    /// Start sending the next packet of port `p`: control first, then data,
    /// marking data packets by RED on the occupancy they leave behind.
    fn start_next(&mut self, p: usize) {
        let now = self.now;
        let u = self.rng.unit();
        let lost = self.rng.unit();
        self.roll(p, now);
        let port = &mut self.ports[p];
        let packet = if let Some(pk) = port.control.pop_front() {
            port.control_bytes -= pk.wire_len() as u64;
            pk
        } else if let Some(pk) = port.data.pop_front() {
            port.data_bytes -= pk.wire_len() as u64;
            port.note_queue();
            if port.is_switch && Ecn::from_tos(pk.tos).is_ect() {
                let prob = mark_probability(port.data_bytes, port.kmin_bytes, port.kmax_bytes);
                let mut pk = pk;
                if prob > 0.0 && u < prob {
                    if Ecn::from_tos(pk.tos) != Ecn::Ce {
                        port.counters.marks += 1;
                        port.bucket.marks += 1;
                        self.totals.marks += 1;
                    }
                    pk.tos |= Ecn::Ce as u8;
                }
                pk
            } else {
                pk
            }
        } else {
            return;
        };
        let len = packet.wire_len();
        // A port freed within this ns (its PortFree event, rounded up, is
        // what got us here) goes on where it stopped; one idle for longer
        // starts now.
        let start_ps = if port.free_ps.div_ceil(1000) >= now {
            port.free_ps
        } else {
            now.saturating_mul(1000)
        };
        port.free_ps = start_ps.saturating_add(ser_ps(len, port.gbps));
        let done = port.free_ps.div_ceil(1000);
        port.busy = true;
        port.counters.tx_packets += 1;
        port.counters.tx_bytes += len as u64;
        port.bucket.tx_bytes += len as u64;
        let to = port.to;
        let arrive = done + port.delay_ns;
        let dropped = port.loss > 0.0 && lost < port.loss;
        if dropped {
            port.counters.drops_loss += 1;
            port.bucket.drops += 1;
            self.totals.drops += 1;
        }
        self.push(done, EventKind::PortFree { port: p });
        if !dropped {
            self.push(arrive, EventKind::Arrive { node: to, packet });
        }
    }

    /// Flush the open time-series buckets (call once at the end of a run).
    pub fn finish(&mut self) {
        let now = self.now;
        let width = self.config.switch.sample_ns;
        for p in 0..self.ports.len() {
            self.roll(p, now + width);
        }
        self.coarsen_if_due();
    }

    /// Move port `p`'s time-series bucket to the one holding `now`.
    fn roll(&mut self, p: usize, now: u64) {
        let port = &mut self.ports[p];
        if port.roll(now, self.config.switch.sample_ns) {
            self.samples += 1;
            self.coarsen_due |= port.series.len() > MAX_PORT_SAMPLES || self.samples > MAX_SAMPLES;
        }
    }

    /// Double the sample width, as often as needed, until the series are
    /// back within [`MAX_PORT_SAMPLES`] and [`MAX_SAMPLES`].
    fn coarsen_if_due(&mut self) {
        while self.coarsen_due {
            let width = self.config.switch.sample_ns.saturating_mul(2);
            self.config.switch.sample_ns = width;
            for port in &mut self.ports {
                port.coarsen(width);
            }
            self.samples = self.ports.iter().map(|p| p.series.len()).sum();
            self.coarsen_due = self.samples > MAX_SAMPLES
                || self.ports.iter().any(|p| p.series.len() > MAX_PORT_SAMPLES);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LinkEvent, SwitchConfig, TopologyConfig};
    use uet::wire::NextHeader;

    /// UET bytes of a data request (RUD, SES header follows) of `len` bytes.
    pub(crate) fn data_bytes(len: usize, flags: u8) -> Vec<u8> {
        let mut b = vec![0u8; len.max(TRIM_KEEP + 1)];
        Prologue {
            ptype: PacketType::RudRequest,
            next: NextHeader::SesRequest,
            flags,
        }
        .emit(&mut b);
        b.truncate(len.max(2));
        b
    }

    fn ack_bytes() -> Vec<u8> {
        let mut b = vec![0u8; 32];
        Prologue {
            ptype: PacketType::AckCc,
            next: NextHeader::None,
            flags: 0,
        }
        .emit(&mut b);
        b
    }

    fn addr(host: usize, port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 10 + host as u8], port))
    }

    fn pkt(src: usize, sport: u16, dst: usize, data: Vec<u8>, tos: u8, tag: u64) -> Packet {
        Packet {
            src: addr(src, sport),
            dst: addr(dst, 5000),
            dst_host: dst,
            tos,
            data,
            tag,
        }
    }

    const ECT0: u8 = Ecn::Ect0 as u8;

    fn single(hosts: usize, switch: SwitchConfig) -> Fabric {
        Fabric::new(FabricConfig {
            topology: TopologyConfig {
                kind: TopologyKind::Single,
                hosts,
                link_gbps: 1.0,
                link_delay_ns: 1000,
                ..Default::default()
            },
            switch,
            events: Vec::new(),
            seed: 7,
        })
        .unwrap()
    }

    fn leaf_spine(leaves: usize, spines: usize, per_leaf: usize, seed: u64) -> FabricConfig {
        FabricConfig {
            topology: TopologyConfig {
                kind: TopologyKind::LeafSpine,
                leaves,
                spines,
                hosts_per_leaf: per_leaf,
                link_gbps: 1.0,
                link_delay_ns: 1000,
                oversubscription: 1.0,
                ..Default::default()
            },
            switch: SwitchConfig::default(),
            events: Vec::new(),
            seed,
        }
    }

    /// Run until nothing is left and return every delivery.
    fn drain(f: &mut Fabric) -> Vec<Delivery> {
        let mut out = Vec::new();
        while let Some(t) = f.next_event_time() {
            out.extend(f.advance(t));
        }
        out
    }

    /// Every sender in `senders` sends `n` ECT data packets of `len` bytes
    /// to `dst` at time 0 (their NICs pace them at line rate).
    fn burst(f: &mut Fabric, senders: &[usize], dst: usize, n: usize, len: usize) {
        for &s in senders {
            for i in 0..n {
                let tag = (s * 1_000_000 + i) as u64;
                f.send(0, s, pkt(s, 40000, dst, data_bytes(len, 0), ECT0, tag));
            }
        }
    }

    #[test]
    fn trimming_keeps_an_ack_riding_at_the_end() {
        let mut f = single(
            3,
            SwitchConfig {
                buffer_bytes: Some(20_000),
                ..Default::default()
            },
        );
        // Data packets that each carry an ACK at their end, the ACK's
        // bytes told apart by the packet's tag.
        for s in [0, 1] {
            for i in 0..40 {
                let tag = (s * 1_000 + i) as u64;
                let mut d = data_bytes(4000 - 32, ack_trailer::FLAG);
                let mut ack = ack_bytes();
                ack[24..32].copy_from_slice(&tag.to_be_bytes());
                d.extend_from_slice(&ack);
                f.send(0, s, pkt(s, 40000, 2, d, ECT0, tag));
            }
        }
        let out = drain(&mut f);
        assert_eq!(out.len(), 80);
        let trimmed: Vec<_> = out
            .iter()
            .filter(|d| ip::trim_of(d.packet.tos).is_some())
            .collect();
        assert!(!trimmed.is_empty());
        for d in trimmed {
            let data = &d.packet.data;
            assert_eq!(data.len(), TRIM_KEEP + 32);
            assert!(ack_trailer::flagged(data));
            let (_, ack) = ack_trailer::split(data, true).expect("splits");
            let ack = ack.expect("the ACK stayed");
            assert_eq!(ack[24..32], d.packet.tag.to_be_bytes());
        }
    }

    /// `n` packets of `len` UET bytes sent back to back from h0 to h1 at
    /// 100 Gb/s over 1 us links: the last delivery against the exact line
    /// rate (n serialisations on the first link, one on the second, and
    /// two link delays), ns.
    fn late_against_line_rate(n: u64, len: usize) -> f64 {
        let mut f = Fabric::new(FabricConfig {
            topology: TopologyConfig {
                hosts: 2,
                link_gbps: 100.0,
                link_delay_ns: 1000,
                ..Default::default()
            },
            switch: SwitchConfig {
                buffer_bytes: Some(1 << 30),
                host_buffer_bytes: 1 << 30,
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap();
        for i in 0..n {
            f.send(0, 0, pkt(0, 40000, 1, data_bytes(len, 0), ECT0, i));
        }
        let out = drain(&mut f);
        assert_eq!(out.len() as u64, n);
        let last = out.iter().map(|d| d.time).max().unwrap();
        let ser = (len + FRAME_OVERHEAD) as f64 * 8.0 / 100.0;
        last as f64 - ((n + 1) as f64 * ser + 2000.0)
    }

    #[test]
    fn links_run_at_their_rate_whatever_the_packet_size() {
        // 4138-byte frames take 331.04 ns at 100 Gb/s and ACK-sized ones
        // 5.92 ns: rounding each up to a whole ns ran the link 0.3% and
        // 1.4% slow. Only the last packet's own rounding may show.
        for len in [4096, 32] {
            let late = late_against_line_rate(10_000, len);
            assert!((0.0..2.0).contains(&late), "{len} B: {late} ns late");
        }
    }

    #[test]
    fn long_runs_keep_a_bounded_series_by_widening_its_buckets() {
        let mut f = single(
            2,
            SwitchConfig {
                sample_ns: 1000,
                ..Default::default()
            },
        );
        // A packet every us for 140 ms: 140 000 buckets of 1 us on each
        // port.
        let n = 140_000u64;
        for i in 0..n {
            f.send(i * 1000, 0, pkt(0, 40000, 1, data_bytes(100, 0), ECT0, i));
        }
        drain(&mut f);
        f.finish();
        // 1 us, then 2 us past 65536 samples, then 4 us.
        assert_eq!(f.config.switch.sample_ns, 4000);
        for port in f.ports.iter().filter(|p| p.counters.tx_packets > 0) {
            assert!(port.series.len() <= 1 << 16);
            assert!(port.series.iter().all(|s| s.t_ns % 4000 == 0));
            let tx: u64 = port.series.iter().map(|s| s.tx_bytes).sum();
            assert_eq!(tx, port.counters.tx_bytes, "nothing lost in merging");
        }
    }

    #[test]
    fn marking_probability_curve() {
        assert_eq!(mark_probability(0, 200, 800), 0.0);
        assert_eq!(mark_probability(200, 200, 800), 0.0);
        assert_eq!(mark_probability(350, 200, 800), 0.25);
        assert_eq!(mark_probability(500, 200, 800), 0.5);
        assert_eq!(mark_probability(800, 200, 800), 1.0);
        assert_eq!(mark_probability(10_000, 200, 800), 1.0);
        let mut last = 0.0;
        for q in (0..1000).step_by(10) {
            let p = mark_probability(q, 200, 800);
            assert!(p >= last, "monotone at {q}");
            last = p;
        }
    }

    /// Fill a switch port's data queue to `q` bytes and dequeue one ECT
    /// packet `trials` times; return the fraction marked CE.
    fn marked_fraction(q_target: u64, trials: usize, tos: u8) -> f64 {
        let mut f = single(
            2,
            SwitchConfig {
                buffer_bytes: Some(100_000),
                ..Default::default()
            },
        );
        let p = f.nodes[f.node_index("sw").unwrap()].ports[1];
        let len = 1000 - FRAME_OVERHEAD;
        let mut marked = 0;
        for _ in 0..trials {
            let port = &mut f.ports[p];
            port.data.clear();
            port.data_bytes = 0;
            port.busy = false;
            // The head packet, then filler that stays behind it.
            port.data
                .push_back(pkt(0, 1, 1, data_bytes(len, 0), tos, 0));
            port.data_bytes += 1000;
            while port.data_bytes < q_target + 1000 {
                port.data
                    .push_back(pkt(0, 1, 1, data_bytes(len, 0), tos, 1));
                port.data_bytes += 1000;
            }
            f.events.clear();
            f.start_next(p);
            let Some(Event {
                kind: EventKind::Arrive { packet, .. },
                ..
            }) = f
                .events
                .iter()
                .find(|e| matches!(e.kind, EventKind::Arrive { .. }))
            else {
                panic!("nothing sent")
            };
            if Ecn::from_tos(packet.tos) == Ecn::Ce {
                marked += 1;
            }
        }
        marked as f64 / trials as f64
    }

    #[test]
    fn red_marks_at_dequeue_by_occupancy() {
        // kmin = 20 kB, kmax = 80 kB of a 100 kB queue.
        assert_eq!(marked_fraction(10_000, 500, ECT0), 0.0);
        assert_eq!(marked_fraction(90_000, 500, ECT0), 1.0);
        let mid = marked_fraction(50_000, 4000, ECT0);
        assert!((mid - 0.5).abs() < 0.05, "mid-range fraction {mid}");
        let quarter = marked_fraction(35_000, 4000, ECT0);
        assert!((quarter - 0.25).abs() < 0.05, "quarter fraction {quarter}");
        // Not ECN-capable: never marked.
        assert_eq!(marked_fraction(90_000, 200, 0), 0.0);
    }

    #[test]
    fn incast_trims_instead_of_dropping() {
        let mut f = single(
            5,
            SwitchConfig {
                buffer_bytes: Some(40_000),
                ..Default::default()
            },
        );
        burst(&mut f, &[0, 1, 2, 3], 4, 50, 4000);
        let out = drain(&mut f);
        let trimmed: Vec<_> = out
            .iter()
            .filter(|d| ip::trim_of(d.packet.tos).is_some())
            .collect();
        assert_eq!(out.len(), 200, "every packet arrives, whole or trimmed");
        assert!(!trimmed.is_empty());
        for d in &trimmed {
            assert_eq!(d.packet.data.len(), TRIM_KEEP);
            // The full queue was the receiver's downlink.
            assert_eq!(ip::trim_of(d.packet.tos), Some(ip::Trim::LastHop));
            assert!(Ecn::from_tos(d.packet.tos).is_ect());
        }
        let t = f.totals();
        assert_eq!(t.trims as usize, trimmed.len());
        assert_eq!(t.drops, 0);
        let down = f.link_ports("sw", "h4")[0];
        let down = if f.ports[down].to_host {
            down
        } else {
            f.link_ports("sw", "h4")[1]
        };
        assert!(f.ports[down].counters.max_queue_bytes <= 40_000);
        assert_eq!(f.ports[down].counters.trims, t.trims);
    }

    #[test]
    fn header_only_packets_are_trimmed_not_dropped() {
        // Zero-byte sends and read requests are all header: a full data
        // queue marks them trimmed, uncut, and gives them control priority.
        let mut f = single(
            5,
            SwitchConfig {
                buffer_bytes: Some(2_000),
                control_buffer_bytes: Some(100_000),
                ..Default::default()
            },
        );
        burst(&mut f, &[0, 1, 2, 3], 4, 50, TRIM_KEEP);
        let out = drain(&mut f);
        let t = f.totals().clone();
        assert_eq!(t.drops, 0);
        assert!(t.trims > 0);
        assert_eq!(out.len(), 200, "every packet arrives");
        let trimmed: Vec<_> = out
            .iter()
            .filter(|d| ip::trim_of(d.packet.tos) == Some(ip::Trim::LastHop))
            .collect();
        assert_eq!(trimmed.len() as u64, t.trims);
        for d in &trimmed {
            assert_eq!(d.packet.data, data_bytes(TRIM_KEEP, 0), "nothing cut");
        }
    }

    /// Trimmed packets per sender of a synchronized 4:1 incast, senders
    /// handing in their packets in the order given.
    fn trims_per_sender(order: [usize; 4]) -> [u64; 4] {
        let mut f = single(
            5,
            SwitchConfig {
                buffer_bytes: Some(40_000),
                ..Default::default()
            },
        );
        burst(&mut f, &order, 4, 200, 4000);
        let mut trims = [0; 4];
        for d in drain(&mut f) {
            if ip::trim_of(d.packet.tos).is_some() {
                trims[(d.packet.tag / 1_000_000) as usize] += 1;
            }
        }
        trims
    }

    #[test]
    fn no_sender_of_a_synchronized_incast_wins_every_tie() {
        // Every round, four packets reach the switch at the same ns and
        // compete for the slot one departure freed. Taken in the order
        // the hosts were asked, the first sender won it every time
        // (trims [14, 197, 197, 198]).
        for order in [[0, 1, 2, 3], [3, 2, 1, 0]] {
            let trims = trims_per_sender(order);
            let (lo, hi) = (trims.iter().min().unwrap(), trims.iter().max().unwrap());
            assert!(
                hi - lo < hi / 4,
                "order {order:?}: trims per sender {trims:?}"
            );
        }
    }

    #[test]
    fn incast_drops_without_trimming() {
        let mut f = single(
            5,
            SwitchConfig {
                buffer_bytes: Some(40_000),
                trimming: false,
                ..Default::default()
            },
        );
        burst(&mut f, &[0, 1, 2, 3], 4, 50, 4000);
        let out = drain(&mut f);
        let t = f.totals().clone();
        assert_eq!(t.trims, 0);
        assert!(t.drops > 0);
        assert_eq!(out.len() as u64 + t.drops, 200);
        assert!(out.iter().all(|d| d.packet.data.len() == 4000));
        assert!(out.iter().all(|d| ip::trim_of(d.packet.tos).is_none()));
    }

    #[test]
    fn fabric_trim_is_not_last_hop() {
        // Two leaves, one spine, uplinks at 1/8 of the host rate: the leaf
        // uplink fills first and trims there.
        let mut cfg = leaf_spine(2, 1, 2, 1);
        cfg.topology.oversubscription = 16.0;
        cfg.switch.buffer_bytes = Some(40_000);
        let mut f = Fabric::new(cfg).unwrap();
        burst(&mut f, &[0, 1], 2, 40, 4000);
        let out = drain(&mut f);
        assert!(out
            .iter()
            .any(|d| ip::trim_of(d.packet.tos) == Some(ip::Trim::Fabric)));
        let up = f.link_ports("leaf0", "spine0");
        let up = up
            .into_iter()
            .find(|&p| f.nodes[f.ports[p].from].name == "leaf0")
            .unwrap();
        assert!(f.ports[up].counters.trims > 0);
    }

    #[test]
    fn control_packets_overtake_queued_data() {
        let mut f = single(
            4,
            SwitchConfig {
                buffer_bytes: Some(200_000),
                ..Default::default()
            },
        );
        // Two senders build a queue at h3's downlink ...
        burst(&mut f, &[0, 1], 3, 30, 4000);
        // ... and h2 sends an ACK to h3 once the queue is deep.
        f.send(150_000, 2, pkt(2, 40000, 3, ack_bytes(), 0, 777));
        let out = drain(&mut f);
        let ack = out.iter().find(|d| d.packet.tag == 777).unwrap();
        // Data that reached the switch before the ACK but left after it.
        let overtaken = out
            .iter()
            .filter(|d| d.packet.tag != 777 && d.time > ack.time)
            .count();
        assert!(
            overtaken > 10,
            "ACK waited behind data: {overtaken} after it"
        );
        // Unloaded ACK: h2 NIC + switch downlink, two hops of 74 B at 1 Gb/s.
        let ser = ((32 + FRAME_OVERHEAD) as f64 * 8.0).ceil() as u64;
        assert!(ack.time - 150_000 <= 2 * (ser + 1000) + 4 * 8 * 4042);
        assert_eq!(classify(&ack_bytes(), 0), Class::Control);
        assert_eq!(classify(&data_bytes(100, 0), 0), Class::Data);
        assert_eq!(
            classify(&data_bytes(100, 0), ip::tos(ip::DSCP_TRIMMED, Ecn::Ect0)),
            Class::Control
        );
    }

    #[test]
    fn ecmp_spreads_entropies_over_spines_and_pins_each_flow() {
        let mut f = Fabric::new(leaf_spine(2, 4, 2, 3)).unwrap();
        // 400 packets from h0 to h2 (other leaf), each with its own source port.
        for i in 0..400u16 {
            let t = i as u64 * 50_000;
            f.send(
                t,
                0,
                pkt(0, 30000 + i, 2, data_bytes(1000, 0), ECT0, i as u64),
            );
        }
        drain(&mut f);
        let counts: Vec<u64> = (0..4)
            .map(|s| {
                let ps = f.link_ports("leaf0", &format!("spine{s}"));
                ps.iter()
                    .filter(|&&p| f.nodes[f.ports[p].from].name == "leaf0")
                    .map(|&p| f.ports[p].counters.tx_packets)
                    .sum()
            })
            .collect();
        assert_eq!(counts.iter().sum::<u64>(), 400);
        for c in &counts {
            assert!((60..=140).contains(c), "spine loads {counts:?}");
        }
        // One entropy: one spine.
        let mut g = Fabric::new(leaf_spine(2, 4, 2, 3)).unwrap();
        for i in 0..50u64 {
            g.send(
                i * 50_000,
                0,
                pkt(0, 31234, 2, data_bytes(1000, 0), ECT0, i),
            );
        }
        drain(&mut g);
        let used = (0..4)
            .filter(|s| {
                g.link_ports("leaf0", &format!("spine{s}"))
                    .iter()
                    .any(|&p| g.ports[p].counters.tx_packets > 0)
            })
            .count();
        assert_eq!(used, 1);
    }

    #[test]
    fn link_failure_degradation_and_loss_follow_the_schedule() {
        let mut cfg = leaf_spine(2, 1, 1, 5);
        cfg.events = vec![
            LinkEvent {
                at_us: 100.0,
                link: ["leaf0".into(), "spine0".into()],
                action: LinkAction::Down,
            },
            LinkEvent {
                at_us: 200.0,
                link: ["leaf0".into(), "spine0".into()],
                action: LinkAction::Up,
            },
            LinkEvent {
                at_us: 300.0,
                link: ["leaf0".into(), "spine0".into()],
                action: LinkAction::Rate { factor: 0.5 },
            },
            LinkEvent {
                at_us: 500.0,
                link: ["spine0".into(), "leaf1".into()],
                action: LinkAction::Loss { loss: 1.0 },
            },
        ];
        let mut f = Fabric::new(cfg).unwrap();
        // One 1000 B packet every 20 us from h0 to h1 for 600 us.
        let mut sent = Vec::new();
        for i in 0..30u64 {
            let t = i * 20_000;
            sent.push(t);
            f.send(t, 0, pkt(0, 40000, 1, data_bytes(1000, 0), ECT0, t));
        }
        let out = drain(&mut f);
        let got: Vec<u64> = out.iter().map(|d| d.packet.tag).collect();
        // Sent before the failure (and through before it): delivered.
        assert!(got.contains(&0) && got.contains(&80_000));
        // Sent while the link was down: lost.
        for t in [120_000u64, 140_000, 160_000, 180_000] {
            assert!(!got.contains(&t), "{t} crossed a down link");
        }
        // After repair, before the loss: delivered.
        for t in [220_000u64, 260_000, 400_000, 440_000] {
            assert!(got.contains(&t), "{t} lost after repair");
        }
        // Loss 1.0 from 500 us on the spine->leaf1 link.
        assert!(got.iter().all(|&t| t < 500_000));
        assert!(
            !got.contains(&480_000),
            "reached spine0->leaf1 after 500 us"
        );
        let t = f.totals();
        assert!(t.drops >= 4 + 5);
        // Half rate: serialisation of a 1042 B frame on the uplink doubles.
        let lat = |tag: u64| out.iter().find(|d| d.packet.tag == tag).unwrap().time - tag;
        let ser = |gbps: f64| ((1000 + FRAME_OVERHEAD) as f64 * 8.0 / gbps).ceil() as u64;
        assert_eq!(lat(400_000) - lat(260_000), ser(0.5) - ser(1.0));
    }

    /// (time, host, tos, length) of each delivery.
    type Trace = Vec<(u64, usize, u8, usize)>;

    /// Two leaves, two spines, routes converging after 100 us, and the
    /// leaf0-spine0 link down from the start.
    fn leaf0_spine0_down_from_start() -> Fabric {
        let mut cfg = leaf_spine(2, 2, 1, 8);
        cfg.switch.reroute_us = Some(100.0);
        cfg.events = vec![LinkEvent {
            at_us: 0.0,
            link: ["leaf0".into(), "spine0".into()],
            action: LinkAction::Down,
        }];
        Fabric::new(cfg).unwrap()
    }

    #[test]
    fn routing_converges_around_a_failed_link_after_the_delay() {
        let mut f = leaf0_spine0_down_from_start();
        // 64 entropies at 50 us, again at 200 us (after convergence).
        for round in [50_000u64, 200_000] {
            for i in 0..64u16 {
                let t = round + i as u64 * 10;
                f.send(t, 0, pkt(0, 30000 + i, 1, data_bytes(200, 0), ECT0, t));
            }
        }
        let out = drain(&mut f);
        let early = out.iter().filter(|d| d.packet.tag < 200_000).count();
        let late = out.iter().filter(|d| d.packet.tag >= 200_000).count();
        assert!(
            early > 0 && early < 64,
            "before convergence some hash to the dead link: {early}"
        );
        assert_eq!(late, 64, "after convergence none does");
    }

    #[test]
    fn converged_routing_withdraws_a_spine_that_lost_its_link_to_the_destination() {
        let mut f = leaf0_spine0_down_from_start();
        // Host 1 (leaf1) to host 0 (leaf0): leaf1 must stop hashing onto
        // spine0, whose only way down to leaf0 is the failed link.
        for i in 0..64u16 {
            let t = 200_000 + i as u64 * 10;
            f.send(t, 1, pkt(1, 30000 + i, 0, data_bytes(200, 0), ECT0, t));
        }
        assert_eq!(drain(&mut f).len(), 64);
    }

    #[test]
    fn held_link_events_apply_from_the_origin() {
        let mut cfg = leaf_spine(2, 2, 1, 8);
        cfg.events = vec![LinkEvent {
            at_us: 10.0,
            link: ["leaf0".into(), "spine0".into()],
            action: LinkAction::Down,
        }];
        let mut f = Fabric::new(cfg).unwrap();
        f.hold_link_events();
        f.schedule_link_events(1_000_000);
        // Before origin + 10 us both spines carry traffic; after it the
        // dead link drops what hashes onto it.
        for i in 0..64u16 {
            let t = 500_000 + i as u64 * 10;
            f.send(t, 0, pkt(0, 30000 + i, 1, data_bytes(200, 0), ECT0, t));
        }
        for i in 0..64u16 {
            let t = 2_000_000 + i as u64 * 10;
            f.send(t, 0, pkt(0, 30000 + i, 1, data_bytes(200, 0), ECT0, t));
        }
        let out = drain(&mut f);
        let early = out.iter().filter(|d| d.packet.tag < 1_000_000).count();
        let late = out.iter().filter(|d| d.packet.tag >= 2_000_000).count();
        assert_eq!(early, 64);
        assert!(late < 64, "the link is down after origin + 10 us: {late}");
    }

    fn run_permutation(seed: u64) -> (Trace, Vec<PortCounters>) {
        let mut cfg = leaf_spine(2, 2, 2, seed);
        cfg.switch.buffer_bytes = Some(30_000);
        let mut f = Fabric::new(cfg).unwrap();
        for i in 0..200u64 {
            for s in 0..4usize {
                let d = (s + 2) % 4;
                let sport = 30000 + (i % 16) as u16;
                f.send(i * 3000, s, pkt(s, sport, d, data_bytes(3000, 0), ECT0, i));
            }
        }
        let out = drain(&mut f)
            .into_iter()
            .map(|d| (d.time, d.host, d.packet.tos, d.packet.data.len()))
            .collect();
        (out, f.ports.iter().map(|p| p.counters.clone()).collect())
    }

    #[test]
    fn same_seed_same_run() {
        let a = run_permutation(11);
        let b = run_permutation(11);
        assert_eq!(a, b);
        assert!(a.1.iter().any(|c| c.marks > 0), "the run exercises marking");
        let c = run_permutation(12);
        assert_ne!(a, c, "a different seed changes salts and marks");
    }

    #[test]
    fn base_rtt_and_buffer_follow_the_topology() {
        let f = Fabric::new(leaf_spine(2, 2, 2, 0)).unwrap();
        // h0 -> h2 crosses 4 links each way.
        assert_eq!(f.path(0, 2).len(), 4);
        assert_eq!(f.path(0, 1).len(), 2);
        let ser = |n: usize| ((n + FRAME_OVERHEAD) as f64 * 8.0).ceil() as u64;
        assert_eq!(
            f.base_rtt_ns(0, 2, 4096, 64),
            4 * (ser(4096) + 1000) + 4 * (ser(64) + 1000)
        );
        assert_eq!(f.data_buffer_bytes(), f.bdp_bytes());
        let mut cfg = leaf_spine(2, 2, 2, 0);
        cfg.switch.trimming = false;
        let g = Fabric::new(cfg).unwrap();
        assert_eq!(g.data_buffer_bytes(), 5 * g.bdp_bytes());
        // Oversubscription 2: each of 2 uplinks carries 2 hosts / (2 * 2).
        let mut cfg = leaf_spine(2, 2, 2, 0);
        cfg.topology.oversubscription = 2.0;
        assert_eq!(cfg.topology.uplink_gbps(), 0.5);
    }

    #[test]
    fn far_future_link_events_stay_in_the_future() {
        // 1e20 us is past u64::MAX ns: never, not a wrapped-round "now".
        let mut cfg = leaf_spine(2, 2, 1, 8);
        cfg.switch.reroute_us = Some(1e20);
        cfg.events = vec![
            LinkEvent {
                at_us: 1e20,
                link: ["leaf0".into(), "spine0".into()],
                action: LinkAction::Down,
            },
            LinkEvent {
                at_us: 1.0,
                link: ["leaf0".into(), "spine1".into()],
                action: LinkAction::Down,
            },
        ];
        let mut f = Fabric::new(cfg).unwrap();
        f.hold_link_events();
        f.schedule_link_events(5_000);
        // The near event, then its reroute, which is as far out as the far
        // event: neither may come before the near one.
        assert_eq!(f.next_event_time(), Some(6_000));
        f.advance(6_000);
        assert!(f.next_event_time().is_some_and(|t| t > 6_000));
        assert!(
            f.ports.iter().filter(|p| !p.up).count() == 2,
            "only spine1's link is down"
        );
    }

    #[test]
    fn link_events_out_of_range_are_errors() {
        let with = |at_us: f64, action: LinkAction| {
            let mut cfg = leaf_spine(2, 2, 1, 8);
            cfg.events.push(LinkEvent {
                at_us,
                link: ["leaf0".into(), "spine0".into()],
                action,
            });
            Fabric::new(cfg)
        };
        for at in [f64::NAN, f64::INFINITY, -1.0] {
            assert!(matches!(
                with(at, LinkAction::Down),
                Err(ModelError::Event { .. })
            ));
        }
        for factor in [0.0, -0.5, f64::NAN, f64::INFINITY] {
            let e = with(1.0, LinkAction::Rate { factor });
            assert!(matches!(e, Err(ModelError::Event { .. })), "{factor}");
        }
        for loss in [-0.1, 1.5, f64::NAN] {
            let e = with(1.0, LinkAction::Loss { loss });
            assert!(matches!(e, Err(ModelError::Event { .. })), "{loss}");
        }
        assert!(with(1e20, LinkAction::Rate { factor: 0.5 }).is_ok());
        let mut cfg = leaf_spine(2, 2, 1, 8);
        cfg.switch.reroute_us = Some(f64::NAN);
        assert!(matches!(Fabric::new(cfg), Err(ModelError::Settings(_))));
    }

    #[test]
    fn unknown_link_in_schedule_is_an_error() {
        let mut cfg = leaf_spine(2, 2, 2, 0);
        cfg.events.push(LinkEvent {
            at_us: 1.0,
            link: ["leaf0".into(), "leaf1".into()],
            action: LinkAction::Down,
        });
        assert!(matches!(
            Fabric::new(cfg),
            Err(ModelError::UnknownLink { .. })
        ));
    }
}
