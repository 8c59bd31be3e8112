//! The UDP driver: runs one sans-IO [`Engine`] over non-blocking UDP sockets.
//!
//! Progress is driven by the caller (the libfabric shim calls [`Endpoint::progress`]
//! from its CQ reads): drain the sockets into the engine, fire timers, flush
//! the engine's transmit queue. A caller that polls without anything to do
//! yields its core every `spin_before_yield` empty calls, so oversubscribed
//! ranks on few cores still progress.
//!
//! An endpoint owns `entropies` sockets on consecutive ports. Socket 0 is its
//! address (what `fi_getname` returns, where every peer sends); a transmit
//! with entropy `k > 0` leaves from socket `k` (modulo the pool), so the
//! UDP source port picks the path through an ECMP fabric. Every datagram
//! carries its IP TOS byte both ways (ECN codepoint, trimmed DSCP).
//!
//! Peers know each other by socket 0's address. Data packets, which may
//! leave from a pool socket or from one connected to their peer
//! (`io/connected.rs`), name the sender's socket-0 port in the SES
//! `initiator` field and the receiving engine keys the peer by (source IP,
//! initiator); ACKs, NACKs, control and SES responses always leave from
//! socket 0, so their source address is the canonical one.
//!
//! With `fabric` set, every datagram goes to that relay wrapped in a
//! [`RelayHeader`], and only what the relay delivers is accepted.
//!
//! With `gso` (and no relay), a progress call takes up to a batch of
//! packets from the engine before sending any, groups them by entropy
//! socket (RUD tolerates the reordering; ROD and control use socket 0 and
//! keep their order), and sends each run of equal-size packets to one
//! destination with one TOS as one `sendmsg` with `UDP_SEGMENT` (runs of
//! three or more: a pair leaves faster as two sends). Once a burst has
//! arrived its sockets take arrivals with `UDP_GRO`, and a coalesced
//! arrival is cut back into its datagrams before the engine sees them;
//! before that, GRO would only slow a ping-pong down. Packets near 64 KB
//! fit twice in one send only when they are short: large datagrams leave
//! one per call.
//!
//! With `send_burst_us`, the first send of a burst leaves at once and the
//! sends posted right after it (no other call between) wait for the
//! burst's end, the application's next call of another kind, or for a GSO
//! batch's worth of bytes: a window of short messages then costs a few
//! segmented sends instead of one system call each, and the receiver
//! acknowledges the run once.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};

use socket2::{Domain, Protocol, Socket, Type};

use crate::cms::LbAlgorithm;
use crate::copy::copy_bytes;
use crate::engine::{Engine, PayloadRef, Transmit};
use crate::ops::{Completion, Context, MsgBuffer, RecvOp, SendOp};
use crate::wire::ip::{self, Ecn};
use crate::wire::prologue::flags as prologue_flags;
use crate::wire::{ack_trailer, Prologue, RelayHeader};
use crate::{Config, Error, Result};

mod connected;
mod host_memory;
mod host_ring;
mod host_ring_backlog;
pub use host_memory::ProcessMemory;
pub mod impair;
mod splice;
mod sys;
#[cfg(test)]
mod tests;
mod trace;

use connected::ConnectedSockets;
use host_ring::{HostRings, Pushed, Retried};
use impair::{FaultConfig, Impairer, PacketClass, Treatment, Verdict, TRIMMED_LEN};
use splice::Splicer;

/// Datagrams received per progress call before timers and transmits get a turn.
const RX_BURST: usize = 64;
/// Datagrams this long or longer may carry a spliced payload (see
/// `discard_stale`): `FI_UET_SPLICE_BYTES` splices no shorter payload.
const STALE_GUARDED_BYTES: usize = crate::config::SPLICE_BYTES_MIN;
/// No gap shorter than this throws arrivals away, however short the
/// timers: the idle-progress thread alone leaves gaps of up to 25 ms, and a
/// loaded host longer ones. Timers that would need a shorter one turn
/// splicing off (see `Endpoint::bind`).
const STALE_FLOOR_NS: u64 = 100_000_000;
/// Landings refused in a row before the driver stops offering that one
/// (the next large packet placed offers a new one).
const LANDING_REFUSALS_MAX: u32 = 4;
/// Largest UDP payload the kernel hands us (and more than any `mtu`).
const MAX_DATAGRAM: usize = 65536;
/// Datagrams per `recvmmsg`: small packets arrive in bursts worth batching;
/// for large datagrams the copy dwarfs the call and a few slots will do.
/// Slots hold `MAX_DATAGRAM` each, whatever our MTU, since a peer may use a
/// larger one.
const RX_BATCH_SMALL: usize = 16;
const RX_BATCH_LARGE: usize = 4;
/// Progress calls between looks at the entropy pool sockets. Peers send to
/// socket 0, which every call reads; the pool sees only strays and ICMP
/// errors, which must not pile up (they would keep blocking waits awake).
const POOL_CHECK_EVERY: u32 = 64;
/// Progress calls in a row that may leave timers for later (a backlog of
/// arrivals, or a message the application is about to take).
const MAX_TIMER_WAITS: u32 = 16;
/// How soon a caller that sleeps looks again at datagrams waiting for a
/// full same-host lane (its receiver frees slots without telling).
const RING_BACKLOG_RETRY_NS: u64 = 100_000;
/// The same for datagrams a full socket refused (it drains at link speed).
const STALL_RETRY_NS: u64 = 20_000;
/// Room in front of the engine's packet for the relay header.
const HEADROOM: usize = RelayHeader::LEN;
/// Attempts at finding free consecutive ports for the pool before taking
/// whatever ports the kernel gives.
const POOL_BIND_ATTEMPTS: usize = 16;
/// Most packets taken from the engine before any is sent, with GSO. Their
/// grouping by socket displaces a packet by less than this, which stays
/// below the receiver's view of loss (SLEEK's out-of-order threshold is at
/// least the congestion window, and the batch is capped at half the packet
/// window, the threshold's own cap).
const GSO_BATCH: usize = 128;
/// Most bytes of `tx_buf` a GSO batch's packet slots take.
const GSO_BUFFER_BYTES: usize = 2 << 20;
/// Shortest run of packets sent as one segmented `sendmsg`, but for a pair
/// of requests. A reply and the ACK behind it leave faster as two plain
/// sends: the first delivers the reply, which is all the peer waits for,
/// and on loopback the segmented pair cost about 0.35 us per message with
/// UDP GRO at the receiver and 1.3 us without it, where the kernel cuts
/// the pair up again. Two requests (a message of two packets) are both
/// waited for, and one system call less pays.
const GSO_MIN_RUN: usize = 3;
/// Datagrams taken in one progress call that switch UDP GRO on for the
/// endpoint's sockets. GRO pays for streams of short packets, but a socket
/// with it costs every arrival about 0.15 us on loopback (a 64 B
/// ping-pong's one-way latency went from 2.8 to 3.2 us), so an endpoint
/// turns it on only once it sees a burst, or a message of several packets
/// (which a peer sends in one segmented call, and which without GRO the
/// kernel cuts up again: a 4 KiB ping-pong with 4 KiB packets went from
/// about 18 to 13-16 us one way), and for good: turning it off
/// again could hand a coalesced arrival that was already queued up
/// without the segment size that says how to cut it.
const GRO_AFTER_BURST: usize = 16;

/// Driver counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverStats {
    /// Datagrams sent from each entropy socket (index = entropy).
    pub sent: Vec<u64>,
    /// Datagrams received on each socket.
    pub received: Vec<u64>,
    /// Arrivals with ECN CE in their TOS byte.
    pub ecn_ce_received: u64,
    /// Arrivals with a trimmed DSCP (fabric or last hop).
    pub trimmed_received: u64,
    /// Fabric mode: arrivals not from the relay, or with a bad relay header.
    pub fabric_dropped: u64,
    /// Fault injection: packets dropped, sent twice, held back, trimmed,
    /// marked CE.
    pub fault_dropped: u64,
    pub fault_duplicated: u64,
    pub fault_delayed: u64,
    pub fault_trimmed: u64,
    pub fault_ce_marked: u64,
    /// GSO: `sendmsg` calls that carried several datagrams, and those
    /// datagrams (also counted in `sent`).
    pub gso_sends: u64,
    pub gso_segments: u64,
    /// GSO sends the kernel refused, whose datagrams then left one by one;
    /// `gso_disabled` once it refused for good (EINVAL, EIO, ...).
    pub gso_fallbacks: u64,
    pub gso_disabled: bool,
    /// GRO: arrivals that held several datagrams, and those datagrams (also
    /// counted in `received`).
    pub gro_receives: u64,
    pub gro_segments: u64,
    /// The sockets take arrivals coalesced (after the first burst).
    pub gro_enabled: bool,
    /// Datagrams received into a landing (see `Engine::landing`) that were
    /// not the packet expected, put back together and copied as usual.
    pub landing_restored: u64,
    /// Datagrams received into a landing that could not be put back
    /// together (never expected; they are dropped and resent).
    pub landing_lost: u64,
    /// Same-host rings (`FI_UET_HOST_RING`): datagrams written into peers'
    /// lanes and taken from our own (not counted in `sent`/`received`),
    /// writes that found the lane full (the datagram then waits in the
    /// backlog, and `ring_backlog_dropped` counts those dropped because
    /// too many waited), doorbells rung and heard, and datagrams from
    /// lanes whose sender did not hold the address it claimed (dropped).
    pub ring_sent: u64,
    pub ring_received: u64,
    pub ring_full: u64,
    pub ring_backlog_dropped: u64,
    pub doorbells_sent: u64,
    pub doorbells_received: u64,
    pub ring_refused: u64,
    /// `FI_UET_SPLICE_BYTES`: datagrams whose payload left by splice, and
    /// those that fell back to a copy; of the spliced ones, those corked
    /// again after the socket refused the payload whole (their headers
    /// split in two pieces), and of the fallbacks, those refused so twice.
    pub spliced: u64,
    pub splice_fallbacks: u64,
    pub splice_recorked: u64,
    pub splice_refused_whole: u64,
    /// Datagrams thrown away unread after a gap in progress long enough
    /// for a peer to give up on us (see `Endpoint::discard_stale`).
    pub stale_discarded: u64,
    /// `FI_UET_CONNECTED_PEERS`: sends (system calls) routed to a socket
    /// connected to their peer, whether the kernel took them or not (those
    /// it took also count in `sent[0]`); such sockets opened, of those the
    /// ones that took an idle peer's place, and the ones that could not be
    /// opened or connected.
    pub connected_sends: u64,
    pub connected_opened: u64,
    pub connected_reused: u64,
    pub connected_failed: u64,
}

/// A datagram ready for the wire: `tx_buf[start..end]` or a held copy.
#[derive(Clone, Copy, Debug)]
struct Outgoing {
    socket: usize,
    to: SocketAddr,
    tos: u8,
    start: usize,
    end: usize,
    copies: u8,
}

/// A packet taken from the engine for a GSO batch: its headers (or all of
/// it) at `tx_buf[slot + HEADROOM..][..head_len()]`, its payload in the
/// engine's message memory when `payload` names one, and then an ACK
/// trailer, if any, at `[tail_start()..len]` of the same slot.
#[derive(Clone, Copy, Debug)]
struct Pending {
    socket: usize,
    to: SocketAddr,
    tos: u8,
    slot: usize,
    len: usize,
    payload: Option<PayloadRef>,
    /// A request (data), not an ACK or other control packet.
    request: bool,
    /// It names its sender's port, so it may leave from any socket
    /// ([`names_its_sender`]).
    any_port: bool,
}

