//! The sans-IO engine of one endpoint.
//!
//! Inputs: application operations ([`Engine::post_send`], [`Engine::post_recv`],
//! [`Engine::cancel`]), datagrams ([`Engine::handle_datagram`]) and the clock
//! ([`Engine::handle_timeout`]); `now` is always an argument, in nanoseconds
//! from any fixed origin. Outputs: datagrams ([`Engine::poll_transmit`]),
//! completions ([`Engine::poll_completion`]) and the next deadline
//! ([`Engine::next_timeout`]). Randomness (start PSNs) comes from a seed.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod input;
mod matching;
mod output;
mod post;
mod rma;
mod timers;

use crate::ops::*;
use crate::pds::{Arrival, RxPdc, SlotKind, TxPdc};
use crate::ses::{Inbound, InboundState, MsgHeader, PostedQueues, TxMessage, Unexpected};
use crate::wire::prologue::flags as pflags;
use crate::wire::ses::flags as sflags;
use crate::wire::{
    AckRepr, Ecn, NextHeader, PacketType, Prologue, RequestRepr, SesOpcode, SesRequestRepr,
    SesResponseRepr,
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
/// Most outgoing messages per peer not yet fully acknowledged; keeps 16-bit
/// message IDs unambiguous.
const MAX_MSGS_PER_PEER: usize = 16384;
/// Headers in front of the payload of a data packet.
const DATA_HEADERS: usize = RequestRepr::LEN + SesRequestRepr::LEN;

/// Counters for diagnostics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub packets_sent: u64,
    pub packets_received: u64,
    pub retransmits: u64,
    pub duplicates: u64,
    pub acks_sent: u64,
    pub acks_received: u64,
    /// Datagrams dropped because they did not parse or failed a check.
    pub malformed: u64,
    /// Requests for a PDC we do not know (stale, spoofed).
    pub unknown_pdc: u64,
    pub out_of_window: u64,
    pub peers_failed: u64,
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
    messages: HashMap<u16, TxMessage>,
    next_msg_id: u16,
    /// Sequence number of the next incoming message to match.
    next_match_seq: u64,
    inbound: HashMap<u16, Inbound>,
    in_send_ring: bool,
    in_ack_queue: bool,
}

impl Peer {
    fn has_work(&self, window: usize) -> bool {
        !self.tx.retransmit.is_empty() || (!self.queue.is_empty() && self.tx.in_flight() < window)
    }
}

pub struct Engine {
    mtu: usize,
    window: usize,
    rto_min: u64,
    rto_max: u64,
    max_retries: u32,
    rng: SmallRng,
    peers: Vec<Peer>,
    peer_by_addr: HashMap<SocketAddr, usize>,
    tx_by_id: HashMap<u16, usize>,
    rx_by_id: HashMap<u16, usize>,
    next_pdc_id: u16,
    posted: PostedQueues,
    unexpected: VecDeque<Unexpected>,
    completions: VecDeque<Completion>,
    ack_queue: VecDeque<usize>,
    send_ring: VecDeque<usize>,
    /// Earliest delayed-ACK deadline (0 = none).
    ack_timer: u64,
    /// Sends posted and not yet retired, over all peers.
    sends_outstanding: usize,
    stats: Stats,
    /// Memory peers may access with RMA (none: every access is refused).
    regions: Option<std::sync::Arc<dyn MemoryRegions>>,
    /// Reads this endpoint initiated, by (peer, read request message ID).
    reads: HashMap<(usize, u16), rma::PendingRead>,
}

impl Engine {
    pub fn new(config: &Config, _local: SocketAddr, seed: u64) -> Engine {
        Engine {
            // An unresolved "auto" (0) means the caller did not pick: be safe.
            mtu: match config.mtu {
                0 => Config::ETHERNET_MTU,
                n => n.max(DATA_HEADERS + 64),
            },
            window: config.window.max(1),
            rto_min: config.rto_min_us * 1000,
            rto_max: config.rto_max_us.max(config.rto_min_us) * 1000,
            max_retries: config.max_retries,
            rng: SmallRng::seed_from_u64(seed),
            peers: Vec::new(),
            peer_by_addr: HashMap::new(),
            tx_by_id: HashMap::new(),
            rx_by_id: HashMap::new(),
            next_pdc_id: 1,
            posted: PostedQueues::default(),
            unexpected: VecDeque::new(),
            completions: VecDeque::new(),
            ack_queue: VecDeque::new(),
            send_ring: VecDeque::new(),
            ack_timer: 0,
            sends_outstanding: 0,
            stats: Stats::default(),
            regions: None,
            reads: HashMap::new(),
        }
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Largest payload carried by one packet.
    pub fn max_payload(&self) -> usize {
        self.mtu - DATA_HEADERS
    }

    /// Limit the window, e.g. to what the peer's socket buffer can absorb.
    pub fn set_window(&mut self, window: usize) {
        self.window = window.max(1);
    }

    fn alloc_pdc_id(&mut self) -> u16 {
        // Skip IDs in use by either direction; 0 is never used.
        loop {
            let id = self.next_pdc_id;
            self.next_pdc_id = self.next_pdc_id.wrapping_add(1).max(1);
            if !self.tx_by_id.contains_key(&id) && !self.rx_by_id.contains_key(&id) {
                return id;
            }
        }
    }

    fn peer_index(&mut self, addr: SocketAddr) -> usize {
        if let Some(&i) = self.peer_by_addr.get(&addr) {
            return i;
        }
        let i = self.peers.len();
        let id = self.alloc_pdc_id();
        let start = self.rng.gen();
        self.peers.push(Peer {
            addr,
            tx: TxPdc::new(id, start),
            rx: None,
            queue: VecDeque::new(),
            messages: HashMap::new(),
            next_msg_id: 0,
            next_match_seq: 0,
            inbound: HashMap::new(),
            in_send_ring: false,
            in_ack_queue: false,
        });
        self.tx_by_id.insert(id, i);
        self.peer_by_addr.insert(addr, i);
        i
    }

    fn mark_ready(&mut self, p: usize) {
        let peer = &mut self.peers[p];
        if !peer.in_send_ring && peer.has_work(self.window) {
            peer.in_send_ring = true;
            self.send_ring.push_back(p);
        }
    }

    fn queue_ack(&mut self, p: usize) {
        let peer = &mut self.peers[p];
        if !peer.in_ack_queue {
            peer.in_ack_queue = true;
            self.ack_queue.push_back(p);
        }
    }
}
