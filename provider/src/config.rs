//! The provider's one configuration struct.
//!
//! Every knob is listed once in [`PARAMS`]; the libfabric shim defines each as
//! an `FI_UET_<NAME>` parameter (so `fi_info -e` lists it with its help text)
//! and feeds the values it reads back through [`Config::set`]. Defaults work on
//! loopback.

use crate::cms::{CcAlgorithm, LbAlgorithm, PaperFeatures};

/// The kind of a parameter, mirroring libfabric's `enum fi_param_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    Int,
    Bool,
    Str,
}

/// One configuration knob: its name without the `FI_UET_` prefix.
#[derive(Clone, Copy, Debug)]
pub struct ParamSpec {
    pub name: &'static str,
    pub kind: ParamKind,
    pub help: &'static str,
}

/// Smallest `FI_UET_SPLICE_BYTES` but 0: receivers guard datagrams from
/// this size on against stale spliced pages (`io::Endpoint::discard_stale`).
pub const SPLICE_BYTES_MIN: usize = 16384;

/// Every parameter the provider reads. The help strings state the default.
pub const PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "mtu",
        kind: ParamKind::Int,
        help: "Largest UDP payload per packet in bytes, UET headers included (1024..65000; default 0 = auto: 65000 on loopback, 1472 (one standard Ethernet frame) elsewhere). Use 4096 to mimic a UET fabric, 9000 on jumbo-frame networks.",
    },
    ParamSpec {
        name: "window",
        kind: ParamKind::Int,
        help: "Most unacknowledged packets per peer (default 256; 8..1024).",
    },
    ParamSpec {
        name: "rto_min_us",
        kind: ParamKind::Int,
        help: "Smallest retransmission timeout in microseconds (default 1000).",
    },
    ParamSpec {
        name: "rto_max_us",
        kind: ParamKind::Int,
        help: "Largest retransmission timeout after backoff in microseconds (default 200000).",
    },
    ParamSpec {
        name: "max_retries",
        kind: ParamKind::Int,
        help: "Retransmissions of one packet before its peer is declared unreachable and its operations fail with FI_EIO (default 30).",
    },
    ParamSpec {
        name: "sockbuf",
        kind: ParamKind::Int,
        help: "Requested socket send and receive buffer size in bytes (default 8388608). As root the kernel limit is bypassed.",
    },
    ParamSpec {
        name: "inject_size",
        kind: ParamKind::Int,
        help: "Largest message fi_inject accepts, in bytes (default 4096).",
    },
    ParamSpec {
        name: "spin_before_yield",
        kind: ParamKind::Int,
        help: "Empty progress calls before the polling thread yields its core, so oversubscribed ranks make progress (default 64; 0 = always yield).",
    },
    ParamSpec {
        name: "wait_spin_us",
        kind: ParamKind::Int,
        help: "Microseconds a blocking wait (fi_cq_sread, fi_cntr_wait) keeps polling before it sleeps, and again after input ends a sleep: a completion due within them is seen without the tens of microseconds a wake-up costs (default 50; 0 = sleep at once, for hosts with more busy processes than cores).",
    },
    ParamSpec {
        name: "idle_progress_us",
        kind: ParamKind::Int,
        help: "With FI_PROGRESS_MANUAL, a domain thread progresses any endpoint the application has not progressed for this many microseconds, so retransmissions, ACKs and held packets still move while the application blocks elsewhere; it notices within up to 4 ms more, by a timer the application's own calls push out, so while they come it wakes only every 20 ms (default 1000; 0 = only the application progresses).",
    },
    ParamSpec {
        name: "direct_rx",
        kind: ParamKind::Bool,
        help: "Receive the payload of a large packet (16 KiB or more: large datagrams, the default on loopback) straight into the posted receive buffer when it continues where the last packet of its message ended, so the kernel's copy is the only one; a datagram that is not the predicted packet is put back together and copied as usual (default 1; 0 = always receive into the endpoint's own buffers and copy).",
    },
    ParamSpec {
        name: "splice_bytes",
        kind: ParamKind::Int,
        help: "A packet's first send whose payload is at least this many bytes (large datagrams: the default on loopback) leaves by vmsplice(2) and splice(2) instead of a copying sendmsg: the datagram refers to the message's own pages until the receiver (on this host) or the NIC takes it, so the sender's kernel copies nothing. The memory stays untouched until the message completes, as for any send; resends and what fi_close sends are copied. For a peer that gave up on a stalled receiver or closed, every endpoint throws away the datagrams of 16 KiB or more that waited in its socket longer than half the sooner of the two for its FI_UET_RTO_MIN_US, FI_UET_RTO_MAX_US and FI_UET_MAX_RETRIES (200 ms by default, at least 100 ms; timers that would want less keep payloads copied): give all endpoints the same. Never through FI_UET_FABRIC (default 32768; 0 = always copy; else 16384..65536).",
    },
    ParamSpec {
        name: "connected_peers",
        kind: ParamKind::Int,
        help: "Up to this many peers get a send socket of their own, connected to the peer, for the data packets that would leave from the endpoint's own socket (all of them with the single-path load balancer, the loopback default): a send on a connected socket reuses the route the kernel cached at connect(2) instead of looking it up per datagram. Such a socket has a port of its own, which data may leave from since it names the sender's own port; ACKs and control still leave from the endpoint's socket. A peer not sent to for a second gives its socket up to a new peer once all are taken; after that, and when no socket can be opened, data leaves from the endpoint's socket. Not through FI_UET_FABRIC or with ordered delivery (FI_UET_DELIVERY=rod: one path for data and responses); a payload spliced on a kernel before 6.5 leaves from the endpoint's socket too (default 32; 0 = every datagram names its destination; at most 4096).",
    },
    ParamSpec {
        name: "defer_acks",
        kind: ParamKind::Bool,
        help: "When a progress call made by the application completes a message and has only ACKs to send, and the application answered the last such call with a send or RMA, hold those ACKs until its next send or RMA, so a reply it posts at once leaves ahead of them or carries them (FI_UET_ACK_PIGGYBACK); not for a message that crossed ours in flight (its sender still has ours unacknowledged and sent no ACK with it: it may wait for this ACK) unless its sender marked that nothing of its waits for the ACK (an fi_inject, a send without completion), which is then held whatever the application did before; only a send or RMA to that message's sender within FI_UET_ACK_HOLD_US counts as an answer; the hold is reported in the ACK's service time; background progress threads never hold ACKs, and the first application call made FI_UET_ACK_HOLD_US or more after the hold began sends them whatever it completes (default 1; 0 = ACKs leave in the call that queues them).",
    },
    ParamSpec {
        name: "ack_hold_us",
        kind: ParamKind::Int,
        help: "How long ACKs held for a reply (FI_UET_DEFER_ACKS) stay held through further application progress calls made before the application answers, such as a read of its send's completion before the message's; a send or RMA to the message's sender posted within this time counts as the answer, a later one or one elsewhere stops the holding (default 10; 0 = released by the next call).",
    },
    ParamSpec {
        name: "ack_piggyback",
        kind: ParamKind::Bool,
        help: "ACKs held for a reply (FI_UET_DEFER_ACKS) ride at the end of the reply's first datagram to the same peer that has room within FI_UET_MTU (datagrams under 16 KiB: receivers land larger payloads in place, which a trailer prevents), so a request-response exchange sends one datagram per message instead of two; an ACK whose peer's next packet is an SES response (delivery completion) rides on that response the same way; a switch that trims the reply keeps the ACK (emu-net does) (default 1; 0 = ACKs leave in datagrams of their own).",
    },
    ParamSpec {
        name: "src_addr",
        kind: ParamKind::Str,
        help: "IP address an endpoint binds when the application names no source or destination address (default 127.0.0.1; \"auto\" = the address of the interface holding the default route).",
    },
    ParamSpec {
        name: "unexpected_bytes",
        kind: ParamKind::Int,
        help: "Most payload bytes an endpoint holds for messages that arrived before a matching receive was posted (default 67108864). Past it, further packets of unmatched messages are refused with NACK 0x07 and resent by the sender later, so memory stays bounded whatever the senders claim.",
    },
    ParamSpec {
        name: "answer_bytes",
        kind: ParamKind::Int,
        help: "Most bytes of RMA read data and fetched atomic values an endpoint holds for its peers until they acknowledge them (default 67108864). Past it, further read and fetching-atomic requests are refused with NACK 0x07 and resent by the initiator later; one answer larger than this still goes when nothing else is held. Requests on ordered (ROD) contexts are not refused: a refused request would hold up its sender's own answers queued behind it.",
    },
    ParamSpec {
        name: "rendezvous_bytes",
        kind: ParamKind::Int,
        help: "Sends longer than this many bytes go as rendezvous sends (default 262144; 0 = never): their first this-many bytes travel eagerly and the receiver pulls the rest straight into its receive buffer once the message is matched, so an unmatched large message costs it at most this much memory. The send completes once the pull is over.",
    },
    ParamSpec {
        name: "host_read",
        kind: ParamKind::Bool,
        help: "Between processes of one host (same boot, PID and network namespace), the receiver of a rendezvous send copies the part past the eager bytes straight from the sender's memory into its receive buffer (process_vm_readv: one copy, no packets) instead of pulling it over the network; both ends must enable it. A peer may only name its own memory: its process must hold the one socket bound to its address, created by its user, and return a random token sent only to that address, so the first large message between two endpoints is pulled while the token travels. When the kernel refuses the copy (ptrace rules), a buffer is not in one piece or the peer is not proven, the pull goes over the network as usual. Those bytes bypass the network, so ECN, trimming and congestion control do not see them; an endpoint with FI_UET_FABRIC (the emu-net relay) ignores this parameter, so every byte crosses the emulated fabric (default 0).",
    },
    ParamSpec {
        name: "host_ring",
        kind: ParamKind::Bool,
        help: "Between endpoints of one host (same boot and network namespace, same user), datagrams travel through shared-memory rings in /dev/shm instead of UDP: the same packets, ACKs and congestion control, without a system call per datagram at either end. A sender uses the ring of a peer that also enables it and that it finds holding the peer's UDP address; to other peers, and past 32 senders per endpoint, it sends over UDP. Those datagrams bypass the network (no ECN marks, trimming or loss); an endpoint with FI_UET_FABRIC, fault injection or FI_UET_DELIVERY=rod ignores this parameter (default 0).",
    },
    ParamSpec {
        name: "host_rendezvous_bytes",
        kind: ParamKind::Int,
        help: "With FI_UET_HOST_READ: once a peer has copied one of our rendezvous sends in place (it is on this host), sends to it longer than this many bytes go as rendezvous sends, instead of those longer than FI_UET_RENDEZVOUS_BYTES, since the copy beats the network from a few pages on (default 16384; 0 = never).",
    },
    ParamSpec {
        name: "trace",
        kind: ParamKind::Str,
        help: "File to write a CSV trace of congestion-control events to (one line per ACK, NACK and timeout: time, peer, entropy, RTT, ECN, cwnd, in flight, base RTT, average delay); \"%p\" in the name becomes the process ID, \"%e\" the endpoint's port (default empty: no trace).",
    },
    ParamSpec {
        name: "pdc_idle_us",
        kind: ParamKind::Int,
        help: "Idle time in microseconds after which a delivery context with nothing in flight is closed with the close handshake, freeing its state; the next message reopens it in 0 RTT (default 1000000; 0 = never close). When half of the context IDs or more are in use, a receive context silent for twice this long asks its sender to close it, and is dropped when nobody answers (the sender is gone).",
    },
    ParamSpec {
        name: "max_pdcs",
        kind: ParamKind::Int,
        help: "Delivery contexts an endpoint keeps at once, both directions (each peer it sends to and each peer it receives from takes one 16-bit ID). When all are taken, new peers wait (sends) or are refused with NACK 0x07 and retry (receives) until idle contexts close (default 16384; 2..65535).",
    },
    ParamSpec {
        name: "port",
        kind: ParamKind::Int,
        help: "UDP port an endpoint binds when the application names none (default 0: the UET port 4793 when it is free, any free port otherwise).",
    },
    ParamSpec {
        name: "delivery",
        kind: ParamKind::Str,
        help: "Delivery mode of the endpoint's send contexts: rud (reliable unordered, default: packets sprayed over every entropy, placed as they arrive) or rod (reliable ordered: one path, the receiver accepts packets only in PSN order and the sender goes back N on loss, so data lands in posting order; also chosen when the application asks for FI_ORDER_RAW/RAR/WAW/SAW in msg_order).",
    },
    ParamSpec {
        name: "cc",
        kind: ParamKind::Str,
        help: "Congestion control per peer: nscc (NSCC, default) or none (fixed window of FI_UET_WINDOW packets, the no-CC baseline).",
    },
    ParamSpec {
        name: "link_gbps",
        kind: ParamKind::Int,
        help: "Link rate in Gb/s that NSCC scales its window and gains with (bdp = rate * base RTT; default 100, a rate loopback sustains with 64 KB datagrams; 1..3200).",
    },
    ParamSpec {
        name: "link_mbps",
        kind: ParamKind::Int,
        help: "Link rate in Mb/s; when set it replaces FI_UET_LINK_GBPS, for emulated links below 1 Gb/s or between whole Gb/s (default 0 = use FI_UET_LINK_GBPS; 0..3200000).",
    },
    ParamSpec {
        name: "base_rtt_us",
        kind: ParamKind::Int,
        help: "Base (unloaded) round-trip time in microseconds NSCC starts from (default 0 = measure it: the smallest valid RTT sample; a seed is still lowered by smaller samples).",
    },
    ParamSpec {
        name: "lb",
        kind: ParamKind::Str,
        help: "Load balancer choosing the entropy (UDP source port) per packet: auto (default: single on an endpoint bound to a loopback address and sending directly, where the kernel has one path and spraying only spreads packets over sockets, reps otherwise), reps (recycles good entropies, simulator form), reps_paper (explore then one cached entropy), bitmap (per-entropy penalties), oblivious (spray without feedback), single (one path: every packet leaves from the endpoint's own socket).",
    },
    ParamSpec {
        name: "nscc_variant",
        kind: ParamKind::Str,
        help: "NSCC form: sim (reference simulator, default), paper (every SMaRTT/SMaRTT-REPS form), or a comma list of paper features: target (target queueing delay 0.5 base RTT), maxwnd (1.25 bdp), wtd (Wait-to-Decrease with fair decrease), qa_scaling (QuickAdapt to 0.8 of achieved), fast_increase (k MTUs per ACK, see FI_UET_NSCC_FAST_INCREASE_MTUS), md_rtt (decrease severity from RTTs).",
    },
    ParamSpec {
        name: "nscc_target_pct",
        kind: ParamKind::Int,
        help: "NSCC target queueing delay in percent of the base RTT (default 0 = from the variant: 75 with trimming, 100 without, 50 for the paper target; 1..1000).",
    },
    ParamSpec {
        name: "nscc_trimming",
        kind: ParamKind::Bool,
        help: "Whether the fabric trims packets instead of dropping them; sets the simulator's target queueing delay to 0.75 (on, default) or 1.0 (off) base RTT.",
    },
    ParamSpec {
        name: "nscc_fast_increase_mtus",
        kind: ParamKind::Int,
        help: "k of the paper FastIncrease: MTUs added per ACK while the pipe is empty (default 2; used with FI_UET_NSCC_VARIANT=paper or fast_increase; 1..64).",
    },
    ParamSpec {
        name: "nscc_min_maxwnd_packets",
        kind: ParamKind::Int,
        help: "Floor of NSCC's maximum window in packets (default 16; 0 = none, maxwnd = 1.5 bdp as in the reference). Where the measured bdp is below a few packets, as on loopback with 64 KB datagrams and microsecond RTTs, a one-packet window would serialise transfers.",
    },
    ParamSpec {
        name: "nscc_qa_idle_restart",
        kind: ParamKind::Bool,
        help: "Whether NSCC's QuickAdapt starts a new window when the sender resumes after its pipe drained with nothing left to send (on, default), treating each busy period as a new flow; off keeps one window across idle gaps, so the first ACK after a gap can cut the window to what the gap let through.",
    },
    ParamSpec {
        name: "nscc_qa_window_limited",
        kind: ParamKind::Bool,
        help: "Whether NSCC's QuickAdapt fires on extreme delay (above 4 target delays) only after a window in which the sender used its window: the window held data back, or at least half of it was in flight (on, default). A sender that left most of its window unused measured its application, not the network, and its delay may be the receiving host's. Off: the reference simulator's rule, any sender. NACKs fire QuickAdapt either way.",
    },
    ParamSpec {
        name: "spray_bytes",
        kind: ParamKind::Int,
        help: "Spray unit of the load balancer: after it picks an entropy (UDP source port) for a data packet, the packets to the same peer after it keep that entropy while they fit in this many wire bytes, and bad news about it (an ECN mark, a trim in the fabric, a timeout) ends the unit at once. A host gives the kernel one segmented send (FI_UET_GSO) per source port, so per-packet spraying over 16 ports cut a run of 44 standard-frame packets into runs of two or three (1 MiB fi_pingpong over a veth pair between two network namespaces: 1.05 GB/s against 2.6 with the auto unit). 0 = auto (default): 65507, what one segmented send holds (44 standard-frame packets, 15 of 4 KiB), when datagrams go straight to the network with FI_UET_GSO; 1 (every packet picks, as the papers spray) through FI_UET_FABRIC or without GSO, where nothing batches them. 1 also restores per-packet spraying for experiments on a real fabric; with units, the algorithms' own counts (explorations, penalty decay) count units. 0..16777216. No effect with the single load balancer or FI_UET_DELIVERY=rod.",
    },
    ParamSpec {
        name: "entropies",
        kind: ParamKind::Int,
        help: "UDP sockets per endpoint, bound to consecutive ports; the source port carries a packet's entropy (path choice). Socket 0 is the endpoint's address (default 16; 1..256). With the single load balancer only socket 0 is bound.",
    },
    ParamSpec {
        name: "gso",
        kind: ParamKind::Bool,
        help: "Batch datagrams through the kernel with UDP segmentation offload (default on): runs of three or more equal-size packets to one peer (two when both carry data) leave with one sendmsg (UDP_SEGMENT), packets of one progress call grouped by entropy socket, and once a burst or a message of several packets has arrived, coalesced arrivals (UDP_GRO) are taken with one receive and cut back into their datagrams (before that GRO stays off: it slows a ping-pong down). Pays off with small packets (FI_UET_MTU=4096); off with FI_UET_FABRIC, and falls back to one datagram per call where the kernel refuses.",
    },
    ParamSpec {
        name: "send_burst_us",
        kind: ParamKind::Int,
        help: "Send bursts: a send posted within this many microseconds of the previous send, with no other call on the endpoint between, waits until the application's next call of any other kind (a completion read, a receive, ...) or until a GSO batch's worth of data waits, then leaves with the rest of the burst in as few system calls as GSO allows. The first send of a burst leaves at once, unless posted with FI_MORE. Needs FI_UET_GSO (default 20; 0 = every send leaves in its own call; 0..1000000).",
    },
    ParamSpec {
        name: "fabric",
        kind: ParamKind::Str,
        help: "ip:port of an emu-net relay: every datagram then goes through it, wrapped in the relay header (default empty: send directly).",
    },
    ParamSpec {
        name: "fault_drop",
        kind: ParamKind::Int,
        help: "Fault injection: per-mille of data and ACK packets not sent (default 0; 0..1000). Faults apply to single packets within GSO batches; the rest of a batch still leaves segmented.",
    },
    ParamSpec {
        name: "fault_dup",
        kind: ParamKind::Int,
        help: "Fault injection: per-mille of data and ACK packets sent twice (default 0; 0..1000).",
    },
    ParamSpec {
        name: "fault_reorder",
        kind: ParamKind::Int,
        help: "Fault injection: per-mille of data and ACK packets held back by FI_UET_FAULT_DELAY_US, so later ones overtake them (default 0; 0..1000).",
    },
    ParamSpec {
        name: "fault_delay_us",
        kind: ParamKind::Int,
        help: "Fault injection: how long FI_UET_FAULT_REORDER holds a packet, in microseconds (default 200).",
    },
    ParamSpec {
        name: "fault_trim",
        kind: ParamKind::Int,
        help: "Fault injection: per-mille of data packets cut after their UET headers and sent with the trimmed DSCP 0x0B, as a switch trims (default 0; 0..1000).",
    },
    ParamSpec {
        name: "fault_ecn",
        kind: ParamKind::Int,
        help: "Fault injection: per-mille of data packets sent with ECN CE (default 0; 0..1000).",
    },
    ParamSpec {
        name: "fault_seed",
        kind: ParamKind::Int,
        help: "Fault injection: seed of the random decisions, so a run can be repeated (default 1).",
    },
];

