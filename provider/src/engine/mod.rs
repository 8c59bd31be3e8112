//! The sans-IO engine of one endpoint.
//!
//! Inputs: application operations ([`Engine::post_send`], [`Engine::post_recv`],
//! [`Engine::cancel`]), datagrams ([`Engine::handle_datagram`], or
//! [`Engine::handle_landed`] for one whose payload the driver received
//! straight into the buffer [`Engine::landing`] named) and the clock
//! ([`Engine::handle_timeout`]); `now` is always an argument, in nanoseconds
//! from any fixed origin. Outputs: datagrams ([`Engine::poll_transmit`]),
//! completions ([`Engine::poll_completion`]) and the next deadline
//! ([`Engine::next_timeout`]). Randomness (start PSNs) comes from a seed.

use std::collections::{HashMap, VecDeque};

/// The per-packet lookups (peer by address, PDC and message IDs) hash with
/// foldhash: seeded per process like std's SipHash, a fraction of its cost
/// (SipHash was about 28% of the engine's instructions per message).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
use std::net::SocketAddr;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod input;
mod landing;
mod matching;
mod output;
mod peer_deadlines;
mod peer_table;
mod post;
mod rendezvous;
mod rma;
mod spares;
use peer_deadlines::PeerTable;
use spares::Spares;
mod timers;

pub use landing::{Landing, LANDING_MIN_PAYLOAD};
use matching::{locate_in, MsgRef};
pub use output::PayloadRef;
use rendezvous::Watch;
pub use rendezvous::{HostAccess, HostClaim, HostMemory, RENDEZVOUS_RESOURCE};

use std::sync::Arc;

use crate::cms::lb::EntropyStats;
use crate::cms::CcStats;
use crate::cms::{
    AckFeedback, CcConfig, CongestionControl, LbConfig, LoadBalancer, PathFeedback, RttSample,
};
use crate::ops::*;
use crate::pds::{AckOutcome, Arrival, RxPdc, SlotKind, TxPdc};
use crate::ses::{
    Inbound, InboundState, MessageCounts, MsgHeader, PacketPayload, PostedQueues, TxMessage,
    Unexpected, UnexpectedQueue,
};
use crate::wire::prologue::flags as pflags;
use crate::wire::ses::flags as sflags;
use crate::wire::{
    AckRepr, ControlRepr, ControlType, Ecn, NackCode, NackRepr, NextHeader, PacketType, Prologue,
    RequestRepr, SesOpcode, SesRequestRepr, SesResponseRepr, Trim,
};
use crate::{Config, Error, Result};

/// A datagram the engine wrote into the caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub dest: SocketAddr,
    pub len: usize,
    /// Which of the endpoint's entropy sockets (UDP source ports) sends it:
    /// 0 is the endpoint's own address, `1..` the spraying pool.
    pub entropy: u16,
    /// ECN codepoint for the IP header: ECT(0) on data, Not-ECT on control.
    pub ecn: Ecn,
}

/// ACK when this many payload bytes arrived since the last one (NSCC.md §6).
const ACK_COALESCE_BYTES: usize = 16 * 1024;
/// Longest an owed ACK waits for more packets to coalesce with.
const ACK_DELAY_NS: u64 = 50_000;
/// Most outgoing messages per peer not yet fully acknowledged (see also
/// [`MSG_ID_WINDOW`]).
const MAX_MSGS_PER_PEER: usize = 16384;

/// How far the next message ID may run ahead of the oldest one a send to
/// the peer still holds (a rendezvous send waits for its receive as long
/// as the application takes). The receiver places a packet by its 16-bit
/// ID, so an ID must not come round while its message lives; the other
/// half of the ID space is left to the engine's own messages (pulls,
/// their answers, responses), which cannot wait.
const MSG_ID_WINDOW: u16 = 1 << 15;
/// Headers in front of the payload of a data packet.
const DATA_HEADERS: usize = RequestRepr::LEN + SesRequestRepr::LEN;

/// An ACK that arrived at the end of a request, kept for later
/// ([`Engine::defer_trailer_acks`]): when, from whom, its bytes.
#[derive(Clone, Copy, Debug)]
struct TrailerAck {
    at: u64,
    from: SocketAddr,
    bytes: [u8; AckRepr::LEN],
}

impl TrailerAck {
    fn cack_psn(&self) -> u32 {
        crate::wire::ack::Packet::new_unchecked(&self.bytes[..]).cack_psn()
    }
}