impl Pending {
    /// Bytes of headers at the start of the slot (all of the datagram when
    /// no payload is gathered).
    fn head_len(&self) -> usize {
        self.payload.map_or(self.len, |r| r.at())
    }

    /// Where the bytes after a gathered payload (an ACK trailer) start;
    /// `len` when there are none.
    fn tail_start(&self) -> usize {
        self.payload.map_or(self.len, |r| r.end())
    }

    /// Most pieces a gathering send takes for it: headers, payload,
    /// trailer.
    fn pieces(&self) -> usize {
        1 + usize::from(self.payload.is_some()) + usize::from(self.tail_start() != self.len)
    }
}

/// GSO transmit state: on while the kernel accepts segmented sends.
struct Gso {
    /// Bytes per packet slot of `tx_buf` (`HEADROOM` + MTU).
    slot_len: usize,
    /// Packets taken from the engine per batch.
    batch: usize,
    pending: Vec<Pending>,
    /// Scratch: `pending` indices grouped by socket.
    order: Vec<usize>,
    /// Scratch: first index into `order` per socket.
    starts: Vec<usize>,
    /// Scratch: a batch on its way through fault injection.
    impaired: Vec<Pending>,
}

/// A datagram held back by fault injection until `at`.
struct Held {
    at: u64,
    out: Outgoing,
    bytes: Vec<u8>,
}

pub struct Endpoint {
    engine: Engine,
    /// Socket 0 is the endpoint's address; `1..` the entropy pool.
    sockets: Vec<UdpSocket>,
    /// Sockets connected to a peer each, for requests that would leave
    /// from socket 0 (`FI_UET_CONNECTED_PEERS`).
    connected: ConnectedSockets,
    local: SocketAddr,
    /// `sys::monotonic_ns` at bind: the engine's time is counted from it.
    epoch_ns: u64,
    /// Engine time at the start of the last progress call.
    progressed_at: u64,
    rx: sys::RecvBatch,
    tx_buf: Vec<u8>,
    /// Datagrams the kernel refused with EAGAIN, sent first next time
    /// (their bytes stay in `tx_buf`), in order.
    stalled: VecDeque<Outgoing>,
    /// Batched transmit with UDP GSO; `None` when off.
    gso: Option<Gso>,
    /// Relay address in fabric mode.
    fabric: Option<SocketAddr>,
    impairer: Option<Impairer>,
    /// Held datagrams in release order (one delay for all, so FIFO).
    held: VecDeque<Held>,
    fault_delay_ns: u64,
    stats: DriverStats,
    /// Which pool sockets (`1..`) have arrivals (one system call for the
    /// whole pool); `None` without a pool.
    poller: Option<sys::Poller>,
    /// Progress calls since the pool was last looked at.
    pool_idle: u32,
    idle_polls: u32,
    /// The engine's next deadline as last scanned (a scan is O(peers)),
    /// valid while `timers_known`: the engine's deadlines change only when
    /// it is called, so an idle poll reuses it.
    timer_due: Option<u64>,
    timers_known: bool,
    /// UDP GRO: `Wanted` while GSO is on and no burst has arrived yet.
    gro: Gro,
    /// Two packets fit in one segmented send, so a message of several
    /// packets may come segmented and turns GRO on.
    gro_for_messages: bool,
    /// Socket 0 had something at the last look: take arrivals in batches.
    /// After an empty look the next one is a single `recvmsg`.
    rx_burst: bool,
    spin_before_yield: u32,
    /// `FI_UET_DEFER_ACKS`: whether `progress_app` may hold ACKs.
    defer_acks: bool,
    /// `FI_UET_DIRECT_RX` (and not through a relay, whose header would
    /// shift the payload): large payloads land in posted buffers.
    direct_rx: bool,
    /// Landings refused in a row (see `LANDING_REFUSALS_MAX`).
    landing_refusals: u32,
    /// ACKs held by the last application progress call, for the next call.
    acks_deferred: bool,
    /// When the application began to owe an answer (`awaiting_reply`;
    /// engine time).
    awaiting_since: u64,
    /// To whom: the peer whose message it took (the first with an ACK
    /// queued then). A send elsewhere answers nothing.
    awaiting_peer: Option<SocketAddr>,
    /// `FI_UET_ACK_HOLD_US` in ns: how long a wait for an answer, and the
    /// ACKs held for it, survive further application progress calls (long
    /// enough for the few CQ reads between taking a message and answering
    /// it, short against the sender's round trip).
    ack_hold_ns: u64,
    /// `FI_UET_SEND_BURST_US` in ns: a send posted this soon after another
    /// waits for the end of the burst; a later one leaves at once (with any
    /// still waiting), so an application that sends now and then never
    /// waits for its next call. 0 = off.
    burst_gap_ns: u64,
    /// The last call was a send: the application is posting a burst.
    in_send_burst: bool,
    /// When the last send was posted (engine time).
    last_send_ns: u64,
    /// Sends of the burst not pushed out yet, and their payload bytes;
    /// past `burst_bytes` (a GSO batch) they go.
    sends_deferred: bool,
    deferred_bytes: usize,
    burst_bytes: usize,
    /// An application progress call completed a message and had ACKs it
    /// could hold, within `ack_hold_ns`: what the application does next
    /// tells whether it answers (a send or RMA) or just polls on.
    awaiting_reply: bool,
    /// It answered last time: ACKs are worth holding. A receiver that only
    /// polls (streaming) never holds its ACKs, which clock the sender.
    replies_follow: bool,
    /// `FI_UET_TRACE` output, when asked for.
    trace: Option<trace::TraceFile>,
    /// Calls in a row whose timers waited (see [`MAX_TIMER_WAITS`]).
    timers_waited: u32,
    /// When the last datagram arrived (engine time; 0 = never).
    last_arrival_ns: u64,
    /// How long a closing endpoint waits for silence at least: twice the
    /// minimum retransmission timeout, at most [`LINGER_MAX_NS`] (see
    /// `Drop`).
    linger_quiet_ns: u64,
    /// Whether a closing endpoint asks its senders to close (always, but
    /// for tests of a sender that does not answer).
    ask_senders_on_close: bool,
    /// How long a closing endpoint keeps resending what its peers have not
    /// acknowledged: twice the largest retransmission timeout, at most
    /// [`LINGER_OWED_MAX_NS`].
    linger_owed_ns: u64,
    /// Same-host rings (`FI_UET_HOST_RING`), when on.
    rings: Option<HostRings>,
    /// Large payloads sent by splice (`FI_UET_SPLICE_BYTES`), when on.
    splicer: Option<Splicer>,
    /// Engine time when socket 0 was last found empty or watched (a sleep
    /// on it that ended in time), the start of a sleep, the gap between
    /// the two last times it was found empty, and the gap after which the
    /// large datagrams waiting in it are thrown away (see `discard_stale`).
    watched_at: std::cell::Cell<u64>,
    asleep_since: std::cell::Cell<u64>,
    last_gap_ns: u64,
    stale_after_ns: u64,
    /// How long a peer with our timers resends before it gives up: a gap
    /// this long throws arrivals away even when such gaps are a habit.
    give_up_ns: u64,
    /// Large datagrams still to look at for stale ones, until socket 0 is
    /// found empty, and how many a full socket buffer holds.
    stale_looks: usize,
    stale_looks_max: usize,
}

/// Whether an endpoint's sockets take arrivals coalesced (UDP GRO).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gro {
    /// Off for good (no GSO, or the relay in between).
    Off,
    /// Off until a burst arrives ([`GRO_AFTER_BURST`]).
    Wanted,
    On,
}

/// The longest a closing endpoint keeps answering its peers.
const LINGER_MAX_NS: u64 = 100_000_000;
/// The longest a closing endpoint keeps resending what its peers have not
/// acknowledged, whatever `FI_UET_RTO_MAX_US` says.
const LINGER_OWED_MAX_NS: u64 = 2_000_000_000;