/// Runtime configuration of an endpoint, filled from the `FI_UET_*` parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// 0 = choose from the bound address (see [`Config::effective_mtu`]).
    pub mtu: usize,
    pub window: usize,
    pub rto_min_us: u64,
    pub rto_max_us: u64,
    pub max_retries: u32,
    pub sockbuf: usize,
    pub inject_size: usize,
    pub spin_before_yield: u32,
    /// Microseconds a blocking wait polls before it sleeps.
    pub wait_spin_us: u64,
    /// Microseconds without application progress before the domain thread
    /// steps in (manual progress); 0 = never.
    pub idle_progress_us: u64,
    /// ACKs of a progress call that completes a message wait for the
    /// application's next call (see `io::Endpoint::progress_app`).
    pub defer_acks: bool,
    /// Microseconds held ACKs survive further application progress calls.
    pub ack_hold_us: u64,
    /// Held ACKs ride at the end of the reply's datagram
    /// (`wire::ack_trailer`).
    pub ack_piggyback: bool,
    /// Large payloads are received straight into posted buffers
    /// (`engine::Engine::landing`).
    pub direct_rx: bool,
    /// Payloads at least this long are spliced (`io::splice`); 0 = never.
    pub splice_bytes: usize,
    /// Peers with a connected send socket (`io::connected`); 0 = none.
    pub connected_peers: usize,
    /// Delivery-context ID pool size per endpoint.
    pub max_pdcs: usize,
    pub port: u16,
    pub pdc_idle_us: u64,
    pub unexpected_bytes: usize,
    /// Read data and fetched values held for peers (`FI_UET_ANSWER_BYTES`).
    pub answer_bytes: usize,
    /// 0 = every send is eager.
    pub rendezvous_bytes: usize,
    /// Same-host rendezvous copies (`engine::HostMemory`).
    pub host_read: bool,
    /// Same-host datagram rings (`io::host_ring`).
    pub host_ring: bool,
    /// Rendezvous threshold towards peers known to copy in place.
    pub host_rendezvous_bytes: usize,
    /// Empty = no congestion-control trace.
    pub trace: String,
    /// Empty = loopback.
    pub src_addr: String,
    /// Reliable ordered delivery (ROD) instead of unordered (RUD).
    pub ordered: bool,
    pub cc: CcAlgorithm,
    pub link_gbps: u32,
    /// 0 = use `link_gbps`.
    pub link_mbps: u32,
    /// 0 = measure.
    pub base_rtt_us: u64,
    /// `None` = auto (see [`Config::effective_lb`]).
    pub lb: Option<LbAlgorithm>,
    pub nscc_variant: PaperFeatures,
    /// 0 = from the variant.
    pub nscc_target_pct: u32,
    pub trimming: bool,
    pub nscc_fast_increase_mtus: u32,
    pub nscc_min_maxwnd_packets: u32,
    pub nscc_qa_idle_restart: bool,
    pub nscc_qa_window_limited: bool,
    /// `FI_UET_SPRAY_BYTES`: wire bytes that keep one entropy pick; 0 =
    /// auto (see [`Config::effective_spray_bytes`]).
    pub spray_bytes: u32,
    /// Sockets (source ports) per endpoint; socket 0 is its address.
    pub entropies: u16,
    /// UDP GSO on transmit and GRO on receive.
    pub gso: bool,
    /// `FI_UET_SEND_BURST_US`: longest pause between two sends of a burst
    /// (0 = no bursts).
    pub send_burst_us: u32,
    /// Relay address `ip:port`; empty = direct.
    pub fabric: String,
    /// Transmit-side fault injection, per-mille.
    pub fault_drop: u32,
    pub fault_dup: u32,
    pub fault_reorder: u32,
    pub fault_delay_us: u64,
    pub fault_trim: u32,
    pub fault_ecn: u32,
    pub fault_seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mtu: 0,
            window: 256,
            rto_min_us: 1000,
            rto_max_us: 200_000,
            max_retries: 30,
            sockbuf: 8 << 20,
            inject_size: 4096,
            spin_before_yield: 64,
            wait_spin_us: 50,
            idle_progress_us: 1000,
            defer_acks: true,
            ack_hold_us: 10,
            ack_piggyback: true,
            direct_rx: true,
            splice_bytes: 32768,
            connected_peers: 32,
            max_pdcs: 16384,
            port: 0,
            pdc_idle_us: 1_000_000,
            unexpected_bytes: 64 << 20,
            answer_bytes: 64 << 20,
            rendezvous_bytes: 256 << 10,
            host_read: false,
            host_ring: false,
            host_rendezvous_bytes: 16 << 10,
            trace: String::new(),
            src_addr: String::new(),
            ordered: false,
            cc: CcAlgorithm::Nscc,
            link_gbps: 100,
            link_mbps: 0,
            base_rtt_us: 0,
            lb: None,
            nscc_variant: PaperFeatures::default(),
            nscc_target_pct: 0,
            trimming: true,
            nscc_fast_increase_mtus: 2,
            nscc_min_maxwnd_packets: 16,
            nscc_qa_idle_restart: true,
            nscc_qa_window_limited: true,
            spray_bytes: 0,
            entropies: 16,
            gso: true,
            send_burst_us: 20,
            fabric: String::new(),
            fault_drop: 0,
            fault_dup: 0,
            fault_reorder: 0,
            fault_delay_us: 200,
            fault_trim: 0,
            fault_ecn: 0,
            fault_seed: 1,
        }
    }
}