/// Counters for diagnostics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub packets_sent: u64,
    pub packets_received: u64,
    pub retransmits: u64,
    pub duplicates: u64,
    pub acks_sent: u64,
    pub acks_received: u64,
    /// ACKs among `acks_sent` that rode at the end of a request
    /// (`FI_UET_ACK_PIGGYBACK`), and those among `acks_received`.
    pub acks_piggybacked: u64,
    pub piggybacked_acks_received: u64,
    /// Datagrams dropped because they did not parse or failed a check.
    pub malformed: u64,
    /// Requests for a PDC we do not know (stale, spoofed).
    pub unknown_pdc: u64,
    /// Times a delivery context could not be opened because every ID of the
    /// pool (`FI_UET_MAX_PDCS`) was in use (the packets waited or were
    /// refused with NACK 0x07).
    pub pdc_exhausted: u64,
    /// Packets queued for retransmission by loss recovery before their
    /// timeout: SLEEK (out-of-order count past its threshold), go-back-N
    /// (ordered delivery) or a promptly answered probe.
    pub sleek_retransmits: u64,
    /// Probes sent after three base RTTs of silence.
    pub probes_sent: u64,
    /// Packets whose retransmission timer expired (each is resent).
    pub timeouts: u64,
    /// Ordered delivery: packets the receiver dropped because an earlier
    /// PSN was missing.
    pub rod_out_of_order: u64,
    pub out_of_window: u64,
    pub peers_failed: u64,
    /// Data packets that arrived trimmed (payload cut by the fabric).
    pub trimmed_received: u64,
    /// Message data packets past the first of their message: a peer sends
    /// messages of several packets (which may come segmented, see
    /// `io::GRO_AFTER_BURST`).
    pub continuations_received: u64,
    /// Data packets that arrived with ECN CE in their IP header.
    pub ecn_ce_received: u64,
    /// ACKs that echoed a CE mark back to us.
    pub ecn_echoes_received: u64,
    pub nacks_sent: u64,
    pub nacks_received: u64,
    /// Retransmissions triggered by a NACK (trimmed packet), not a timer.
    pub nack_retransmits: u64,
    /// Idle delivery contexts closed with the close handshake.
    pub pdcs_closed: u64,
    /// Peers forgotten after a long time without any state (their entry
    /// is reused by the next new peer).
    pub peers_evicted: u64,
    /// Receive contexts dropped because their sender answered none of the
    /// close requests sent after a long silence (it is gone).
    pub rx_pdcs_reclaimed: u64,
    /// Messages dropped unfinished with such a context: their sender went
    /// silent in the middle of them (the receives bound to them failed).
    pub messages_abandoned: u64,
    /// Packets of unmatched messages refused (NACK 0x07) because the
    /// staging budget was spent.
    pub backpressure: u64,
    /// New messages refused (NACK 0x07) because their 16-bit message ID
    /// is still held here by an older message of that peer that is not
    /// whole yet, so cannot be parked (a sender that reuses an ID before
    /// its message was acknowledged): they come once it is done.
    pub message_id_waits: u64,
    /// Whole unexpected messages moved out of the way of a new message
    /// with their 16-bit ID (the sender sent 65536 messages since): they
    /// wait for their receive under their sequence number instead.
    pub messages_parked: u64,
    /// Rendezvous messages this endpoint asked the sender for (pulls,
    /// including the empty ones of discarded or truncated messages).
    pub rendezvous_pulls: u64,
    /// Rendezvous remainders copied from a sender on this host instead of
    /// pulled (`FI_UET_HOST_READ`), and their bytes.
    pub host_reads: u64,
    pub host_read_bytes: u64,
    /// Same-host copies that failed (the remainder was pulled instead, or,
    /// for the share of a split copy, the receive failed).
    pub host_read_failures: u64,
    /// Pulls a receiver on this host let us answer by writing into its
    /// buffer, their bytes, and such writes that failed (the data was sent).
    pub host_writes: u64,
    pub host_write_bytes: u64,
    pub host_write_failures: u64,
    /// Same-host copies, reads or writes, not made because the peer had
    /// not returned the token this endpoint offers it (the first
    /// rendezvous send to a peer, or one after its socket changed hands):
    /// the bytes were pulled or sent instead.
    pub host_unproven: u64,
    /// Data packets whose payload the driver received straight into the
    /// posted buffer (see `Engine::landing`).
    pub landed: u64,
}

/// The send side's view of one peer: congestion state, resends and path use.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerStats {
    pub cc: CcStats,
    pub retransmits: u64,
    /// Per entropy (source-port index), as the load balancer counts.
    pub entropies: Vec<EntropyStats>,
}

/// What a congestion-control trace record was written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceKind {
    Ack,
    Nack,
    Timeout,
}

impl TraceKind {
    pub fn name(self) -> &'static str {
        match self {
            TraceKind::Ack => "ack",
            TraceKind::Nack => "nack",
            TraceKind::Timeout => "timeout",
        }
    }
}

/// One congestion-control event towards a peer, recorded when tracing is on
/// (`FI_UET_TRACE`); the driver writes them out as CSV.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TraceEvent {
    pub now: u64,
    pub peer: SocketAddr,
    pub kind: TraceKind,
    /// Entropy of the packet the feedback is about.
    pub entropy: u16,
    /// RTT of the triggering packet less the receiver's service time, as
    /// congestion control sees it (ACK only; 0 otherwise).
    pub rtt_ns: u64,
    pub ecn: bool,
    pub cwnd: u64,
    pub in_flight: u64,
    pub base_rtt_ns: u64,
    pub avg_delay_ns: f64,
}

impl TraceEvent {
    pub const CSV_HEADER: &'static str =
        "time_ns,peer,event,entropy,rtt_ns,ecn,cwnd,in_flight,base_rtt_ns,avg_delay_ns";

    pub fn csv(&self) -> String {
        format!(
            "{},{},{},{},{},{},{},{},{},{:.0}",
            self.now,
            self.peer,
            self.kind.name(),
            self.entropy,
            self.rtt_ns,
            self.ecn as u8,
            self.cwnd,
            self.in_flight,
            self.base_rtt_ns,
            self.avg_delay_ns
        )
    }
}

/// A packet of the control class waiting in [`Engine::control_queue`].
#[derive(Clone, Copy, Debug)]
enum ControlOut {
    Nack(NackRepr),
    Control(ControlRepr),
}

enum TxItem {
    Message(u16),
    /// An SES response; `code` 0 = success, else an RMA access error.
    Response {
        msg_id: u16,
        len: u32,
        code: u8,
    },
}