impl Endpoint {
    /// Bind the socket pool at `addr` (port 0 = any) and build an engine on it.
    pub fn bind(config: &Config, addr: SocketAddr) -> Result<Endpoint> {
        let fabric = match config.fabric.as_str() {
            "" => None,
            s => Some(s.parse::<SocketAddr>().map_err(|_| {
                Error::Io(std::io::Error::new(
                    ErrorKind::InvalidInput,
                    format!("FI_UET_FABRIC={s} is not ip:port"),
                ))
            })?),
        };
        if fabric.is_some_and(|f| f.is_ipv4() != addr.is_ipv4()) {
            return Err(Error::Unreachable(fabric.unwrap_or(addr)));
        }
        let mut config = config.clone();
        let lb = config.effective_lb(addr.ip(), fabric.is_some());
        config.lb = Some(lb);
        config.spray_bytes = config.effective_spray_bytes(fabric.is_some());
        // One path needs no pool of source ports.
        let pool = match lb {
            LbAlgorithm::Single => 1,
            _ => config.entropies.max(1) as usize,
        };
        let sockets = bind_pool(&config, addr, pool)?;
        let local = sockets[0].local_addr()?;
        let seed = seed_from(local);
        config.mtu = config.effective_mtu(local.ip());
        if fabric.is_some() {
            // The relay header rides in front of every packet, within the
            // largest UDP payload (65507 bytes over IPv4).
            config.mtu = config.mtu.min(65507 - HEADROOM);
        }
        let mut engine = Engine::new(&config, local, seed);
        // Through an emulated fabric every byte must cross it: the relay
        // hands the engine the sender's own address, so the copies would
        // otherwise bypass the emulated switch.
        if config.host_read && fabric.is_none() {
            if let Some(m) = host_memory::ProcessMemory::new() {
                engine.enable_host_read(Box::new(m));
            }
        }
        // The peer runs the same configuration, so our own receive buffer is
        // the best guess of how many packets it can absorb before the kernel
        // drops them; a larger window only turns into retransmissions.
        let rcvbuf = socket2::SockRef::from(&sockets[0]).recv_buffer_size()?;
        engine.set_window(config.window.min(rcvbuf / kernel_cost(config.mtu)).max(4));
        let faults = FaultConfig {
            drop: config.fault_drop,
            dup: config.fault_dup,
            reorder: config.fault_reorder,
            trim: config.fault_trim,
            ecn: config.fault_ecn,
            delay_ns: config.fault_delay_us * 1000,
            seed: config.fault_seed,
        };
        // The rings carry datagrams the network would: not where every
        // datagram must cross an emulated fabric or meet injected faults,
        // and not under ordered delivery, which would take the reordering
        // between a ring and a socket for loss.
        // Lanes name the sender by its bound address, which must be the one
        // its datagrams come from.
        let rings = (config.host_ring
            && fabric.is_none()
            && !faults.any()
            && !engine.ordered()
            && !local.ip().is_unspecified())
        .then(|| HostRings::new(local))
        .flatten();
        // A peer with our timers hands back memory that its queued
        // datagrams may refer to once it gives up on us or once its close
        // stops resending: a receiver throws away what waited for half the
        // sooner of the two (see `discard_stale`). Timers that would want
        // that below the floor keep payloads copied, and so does a relay,
        // which has no such guard. Without a pipe big enough, too.
        let give_up_ns = give_up_ns(&config);
        let linger_owed_ns = (2 * engine.rto_max_ns()).min(LINGER_OWED_MAX_NS);
        let returned_ns = give_up_ns.min(linger_owed_ns);
        let stale_after_ns = (returned_ns / 2).max(STALE_FLOOR_NS);
        let splicer =
            (config.splice_bytes > 0 && fabric.is_none() && returned_ns / 2 >= STALE_FLOOR_NS)
                .then(|| Splicer::new(config.splice_bytes).ok())
                .flatten();
        let n = sockets.len();
        let poller = match sockets.len() {
            1 => None,
            _ => Some(sys::Poller::new(&sockets[1..])?),
        };
        let rx_batch = if config.mtu > 16384 {
            RX_BATCH_LARGE
        } else {
            RX_BATCH_SMALL
        };
        // Packets smaller than the MTU (short messages) segment together
        // whatever the MTU; a batch's slots, which hold whole packets only
        // when the socket is full, stay within GSO_BUFFER_BYTES.
        let gso = (config.gso && fabric.is_none()).then(|| {
            let slot_len = HEADROOM + config.mtu;
            Gso {
                slot_len,
                batch: (engine.window() / 2)
                    .min(GSO_BUFFER_BYTES / slot_len)
                    .clamp(1, GSO_BATCH),
                pending: Vec::with_capacity(GSO_BATCH),
                order: Vec::with_capacity(GSO_BATCH),
                starts: vec![0; n + 1],
                impaired: Vec::new(),
            }
        });
        // Peers run the same configuration, so only endpoints that send
        // segmented take arrivals coalesced (cut up in `receive`), from the
        // first burst on. A kernel without UDP GRO delivers datagrams one
        // by one, which works as well, and so does a sender that segments
        // to a socket without GRO (the kernel cuts its sends up).
        let gro = if gso.is_some() { Gro::Wanted } else { Gro::Off };
        let burst_bytes = gso
            .as_ref()
            .map_or(0, |g| g.batch * (g.slot_len - HEADROOM));
        let tx_len = match &gso {
            Some(g) => (g.slot_len * g.batch).max(MAX_DATAGRAM + HEADROOM),
            None => MAX_DATAGRAM + HEADROOM,
        };
        let epoch_ns = sys::monotonic_ns();
        let trace = match config.trace.as_str() {
            "" => None,
            pattern => {
                let unix = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                Some(trace::TraceFile::open(pattern, local, &mut engine, unix)?)
            }
        };
        // Through a relay every datagram goes to one address, and the
        // relay keys hosts by source port. Ordered delivery keeps one path
        // for a context's data and SES responses, which leave from socket 0.
        let connected_peers = if fabric.is_none() && !engine.ordered() {
            config.connected_peers
        } else {
            0
        };
        Ok(Endpoint {
            engine,
            sockets,
            connected: ConnectedSockets::new(local, connected_peers, config.sockbuf),
            local,
            epoch_ns,
            progressed_at: 0,
            rx: sys::RecvBatch::new(rx_batch, MAX_DATAGRAM),
            tx_buf: vec![0; tx_len],
            stalled: VecDeque::new(),
            gso,
            fabric,
            impairer: faults.any().then(|| Impairer::new(faults)),
            held: VecDeque::new(),
            fault_delay_ns: faults.delay_ns,
            stats: DriverStats {
                sent: vec![0; n],
                received: vec![0; n],
                ..DriverStats::default()
            },
            poller,
            pool_idle: 0,
            idle_polls: 0,
            timer_due: None,
            timers_known: false,
            gro,
            gro_for_messages: 2 * config.mtu <= sys::MAX_SEGMENTED_BYTES,
            rx_burst: false,
            spin_before_yield: config.spin_before_yield,
            defer_acks: config.defer_acks,
            direct_rx: config.direct_rx && fabric.is_none(),
            landing_refusals: 0,
            acks_deferred: false,
            awaiting_since: 0,
            awaiting_peer: None,
            ack_hold_ns: config.ack_hold_us.saturating_mul(1000),
            burst_gap_ns: u64::from(config.send_burst_us) * 1000,
            in_send_burst: false,
            last_send_ns: 0,
            sends_deferred: false,
            deferred_bytes: 0,
            burst_bytes,
            awaiting_reply: false,
            replies_follow: false,
            trace,
            last_arrival_ns: 0,
            timers_waited: 0,
            linger_quiet_ns: (2 * config.rto_min_us * 1000).min(LINGER_MAX_NS),
            ask_senders_on_close: true,
            linger_owed_ns,
            rings,
            splicer,
            watched_at: std::cell::Cell::new(0),
            asleep_since: std::cell::Cell::new(0),
            last_gap_ns: 0,
            stale_after_ns,
            give_up_ns,
            stale_looks: 0,
            stale_looks_max: 2 * config.sockbuf / STALE_GUARDED_BYTES + RX_BURST,
        })
    }

    /// Whether this endpoint sends with reliable ordered delivery (ROD).
    pub fn ordered(&self) -> bool {
        self.engine.ordered()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The source address of each entropy socket (index = entropy).
    pub fn entropy_addrs(&self) -> Vec<SocketAddr> {
        self.sockets
            .iter()
            .filter_map(|s| s.local_addr().ok())
            .collect()
    }

    pub fn stats(&self) -> DriverStats {
        let ring = self.rings.as_ref().map(|r| r.stats).unwrap_or_default();
        DriverStats {
            gro_enabled: self.gro == Gro::On,
            ring_sent: ring.sent,
            ring_received: ring.received,
            ring_full: ring.full,
            ring_backlog_dropped: ring.backlog_dropped,
            doorbells_sent: ring.doorbells_sent,
            ring_refused: ring.refused,
            spliced: self.splicer.as_ref().map_or(0, |s| s.spliced),
            splice_fallbacks: self.splicer.as_ref().map_or(0, |s| s.fallbacks),
            splice_recorked: self.splicer.as_ref().map_or(0, |s| s.recorked),
            splice_refused_whole: self.splicer.as_ref().map_or(0, |s| s.refused_whole),
            connected_sends: self.connected.stats.sends,
            connected_opened: self.connected.stats.opened,
            connected_reused: self.connected.stats.reused,
            connected_failed: self.connected.stats.failed,
            ..self.stats.clone()
        }
    }

    /// The engine's counters (packets, retransmits, NACKs, ECN, ...).
    pub fn engine_stats(&self) -> crate::engine::Stats {
        self.engine.stats()
    }

    /// Congestion state and path use towards one peer.
    pub fn peer_stats(&self, peer: SocketAddr) -> Option<crate::engine::PeerStats> {
        self.engine.peer_stats(peer)
    }

    fn now(&self) -> u64 {
        engine_time(self.epoch_ns)
    }

    /// The endpoint's clock: nanoseconds since it was bound.
    pub fn clock_ns(&self) -> u64 {
        self.now()
    }

    /// [`clock_ns`](Self::clock_ns) when the last progress call began: what
    /// a caller that just progressed takes for "now" without reading the
    /// clock again.
    pub fn progressed_at(&self) -> u64 {
        self.progressed_at
    }

    /// Post a send and push its first packets out at once.
    pub fn send(&mut self, op: SendOp) -> Result<()> {
        self.timers_known = false;
        if op.dest.is_ipv4() != self.local.is_ipv4() {
            return Err(Error::Unreachable(op.dest));
        }
        let now = self.now();
        let len = op.payload.len();
        let dest = op.dest;
        self.engine.post_send(now, op)?;
        self.judge_answer(now, dest);
        // The first send of a burst leaves at once; those posted right
        // after it wait for the burst's end (the next call of any other
        // kind) or a full batch, so they share system calls.
        self.deferred_bytes += len.max(1);
        let burst = self.in_send_burst && now.saturating_sub(self.last_send_ns) < self.burst_gap_ns;
        if burst && self.deferred_bytes < self.burst_bytes {
            self.sends_deferred = true;
            self.last_send_ns = now;
        } else {
            self.sends_deferred = false;
            self.deferred_bytes = 0;
            self.flush_reply(now);
            // The pause counts from the end of the system calls.
            self.last_send_ns = self.now();
        }
        self.in_send_burst = true;
        Ok(())
    }

    /// The application's hint (`FI_MORE`) that another send follows the
    /// next one at once: that one waits for the burst's end too.
    pub fn expect_more_sends(&mut self) {
        self.in_send_burst = true;
        self.last_send_ns = self.now();
    }

    /// Push out sends a burst left waiting; every call but a send ends a
    /// burst.
    fn end_send_burst(&mut self, now: u64) {
        self.in_send_burst = false;
        if std::mem::take(&mut self.sends_deferred) {
            self.deferred_bytes = 0;
            self.flush_reply(now);
        }
    }

    /// Post an RMA write or read and push its first packets out at once.
    pub fn rma(&mut self, op: crate::ops::RmaOp) -> Result<()> {
        self.timers_known = false;
        if op.dest.is_ipv4() != self.local.is_ipv4() {
            return Err(Error::Unreachable(op.dest));
        }
        let now = self.now();
        self.end_send_burst(now);
        let dest = op.dest;
        self.engine.post_rma(now, op)?;
        self.judge_answer(now, dest);
        self.flush_reply(now);
        Ok(())
    }

    /// Memory peers may access with RMA.
    pub fn set_memory_regions(&mut self, regions: std::sync::Arc<dyn crate::ops::MemoryRegions>) {
        self.timers_known = false;
        self.engine.set_memory_regions(regions);
    }

    /// See [`Engine::payload_buffer`].
    pub fn payload_buffer(&mut self) -> Vec<u8> {
        self.engine.payload_buffer()
    }

    /// See [`Engine::boxed_buffer`].
    pub fn boxed_buffer<T: MsgBuffer + std::any::Any>(&mut self, buffer: T) -> Box<dyn MsgBuffer> {
        self.engine.boxed_buffer(buffer)
    }

    /// Post a receive buffer (or a peek/claim/discard request).
    pub fn recv(&mut self, op: RecvOp) -> Result<()> {
        self.timers_known = false;
        let now = self.now();
        self.end_send_burst(now);
        self.engine.post_recv(now, op)?;
        // Posting a receive is how an application readies for the next
        // message before it answers this one: held ACKs keep waiting,
        // unless the receive set data moving (a pull), which must not
        // overtake them.
        let hold = self.acks_deferred && !self.engine.has_queued_data();
        self.flush_holding_acks(now, hold);
        Ok(())
    }

    /// Cancel a posted receive; true when one was found (an FI_ECANCELED
    /// completion is then queued).
    pub fn cancel(&mut self, context: Context) -> bool {
        self.timers_known = false;
        let now = self.now();
        self.end_send_burst(now);
        self.engine.cancel(context)
    }

    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.engine.poll_completion()
    }

    /// True when completions are waiting to be read.
    pub fn has_completions(&self) -> bool {
        self.engine.has_completions()
    }