/// A parameter value that is out of range or of the wrong kind.
#[derive(Debug, thiserror::Error)]
#[error("FI_UET_{name}: {reason}")]
pub struct ConfigError {
    pub name: String,
    pub reason: String,
}

/// A value read from the environment through libfabric.
#[derive(Clone, Debug)]
pub enum ParamValue {
    Int(i64),
    Bool(bool),
    Str(String),
}

impl Config {
    /// Largest message the engine accepts (bounded by the SES request-length
    /// field, 32 bits).
    pub const MAX_MSG_SIZE: usize = (u32::MAX as usize) & !0xfff;

    /// Most operations an endpoint holds per direction: sends not yet
    /// complete, and posted receives. Beyond it posting returns `Again`.
    pub const QUEUE_DEPTH: usize = 8192;

    /// The link rate NSCC and the load balancer scale with, Gb/s:
    /// `link_mbps` when set, else `link_gbps`.
    pub fn link_rate_gbps(&self) -> f64 {
        match self.link_mbps {
            0 => self.link_gbps as f64,
            mbps => mbps as f64 / 1000.0,
        }
    }

    /// MTU on loopback, where the kernel carries 64 KiB datagrams cheaply.
    pub const LOOPBACK_MTU: usize = 65000;
    /// MTU elsewhere: one standard Ethernet frame (1500 - IP - UDP headers).
    pub const ETHERNET_MTU: usize = 1472;