struct Peer {
    addr: SocketAddr,
    tx: TxPdc,
    rx: Option<RxPdc>,
    queue: VecDeque<TxItem>,
    messages: FastMap<u16, TxMessage>,
    /// What the per-packet paths ask about `messages`; every insertion,
    /// completion and removal goes through it.
    message_counts: MessageCounts,
    /// The latest new packet to this peer asked for an immediate ACK (AR
    /// without NO_WAIT).
    tail_asked_ack: bool,
    next_msg_id: u16,
    /// The oldest message ID `messages` may still hold: every earlier one
    /// is finished (see [`Peer::msg_ids_left`]).
    oldest_msg_id: u16,
    /// Sequence number of the next incoming message to match.
    next_match_seq: u64,
    /// Incoming messages by their 16-bit ID: being received, waiting for
    /// their turn in the matching order, or waiting for a receive until
    /// they are parked (`Engine::parked`).
    inbound: FastMap<u16, Inbound>,
    /// How many of this peer's messages are parked (`Engine::parked`).
    parked: u32,
    in_send_ring: bool,
    in_ack_queue: bool,
    /// The driver cannot carry data to this peer for now (see
    /// [`Engine::hold_data_for`]).
    data_held: bool,
    /// Last time the send side had anything to do (idle-close clock).
    tx_active_at: u64,
    /// Close handshake in progress on the send side; data waits for it.
    closing: Option<Closing>,
    /// Close packets sent on the send context so far: the number of the
    /// latest attempt, which the receiver echoes in its answer.
    close_attempts: u16,
    /// Congestion control and path choice of the send side (NSCC.md).
    cc: CongestionControl,
    lb: LoadBalancer,
    /// Bytes sent (headers included) and not yet reported received by the
    /// peer's cumulative received-bytes field, nor NACKed.
    in_flight_bytes: u64,
    /// That field (24 bits, 256-byte units) as of the latest ACK.
    rcvd_units: u32,
    /// An ACK emptied the pipe while nothing was left to send: the next
    /// packet of new data starts a new busy period (application-limited
    /// restart, see [`CongestionControl::on_idle_restart`]).
    pipe_drained: bool,
    /// The same for an ACK that arrived riding on a request and waits
    /// (`Engine::defer_trailer_acks`): it emptied the pipe on arrival, so
    /// new data sent before it is handled starts a new busy period, as it
    /// would have had the ACK been taken at once.
    drained_by_trailer: bool,
    /// That new data left: the restart is owed, applied once the waiting
    /// ACK has been taken (after it, as when the ACK is taken at once, so
    /// its late round-trip sample cannot open the new period's window).
    restart_owed: bool,
    /// Packets resent to this peer (timer, SACK hole or NACK).
    retransmits: u64,
    /// The receive context this peer closed last, as (its SPDCID, start
    /// PSN; SPDCID 0, never used, for none): a copy of one of its SYN
    /// packets that arrives late opens nothing.
    closed_rx: (u16, u32),
    /// When that context went (with `tx_active_at`, how long the peer
    /// has been quiet: see `engine/peer_table.rs`).
    rx_gone_at: u64,
    /// Set while this endpoint waits on the peer for a rendezvous step
    /// (`engine/rendezvous.rs`): its probe state, and a deadline that
    /// counts among the peer's (`peer_deadline`).
    watch: Option<Watch>,
    /// The peer went silent (our retransmissions or probes went
    /// unanswered) and nothing has come from it since (a packet, an ACK,
    /// a probe): a same-host copy of one of its messages is not shared
    /// with it (`engine/rendezvous.rs`). A share it never writes would
    /// hold the receive for `HOST_WRITE_HOLD_NS` and then fail it; the
    /// receiver's own copy of the whole succeeds while the sender's
    /// memory is there, at the cost of making it in the call that
    /// matched the message.
    given_up: bool,
}

/// The send side asked the receiver to close an idle context.
#[derive(Clone, Copy, Debug)]
struct Closing {
    /// Next PSN of the context: the receiver must have everything below.
    psn: u32,
    sent_at: u64,
    tries: u32,
}

impl Peer {
    /// The congestion window has room for one more packet of the largest
    /// size, whatever is sent next.
    fn full_packet_fits(&self, max_payload: usize) -> bool {
        self.cc
            .can_send(self.in_flight_bytes, (max_payload + DATA_HEADERS) as u64)
    }

    /// Something can go out now: a retransmission, or the next piece of
    /// new data if both the packet window and the congestion window admit
    /// it (judged by its own size: a small message fits beside another in
    /// a one-packet window).
    fn has_work(&self, window: usize, max_payload: usize, ordered: bool) -> bool {
        self.closing.is_none()
            && !self.data_held
            && (self.next_retransmit(ordered).is_some()
                || (self.tx.in_flight() < window
                    && !self.queue.is_empty()
                    // Asked after every packet: a full one fitting settles
                    // it without sizing the next.
                    && (self.full_packet_fits(max_payload)
                        || self
                            .next_new_bytes(max_payload)
                            .is_some_and(|bytes| self.cc.can_send(self.in_flight_bytes, bytes)))))
    }

    /// Take packets just declared lost out of the in-flight estimate.
    fn forget_lost(&mut self) {
        self.in_flight_bytes = self
            .in_flight_bytes
            .saturating_sub(self.tx.take_lost_bytes())
            .min(self.tx.counted_bytes());
    }

    /// Position in the retransmission queue of the first entry that may
    /// leave now. A packet queued for retransmission (NACKed, or declared
    /// lost by its timer, SLEEK or a probe) left the in-flight count, so
    /// its resend must fit the window like new data (NSCC.md section 5, as
    /// the reference simulator sends its retransmission queue): resent at
    /// once, a trimmed packet would go straight back into the queue that
    /// trimmed it, and the window cut the NACK made would never take
    /// effect. Entries are tried in order, so a smaller packet behind a
    /// blocked one may pass it; under ordered delivery only the lowest PSN
    /// queued may leave, since the receiver drops anything past a hole.
    fn next_retransmit(&self, ordered: bool) -> Option<usize> {
        // Asked before every packet and after every ACK; nearly always empty.
        if self.tx.retransmit.is_empty() {
            return None;
        }
        let may_leave = |psn: u32| match self.tx.slot(psn) {
            Some(s) if !s.acked && !s.in_flight => {
                self.cc.can_send(self.in_flight_bytes, s.bytes as u64)
            }
            // Still counted (nothing to add), or nothing to send
            // (next_packet drops it).
            _ => true,
        };
        if ordered {
            let base = self.tx.base();
            let (i, &psn) = self
                .tx
                .retransmit
                .iter()
                .enumerate()
                .min_by_key(|&(_, &psn)| psn.wrapping_sub(base))?;
            return may_leave(psn).then_some(i);
        }
        self.tx.retransmit.iter().position(|&psn| may_leave(psn))
    }