    /// Descriptors that become readable when a datagram arrives, for callers
    /// that sleep in poll/epoll between progress calls.
    pub fn wait_fds(&self) -> Vec<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.sockets.iter().map(|s| s.as_raw_fd()).collect()
    }

    /// How long a caller may sleep before the engine needs a progress call
    /// even without input: zero when a transmit is pending, the time to the
    /// next timer otherwise, `None` when nothing is armed. Datagrams that
    /// wait for room are retried like timers: at most `STALL_RETRY_NS`
    /// after the kernel refused one, `RING_BACKLOG_RETRY_NS` while some
    /// wait for a full same-host lane (neither says when it has room, and
    /// a zero budget would make every blocking wait spin until then).
    pub fn idle_budget(&self) -> Option<std::time::Duration> {
        if self.input_waiting()
            || self.acks_deferred
            || self.sends_deferred
            || self.engine.has_trailer_acks()
            || self.engine.has_completions()
        {
            return Some(std::time::Duration::ZERO);
        }
        let now = self.now();
        // Held (reordered) datagrams are due like timers.
        let held = self.held.front().map(|h| h.at);
        let backlog = self
            .rings
            .as_ref()
            .filter(|r| r.has_backlog())
            .map(|_| now + RING_BACKLOG_RETRY_NS);
        let stalled = (!self.stalled.is_empty()).then_some(now + STALL_RETRY_NS);
        let next = [self.engine.next_timeout(), held, backlog, stalled]
            .into_iter()
            .flatten()
            .min();
        next.map(|t| std::time::Duration::from_nanos(t.saturating_sub(now)))
    }

    /// Move packets and fire timers. Returns true when anything happened.
    /// For background threads: every ACK leaves in the call that queues it.
    pub fn progress(&mut self) -> bool {
        self.progress_holding(false)
    }

    /// [`progress`](Self::progress) for the application thread that takes
    /// the completions: when the call completes a message and has nothing
    /// but ACKs to send, and the application answered the last such call
    /// with a send or RMA, they are held (`FI_UET_DEFER_ACKS`) until its
    /// next send or RMA, so a reply the application posts at once leaves
    /// ahead of them or carries them instead of waiting out an ACK's
    /// system call. Progress calls within `FI_UET_ACK_HOLD_US` keep them;
    /// the first call after that sends them whatever it completes, and
    /// [`idle_budget`] is zero meanwhile, so nobody sleeps on them.
    ///
    /// [`idle_budget`]: Self::idle_budget
    pub fn progress_app(&mut self) -> bool {
        self.progress_holding(self.defer_acks)
    }

    fn progress_holding(&mut self, may_hold: bool) -> bool {
        let mut now = self.now();
        self.progressed_at = now;
        self.discard_stale(now);
        self.end_send_burst(now);

        let mut busy = false;
        // ACKs that came riding on the last call's arrivals, once the
        // answer (if any) has left.
        if self.engine.has_trailer_acks() {
            self.engine.handle_trailer_acks();
            busy = true;
        }
        // A wait for the answer, and the ACKs held for it, last through
        // the application's calls for a short while (FI_UET_ACK_HOLD_US):
        // between taking a message and answering it, an application may
        // read a CQ more than once (its send's completion, then the
        // message's). The wait lasts even when its ACKs could not be held
        // (replies_follow off), so an answer after such calls counts.
        // A background call (the idle-progress thread) ends neither the
        // wait nor its verdict early: the application may still answer in
        // time, and one that comes back later has not answered.
        let waiting = self.awaiting_reply && self.within_hold(now);
        let young = may_hold && waiting;
        let released = !young && std::mem::take(&mut self.acks_deferred);
        if !waiting && std::mem::take(&mut self.awaiting_reply) {
            // No answer in time: back to polling instead of answering.
            self.replies_follow = false;
        }
        // An application seen answering answers what arrives now: the
        // ACKs riding on it wait until the answer has left
        // (Engine::defer_trailer_acks).
        self.engine
            .defer_trailer_acks(may_hold && self.replies_follow);
        // Peers address everything to socket 0; the pool sockets see only
        // strays and ICMP errors, drained every so often.
        let arrived = self.receive(0, &mut now) + self.receive_rings(&mut now);
        self.engine.defer_trailer_acks(false);
        if !self.engine.has_completions() {
            // Nothing to answer: no reason to wait.
            self.engine.handle_trailer_acks();
        }
        busy |= arrived > 0;
        // A full burst may have left more in the socket, the ACKs for what
        // a timer is about to declare lost among them (a long flush kept
        // the endpoint from reading): timers wait for the socket to drain,
        // a few calls at most. So do they while the application has a
        // message to take and most likely answer: the timers' turn then
        // comes in the next call instead of between the arrival and the
        // reply.
        let timers_wait = (arrived >= RX_BURST || (may_hold && self.engine.has_completions()))
            && self.timers_waited < MAX_TIMER_WAITS;
        self.pool_idle += 1;
        if self.pool_idle >= POOL_CHECK_EVERY {
            self.pool_idle = 0;
            let ready = self.poller.as_mut().map_or(0, |p| p.poll());
            for k in 0..ready {
                let i = self.poller.as_ref().map_or(0, |p| p.ready(k)) + 1;
                busy |= self.receive(i, &mut now) > 0;
            }
        }
        if timers_wait {
            self.timers_waited += 1;
            self.timers_known = false;
        } else {
            self.timers_waited = 0;
            // Rescan after any engine work, and every POOL_CHECK_EVERY
            // polls whatever happened (cheap insurance against a missed
            // change).
            if busy || !self.timers_known || self.pool_idle == 0 {
                self.timer_due = self.engine.next_timeout();
                self.timers_known = true;
            }
            if self.timer_due.is_some_and(|t| t <= now) {
                self.engine.handle_timeout(now);
                self.timers_known = false;
            }
        }
        // Only ACKs may wait: were data of this call's own (a read
        // response, a retransmission) to overtake them, the peer would see
        // that operation finish before the one the ACK completes.
        let answerable = may_hold
            && !released
            && (young || self.engine.has_completions())
            && self.engine.has_queued_acks()
            && !self.engine.has_queued_data();
        if answerable && !self.awaiting_reply {
            self.awaiting_since = now;
            self.awaiting_peer = self.engine.first_queued_ack_peer();
        }
        self.awaiting_reply = answerable || waiting;
        let hold = answerable && self.engine.queued_acks_may_wait(self.replies_follow);
        busy |= self.flush_holding_acks(now, hold);
        if self.engine.has_host_copies() {
            // Our shares of same-host copies, now that the pulls handing
            // the senders theirs are out (FI_UET_HOST_READ).
            self.engine.run_host_copies();
            busy = true;
            busy |= self.flush(self.now());
        }
        busy |= self.engine.has_completions();
        if let Some(t) = self.trace.as_mut() {
            t.drain(&mut self.engine);
        }
        if busy {
            self.idle_polls = 0;
            self.timers_known = false;
        } else {
            self.idle_polls += 1;
            if self.idle_polls >= self.spin_before_yield {
                self.idle_polls = 0;
                std::thread::yield_now();
            }
        }
        busy
    }

    /// When socket 0 was last found empty (or watched by a sleep) longer
    /// ago than `stale_after_ns`, throw away the large datagrams that
    /// waited in it (until it is found empty again), unless such gaps are
    /// this endpoint's habit (the one before was at least a quarter as
    /// long: an application that polls that seldom would otherwise never
    /// receive) and shorter than `give_up_ns`. A peer that splices its payloads
    /// (`FI_UET_SPLICE_BYTES`, datagrams of [`STALE_GUARDED_BYTES`] or
    /// more) hands the kernel references to its message's pages; once it
    /// gave up on us or closed, its application may have reused that
    /// memory, and a datagram read now could carry the new bytes under the
    /// old sequence number. Dropping them is a loss like any other: peers
    /// still waiting resend. Shorter datagrams were copied when sent.
    fn discard_stale(&mut self, now: u64) {
        let gap = now.saturating_sub(self.watched_at.get());
        let habit = gap / 4 <= self.last_gap_ns && gap <= self.give_up_ns;
        if gap > self.stale_after_ns && !habit {
            self.stale_looks = self.stale_looks_max;
        }
    }

    /// A receive call that began at `before` and ended at `after` (a
    /// process stopped within it) may have taken stale datagrams: look at
    /// those too.
    fn look_for_stale_if_stalled(&mut self, before: u64, after: u64) {
        if after.saturating_sub(before) > self.stale_after_ns {
            self.stale_looks = self.stale_looks_max;
        }
    }

    /// Hand up to a burst of datagrams from socket `i` to the engine.
    /// `now` is read again after every system call that brought something:
    /// taking a burst of large datagrams takes long enough that a stale
    /// clock would date later arrivals too early, and the service time
    /// their ACK reports would exceed their round trip.
    fn receive(&mut self, i: usize, now: &mut u64) -> usize {
        let mut got = 0;
        let mut calls = 0;
        let mut drained = false;
        let single = i == 0 && !self.rx_burst;
        while got < RX_BURST && calls < RX_BURST {
            calls += 1;
            let landing = match i == 0 && self.direct_rx {
                true => self.receive_landing(now),
                false => None,
            };
            let landing_call = landing.is_some();
            let taken = match landing {
                Some(Ok(Landed::InPlace)) => {
                    got += 1;
                    self.stats.received[i] += 1;
                    continue;
                }
                Some(Ok(Landed::Lost)) => continue,
                // Slot 0 holds it as sent.
                Some(Ok(Landed::Restored)) => Ok(1),
                Some(Err(e)) => Err(e),
                None if single => self.rx.recv_one(&self.sockets[i]),
                None => self.rx.recv(&self.sockets[i]),
            };
            let n = match taken {
                Ok(n) => n,
                // ICMP port unreachable from an earlier send surfaces here as
                // ECONNREFUSED on Linux; the engine's timers handle dead peers.
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => continue,
                Err(e) => {
                    drained = e.kind() == ErrorKind::WouldBlock;
                    break;
                }
            };
            if n > 0 {
                let before = std::mem::replace(now, self.now());
                self.look_for_stale_if_stalled(before, *now);
            }
            for k in 0..n {
                let (r, bytes) = self.rx.get(k);
                let Some(source) = r.from.filter(|_| !r.truncated) else {
                    got += 1;
                    self.stats.received[i] += 1;
                    continue;
                };
                // A GRO arrival holds datagrams of `segment` bytes, the last
                // possibly shorter, all with the same TOS.
                let segment = match r.segment {
                    0 => bytes.len(),
                    s => s,
                };
                let mut count = 0u64;
                for datagram in bytes
                    .chunks(segment.max(1))
                    .chain(bytes.is_empty().then_some(bytes))
                {
                    count += 1;
                    if take_stale(&mut self.stale_looks, &mut self.stats, datagram.len()) {
                        continue;
                    }
                    deliver(
                        &mut self.engine,
                        &mut self.stats,
                        self.fabric,
                        *now,
                        source,
                        r.tos,
                        datagram,
                    );
                }
                if count > 1 {
                    self.stats.gro_receives += 1;
                    self.stats.gro_segments += count;
                }
                got += count as usize;
                self.stats.received[i] += count;
            }
            // After a landing the next datagram may be the next packet.
            if (single || n < self.rx.capacity()) && !landing_call {
                drained = n == 0 || !single;
                break;
            }
        }
        if i == 0 {
            self.rx_burst = got > 0;
            if drained {
                // What comes next arrived since: nothing in the socket is
                // older than this.
                let gap = now.saturating_sub(self.watched_at.replace(*now));
                self.last_gap_ns = gap;
                self.stale_looks = 0;
            }
        }
        if self.gro == Gro::Wanted
            && (got >= GRO_AFTER_BURST
                || got > 0
                    && self.gro_for_messages
                    && self.engine.has_taken_multi_packet_messages())
        {
            self.enable_gro();
        }
        if got > 0 {
            self.last_arrival_ns = *now;
        }
        got
    }

    /// Hand up to a burst of datagrams from our same-host lanes to the
    /// engine, as [`receive`](Self::receive) does from a socket.
    fn receive_rings(&mut self, now: &mut u64) -> usize {
        let Some(rings) = self.rings.as_mut() else {
            return 0;
        };
        let t = engine_time(self.epoch_ns);
        let engine = &mut self.engine;
        let got = rings.receive(RX_BURST, |from, tos, bytes| {
            engine.handle_datagram(t, from, tos, bytes);
        });
        if got > 0 {
            *now = t;
            self.last_arrival_ns = t;
        }
        got
    }

    /// Before sleeping on [`wait_fds`](Self::wait_fds): false when a
    /// same-host lane holds something (progress instead). True means
    /// senders ring the doorbell until [`end_sleep`](Self::end_sleep).
    pub fn begin_sleep(&self) -> bool {
        self.asleep_since.set(self.now());
        self.rings.as_ref().is_none_or(HostRings::begin_sleep)
    }

    /// After a sleep that [`begin_sleep`](Self::begin_sleep) allowed. A
    /// sleep on the sockets watched them: arrivals would have ended it at
    /// once. One that lasted longer than the stale guard's gap (a process
    /// stopped meanwhile) watched nothing.
    pub fn end_sleep(&self) {
        let now = self.now();
        if now.saturating_sub(self.asleep_since.get()) <= self.stale_after_ns {
            self.watched_at.set(now);
        }
        if let Some(r) = self.rings.as_ref() {
            r.end_sleep();
        }
    }

    /// Whether input waits where [`wait_fds`](Self::wait_fds) do not show
    /// it (same-host lanes): a caller must not sleep on them now.
    pub fn input_waiting(&self) -> bool {
        self.rings.as_ref().is_some_and(HostRings::pending)
    }

    /// The application sleeps on [`wait_fds`](Self::wait_fds) by itself
    /// (`FI_GETWAIT`), out of our sight: same-host senders ring the
    /// doorbell whenever they fill an empty lane.
    pub fn wake_on_every_arrival(&self) {
        if let Some(r) = self.rings.as_ref() {
            r.always_ring();
        }
    }

    /// Receive one datagram into the landing the engine expects (see
    /// `Engine::landing`), if it expects one: its payload goes straight
    /// into the posted buffer, and when it is the packet predicted the
    /// engine takes it from there.
    fn receive_landing(&mut self, now: &mut u64) -> Option<std::io::Result<Landed>> {
        let (landing, region) = self.engine.landing()?;
        let header_len = landing.header_len;
        if let Err(e) = self.rx.recv_landing(&self.sockets[0], header_len, region) {
            // EFAULT (memory the application gave but cannot be written)
            // costs the kernel the datagram: this landing is not tried
            // again, and the sender resends.
            if e.kind() != ErrorKind::WouldBlock {
                self.engine.forget_landing();
            }
            return Some(Err(e));
        }
        let before = std::mem::replace(now, self.now());
        self.look_for_stale_if_stalled(before, *now);
        let (slot, bytes) = self.rx.get(0);
        let coalesced = slot.segment != 0 && slot.segment < slot.len;
        if let Some(from) = slot.from.filter(|_| !slot.truncated && !coalesced) {
            // What would not land is put back together and looked at as
            // usual.
            if take_stale(&mut self.stale_looks, &mut self.stats, slot.len) {
                // Its bytes in the region are written again by their own
                // packet, as after any wrong guess.
                return Some(Ok(Landed::Lost));
            }
            if slot.len > header_len {
                let header = &bytes[..header_len];
                let payload_len = slot.len - header_len;
                if self
                    .engine
                    .handle_landed(*now, from, slot.tos, &landing, header, payload_len)
                {
                    count_arrival(&mut self.stats, slot.tos);
                    self.landing_refusals = 0;
                    return Some(Ok(Landed::InPlace));
                }
            }
        }
        // Something else came (an ACK, another message's packet): put it
        // back together. The engine refused it without a change, so the
        // same landing is on offer with the same region.
        match self.engine.landing() {
            Some((again, region)) if again == landing => {
                self.rx.restore_landing(header_len, region);
                self.stats.landing_restored += 1;
                // A message that stalls (a packet lost, the sender busy
                // with another) would make every arrival, ACKs included,
                // come one per call and be put back together.
                self.landing_refusals += 1;
                if self.landing_refusals >= LANDING_REFUSALS_MAX {
                    self.landing_refusals = 0;
                    self.engine.forget_landing();
                }
                Some(Ok(Landed::Restored))
            }
            // Not reached; were it, the datagram is dropped rather than
            // delivered with a hole (the sender resends it).
            _ => {
                self.stats.landing_lost += 1;
                Some(Ok(Landed::Lost))
            }
        }
    }

    /// Take arrivals coalesced from now on (see [`GRO_AFTER_BURST`]).
    fn enable_gro(&mut self) {
        // A kernel without UDP GRO refuses it on every socket alike.
        self.gro = Gro::Off;
        for s in &self.sockets {
            if sys::enable_gro(s).is_ok() {
                self.gro = Gro::On;
            }
        }
    }

    /// After posting a send or RMA: its data first, carrying the ACKs held
    /// for it where they fit (`wire::ack_trailer`), then the others. Those
    /// leave after the reply, so neither their building nor their system
    /// call delays it. Then the ACKs that arrived riding on what the
    /// application answers.
    fn flush_reply(&mut self, now: u64) {
        if std::mem::take(&mut self.acks_deferred) {
            self.engine.hold_acks(true);
            self.flush(now);
            self.engine.hold_acks(false);
            // Dated after the reply left: the ACKs report their wait.
            self.flush(self.now());
        } else {
            self.flush(now);
        }
        // The ACKs that came riding on what this answers, now that the
        // answer is out; what they free may send more.
        if self.engine.has_trailer_acks() {
            self.engine.handle_trailer_acks();
            self.flush(self.now());
        }
    }

    /// A send or RMA to `dest` was posted (sent now or with its burst):
    /// it answers the message the application took if it goes to that
    /// message's sender within the hold, a request-response exchange where
    /// held ACKs pay. One posted later (the application went elsewhere
    /// meanwhile, and the peer waited for its ACK until now) or elsewhere
    /// (a shift or ring pattern) stops the holding.
    fn judge_answer(&mut self, now: u64, dest: SocketAddr) {
        if std::mem::take(&mut self.awaiting_reply) {
            self.replies_follow = Some(dest) == self.awaiting_peer && self.within_hold(now);
        }
    }

    /// `now` is within `FI_UET_ACK_HOLD_US` of the message the application
    /// owes an answer to.
    fn within_hold(&self, now: u64) -> bool {
        now.saturating_sub(self.awaiting_since) < self.ack_hold_ns
    }

    /// [`flush`](Self::flush), keeping queued ACKs back when `hold`
    /// (remembered in `acks_deferred`).
    fn flush_holding_acks(&mut self, now: u64, hold: bool) -> bool {
        self.engine.hold_acks(hold);
        let sent = self.flush(now);
        self.engine.hold_acks(false);
        self.acks_deferred = hold && self.engine.has_queued_acks();
        sent
    }

    /// Retry the datagrams that wait for full same-host lanes; true when
    /// any left.
    fn retry_ring_backlog(&mut self) -> bool {
        let Some(rings) = self.rings.as_mut().filter(|r| r.has_backlog()) else {
            return false;
        };
        let written = rings.stats.sent;
        let mut by_udp = false;
        let mut unrung = Vec::new();
        let (sockets, stats) = (&self.sockets, &mut self.stats);
        rings.retry_backlog(|r| match r {
            Retried::Doorbell(to) => {
                if sys::send_with_tos(&sockets[0], to, sys::DEFAULT_TOS, &[]).is_err() {
                    unrung.push(to);
                }
            }
            // Lost like any datagram the network drops (see `emit`).
            Retried::ByUdp(to, tos, bytes) => {
                by_udp = true;
                if sys::send_parts(&sockets[0], to, tos, &[bytes]).is_ok() {
                    stats.sent[0] += 1;
                }
            }
        });
        // Tried again at the next flush (see `send_datagram`).
        for to in unrung {
            rings.owe_doorbell(to);
        }
        let moved = by_udp || rings.stats.sent != written;
        hold_ring_backlog(&mut self.rings, &mut self.engine);
        moved
    }

    /// Send everything the engine has ready (and held datagrams now due);
    /// stop at the first EAGAIN.
    fn flush(&mut self, now: u64) -> bool {
        let mut sent = self.retry_ring_backlog();
        while self.held.front().is_some_and(|h| h.at <= now) {
            let Some(mut h) = self.held.pop_front() else {
                break;
            };
            let mut out = SendSockets::new(&self.sockets, &mut self.connected, now);
            if !emit(
                &mut out,
                &mut self.rings,
                &mut self.stats,
                &mut h.out,
                &h.bytes,
            ) {
                self.held.push_front(h);
                return sent;
            }
            sent = true;
        }
        while let Some(out) = self.stalled.front_mut() {
            let bytes = &self.tx_buf[out.start..out.end];
            let mut via = SendSockets::new(&self.sockets, &mut self.connected, now);
            if !emit(&mut via, &mut self.rings, &mut self.stats, out, bytes) {
                return sent;
            }
            self.stalled.pop_front();
            sent = true;
        }
        if self.gso.is_some() {
            return self.flush_batched(now) || sent;
        }
        self.flush_unsegmented(now) || sent
    }

    /// The transmit loop without GSO: `flush_gather`, or datagram by
    /// datagram through fault injection.
    fn flush_unsegmented(&mut self, now: u64) -> bool {
        if self.impairer.is_none() {
            return self.flush_gather(now);
        }
        let mut sent = false;
        while let Some(t) = self.engine.poll_transmit(now, &mut self.tx_buf[HEADROOM..]) {
            sent = true;
            let Some(mut out) = self.prepare(&t, now) else {
                continue;
            };
            let bytes = &self.tx_buf[out.start..out.end];
            let mut via = SendSockets::new(&self.sockets, &mut self.connected, now);
            if !emit(&mut via, &mut self.rings, &mut self.stats, &mut out, bytes) {
                // The bytes stay in `tx_buf`: nothing more is pulled from
                // the engine until this datagram is out.
                self.stalled.push_back(out);
                break;
            }
        }
        sent
    }

    /// The transmit loop without fault injection: headers are built in
    /// `tx_buf` and a payload that lies in one piece of the message's memory
    /// goes out from there by a gather list, so large messages are copied
    /// once (by the kernel) instead of twice. Stops at the first EAGAIN,
    /// keeping that datagram whole in `tx_buf`.
    fn flush_gather(&mut self, mut now: u64) -> bool {
        let mut sent = false;
        while let Some((t, payload)) = self
            .engine
            .poll_transmit_gather(now, &mut self.tx_buf[HEADROOM..])
        {
            sent = true;
            // Headers, the payload in its message's memory, an ACK trailer.
            let (payload, hole) = match payload {
                Some((r, bytes)) => (bytes, HEADROOM + r.at()..HEADROOM + r.end()),
                None => (&[][..], HEADROOM + t.len..HEADROOM + t.len),
            };
            let (start, to) = match self.fabric {
                None => (HEADROOM, t.dest),
                Some(relay) => {
                    RelayHeader { addr: t.dest }.emit(&mut self.tx_buf[..HEADROOM]);
                    (0, relay)
                }
            };
            let socket = t.entropy as usize % self.sockets.len();
            let tos = ip::tos(0, t.ecn);
            let head = &self.tx_buf[start..hole.start];
            let tail = &self.tx_buf[hole.end..HEADROOM + t.len];
            let splicer = self.splicer.as_mut();
            let pieces = (head, payload, tail);
            let mut via = SendSockets::new(&self.sockets, &mut self.connected, now);
            match send_datagram(&mut via, &mut self.rings, splicer, socket, to, tos, pieces) {
                Ok(Carrier::Udp) => self.stats.sent[socket] += 1,
                Ok(Carrier::Ring) => hold_ring_backlog(&mut self.rings, &mut self.engine),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    copy_bytes(&mut self.tx_buf[hole], payload);
                    self.stalled.push_back(Outgoing {
                        socket,
                        to,
                        tos,
                        start,
                        end: HEADROOM + t.len,
                        copies: 1,
                    });
                    break;
                }
                // Lost like any datagram the network drops (see `emit`).
                Err(_) => {}
            }
            // The next packet is dated when it leaves (see flush_batched).
            now = self.now();
        }
        sent
    }

    /// The transmit loop with GSO: take up to a batch of packets from the
    /// engine (headers in one `tx_buf` slot each, payloads left in message
    /// memory), then send them grouped by socket, each run of equal-size
    /// packets to one destination with one TOS in one `sendmsg`. Stops at
    /// the first EAGAIN, keeping what is left whole in `tx_buf`.
    fn flush_batched(&mut self, mut now: u64) -> bool {
        let epoch_ns = self.epoch_ns;
        // Fields borrowed apart, so the GSO state stays in place.
        let Endpoint {
            gso: Some(gso),
            engine,
            tx_buf,
            sockets,
            connected,
            stats,
            stalled,
            rings,
            impairer,
            held,
            splicer,
            ..
        } = self
        else {
            return false;
        };
        let mut sent = false;
        loop {
            gso.pending.clear();
            while gso.pending.len() < gso.batch {
                let slot = gso.pending.len() * gso.slot_len;
                let buf = &mut tx_buf[slot + HEADROOM..slot + gso.slot_len];
                let Some((t, payload)) = engine.poll_transmit_ref(now, buf) else {
                    break;
                };
                let prologue = Prologue::parse(buf).ok();
                let request = prologue.is_some_and(|p| p.ptype.is_request());
                let any_port = prologue.is_some_and(names_its_sender);
                gso.pending.push(Pending {
                    socket: t.entropy as usize % sockets.len(),
                    to: t.dest,
                    tos: ip::tos(0, t.ecn),
                    slot,
                    len: t.len,
                    payload,
                    request,
                    any_port,
                });
            }
            let taken = gso.pending.len();
            if taken == 0 {
                break;
            }
            sent = true;
            // A payload the engine no longer has (never within one flush)
            // leaves the headers alone rather than garbage: the receiver
            // drops the short packet. Its length must say so, or it would
            // break a run of segments.
            for p in gso.pending.iter_mut() {
                if p.payload.is_some_and(|r| engine.payload(r).is_none()) {
                    p.len = p.head_len();
                    p.payload = None;
                }
            }
            if let Some(imp) = impairer.as_mut() {
                impair_batch(imp, gso, tx_buf, engine, stats, held, now);
                if gso.pending.is_empty() {
                    if taken < gso.batch {
                        break;
                    }
                    continue;
                }
            }
            let mut batch = Batch {
                via: SendSockets::new(sockets, connected, now),
                rings,
                engine,
                tx_buf,
                stats,
                stalled,
                splicer,
                gso_on: true,
            };
            // A lone packet (a ping-pong's message or ACK; twice when
            // fault injection duplicates it) leaves as flush_gather would
            // send it, without the grouping.
            if taken == 1 {
                gso.order.clear();
                gso.order.extend(0..gso.pending.len());
                if let Err(at) = batch.send_one_by_one(&gso.pending, &gso.order) {
                    batch.stall(&gso.pending, &gso.order[at..]);
                }
                hold_ring_backlog(rings, engine);
                break;
            }
            group_by_socket(gso, sockets.len());
            let all_out = batch.send(&gso.pending, &gso.order);
            let gso_on = batch.gso_on;
            hold_ring_backlog(rings, engine);
            if !gso_on {
                stats.gso_disabled = true;
                // Slots of stalled packets stay valid: flush_unsegmented
                // uses only the first, and runs once nothing is stalled.
                self.gso = None;
                // What the engine has left leaves now, unsegmented: no
                // sleeper's budget would say it waits.
                if all_out {
                    let now = engine_time(epoch_ns);
                    return self.flush_unsegmented(now) || sent;
                }
                return sent;
            }
            if !all_out || taken < gso.batch {
                break;
            }
            // A full window takes a while to send: the next batch is dated
            // when it leaves, or its round trips would include this one's
            // and outlast the retransmission timer.
            now = engine_time(epoch_ns);
        }
        sent
    }

    /// Turn the engine's packet in `tx_buf[HEADROOM..]` into what goes on
    /// the wire: fault injection, relay header, TOS byte. `None` when the
    /// packet is dropped or held back.
    fn prepare(&mut self, t: &Transmit, now: u64) -> Option<Outgoing> {
        let mut len = t.len;
        let mut tos = ip::tos(0, t.ecn);
        let mut treat = Treatment::UNTOUCHED;
        if let Some(imp) = self.impairer.as_mut() {
            let packet = &mut self.tx_buf[HEADROOM..HEADROOM + len];
            treat = judge(imp, &mut self.stats, now, packet, len)?;
            (len, tos) = apply_treatment(&treat, packet, tos);
        }
        let (start, to) = match self.fabric {
            None => (HEADROOM, t.dest),
            Some(relay) => {
                RelayHeader { addr: t.dest }.emit(&mut self.tx_buf[..HEADROOM]);
                (0, relay)
            }
        };
        let out = Outgoing {
            socket: t.entropy as usize % self.sockets.len(),
            to,
            tos,
            start,
            end: HEADROOM + len,
            copies: treat.copies,
        };
        if let Some(at) = treat.hold_until {
            debug_assert_eq!(at, now + self.fault_delay_ns);
            self.held.push_back(Held {
                at,
                out,
                bytes: self.tx_buf[start..out.end].to_vec(),
            });
            return None;
        }
        Some(out)
    }
}