    /// The packet size an endpoint bound at `local` uses.
    pub fn effective_mtu(&self, local: std::net::IpAddr) -> usize {
        match self.mtu {
            0 if local.is_loopback() => Self::LOOPBACK_MTU,
            0 => Self::ETHERNET_MTU,
            n => n,
        }
    }

    /// The load balancer of an endpoint bound at `local`, sending through
    /// an emu-net relay or not. Directly over loopback the kernel has one
    /// path whatever the source port, so spraying would only spread packets
    /// over sockets (colder caches, shorter segmentation runs); through a
    /// relay or a real network the entropy picks the path, and REPS is the
    /// default.
    pub fn effective_lb(&self, local: std::net::IpAddr, relayed: bool) -> LbAlgorithm {
        match self.lb {
            Some(lb) => lb,
            None if local.is_loopback() && !relayed => LbAlgorithm::Single,
            None => LbAlgorithm::FABRIC_DEFAULT,
        }
    }

    /// The spray unit auto picks: what one segmented send carries at most
    /// (the largest UDP payload of an IPv4 datagram), so a unit of
    /// equal-size packets fits in one.
    pub const GSO_SPRAY_BYTES: u32 = 65507;

    /// The spray unit ([`crate::cms::lb::LbConfig::spray_bytes`]) of an
    /// endpoint sending through an emu-net relay or not. Where datagrams go
    /// straight to the kernel in segmented sends, one per source port,
    /// a unit of one such send keeps the runs whole; through a relay, or
    /// without GSO, every datagram is a system call of its own anyway, and
    /// every packet picks, as the papers spray.
    pub fn effective_spray_bytes(&self, relayed: bool) -> u32 {
        match self.spray_bytes {
            0 if relayed || !self.gso => 1,
            0 => Self::GSO_SPRAY_BYTES,
            n => n,
        }
    }