    /// Whether the application may take another message ID: the oldest
    /// one still held is less than [`MSG_ID_WINDOW`] behind. The mark
    /// moves past finished IDs once each, so this costs a lookup or two
    /// per message.
    fn msg_ids_left(&mut self) -> bool {
        while self.oldest_msg_id != self.next_msg_id
            && !self.messages.contains_key(&self.oldest_msg_id)
        {
            self.oldest_msg_id = self.oldest_msg_id.wrapping_add(1);
        }
        self.next_msg_id.wrapping_sub(self.oldest_msg_id) < MSG_ID_WINDOW
    }

    /// Queue a message the engine itself sends on behalf of an operation
    /// (read data, a rendezvous pull or its data): no completion of its
    /// own. Returns its message ID. The caller counts it in
    /// `sends_outstanding`.
    fn queue_internal(&mut self, payload: Payload, rma: crate::ses::RmaTx) -> u16 {
        let id = self.next_msg_id;
        self.next_msg_id = id.wrapping_add(1);
        self.add_message(
            id,
            TxMessage {
                tagged: false,
                tag: 0,
                cq_data: None,
                payload,
                context: 0,
                level: CompletionLevel::Transmit,
                signal: false,
                next_offset: 0,
                started: false,
                unacked_packets: 0,
                completed: true,
                delivered: false,
                failed: false,
                rma: Some(rma),
            },
        );
        self.queue.push_back(TxItem::Message(id));
        id
    }

    /// Message `id` joins `messages`.
    fn add_message(&mut self, id: u16, m: TxMessage) {
        self.message_counts.add(&m);
        if let Some(old) = self.messages.insert(id, m) {
            // IDs are not reused while a message holds one (`msg_ids_left`).
            debug_assert!(false, "message ID {id} taken twice");
            self.message_counts.remove(&old);
        }
    }

    /// Message `id` leaves `messages`.
    fn take_message(&mut self, id: u16) -> Option<TxMessage> {
        let m = self.messages.remove(&id)?;
        self.message_counts.remove(&m);
        Some(m)
    }

    /// `message_counts` agrees with `messages` (a check for debug builds:
    /// it scans them).
    fn message_counts_hold(&self) -> bool {
        self.message_counts == MessageCounts::of(self.messages.values())
    }

    /// Nothing posted, queued or unacknowledged on the send side.
    fn tx_idle(&self) -> bool {
        self.tx.in_flight() == 0 && self.queue.is_empty() && self.messages.is_empty()
    }
}

pub struct Engine {
    mtu: usize,
    window: usize,
    /// Send contexts use reliable ordered delivery (ROD) instead of RUD.
    ordered: bool,
    rto_min: u64,
    rto_max: u64,
    max_retries: u32,
    cc_config: Arc<CcConfig>,
    lb_config: LbConfig,
    /// Close a send context idle this long (ns; 0 = never).
    pdc_idle: u64,
    rng: SmallRng,
    peers: PeerTable,
    peer_by_addr: FastMap<SocketAddr, usize>,
    /// The peer found last by address: one comparison instead of hashing
    /// the address when the same peer comes up again (ping-pong, a stream).
    /// Never the index of a free entry (`usize::MAX` after an eviction).
    last_peer: usize,
    /// Entries of `peers` freed by eviction, reused by new peers, and when
    /// the next eviction sweep may run (`engine/peer_table.rs`).
    free_peers: Vec<usize>,
    next_peer_sweep: u64,
    tx_by_id: FastMap<u16, usize>,
    rx_by_id: FastMap<u16, usize>,
    next_pdc_id: u16,
    /// Size of the delivery-context ID pool (`FI_UET_MAX_PDCS`).
    max_pdcs: usize,
    posted: PostedQueues,
    unexpected: UnexpectedQueue,
    completions: VecDeque<Completion>,
    ack_queue: VecDeque<usize>,
    /// Queued ACKs stay back (see [`Engine::hold_acks`]).
    acks_held: bool,
    /// A held ACK rides at the end of a request to its peer
    /// (`FI_UET_ACK_PIGGYBACK`, [`crate::wire::ack_trailer`]).
    ack_piggyback: bool,
    /// ACKs that arrived riding on requests wait in `trailer_acks` (see
    /// [`Engine::defer_trailer_acks`]).
    trailer_acks_deferred: bool,
    trailer_acks: Vec<TrailerAck>,
    /// NACKs and control packets, sent ahead of ACKs and data.
    control_queue: VecDeque<(SocketAddr, ControlOut)>,
    send_ring: VecDeque<usize>,
    /// Sends posted and not yet retired, over all peers.
    sends_outstanding: usize,
    /// Payload bytes held for messages not matched yet, over all peers,
    /// and the most allowed (`FI_UET_UNEXPECTED_BYTES`).
    staged_bytes: usize,
    stage_budget: usize,
    /// Read data and fetched atomic values queued for peers until they
    /// acknowledge them, and the most allowed (`FI_UET_ANSWER_BYTES`).
    answer_bytes: usize,
    answer_budget: usize,
    /// Congestion-control events for the trace; `None` = tracing off.
    trace: Option<Vec<TraceEvent>>,
    /// Reused by every ACK (no allocation per ACK).
    ack_scratch: AckOutcome,
    /// Buffers of finished operations kept for the next ones.
    spares: Spares,
    /// Entropies of packets that just timed out (reused, for the trace).
    timeout_scratch: Vec<u16>,
    /// Peers whose timers are due, taken by `handle_timeout`.
    timers_due: Vec<usize>,
    stats: Stats,
    /// Our canonical address (the driver's socket 0). Data packets name its
    /// port in the SES `initiator` field, because they may leave from
    /// another source port (entropy); see `canonical_source`.
    local: SocketAddr,
    /// Memory peers may access with RMA (none: every access is refused).
    regions: Option<std::sync::Arc<dyn MemoryRegions>>,
    /// Reads this endpoint initiated, by (peer, read request message ID).
    reads: HashMap<(usize, u16), rma::PendingRead>,
    /// Rendezvous sends and pulls (engine/rendezvous.rs).
    rdv: rendezvous::RendezvousState,
    /// Whole unexpected messages, by peer and sequence number, whose 16-bit
    /// ID their sender's IDs came round to (it sent 65536 messages since),
    /// or whose sender opened a new context: no packet of theirs can come
    /// any more, and a new message takes the ID (`engine/matching.rs`,
    /// [`MsgRef`]). Kept apart from the peers, as they are rare.
    parked: FastMap<(usize, u64), Inbound>,
    /// Where the next large data packet is expected (engine/landing.rs).
    landing_hint: Option<landing::LandingHint>,
}