/// Fault injection's verdict on a packet of `len` bytes whose headers are
/// `head`, counted in `stats`: `None` when it is dropped. A trim is only
/// asked of a packet longer than a trimmed one.
fn judge(
    imp: &mut Impairer,
    stats: &mut DriverStats,
    now: u64,
    head: &[u8],
    len: usize,
) -> Option<Treatment> {
    let mut treat = match imp.decide(now, PacketClass::of(head)) {
        Verdict::Drop => {
            stats.fault_dropped += 1;
            return None;
        }
        Verdict::Send(treat) => treat,
    };
    treat.trim &= len > TRIMMED_LEN;
    stats.fault_trimmed += u64::from(treat.trim);
    stats.fault_ce_marked += u64::from(treat.mark_ce);
    stats.fault_duplicated += u64::from(treat.copies > 1);
    stats.fault_delayed += u64::from(treat.hold_until.is_some());
    Some(treat)
}

/// Trim `packet` (whole, contiguous) and mark its TOS byte `tos` as
/// `treat` says: its new length and TOS.
fn apply_treatment(treat: &Treatment, packet: &mut [u8], tos: u8) -> (usize, u8) {
    let (len, dscp) = if treat.trim {
        (ack_trailer::trim(packet, TRIMMED_LEN), ip::DSCP_TRIMMED)
    } else {
        (packet.len(), ip::dscp(tos))
    };
    let ecn = if treat.mark_ce {
        Ecn::Ce
    } else {
        Ecn::from_tos(tos)
    };
    (len, ip::tos(dscp, ecn))
}