    /// The current value of a parameter, by its `PARAMS` name.
    pub fn get(&self, name: &str) -> Option<ParamValue> {
        match name {
            "src_addr" => return Some(ParamValue::Str(self.src_addr.clone())),
            "trace" => return Some(ParamValue::Str(self.trace.clone())),
            "cc" => return Some(ParamValue::Str(self.cc.name().into())),
            "delivery" => {
                return Some(ParamValue::Str(
                    if self.ordered { "rod" } else { "rud" }.into(),
                ))
            }
            "lb" => return Some(ParamValue::Str(self.lb.map_or("auto", |l| l.name()).into())),
            "nscc_variant" => return Some(ParamValue::Str(self.nscc_variant.name())),
            "nscc_trimming" => return Some(ParamValue::Bool(self.trimming)),
            "nscc_qa_idle_restart" => return Some(ParamValue::Bool(self.nscc_qa_idle_restart)),
            "nscc_qa_window_limited" => return Some(ParamValue::Bool(self.nscc_qa_window_limited)),
            "gso" => return Some(ParamValue::Bool(self.gso)),
            "send_burst_us" => return Some(ParamValue::Int(self.send_burst_us.into())),
            "defer_acks" => return Some(ParamValue::Bool(self.defer_acks)),
            "ack_piggyback" => return Some(ParamValue::Bool(self.ack_piggyback)),
            "ack_hold_us" => return Some(ParamValue::Int(self.ack_hold_us as i64)),
            "direct_rx" => return Some(ParamValue::Bool(self.direct_rx)),
            "splice_bytes" => return Some(ParamValue::Int(self.splice_bytes as i64)),
            "connected_peers" => return Some(ParamValue::Int(self.connected_peers as i64)),
            "host_read" => return Some(ParamValue::Bool(self.host_read)),
            "host_ring" => return Some(ParamValue::Bool(self.host_ring)),
            "fabric" => return Some(ParamValue::Str(self.fabric.clone())),
            _ => {}
        }
        let v = match name {
            "mtu" => self.mtu as i64,
            "window" => self.window as i64,
            "rto_min_us" => self.rto_min_us as i64,
            "rto_max_us" => self.rto_max_us as i64,
            "max_retries" => self.max_retries as i64,
            "sockbuf" => self.sockbuf as i64,
            "inject_size" => self.inject_size as i64,
            "spin_before_yield" => self.spin_before_yield as i64,
            "wait_spin_us" => self.wait_spin_us as i64,
            "idle_progress_us" => self.idle_progress_us as i64,
            "max_pdcs" => self.max_pdcs as i64,
            "port" => self.port as i64,
            "pdc_idle_us" => self.pdc_idle_us as i64,
            "unexpected_bytes" => self.unexpected_bytes as i64,
            "answer_bytes" => self.answer_bytes as i64,
            "rendezvous_bytes" => self.rendezvous_bytes as i64,
            "host_rendezvous_bytes" => self.host_rendezvous_bytes as i64,
            "link_gbps" => self.link_gbps as i64,
            "link_mbps" => self.link_mbps as i64,
            "base_rtt_us" => self.base_rtt_us as i64,
            "nscc_target_pct" => self.nscc_target_pct as i64,
            "nscc_fast_increase_mtus" => self.nscc_fast_increase_mtus as i64,
            "nscc_min_maxwnd_packets" => self.nscc_min_maxwnd_packets as i64,
            "entropies" => self.entropies as i64,
            "spray_bytes" => self.spray_bytes as i64,
            "fault_drop" => self.fault_drop as i64,
            "fault_dup" => self.fault_dup as i64,
            "fault_reorder" => self.fault_reorder as i64,
            "fault_delay_us" => self.fault_delay_us as i64,
            "fault_trim" => self.fault_trim as i64,
            "fault_ecn" => self.fault_ecn as i64,
            "fault_seed" => self.fault_seed as i64,
            _ => return None,
        };
        Some(ParamValue::Int(v))
    }