impl Engine {
    pub fn new(config: &Config, local: SocketAddr, seed: u64) -> Engine {
        // An unresolved "auto" (0) means the caller did not pick: be safe.
        let mtu = match config.mtu {
            0 => Config::ETHERNET_MTU,
            n => n.max(DATA_HEADERS + 64),
        };
        Engine {
            mtu,
            cc_config: Arc::new(CcConfig::from_config(config, mtu, mtu - DATA_HEADERS)),
            lb_config: LbConfig::from_config(config, mtu),
            window: config.window.max(1),
            ordered: config.ordered,
            rto_min: config.rto_min_us * 1000,
            rto_max: config.rto_max_us.max(config.rto_min_us) * 1000,
            max_retries: config.max_retries,
            pdc_idle: config.pdc_idle_us.saturating_mul(1000),
            rng: SmallRng::seed_from_u64(seed),
            peers: PeerTable::new(),
            peer_by_addr: FastMap::default(),
            last_peer: 0,
            free_peers: Vec::new(),
            next_peer_sweep: 0,
            tx_by_id: FastMap::default(),
            rx_by_id: FastMap::default(),
            next_pdc_id: 1,
            max_pdcs: config.max_pdcs.clamp(2, u16::MAX as usize),
            posted: PostedQueues::default(),
            unexpected: UnexpectedQueue::default(),
            completions: VecDeque::new(),
            ack_queue: VecDeque::new(),
            acks_held: false,
            ack_piggyback: config.ack_piggyback,
            trailer_acks_deferred: false,
            trailer_acks: Vec::new(),
            control_queue: VecDeque::new(),
            send_ring: VecDeque::new(),
            sends_outstanding: 0,
            staged_bytes: 0,
            stage_budget: config.unexpected_bytes,
            answer_bytes: 0,
            answer_budget: config.answer_bytes,
            trace: None,
            ack_scratch: AckOutcome::default(),
            spares: Spares::default(),
            timeout_scratch: Vec::new(),
            timers_due: Vec::new(),
            stats: Stats::default(),
            local,
            regions: None,
            reads: HashMap::new(),
            rdv: rendezvous::RendezvousState::new(config),
            parked: FastMap::default(),
            landing_hint: None,
        }
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// A peer has sent a message of several packets.
    pub fn has_taken_multi_packet_messages(&self) -> bool {
        self.stats.continuations_received > 0
    }

    /// Congestion state and per-entropy path use towards `addr`; `None`
    /// when this engine has no entry for it: it never exchanged packets
    /// with it, or freed its entry after a long time without state
    /// (`engine/peer_table.rs`).
    pub fn peer_stats(&self, addr: SocketAddr) -> Option<PeerStats> {
        let peer = &self.peers[*self.peer_by_addr.get(&addr)?];
        let mut cc = peer.cc.stats();
        cc.in_flight = peer.in_flight_bytes;
        Some(PeerStats {
            cc,
            retransmits: peer.retransmits,
            entropies: peer.lb.entropy_stats().to_vec(),
        })
    }

    /// Record congestion-control events (see [`Engine::take_trace`]).
    pub fn enable_trace(&mut self) {
        self.trace.get_or_insert_with(Vec::new);
    }

    /// Move the recorded events into `out` (oldest first).
    pub fn take_trace(&mut self, out: &mut Vec<TraceEvent>) {
        if let Some(t) = self.trace.as_mut() {
            out.append(t);
        }
    }

    fn record(
        &mut self,
        p: usize,
        now: u64,
        kind: TraceKind,
        entropy: u16,
        rtt_ns: u64,
        ecn: bool,
    ) {
        let Some(trace) = self.trace.as_mut() else {
            return;
        };
        let peer = &self.peers[p];
        let s = peer.cc.stats();
        trace.push(TraceEvent {
            now,
            peer: peer.addr,
            kind,
            entropy,
            rtt_ns,
            ecn,
            cwnd: s.cwnd,
            in_flight: peer.in_flight_bytes,
            base_rtt_ns: s.base_rtt_ns,
            avg_delay_ns: s.avg_delay_ns,
        });
    }

    /// Payload bytes held right now for messages not yet matched.
    pub fn staged_bytes(&self) -> usize {
        self.staged_bytes
    }

    /// Bytes of read data and fetched atomic values held right now for
    /// peers, until they acknowledge them.
    pub fn answer_bytes(&self) -> usize {
        self.answer_bytes
    }

    /// Whether send contexts use reliable ordered delivery (ROD).
    pub fn ordered(&self) -> bool {
        self.ordered
    }

    /// An empty vector for copying a send's payload into
    /// ([`Payload::Owned`]): the copy of a retired send when one was kept,
    /// so small sends allocate nothing.
    pub fn payload_buffer(&mut self) -> Vec<u8> {
        self.spares.payload()
    }

    /// `buffer` boxed for a [`RecvOp`] or a [`Payload::Borrowed`], in the box
    /// of a finished operation of the same type when one was kept
    /// ([`MsgBuffer::as_any_mut`]).
    pub fn boxed_buffer<T: MsgBuffer + std::any::Any>(&mut self, buffer: T) -> Box<dyn MsgBuffer> {
        self.spares.boxed(buffer)
    }

    /// Largest payload carried by one packet.
    pub fn max_payload(&self) -> usize {
        self.mtu - DATA_HEADERS
    }

    /// Limit the window, e.g. to what the peer's socket buffer can absorb.
    pub fn set_window(&mut self, window: usize) {
        self.window = window.max(1);
    }

    /// Most unacknowledged packets per peer.
    pub fn window(&self) -> usize {
        self.window
    }

    /// The largest retransmission timeout in ns (never below the smallest).
    pub fn rto_max_ns(&self) -> u64 {
        self.rto_max
    }

    /// Ask the sender of every receive context that could close to close
    /// it, as an endpoint that is closing does: an idle sender (all its
    /// packets acknowledged) starts the close handshake, a busy one
    /// answers with an ACK request, whose ACK gives it what it waits for.
    /// A context holding messages of its peer would refuse the close, so
    /// its sender is not asked (it would ask again and again). Returns how
    /// many were asked.
    pub fn ask_senders_to_close(&mut self) -> usize {
        let mut asked = 0;
        for p in 0..self.peers.len() {
            let peer = &self.peers[p];
            if peer.rx.is_some() && peer.inbound.is_empty() {
                self.ask_to_close(p);
                asked += 1;
            }
        }
        asked
    }

    /// Whether any peer still has a receive context open with us (it may
    /// still resend).
    pub fn receiving_from_peers(&self) -> bool {
        self.peers.iter().any(|p| p.rx.is_some())
    }

    /// How long a peer that sends to us may wait before it resends, as far
    /// as this end can tell: the largest retransmission timeout of our own
    /// contexts to the peers we receive from (the same path the other way;
    /// a long transfer leaves it well above the minimum), at least the
    /// minimum one; a peer we never sent to counts the minimum (no round
    /// trip to go by). A closing driver keeps answering for longer than
    /// this.
    pub fn peer_resend_wait_ns(&self) -> u64 {
        self.peers
            .iter()
            .filter(|p| p.rx.is_some())
            .map(|p| p.tx.rto(self.rto_min, self.rto_max, 0))
            .fold(self.rto_min, u64::max)
    }

    /// Hold (or, with `held` false, release) the data packets for `addr`:
    /// for a driver whose carrier to that peer alone is full (a same-host
    /// lane whose receiver does not take), so the peer's packets wait here,
    /// under the engine's windows and timers, instead of piling up in the
    /// driver or holding up the other peers. ACKs and control packets to it
    /// still come out. Unknown peers are left alone.
    pub fn hold_data_for(&mut self, addr: SocketAddr, held: bool) {
        let Some(p) = self.find_peer(addr) else {
            return;
        };
        self.peers[p].data_held = held;
        if !held {
            self.mark_ready(p);
        }
    }

    /// Delivery-context IDs in use, both directions.
    fn pdc_ids_in_use(&self) -> usize {
        self.tx_by_id.len() + self.rx_by_id.len()
    }

    fn pdc_id_available(&self) -> bool {
        self.pdc_ids_in_use() < self.max_pdcs
    }

    /// A free 16-bit delivery-context ID from the bounded pool
    /// (`FI_UET_MAX_PDCS`), or `None` when all are taken. IDs are handed out
    /// round-robin, so a just-closed ID is not reused at once.
    fn alloc_pdc_id(&mut self) -> Option<u16> {
        if !self.pdc_id_available() {
            return None;
        }
        // max_pdcs < 65536, so a free ID exists; 0 is never used.
        loop {
            let id = self.next_pdc_id;
            self.next_pdc_id = self.next_pdc_id.wrapping_add(1).max(1);
            if !self.tx_by_id.contains_key(&id) && !self.rx_by_id.contains_key(&id) {
                return Some(id);
            }
        }
    }

    /// Give peer `p` a send context ID if it has none (first packet after
    /// creation or a close). False when the pool is empty: its packets wait.
    fn ensure_tx_pdc_id(&mut self, p: usize) -> bool {
        if self.peers[p].tx.local_id != 0 {
            return true;
        }
        let Some(id) = self.alloc_pdc_id() else {
            self.stats.pdc_exhausted += 1;
            return false;
        };
        self.peers[p].tx.local_id = id;
        self.tx_by_id.insert(id, p);
        true
    }

    /// The peer at `addr`, if it is one.
    #[inline]
    fn find_peer(&mut self, addr: SocketAddr) -> Option<usize> {
        if self
            .peers
            .get(self.last_peer)
            .is_some_and(|peer| peer.addr == addr)
        {
            return Some(self.last_peer);
        }
        self.find_other_peer(addr)
    }

    /// [`find_peer`](Self::find_peer) when it is not the last one found
    /// (out of line: the common case then needs no registers saved).
    #[inline(never)]
    fn find_other_peer(&mut self, addr: SocketAddr) -> Option<usize> {
        let i = *self.peer_by_addr.get(&addr)?;
        self.last_peer = i;
        Some(i)
    }

    /// The peer at `addr`, made one if it is not yet (at time `now`).
    #[inline]
    fn peer_index(&mut self, addr: SocketAddr, now: u64) -> usize {
        match self.find_peer(addr) {
            Some(i) => i,
            None => self.add_peer(addr, now),
        }
    }

    #[inline(never)]
    fn add_peer(&mut self, addr: SocketAddr, now: u64) -> usize {
        self.sweep_peers(now);
        let start = self.rng.gen();
        let lb = LoadBalancer::new(self.lb_config, self.rng.gen());
        let peer = Peer {
            addr,
            // The context ID is taken when the first packet leaves.
            tx: TxPdc::new(0, start),
            rx: None,
            queue: VecDeque::new(),
            messages: FastMap::default(),
            message_counts: MessageCounts::default(),
            tail_asked_ack: false,
            next_msg_id: 0,
            oldest_msg_id: 0,
            next_match_seq: 0,
            inbound: FastMap::default(),
            parked: 0,
            in_send_ring: false,
            in_ack_queue: false,
            data_held: false,
            tx_active_at: 0,
            closing: None,
            close_attempts: 0,
            cc: CongestionControl::new(&self.cc_config),
            lb,
            in_flight_bytes: 0,
            rcvd_units: 0,
            pipe_drained: false,
            drained_by_trailer: false,
            restart_owed: false,
            retransmits: 0,
            closed_rx: (0, 0),
            rx_gone_at: 0,
            watch: None,
            given_up: false,
        };
        let i = match self.free_peers.pop() {
            Some(i) => {
                self.peers[i] = peer;
                i
            }
            None => {
                self.peers.push(peer);
                self.peers.len() - 1
            }
        };
        self.peer_by_addr.insert(addr, i);
        i
    }

    fn mark_ready(&mut self, p: usize) {
        let max_payload = self.max_payload();
        let peer = &mut self.peers[p];
        if peer.in_send_ring {
            return;
        }
        if peer.has_work(self.window, max_payload, self.ordered) {
            peer.in_send_ring = true;
            self.send_ring.push_back(p);
        } else if !peer.queue.is_empty() && peer.closing.is_none() && !peer.data_held {
            // Data waits and only the windows keep it back. Every refusal
            // passes here: `take_transmit` asks again after each packet.
            peer.cc.on_window_limited();
        }
    }

    /// NACK `code` for `psn` to `to`; `spdcid` names our context (or the
    /// one the packet named, when we have none), `dpdcid` the sender's.
    fn queue_nack(&mut self, to: SocketAddr, code: NackCode, psn: u32, spdcid: u16, dpdcid: u16) {
        self.stats.nacks_sent += 1;
        let nack = NackRepr {
            flags: 0,
            code,
            vendor_code: 0,
            psn,
            spdcid,
            dpdcid,
            payload: 0,
        };
        self.control_queue.push_back((to, ControlOut::Nack(nack)));
    }

    fn queue_ack(&mut self, p: usize) {
        let peer = &mut self.peers[p];
        if !peer.in_ack_queue {
            peer.in_ack_queue = true;
            self.ack_queue.push_back(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything `e` has ready at `now`.
    fn drain(e: &mut Engine, now: u64) -> Vec<Vec<u8>> {
        let mut buf = vec![0u8; 65536];
        let mut out = Vec::new();
        while let Some(t) = e.poll_transmit(now, &mut buf) {
            out.push(buf[..t.len].to_vec());
        }
        out
    }

    /// The sender and the receiver of the two-engine tests.
    const A: SocketAddr = SocketAddr::new(
        std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1)),
        4793,
    );
    const B: SocketAddr = SocketAddr::new(
        std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2)),
        4793,
    );

