//! Fabric description: topology, switch settings and the link-event schedule.
//! Deserialised from the `[fabric]` part of a scenario file (TOML) or built
//! in code; every field has a default that suits loopback runs.

use serde::{Deserialize, Serialize};

/// Bytes a packet occupies on an emulated link besides its UET bytes:
/// Ethernet header (14) + IPv4 (20) + UDP (8).
pub const FRAME_OVERHEAD: usize = 42;

/// Size of a PDS request (12 B) plus the SES standard header (44 B): what a
/// trimmed data packet keeps of its UET bytes (and an ACK riding at its
/// end, `uet::wire::ack_trailer`).
pub const TRIM_KEEP: usize = 56;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricConfig {
    #[serde(default)]
    pub topology: TopologyConfig,
    #[serde(default)]
    pub switch: SwitchConfig,
    /// Link failures, degradations and loss, applied at their times.
    #[serde(default)]
    pub events: Vec<LinkEvent>,
    /// Seeds ECN marking, loss and the per-switch ECMP salts.
    #[serde(default)]
    pub seed: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TopologyKind {
    /// All hosts on one switch.
    #[default]
    Single,
    /// `leaves` leaf switches with `hosts_per_leaf` hosts each, every leaf
    /// linked once to each of `spines` spine switches.
    LeafSpine,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopologyConfig {
    pub kind: TopologyKind,
    /// Hosts of a single-switch topology (leaf-spine: leaves * hosts_per_leaf).
    pub hosts: usize,
    pub leaves: usize,
    pub spines: usize,
    pub hosts_per_leaf: usize,
    /// Host link rate, Gb/s (1 Gb/s = 1 bit/ns).
    pub link_gbps: f64,
    /// Propagation (plus switch traversal) delay of every link, ns.
    pub link_delay_ns: u64,
    /// Host bandwidth of a leaf over its uplink bandwidth: each leaf-spine
    /// link runs at hosts_per_leaf * link_gbps / (spines * oversubscription).
    pub oversubscription: f64,
}

impl Default for TopologyConfig {
    fn default() -> Self {
        TopologyConfig {
            kind: TopologyKind::Single,
            hosts: 2,
            leaves: 1,
            spines: 1,
            hosts_per_leaf: 2,
            link_gbps: 2.0,
            link_delay_ns: 2_000,
            oversubscription: 1.0,
        }
    }
}

impl TopologyConfig {
    pub fn host_count(&self) -> usize {
        match self.kind {
            TopologyKind::Single => self.hosts,
            TopologyKind::LeafSpine => self.leaves * self.hosts_per_leaf,
        }
    }

    /// Rate of one leaf-spine link, Gb/s.
    pub fn uplink_gbps(&self) -> f64 {
        self.hosts_per_leaf as f64 * self.link_gbps
            / (self.spines.max(1) as f64 * self.oversubscription.max(f64::MIN_POSITIVE))
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SwitchConfig {
    /// Data queue of each switch port, bytes. Unset: 1 BDP of a host link
    /// with trimming, 5 BDP without (NSCC.md section 8).
    pub buffer_bytes: Option<u64>,
    /// RED marking thresholds as fractions of the data queue.
    pub kmin: f64,
    pub kmax: f64,
    /// Trim data packets that find the queue full (false: drop them).
    pub trimming: bool,
    /// Control queue of each switch port, bytes. Unset: the data queue size.
    pub control_buffer_bytes: Option<u64>,
    /// Egress queue of a host NIC (no marking, no trimming), bytes.
    pub host_buffer_bytes: u64,
    /// Packet size (UET bytes) used to compute base RTT and BDP.
    pub mtu: usize,
    /// Width of one time-series bucket, ns.
    pub sample_ns: u64,
    /// Microseconds after a link goes down until routing stops using it
    /// (unset: never; packets hashed onto it are lost until it comes up).
    pub reroute_us: Option<f64>,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig {
            buffer_bytes: None,
            kmin: 0.2,
            kmax: 0.8,
            trimming: true,
            control_buffer_bytes: None,
            host_buffer_bytes: 16 << 20,
            mtu: 4096,
            sample_ns: 100_000,
            reroute_us: None,
        }
    }
}

/// What happens to a link (both directions) at a given time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkEvent {
    /// Time of the event, microseconds after the fabric started.
    pub at_us: f64,
    /// The two node names the link joins (`h3`, `sw`, `leaf0`, `spine1`).
    pub link: [String; 2],
    #[serde(flatten)]
    pub action: LinkAction,
}

impl LinkEvent {
    /// `at_us` in ns; the cast saturates, so a time past u64::MAX ns is
    /// u64::MAX (never), and a negative one 0.
    pub fn at_ns(&self) -> u64 {
        (self.at_us * 1000.0) as u64
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum LinkAction {
    /// The link stops: queued packets and every later arrival are dropped.
    Down,
    /// The link carries traffic again at its configured rate.
    Up,
    /// The link runs at `factor` times its configured rate (degradation).
    Rate { factor: f64 },
    /// Each packet sent on the link is lost with probability `loss`.
    Loss { loss: f64 },
}