    /// Apply one parameter read by the shim. Unknown names and out-of-range
    /// values are errors so a typo is reported rather than ignored.
    pub fn set(&mut self, name: &str, value: ParamValue) -> Result<(), ConfigError> {
        let err = |reason: String| ConfigError {
            name: name.to_ascii_uppercase(),
            reason,
        };
        let int = |lo: i64, hi: i64| -> Result<i64, ConfigError> {
            match value {
                ParamValue::Int(v) if (lo..=hi).contains(&v) => Ok(v),
                ParamValue::Int(v) => Err(err(format!("{v} is outside {lo}..={hi}"))),
                _ => Err(err("expects an integer".into())),
            }
        };
        let boolean = || match value {
            ParamValue::Bool(b) => Ok(b),
            ParamValue::Int(v) => Ok(v != 0),
            _ => Err(err("expects a boolean".into())),
        };
        let text = || match &value {
            ParamValue::Str(s) => Ok(s.trim().to_ascii_lowercase()),
            _ => Err(err("expects a string".into())),
        };
        match name {
            "mtu" => {
                let v = int(0, 65000)?;
                if v != 0 && v < 1024 {
                    return Err(err(format!("{v} is below 1024 (0 = auto)")));
                }
                self.mtu = v as usize
            }
            "window" => self.window = int(8, 1024)? as usize,
            "rto_min_us" => self.rto_min_us = int(10, 10_000_000)? as u64,
            "rto_max_us" => self.rto_max_us = int(10, 100_000_000)? as u64,
            "max_retries" => self.max_retries = int(1, 1000)? as u32,
            "sockbuf" => self.sockbuf = int(65536, 1 << 30)? as usize,
            "inject_size" => self.inject_size = int(0, 65536)? as usize,
            "spin_before_yield" => self.spin_before_yield = int(0, 1 << 30)? as u32,
            "wait_spin_us" => self.wait_spin_us = int(0, 10_000_000)? as u64,
            "idle_progress_us" => self.idle_progress_us = int(0, 10_000_000)? as u64,
            "max_pdcs" => self.max_pdcs = int(2, 65535)? as usize,
            "port" => self.port = int(0, 65535)? as u16,
            "pdc_idle_us" => self.pdc_idle_us = int(0, 1 << 40)? as u64,
            "unexpected_bytes" => self.unexpected_bytes = int(0, 1 << 40)? as usize,
            "answer_bytes" => self.answer_bytes = int(0, 1 << 40)? as usize,
            "rendezvous_bytes" => self.rendezvous_bytes = int(0, 1 << 40)? as usize,
            "host_rendezvous_bytes" => self.host_rendezvous_bytes = int(0, 1 << 40)? as usize,
            "trace" => match value {
                ParamValue::Str(s) => self.trace = s,
                _ => return Err(err("expects a file name".into())),
            },
            "src_addr" => match value {
                ParamValue::Str(s) => self.src_addr = s,
                _ => return Err(err("expects an IP address or \"auto\"".into())),
            },
            "delivery" => {
                let t = text()?;
                self.ordered = match t.as_str() {
                    "rud" => false,
                    "rod" => true,
                    _ => return Err(err(format!("{t:?} is not rud or rod"))),
                }
            }
            "cc" => {
                let t = text()?;
                self.cc = CcAlgorithm::parse(&t)
                    .ok_or_else(|| err(format!("{t:?} is not nscc or none")))?
            }
            "lb" => {
                let t = text()?;
                self.lb = match t.trim() {
                    "auto" => None,
                    _ => Some(LbAlgorithm::parse(&t).ok_or_else(|| {
                        err(format!(
                            "{t:?} is not auto, oblivious, reps, reps_paper, bitmap or single"
                        ))
                    })?),
                }
            }
            "nscc_variant" => {
                let t = text()?;
                self.nscc_variant = PaperFeatures::parse(&t).ok_or_else(|| {
                    err(format!("{t:?} is not sim, paper or a list of target, maxwnd, wtd, qa_scaling, fast_increase, md_rtt"))
                })?
            }
            "nscc_trimming" => self.trimming = boolean()?,
            "nscc_qa_idle_restart" => self.nscc_qa_idle_restart = boolean()?,
            "nscc_qa_window_limited" => self.nscc_qa_window_limited = boolean()?,
            "defer_acks" => self.defer_acks = boolean()?,
            "ack_piggyback" => self.ack_piggyback = boolean()?,
            "ack_hold_us" => self.ack_hold_us = int(0, 1_000_000)? as u64,
            "direct_rx" => self.direct_rx = boolean()?,
            "splice_bytes" => {
                let v = int(0, 65536)?;
                if v != 0 && (v as usize) < SPLICE_BYTES_MIN {
                    return Err(err(format!("{v} is below {SPLICE_BYTES_MIN} (0 = off)")));
                }
                self.splice_bytes = v as usize
            }
            "connected_peers" => self.connected_peers = int(0, 4096)? as usize,
            "host_read" => self.host_read = boolean()?,
            "host_ring" => self.host_ring = boolean()?,
            "link_gbps" => self.link_gbps = int(1, 3200)? as u32,
            "link_mbps" => self.link_mbps = int(0, 3_200_000)? as u32,
            "base_rtt_us" => self.base_rtt_us = int(0, 1_000_000)? as u64,
            "nscc_target_pct" => self.nscc_target_pct = int(0, 1000)? as u32,
            "nscc_fast_increase_mtus" => self.nscc_fast_increase_mtus = int(1, 64)? as u32,
            "nscc_min_maxwnd_packets" => self.nscc_min_maxwnd_packets = int(0, 65536)? as u32,
            "entropies" => self.entropies = int(1, 256)? as u16,
            "spray_bytes" => self.spray_bytes = int(0, 1 << 24)? as u32,
            "send_burst_us" => self.send_burst_us = int(0, 1_000_000)? as u32,
            "gso" => self.gso = boolean()?,
            "fabric" => match value {
                ParamValue::Str(s) if s.is_empty() || s.parse::<std::net::SocketAddr>().is_ok() => {
                    self.fabric = s
                }
                _ => return Err(err("expects ip:port of a relay (or empty)".into())),
            },
            "fault_drop" => self.fault_drop = int(0, 1000)? as u32,
            "fault_dup" => self.fault_dup = int(0, 1000)? as u32,
            "fault_reorder" => self.fault_reorder = int(0, 1000)? as u32,
            "fault_delay_us" => self.fault_delay_us = int(0, 10_000_000)? as u64,
            "fault_trim" => self.fault_trim = int(0, 1000)? as u32,
            "fault_ecn" => self.fault_ecn = int(0, 1000)? as u32,
            "fault_seed" => self.fault_seed = int(0, i64::MAX)? as u64,
            _ => return Err(err("unknown parameter".into())),
        }
        if self.rto_max_us < self.rto_min_us {
            self.rto_max_us = self.rto_min_us;
        }
        Ok(())
    }