    /// Both ways at once, each datagram 1 us on the wire, until both
    /// engines (`tx` at A, `rx` at B) have nothing more to send.
    fn exchange(tx: &mut Engine, rx: &mut Engine, now: &mut u64) {
        loop {
            let (out, back) = (drain(tx, *now), drain(rx, *now));
            if out.is_empty() && back.is_empty() {
                break;
            }
            *now += 1_000;
            out.iter().for_each(|d| rx.handle_datagram(*now, A, 0, d));
            back.iter().for_each(|d| tx.handle_datagram(*now, B, 0, d));
        }
    }

    fn send_op(dest: SocketAddr, len: usize) -> SendOp {
        SendOp {
            dest,
            payload: Payload::Owned(vec![7; len]),
            tag: None,
            cq_data: None,
            context: 1,
            level: CompletionLevel::Transmit,
            signal: true,
        }
    }

    /// An ACK that acknowledges a PSN never sent is ignored whole: it must
    /// not name the receiver's context for a sender still in SYN, or the
    /// real ACK that follows is refused and the send fails.
    #[test]
    fn an_ack_beyond_what_was_sent_names_no_context() {
        let cfg = Config::default();
        let (mut tx, mut rx) = (Engine::new(&cfg, A, 1), Engine::new(&cfg, B, 2));
        let (a, b) = (A, B);
        tx.post_send(0, send_op(b, 64)).unwrap();
        let data = drain(&mut tx, 0);
        assert_eq!(data.len(), 1);
        let req = RequestRepr::parse(&data[0]).unwrap();
        let bogus = AckRepr {
            cack_psn: req.psn.wrapping_add(100),
            spdcid: 777,
            dpdcid: req.spdcid,
            ..AckRepr::default()
        };
        let mut bytes = [0u8; AckRepr::LEN];
        bogus.emit(&mut bytes);
        tx.handle_datagram(1_000, b, 0, &bytes);
        rx.handle_datagram(1_000, a, 0, &data[0]);
        for d in drain(&mut rx, 1_000) {
            tx.handle_datagram(2_000, b, 0, &d);
        }
        let done = tx.poll_completion().expect("the send completes");
        assert!(done.error.is_none(), "{done:?}");
        assert_eq!(tx.stats().unknown_pdc, 0);
    }