/// Fault injection over a batch taken from the engine, as `prepare` does
/// for a datagram sent alone: dropped packets leave `gso.pending`, held
/// ones go to `held` (copied whole), duplicated ones appear twice in a
/// row; a packet trimmed or held first has its payload copied behind its
/// headers.
fn impair_batch(
    imp: &mut Impairer,
    gso: &mut Gso,
    tx_buf: &mut [u8],
    engine: &Engine,
    stats: &mut DriverStats,
    held: &mut VecDeque<Held>,
    now: u64,
) {
    let mut taken = std::mem::take(&mut gso.impaired);
    std::mem::swap(&mut taken, &mut gso.pending);
    for mut p in taken.drain(..) {
        let start = p.slot + HEADROOM;
        let head = &tx_buf[start..start + p.head_len()];
        let Some(treat) = judge(imp, stats, now, head, p.len) else {
            continue;
        };
        if treat.trim || treat.hold_until.is_some() {
            if let Some(payload) = p.payload.and_then(|r| engine.payload(r)) {
                let at = start + p.head_len();
                copy_bytes(&mut tx_buf[at..at + payload.len()], payload);
            }
            p.payload = None;
        }
        let packet = &mut tx_buf[start..start + p.len];
        (p.len, p.tos) = apply_treatment(&treat, packet, p.tos);
        if let Some(at) = treat.hold_until {
            held.push_back(Held {
                at,
                out: Outgoing {
                    socket: p.socket,
                    to: p.to,
                    tos: p.tos,
                    start: 0,
                    end: p.len,
                    copies: treat.copies,
                },
                bytes: tx_buf[start..start + p.len].to_vec(),
            });
            continue;
        }
        for _ in 0..treat.copies {
            gso.pending.push(p);
        }
    }
    gso.impaired = taken;
}

/// Whether a datagram of `len` bytes, just taken while `looks` remain
/// after a gap (see `Endpoint::discard_stale`), is thrown away as possibly
/// stale; counted in `stats`.
fn take_stale(looks: &mut usize, stats: &mut DriverStats, len: usize) -> bool {
    if *looks == 0 || len < STALE_GUARDED_BYTES {
        return false;
    }
    *looks -= 1;
    stats.stale_discarded += 1;
    true
}

/// The engine's clock: nanoseconds since `epoch_ns` (the endpoint's bind).
fn engine_time(epoch_ns: u64) -> u64 {
    sys::monotonic_ns().saturating_sub(epoch_ns)
}

/// Hand one received datagram to the engine (unwrapping the relay header
/// in fabric mode), counting CE marks and trims.
fn deliver(
    engine: &mut Engine,
    stats: &mut DriverStats,
    fabric: Option<SocketAddr>,
    now: u64,
    source: SocketAddr,
    tos: u8,
    bytes: &[u8],
) {
    let (from, data) = match fabric {
        None => (source, bytes),
        Some(relay) => match RelayHeader::parse(bytes) {
            Ok(h) if source == relay => (h.addr, &bytes[HEADROOM..]),
            _ => {
                stats.fabric_dropped += 1;
                return;
            }
        },
    };
    // An empty datagram is a same-host peer's doorbell: it woke us, and
    // its datagrams wait in our lanes.
    if data.is_empty() {
        stats.doorbells_received += 1;
        return;
    }
    count_arrival(stats, tos);
    engine.handle_datagram(now, from, tos, data);
}

/// The driver's count of what the IP header says of an arrival.
fn count_arrival(stats: &mut DriverStats, tos: u8) {
    if Ecn::from_tos(tos) == Ecn::Ce {
        stats.ecn_ce_received += 1;
    }
    if ip::trim_of(tos).is_some() {
        stats.trimmed_received += 1;
    }
}

/// What a receive into a landing came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Landed {
    /// The packet predicted: its payload is in place and handled.
    InPlace,
    /// Another datagram, back together in slot 0 for the usual path.
    Restored,
    /// Could not be put back together: dropped (see `landing_lost`).
    Lost,
}