    /// The defaults with every `FI_UET_*` variable of this process's
    /// environment applied (see [`set_text`](Self::set_text)), for tools
    /// that run the engine without libfabric; the first one refused stops
    /// it.
    pub fn from_process_env() -> Result<Config, ConfigError> {
        let mut config = Config::default();
        for (key, value) in std::env::vars() {
            if let Some(name) = key.strip_prefix("FI_UET_") {
                config.set_text(&name.to_ascii_lowercase(), &value)?;
            }
        }
        Ok(config)
    }

    /// Apply one parameter given as text, read the way libfabric reads an
    /// `FI_UET_*` environment variable: integers in decimal (or `0x` hex),
    /// booleans as 1/0, yes/no, true/false or on/off. For front-ends that
    /// run the engine without libfabric (emu-net's virtual-time runs).
    pub fn set_text(&mut self, name: &str, text: &str) -> Result<(), ConfigError> {
        let err = |reason: String| ConfigError {
            name: name.to_ascii_uppercase(),
            reason,
        };
        let spec = PARAMS
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| err("unknown parameter".into()))?;
        let t = text.trim();
        let value = match spec.kind {
            ParamKind::Int => {
                let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                    Some(hex) => i64::from_str_radix(hex, 16),
                    None => t.parse::<i64>(),
                };
                ParamValue::Int(parsed.map_err(|_| err(format!("{t:?} is not an integer")))?)
            }
            ParamKind::Bool => ParamValue::Bool(match t.to_ascii_lowercase().as_str() {
                "1" | "yes" | "true" | "on" => true,
                "0" | "no" | "false" | "off" => false,
                _ => return Err(err(format!("{t:?} is not a boolean"))),
            }),
            ParamKind::Str => ParamValue::Str(text.to_string()),
        };
        self.set(name, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_param_has_a_setter() {
        let defaults = Config::default();
        for p in PARAMS {
            let v = defaults.get(p.name).expect(p.name);
            let mut c = Config::default();
            c.set(p.name, v).unwrap();
            assert_eq!(c, defaults, "{}", p.name);
        }
    }

    /// A help text that points the reader to another parameter names one
    /// that exists (`fi_info -e` is all a user has to go by).
    #[test]
    fn help_texts_name_only_real_parameters() {
        let known: Vec<String> = PARAMS
            .iter()
            .map(|p| format!("FI_UET_{}", p.name.to_uppercase()))
            .collect();
        for p in PARAMS {
            for (at, _) in p.help.match_indices("FI_UET_") {
                let name: String = p.help[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                // "FI_UET_FAULT_*" names a family.
                let family = p.help[at + name.len()..].starts_with('*');
                assert!(
                    family || known.contains(&name),
                    "the help of {} names {name}",
                    p.name
                );
            }
        }
    }

    #[test]
    fn text_values_parse_like_the_environment() {
        let mut c = Config::default();
        c.set_text("mtu", " 8192 ").unwrap();
        c.set_text("window", "0x40").unwrap();
        c.set_text("nscc_trimming", "off").unwrap();
        c.set_text("cc", "none").unwrap();
        assert_eq!((c.mtu, c.window, c.trimming), (8192, 64, false));
        assert_eq!(c.cc, CcAlgorithm::None);
        c.set_text("nscc_trimming", "YES").unwrap();
        assert!(c.trimming);
        c.set_text("gso", "0").unwrap();
        assert!(!c.gso);
        let before = c.clone();
        assert!(c.set_text("mtu", "big").is_err());
        assert!(c.set_text("nscc_trimming", "maybe").is_err());
        assert!(c.set_text("mtu", "10").is_err());
        assert!(c.set_text("no_such_knob", "1").is_err());
        assert_eq!(c, before);
    }

    #[test]
    fn out_of_range_is_rejected() {
        let mut c = Config::default();
        assert!(c.set("mtu", ParamValue::Int(10)).is_err());
        assert!(c.set("window", ParamValue::Str("x".into())).is_err());
        assert!(c.set("nonsense", ParamValue::Int(1)).is_err());
        assert_eq!(c, Config::default());
    }

    #[test]
    fn congestion_parameters_parse() {
        let mut c = Config::default();
        c.set("cc", ParamValue::Str("none".into())).unwrap();
        assert_eq!(c.cc, CcAlgorithm::None);
        c.set("lb", ParamValue::Str(" Bitmap ".into())).unwrap();
        assert_eq!(c.lb, Some(LbAlgorithm::Bitmap));
        assert_eq!(
            c.effective_lb([127, 0, 0, 1].into(), false),
            LbAlgorithm::Bitmap
        );
        c.set("lb", ParamValue::Str("auto".into())).unwrap();
        assert!(matches!(c.get("lb"), Some(ParamValue::Str(s)) if s == "auto"));
        // Auto: one path over loopback, REPS through a relay or elsewhere.
        let lo = std::net::IpAddr::from([127, 0, 0, 1]);
        let v6lo = std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST);
        let lan = std::net::IpAddr::from([10, 0, 0, 1]);
        assert_eq!(c.effective_lb(lo, false), LbAlgorithm::Single);
        assert_eq!(c.effective_lb(v6lo, false), LbAlgorithm::Single);
        assert_eq!(c.effective_lb(lo, true), LbAlgorithm::Reps);
        assert_eq!(c.effective_lb(lan, false), LbAlgorithm::Reps);
        // Spray units: one segmented send's worth where GSO batches, else
        // every packet picks; a value set is kept.
        assert_eq!(c.effective_spray_bytes(false), 65507);
        assert_eq!(c.effective_spray_bytes(true), 1);
        c.set("gso", ParamValue::Bool(false)).unwrap();
        assert_eq!(c.effective_spray_bytes(false), 1);
        c.set("spray_bytes", ParamValue::Int(8192)).unwrap();
        assert_eq!(c.effective_spray_bytes(true), 8192);
        assert!(c.set("spray_bytes", ParamValue::Int(-1)).is_err());
        c.set("gso", ParamValue::Bool(true)).unwrap();
        c.set("nscc_variant", ParamValue::Str("wtd,qa_scaling".into()))
            .unwrap();
        assert!(
            c.nscc_variant.wait_to_decrease && c.nscc_variant.qa_scaling && !c.nscc_variant.target
        );
        c.set("nscc_variant", ParamValue::Str("paper".into()))
            .unwrap();
        assert_eq!(c.nscc_variant, PaperFeatures::ALL);
        c.set("link_gbps", ParamValue::Int(800)).unwrap();
        c.set("base_rtt_us", ParamValue::Int(12)).unwrap();
        c.set("entropies", ParamValue::Int(256)).unwrap();
        c.set("nscc_trimming", ParamValue::Bool(false)).unwrap();
        assert_eq!(
            (c.link_gbps, c.base_rtt_us, c.entropies, c.trimming),
            (800, 12, 256, false)
        );
        assert_eq!(c.link_rate_gbps(), 800.0);
        c.set("link_mbps", ParamValue::Int(250)).unwrap();
        assert_eq!(c.link_rate_gbps(), 0.25);
        let before = c.clone();
        assert!(c.set("cc", ParamValue::Str("cubic".into())).is_err());
        assert!(c.set("lb", ParamValue::Int(1)).is_err());
        assert!(c
            .set("nscc_variant", ParamValue::Str("target,bogus".into()))
            .is_err());
        assert!(c.set("link_gbps", ParamValue::Int(0)).is_err());
        assert!(c.set("entropies", ParamValue::Int(0)).is_err());
        assert_eq!(c, before);
    }

    #[test]
    fn the_public_header_names_every_parameter() {
        let header = include_str!("../../include/rdma/fi_ext_uet.h");
        for p in PARAMS {
            let name = format!("\"FI_UET_{}\"", p.name.to_ascii_uppercase());
            assert!(header.contains(&name), "fi_ext_uet.h lacks {name}");
        }
    }
}