    fn recv_op(len: usize, context: u64) -> RecvOp {
        RecvOp {
            src: None,
            tagged: false,
            tag: 0,
            ignore: 0,
            buffer: Box::new(vec![0u8; len]),
            context,
            signal: true,
            probe: ProbeFlags::default(),
        }
    }

    /// Operations posted while the idle context's close is under way wait
    /// for it, then open the next context, whose message IDs start at 0 at
    /// the receiver: they must arrive as that context's first messages.
    #[test]
    fn a_send_posted_during_the_close_is_received() {
        let cfg = Config {
            pdc_idle_us: 100,
            // The third message is a rendezvous send: pulled by its key.
            rendezvous_bytes: 4096,
            ..Config::default()
        };
        let (mut tx, mut rx) = (Engine::new(&cfg, A, 1), Engine::new(&cfg, B, 2));
        let (a, b) = (A, B);
        let mut now = 0;
        for k in 0..3 {
            rx.post_recv(now, recv_op(8192, 10 + k)).unwrap();
        }
        tx.post_send(now, send_op(b, 64)).unwrap();
        exchange(&mut tx, &mut rx, &mut now);
        assert!(rx.poll_completion().is_some_and(|c| c.error.is_none()));
        assert!(tx.poll_completion().is_some_and(|c| c.error.is_none()));
        // Idle: the close leaves; the next send is posted before its answer.
        now += 200_000;
        tx.handle_timeout(now);
        let close = drain(&mut tx, now);
        assert_eq!(close.len(), 1);
        assert_eq!(
            Prologue::parse(&close[0]).unwrap().ptype,
            PacketType::Control
        );
        tx.post_send(now, send_op(b, 64)).unwrap();
        // A read too: it waits for its answer by message ID (the target
        // has no memory to offer, so it is refused).
        let read = RmaOp {
            dest: b,
            kind: RmaKind::Read {
                buffer: Box::new(vec![0u8; 8]),
            },
            addr: 0,
            key: 1,
            context: 3,
            signal: true,
        };
        tx.post_rma(now, read).unwrap();
        tx.post_send(
            now,
            SendOp {
                context: 4,
                ..send_op(b, 8192)
            },
        )
        .unwrap();
        assert!(drain(&mut tx, now).is_empty(), "data waits for the close");
        rx.handle_datagram(now + 1_000, a, 0, &close[0]);
        now += 1_000;
        exchange(&mut tx, &mut rx, &mut now);
        assert_eq!(tx.stats().pdcs_closed, 1);
        let got: Vec<_> = std::iter::from_fn(|| rx.poll_completion())
            .map(|c| (c.context, c.len, c.error))
            .collect();
        assert_eq!(got, [(11, 64, None), (12, 8192, None)], "both are received");
        let mut done: Vec<_> = std::iter::from_fn(|| tx.poll_completion())
            .map(|c| (c.context, c.error))
            .collect();
        done.sort_by_key(|&(context, _)| context);
        assert_eq!(
            done,
            [
                (1, None),
                (3, Some(CompletionError::AccessDenied)),
                (4, None)
            ],
            "the sends and the refused read complete"
        );
    }