impl Drop for Endpoint {
    /// Nothing the endpoint owes its peers is left behind: ACKs held for a
    /// reply that never came, sends a burst left waiting and datagrams fault
    /// injection holds back go out. And a peer whose last packet arrived may
    /// not have its ACK (lost on the way). So the endpoint asks every peer with
    /// a receive context open to close it (`Engine::ask_senders_to_close`: at
    /// once, then again every minimum timeout, `CLOSE_ASKS` times in all): a
    /// busy peer answers with an ACK request and gets its ACKs, an idle one
    /// closes, and once no peer has a context open with us nobody will resend.
    /// A peer that does not answer, or whose context still receives a message
    /// (it would refuse), is covered by waiting: until nothing has arrived (or
    /// been asked) for twice as long as that peer may wait before it resends
    /// (`Engine::peer_resend_wait_ns`: after a long transfer its timeout is
    /// well above the minimum; a peer we never sent to counts the minimum, for
    /// want of a round trip to go by), twice the minimum retransmission timeout
    /// at least, and twice longer after each round of resends that shows our
    /// answer lost again (the peer then waits twice as long), the endpoint
    /// keeps answering, so that peer's retransmission is acknowledged instead
    /// of meeting a closed port and failing its send; `LINGER_MAX_NS` in all at
    /// most. Likewise, while a peer has not acknowledged all we sent it (at
    /// most twice the largest retransmission timeout), the endpoint keeps
    /// resending: an application that closes right after an inject has no
    /// completion to wait for, and a lost packet of it would otherwise be lost
    /// for good.
    fn drop(&mut self) {
        // What the close sends leaves copied: once it returns, the
        // application may reuse memory a queued datagram would refer to.
        self.splicer = None;
        let start = self.now();
        self.flush(start);
        let resend_wait = self.engine.peer_resend_wait_ns();
        let mut duplicates = self.engine.stats().duplicates;
        // Rounds of resends seen, and when the latest began: the packets
        // of one round (a window resent at once) come together.
        let (mut rounds, mut round_at) = (0, 0);
        // Ask at once, however long ago the last arrival was: a sender
        // with a longer timeout than our quiet wait may still resend. The
        // ask counts as an arrival, so its answers have a quiet period to
        // come in. Asked again every minimum timeout, a few times at most:
        // a peer that stays busy answers every ask, and each answer would
        // put the quiet period off again.
        let mut asks = 0;
        let mut asked_at = 0;
        if self.ask_senders_on_close && self.engine.ask_senders_to_close() > 0 {
            asks = 1;
            asked_at = start;
        }
        loop {
            let now = self.now();
            let seen = self.engine.stats().duplicates;
            if seen != duplicates {
                duplicates = seen;
                if rounds == 0 || now.saturating_sub(round_at) >= resend_wait {
                    rounds += 1;
                    round_at = now;
                }
            }
            let quiet_ns = linger_quiet_ns(self.linger_quiet_ns, resend_wait, rounds);
            let heard_at = self.last_arrival_ns.max(asked_at);
            let quiet = now.saturating_sub(heard_at) >= quiet_ns;
            // Once every sender closed its context with us (the handshake
            // says it has every ACK it waits for), nobody will resend.
            let answering = heard_at != 0
                && !quiet
                && self.engine.receiving_from_peers()
                && now - start < LINGER_MAX_NS;
            let owing = self.engine.owes_peers() && now - start < self.linger_owed_ns;
            if !answering && !owing {
                break;
            }
            if answering
                && asks > 0
                && asks < CLOSE_ASKS
                && now - asked_at >= self.linger_quiet_ns / 2
            {
                self.engine.ask_senders_to_close();
                asks += 1;
                asked_at = now;
            }
            // Nobody takes completions any more; left queued they would
            // count as progress and keep the loop from sleeping.
            while self.engine.poll_completion().is_some() {}
            if !self.progress() {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
        for mut h in std::mem::take(&mut self.held) {
            let now = self.now();
            let mut via = SendSockets::new(&self.sockets, &mut self.connected, now);
            emit(
                &mut via,
                &mut self.rings,
                &mut self.stats,
                &mut h.out,
                &h.bytes,
            );
        }
        // The mailbox goes while the socket is still bound: another
        // endpoint's sweep takes a mailbox whose address nobody holds for
        // abandoned (host_ring::remove_abandoned_mailboxes).
        self.rings = None;
    }
}

/// How many times a closing endpoint asks its senders to close (a lost
/// request or answer gets another chance; a peer that stays busy answers
/// each one).
const CLOSE_ASKS: u32 = 3;

/// The shortest time a peer with `config`'s timers keeps resending a packet
/// before it gives up: each of its `max_retries` timeouts at least the
/// minimum timeout, doubled each time, up to the maximum.
fn give_up_ns(config: &Config) -> u64 {
    let (min, max) = (config.rto_min_us * 1000, config.rto_max_us * 1000);
    let mut rto = min;
    let mut total: u64 = 0;
    for _ in 0..config.max_retries {
        total = total.saturating_add(rto.min(max));
        rto = rto.saturating_mul(2);
    }
    total
}

/// How long a closing endpoint waits for silence before it stops answering:
/// twice as long as a peer may wait before it resends (`resend_wait`), and
/// twice more for each round of resends of packets we had (`rounds`: our
/// answer was lost again, and the peer backs off, doubling its wait); at
/// least `floor`, at most [`LINGER_MAX_NS`].
fn linger_quiet_ns(floor: u64, resend_wait: u64, rounds: u32) -> u64 {
    let mut quiet = resend_wait.saturating_mul(2).max(floor);
    for _ in 0..rounds {
        if quiet >= LINGER_MAX_NS {
            break;
        }
        quiet = quiet.saturating_mul(2);
    }
    quiet.min(LINGER_MAX_NS)
}

/// The sockets a datagram may leave from: the entropy sockets, and for
/// requests that would leave from socket 0 the one connected to their
/// peer.
struct SendSockets<'a> {
    pool: &'a [UdpSocket],
    connected: &'a mut ConnectedSockets,
    now: u64,
}

impl<'a> SendSockets<'a> {
    fn new(pool: &'a [UdpSocket], connected: &'a mut ConnectedSockets, now: u64) -> Self {
        SendSockets {
            pool,
            connected,
            now,
        }
    }

    /// The socket and destination for a datagram that would leave from
    /// entropy socket `socket` to `to`; `any_port` when it names its
    /// sender's port ([`names_its_sender`]), else it keeps its socket.
    fn route(&mut self, socket: usize, to: SocketAddr, any_port: bool) -> (&UdpSocket, sys::Dest) {
        if socket == 0 && any_port {
            if let Some(s) = self.connected.socket_for(to, self.now) {
                return (s, sys::Dest::Connected(to));
            }
        }
        (&self.pool[socket], sys::Dest::Named(to))
    }
}

/// Whether a packet names its sender's canonical port (the SES request
/// header's `initiator`), so that it may leave from any of its sockets.
/// SES responses ride in request packets too but have no such field:
/// their receiver knows the sender by the source address.
fn names_its_sender(prologue: Prologue) -> bool {
    prologue.ptype.is_request() && prologue.next == crate::wire::NextHeader::SesRequest
}

/// Send the remaining copies of `out` (bytes in `data`); false when the
/// socket is full and the rest must be retried.
fn emit(
    via: &mut SendSockets<'_>,
    rings: &mut Option<HostRings>,
    stats: &mut DriverStats,
    out: &mut Outgoing,
    data: &[u8],
) -> bool {
    while out.copies > 0 {
        let whole = (data, &[][..], &[][..]);
        match send_datagram(via, rings, None, out.socket, out.to, out.tos, whole) {
            Ok(Carrier::Udp) => stats.sent[out.socket] += 1,
            Ok(Carrier::Ring) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            // Any other error (peer gone, unreachable) is a lost datagram;
            // retransmission or the peer timeout deals with it.
            Err(_) => {}
        }
        out.copies -= 1;
    }
    true
}

/// Tell the engine which peers' same-host lanes are full, so it holds
/// their data (and no more of it piles up in the backlog), and which have
/// room again.
fn hold_ring_backlog(rings: &mut Option<HostRings>, engine: &mut Engine) {
    if let Some(r) = rings.as_mut() {
        while let Some((to, held)) = r.take_backlog_change() {
            engine.hold_data_for(to, held);
        }
    }
}

/// How a datagram left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Carrier {
    Udp,
    Ring,
}

/// Send the datagram made of `head`, `payload` and `tail` to `to`: into
/// our lane of its mailbox when it is on our rings (ringing its doorbell
/// when it sleeps; for a full lane it waits in the rings' backlog), else
/// over UDP from socket `socket`, the payload spliced when `splicer` takes
/// it. Only a payload in message memory may be offered to `splicer`: it
/// must stay unchanged until the peer acknowledges the datagram.
fn send_datagram(
    via: &mut SendSockets<'_>,
    rings: &mut Option<HostRings>,
    splicer: Option<&mut Splicer>,
    socket: usize,
    to: SocketAddr,
    tos: u8,
    (head, payload, tail): (&[u8], &[u8], &[u8]),
) -> std::io::Result<Carrier> {
    let (parts, n) = datagram_parts(head, payload, tail);
    if let Some(r) = rings.as_mut() {
        match r.push(to, tos, &parts[..n]) {
            Pushed::NoLane => {}
            Pushed::Written => return Ok(Carrier::Ring),
            Pushed::Doorbell => {
                // Rung again at the next flush when it cannot go now (a
                // full buffer): the lane is no longer empty, so the next
                // datagram would not ring, and the sleeper might have no
                // timer to wake it.
                if sys::send_with_tos(&via.pool[0], to, sys::DEFAULT_TOS, &[]).is_err() {
                    r.owe_doorbell(to);
                }
                return Ok(Carrier::Ring);
            }
            // Waits for a full lane (held up alone, see `hold_ring_backlog`).
            Pushed::Queued => return Ok(Carrier::Ring),
        }
    }
    // Resends leave copied: a message fails, handing its memory back,
    // only when resends went unanswered for as long as the peer's timers
    // allow, so a spliced datagram read after that waited that long in
    // the receiver's socket, which the receiver then throws away.
    let prologue = Prologue::parse(head).ok();
    let first_send = prologue.is_some_and(|p| p.flags & prologue_flags::RETX == 0);
    let splicer = splicer.filter(|s| first_send && s.takes(payload, tail.len()));
    // A kernel that may take a splice in parts needs an unconnected socket
    // to refuse what is left of a datagram it dropped (io/splice.rs).
    let any_port = prologue.is_some_and(names_its_sender)
        && splicer.as_ref().is_none_or(|s| s.splices_whole());
    let (socket, dest) = via.route(socket, to, any_port);
    let sent = match splicer {
        // A stale ICMP error fails the splice's first system call, which
        // it makes once more itself.
        Some(s) => s.send(socket, dest, tos, head, payload, tail),
        None => once_more_if_connected(dest, || sys::send_parts(socket, dest, tos, &parts[..n])),
    };
    sent.map(|()| Carrier::Udp)
}

/// `send()`, and once more if it failed on a socket connected to its
/// peer: such a socket reports an ICMP error about an earlier datagram
/// (the peer's port was closed, a smaller path MTU) by failing the next
/// send, which then leaves nothing. Only a second failure is this
/// datagram's own. (A path MTU that really fell below the datagram fails
/// the second send too.)
pub(super) fn once_more_if_connected(
    dest: sys::Dest,
    mut send: impl FnMut() -> std::io::Result<()>,
) -> std::io::Result<()> {
    match send() {
        Err(e) if matches!(dest, sys::Dest::Connected(_)) && e.kind() != ErrorKind::WouldBlock => {
            send()
        }
        sent => sent,
    }
}

/// Fill `gso.order` with the indices of `gso.pending` grouped by socket
/// (counting sort, each group in the engine's order). The socket of the
/// batch's last packet goes last, so that packet stays last: the engine
/// asks for an immediate ACK on the packet that empties its backlog or
/// fills the window, and the receiver should see nothing of the batch
/// after it (else the rest waits for a delayed ACK).
fn group_by_socket(gso: &mut Gso, sockets: usize) {
    let Some(last) = gso.pending.last().map(|p| p.socket) else {
        gso.order.clear();
        return;
    };
    // Group rank of a socket: the last packet's socket ranks last.
    let rank = |socket: usize| (socket + sockets - last - 1) % sockets;
    let starts = &mut gso.starts;
    starts.clear();
    starts.resize(sockets + 1, 0);
    for p in &gso.pending {
        starts[rank(p.socket) + 1] += 1;
    }
    for k in 1..starts.len() {
        starts[k] += starts[k - 1];
    }
    gso.order.clear();
    gso.order.resize(gso.pending.len(), 0);
    for (i, p) in gso.pending.iter().enumerate() {
        let r = rank(p.socket);
        gso.order[starts[r]] = i;
        starts[r] += 1;
    }
}