    /// A copy of a closed context's SYN packet that the network delivers
    /// late (a resend whose original got through) must not replace the
    /// context its sender opened since: that would drop the new context's
    /// messages and fail its sends.
    #[test]
    fn a_late_syn_of_a_closed_context_opens_nothing() {
        let cfg = Config {
            pdc_idle_us: 100,
            mtu: 1500,
            ..Config::default()
        };
        let (mut tx, mut rx) = (Engine::new(&cfg, A, 1), Engine::new(&cfg, B, 2));
        let (a, b) = (A, B);
        let mut now = 0;
        rx.post_recv(now, recv_op(64, 10)).unwrap();
        tx.post_send(now, send_op(b, 64)).unwrap();
        let first = drain(&mut tx, now);
        let old_syn = first[0].clone();
        now += 1_000;
        rx.handle_datagram(now, a, 0, &first[0]);
        exchange(&mut tx, &mut rx, &mut now);
        // Idle: the context closes.
        now += 200_000;
        tx.handle_timeout(now);
        exchange(&mut tx, &mut rx, &mut now);
        assert_eq!(tx.stats().pdcs_closed, 1);
        while tx.poll_completion().is_some() {}
        assert!(rx.poll_completion().is_some());
        // A message of three packets on a new context; the old SYN comes
        // in after its first packet.
        rx.post_recv(now, recv_op(4000, 11)).unwrap();
        tx.post_send(now, send_op(b, 4000)).unwrap();
        let data = drain(&mut tx, now);
        assert_eq!(data.len(), 3);
        now += 1_000;
        rx.handle_datagram(now, a, 0, &data[0]);
        rx.handle_datagram(now, a, 0, &old_syn);
        for d in &data[1..] {
            rx.handle_datagram(now, a, 0, d);
        }
        exchange(&mut tx, &mut rx, &mut now);
        for _ in 0..50 {
            now += 1_000_000;
            tx.handle_timeout(now);
            rx.handle_timeout(now);
            exchange(&mut tx, &mut rx, &mut now);
        }
        let got = rx.poll_completion().expect("the message is received");
        assert!(got.error.is_none() && got.len == 4000, "{got:?}");
        let sent = tx.poll_completion().expect("the send completes");
        assert!(sent.error.is_none(), "{sent:?}");
    }

    /// The per-peer figures documented in provider/README.md section 2.5.
    #[test]
    fn per_peer_state_stays_small() {
        let sizes = [
            ("Peer", std::mem::size_of::<Peer>()),
            ("TxPdc", std::mem::size_of::<TxPdc>()),
            ("RxPdc", std::mem::size_of::<RxPdc>()),
            ("TxSlot", std::mem::size_of::<crate::pds::TxSlot>()),
            ("TxMessage", std::mem::size_of::<TxMessage>()),
            ("Inbound", std::mem::size_of::<Inbound>()),
        ];
        println!("{sizes:?}");
        let documented = [
            ("Peer", 1024),
            ("TxPdc", 208),
            ("RxPdc", 112),
            ("TxSlot", 48),
            ("TxMessage", 152),
            ("Inbound", 232),
        ];
        assert_eq!(sizes, documented, "update provider/README.md section 2.5");
        assert!(sizes[0].1 <= 1024, "{sizes:?}");
    }
}