/// What sending one GSO batch touches, borrowed from the endpoint.
struct Batch<'a> {
    via: SendSockets<'a>,
    rings: &'a mut Option<HostRings>,
    engine: &'a Engine,
    tx_buf: &'a mut Vec<u8>,
    stats: &'a mut DriverStats,
    stalled: &'a mut VecDeque<Outgoing>,
    splicer: &'a mut Option<Splicer>,
    /// Cleared when the kernel refuses segmented sends for good.
    gso_on: bool,
}

impl Batch<'_> {
    /// Send `pending` in `order`, runs of segments together; false when
    /// the socket filled up and the rest went to `stalled`.
    fn send(&mut self, pending: &[Pending], order: &[usize]) -> bool {
        let mut k = 0;
        while k < order.len() {
            let first = &pending[order[k]];
            let segment = first.len;
            let mut end = k + 1;
            let mut bytes = segment;
            let mut pieces = first.pieces();
            // Same socket, destination and TOS; every datagram but the last
            // exactly `segment` bytes (an ACK trailer counts, so a reply
            // whose first packet carries one still leaves in one call);
            // within the kernel's limits.
            while end < order.len()
                && end - k < sys::MAX_SEGMENTS
                && pending[order[end - 1]].len == segment
            {
                let p = &pending[order[end]];
                if p.socket != first.socket
                    || p.to != first.to
                    || p.tos != first.tos
                    || p.len > segment
                    || bytes + p.len > sys::MAX_SEGMENTED_BYTES
                    || pieces + p.pieces() > sys::MAX_SEGMENT_PARTS
                {
                    break;
                }
                bytes += p.len;
                pieces += p.pieces();
                end += 1;
            }
            let run = &order[k..end];
            // A peer on our rings takes datagrams one by one.
            let by_ring = self.rings.as_mut().is_some_and(|r| r.has_lane(first.to));
            let worth = run.len() >= GSO_MIN_RUN || (run.len() == 2 && pending[run[1]].request);
            let out = if worth && self.gso_on && !by_ring {
                self.send_run(pending, run)
            } else {
                self.send_one_by_one(pending, run)
            };
            if let Err(at) = out {
                self.stall(pending, &order[k + at..]);
                return false;
            }
            k = end;
        }
        true
    }

    /// One segmented `sendmsg` for `run`; on a refusal other than EAGAIN,
    /// the datagrams leave one by one (and GSO stays off when the kernel
    /// cannot segment at all). `Err(i)`: `run[i..]` did not leave.
    fn send_run(&mut self, pending: &[Pending], run: &[usize]) -> std::result::Result<(), usize> {
        let first = &pending[run[0]];
        let Ok(segment) = u16::try_from(first.len) else {
            return self.send_one_by_one(pending, run);
        };
        let mut parts: [&[u8]; sys::MAX_SEGMENT_PARTS] = [&[]; sys::MAX_SEGMENT_PARTS];
        let mut count = 0;
        // `send` keeps runs within this; never leave a piece out.
        if run.iter().map(|&i| pending[i].pieces()).sum::<usize>() > parts.len() {
            return self.send_one_by_one(pending, run);
        }
        for &i in run {
            let (head, payload, tail) = pending_pieces(self.tx_buf, self.engine, &pending[i]);
            let (pieces, n) = datagram_parts(head, payload, tail);
            parts[count..count + n].copy_from_slice(&pieces[..n]);
            count += n;
        }
        let any_port = run.iter().all(|&i| pending[i].any_port);
        let (socket, dest) = self.via.route(first.socket, first.to, any_port);
        let parts = &parts[..count];
        match once_more_if_connected(dest, || {
            sys::send_segments(socket, dest, first.tos, segment, parts)
        }) {
            Ok(()) => {
                let n = run.len() as u64;
                self.stats.sent[first.socket] += n;
                self.stats.gso_sends += 1;
                self.stats.gso_segments += n;
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => Err(0),
            Err(e) => {
                self.stats.gso_fallbacks += 1;
                if cannot_segment(&e) {
                    self.gso_on = false;
                }
                self.send_one_by_one(pending, run)
            }
        }
    }

    /// Each datagram of `run` with its own `sendmsg`. `Err(i)`: EAGAIN at
    /// `run[i]`.
    fn send_one_by_one(
        &mut self,
        pending: &[Pending],
        run: &[usize],
    ) -> std::result::Result<(), usize> {
        for (k, &i) in run.iter().enumerate() {
            let p = &pending[i];
            let pieces = pending_pieces(self.tx_buf, self.engine, p);
            let splicer = self.splicer.as_mut();
            match send_datagram(
                &mut self.via,
                self.rings,
                splicer,
                p.socket,
                p.to,
                p.tos,
                pieces,
            ) {
                Ok(Carrier::Udp) => self.stats.sent[p.socket] += 1,
                Ok(Carrier::Ring) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Err(k),
                // Lost like any datagram the network drops (see `emit`).
                Err(_) => {}
            }
        }
        Ok(())
    }

    /// Queue `rest` (in send order) for the next flush: each payload is
    /// copied behind its headers, so the slot holds the whole datagram.
    fn stall(&mut self, pending: &[Pending], rest: &[usize]) {
        for &i in rest {
            let p = &pending[i];
            let start = p.slot + HEADROOM;
            if let Some(payload) = p.payload.and_then(|r| self.engine.payload(r)) {
                let at = start + p.head_len();
                copy_bytes(&mut self.tx_buf[at..at + payload.len()], payload);
            }
            self.stalled.push_back(Outgoing {
                socket: p.socket,
                to: p.to,
                tos: p.tos,
                start,
                end: start + p.len,
                copies: 1,
            });
        }
    }
}

/// A pending packet's headers (in `tx_buf`), payload (in message memory;
/// empty when the headers slot holds it all) and what follows a gathered
/// payload (an ACK trailer, in `tx_buf`).
fn pending_pieces<'b>(
    tx_buf: &'b [u8],
    engine: &'b Engine,
    p: &Pending,
) -> (&'b [u8], &'b [u8], &'b [u8]) {
    let start = p.slot + HEADROOM;
    let head = &tx_buf[start..start + p.head_len()];
    let payload = p.payload.and_then(|r| engine.payload(r)).unwrap_or(&[]);
    let tail = &tx_buf[start + p.tail_start()..start + p.len];
    (head, payload, tail)
}

/// The pieces of one datagram for a gathering send, and how many there
/// are: the headers, then the payload and the ACK trailer when not empty.
fn datagram_parts<'a>(
    head: &'a [u8],
    payload: &'a [u8],
    tail: &'a [u8],
) -> ([&'a [u8]; sys::MAX_PARTS], usize) {
    let mut parts = [head; sys::MAX_PARTS];
    let mut n = 1;
    for piece in [payload, tail] {
        if !piece.is_empty() {
            parts[n] = piece;
            n += 1;
        }
    }
    (parts, n)
}

/// Errors with which the kernel refuses a segmented send it will never
/// accept on this socket (no checksum offload, segment over the path MTU,
/// no GSO support); nothing was sent.
fn cannot_segment(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::EIO | libc::EOPNOTSUPP | libc::ENOPROTOOPT | libc::EMSGSIZE)
    )
}

/// Receive-buffer bytes the kernel charges for one datagram of `mtu` bytes
/// (payload plus skb overhead, rounded the way loopback allocates).
fn kernel_cost(mtu: usize) -> usize {
    mtu + mtu / 4 + 1024
}

/// A UDP socket of `addr`'s family (IPv6 only for IPv6, so an IPv4 peer
/// never reaches it mapped), not yet bound.
fn udp_socket(addr: SocketAddr) -> std::io::Result<Socket> {
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let socket = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    Ok(socket)
}

/// SO_SNDBUF of `bytes`: root may exceed net.core.wmem_max, everyone else
/// gets the cap.
fn set_send_buffer(socket: &Socket, bytes: usize) {
    if force_buffer_size(socket, libc::SO_SNDBUFFORCE, bytes).is_err() {
        let _ = socket.set_send_buffer_size(bytes);
    }
}

fn open_socket(config: &Config, addr: SocketAddr) -> Result<UdpSocket> {
    let socket = udp_socket(addr)?;
    // Root may exceed net.core.rmem_max; everyone else gets the cap.
    if force_buffer_size(&socket, libc::SO_RCVBUFFORCE, config.sockbuf).is_err() {
        let _ = socket.set_recv_buffer_size(config.sockbuf);
    }
    set_send_buffer(&socket, config.sockbuf);
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    let socket: UdpSocket = socket.into();
    sys::enable_recv_tos(&socket, addr.is_ipv6())?;
    sys::set_default_tos(&socket, addr.is_ipv6())?;
    Ok(socket)
}

/// Socket 0 at `addr`, then `n - 1` pool sockets on the ports that follow
/// it. When one is taken the pool moves to another base (a port the kernel
/// just handed out as free), and after a few tries to whatever ports the
/// kernel gives: consecutive ports are tidy, not required.
fn bind_pool(config: &Config, addr: SocketAddr, n: usize) -> Result<Vec<UdpSocket>> {
    // No port named: the UET port when it is free, so peers that know only
    // our IP address reach us; any port otherwise (several endpoints on one
    // host).
    let first = if addr.port() == 0 {
        match open_socket(
            config,
            SocketAddr::new(addr.ip(), crate::wire::UET_UDP_PORT),
        ) {
            Ok(s) => s,
            Err(Error::Io(e)) if e.kind() == ErrorKind::AddrInUse => open_socket(config, addr)?,
            Err(e) => return Err(e),
        }
    } else {
        open_socket(config, addr)?
    };
    // Right after the endpoint's port, unless the application named it:
    // launchers that number ports give the next one to the next rank.
    let mut base = (addr.port() == 0)
        .then(|| first.local_addr().map(|a| a.port() as usize + 1))
        .transpose()?;
    let mut sockets = vec![first];
    for _ in 0..POOL_BIND_ATTEMPTS {
        let start = match base.take() {
            Some(start) => start,
            // Where the kernel picks: the probe goes before the binding.
            None => open_socket(config, SocketAddr::new(addr.ip(), 0))?
                .local_addr()?
                .port() as usize,
        };
        if bind_consecutive(config, addr, start, n - 1, &mut sockets)? {
            return Ok(sockets);
        }
        sockets.truncate(1);
    }
    while sockets.len() < n {
        sockets.push(open_socket(config, SocketAddr::new(addr.ip(), 0))?);
    }
    Ok(sockets)
}

/// Bind `count` sockets on ports `base..` onto `sockets`; false when a port
/// is taken or out of range.
fn bind_consecutive(
    config: &Config,
    addr: SocketAddr,
    base: usize,
    count: usize,
    sockets: &mut Vec<UdpSocket>,
) -> Result<bool> {
    for port in base..base + count {
        let Ok(port) = u16::try_from(port) else {
            return Ok(false);
        };
        match open_socket(config, SocketAddr::new(addr.ip(), port)) {
            Ok(s) => sockets.push(s),
            Err(Error::Io(e)) if e.kind() == ErrorKind::AddrInUse => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// SO_RCVBUFFORCE / SO_SNDBUFFORCE: like SO_RCVBUF / SO_SNDBUF but past the
/// sysctl cap; needs CAP_NET_ADMIN (socket2 has no wrapper).
fn force_buffer_size(socket: &Socket, option: libc::c_int, bytes: usize) -> std::io::Result<()> {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    sys::set_int_option(socket, libc::SOL_SOCKET, option, value)
}

/// Start PSNs and message IDs must differ across restarts of the same
/// address, so the seed mixes the address with the clock.
fn seed_from(local: SocketAddr) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    local.hash(&mut h);
    std::time::Instant::now().hash(&mut h);
    std::process::id().hash(&mut h);
    h.finish()
}
