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

use crate::ops::*;
use crate::pds::{AckOutcome, Arrival, RxPdc, SlotKind, TxPdc};
use crate::ses::{Inbound, InboundState, MsgHeader, PostedQueues, TxMessage, Unexpected};
use crate::wire::prologue::flags as pflags;
use crate::wire::ses::flags as sflags;
use crate::wire::{
    AckRepr, NextHeader, PacketType, Prologue, RequestRepr, SesOpcode, SesRequestRepr,
    SesResponseRepr,
};
use crate::{Config, Error, Result};

/// A datagram the engine wrote into the caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub dest: SocketAddr,
    pub len: usize,
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
    Response { msg_id: u16, len: u32 },
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
    /// Reused by every ACK (no allocation per ACK).
    ack_scratch: AckOutcome,
    stats: Stats,
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
            ack_scratch: AckOutcome::default(),
            stats: Stats::default(),
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

    // ----- application operations -------------------------------------------------

    pub fn post_send(&mut self, _now: u64, op: SendOp) -> Result<()> {
        let len = op.payload.len();
        if len > Config::MAX_MSG_SIZE {
            return Err(Error::MessageTooLong {
                len,
                max: Config::MAX_MSG_SIZE,
            });
        }
        if self.sends_outstanding >= Config::QUEUE_DEPTH {
            return Err(Error::Again);
        }
        let p = self.peer_index(op.dest);
        if self.peers[p].messages.len() >= MAX_MSGS_PER_PEER {
            return Err(Error::Again);
        }
        self.sends_outstanding += 1;
        let mut payload = op.payload;
        let mut completed = !op.signal;
        if op.level == CompletionLevel::Inject {
            // The source buffer is free once this call returns.
            if let Payload::Borrowed(b) = &payload {
                let mut copy = vec![0u8; b.len()];
                b.read_at(0, &mut copy);
                payload = Payload::Owned(copy);
            }
            if op.signal {
                self.completions
                    .push_back(Completion::send(op.context, op.tag.is_some(), len));
            }
            completed = true;
        }
        let peer = &mut self.peers[p];
        let id = peer.next_msg_id;
        peer.next_msg_id = id.wrapping_add(1);
        peer.messages.insert(
            id,
            TxMessage {
                tagged: op.tag.is_some(),
                tag: op.tag.unwrap_or(0),
                cq_data: op.cq_data,
                payload,
                context: op.context,
                level: op.level,
                signal: op.signal,
                next_offset: 0,
                started: false,
                unacked_packets: 0,
                completed,
                delivered: false,
            },
        );
        peer.queue.push_back(TxItem::Message(id));
        self.mark_ready(p);
        Ok(())
    }

    pub fn post_recv(&mut self, _now: u64, op: RecvOp) -> Result<()> {
        let probe = op.probe;
        if probe.peek || probe.claim || probe.discard {
            return self.probe(op);
        }
        let found = self.unexpected.iter().position(|u| u.matches(&op));
        match found.and_then(|i| self.unexpected.remove(i)) {
            Some(u) => self.bind_receive(u.peer, u.msg_id, op),
            None if self.posted.len() >= Config::QUEUE_DEPTH => return Err(Error::Again),
            None => self.posted.push(op),
        }
        Ok(())
    }

    /// fi_trecvmsg with FI_PEEK / FI_CLAIM / FI_DISCARD.
    fn probe(&mut self, op: RecvOp) -> Result<()> {
        let ProbeFlags {
            peek,
            claim,
            discard,
        } = op.probe;
        if !op.tagged || (!peek && !claim) {
            return Err(Error::InvalidArgument(
                "FI_DISCARD needs FI_PEEK or FI_CLAIM",
            ));
        }
        let found = if peek {
            self.unexpected.iter().position(|u| u.matches(&op))
        } else {
            self.unexpected
                .iter()
                .position(|u| u.claimed == Some(op.context))
        };
        let Some(i) = found else {
            self.completions.push_back(Completion {
                kind: CompletionKind::Recv,
                context: op.context,
                tagged: true,
                len: 0,
                buf: 0,
                tag: op.tag,
                data: None,
                src: None,
                error: Some(CompletionError::NoMessage),
            });
            return Ok(());
        };
        let u = self.unexpected[i];
        let header = self.peers[u.peer].inbound.get(&u.msg_id).map(|m| m.header);
        let Some(header) = header else {
            // Cannot happen: an unexpected entry always has its inbound state.
            self.unexpected.remove(i);
            return Err(Error::InvalidArgument("stale unexpected message"));
        };
        if peek {
            self.completions.push_back(Completion {
                kind: CompletionKind::Recv,
                context: op.context,
                tagged: true,
                len: header.len as usize,
                buf: 0,
                tag: header.tag,
                data: header.cq_data,
                src: Some(u.src),
                error: None,
            });
            if discard {
                self.unexpected.remove(i);
                self.discard(u.peer, u.msg_id);
            } else if claim {
                self.unexpected[i].claimed = Some(op.context);
            }
            return Ok(());
        }
        // FI_CLAIM on a message reserved by an earlier FI_PEEK|FI_CLAIM.
        self.unexpected.remove(i);
        if discard {
            self.completions.push_back(Completion {
                kind: CompletionKind::Recv,
                context: op.context,
                tagged: true,
                len: 0,
                buf: 0,
                tag: header.tag,
                data: header.cq_data,
                src: Some(u.src),
                error: None,
            });
            self.discard(u.peer, u.msg_id);
        } else {
            self.bind_receive(u.peer, u.msg_id, op);
        }
        Ok(())
    }

    /// Cancel a posted receive. True when found; its FI_ECANCELED completion
    /// is queued.
    pub fn cancel(&mut self, context: Context) -> bool {
        let Some(recv) = self.posted.take_context(context) else {
            return false;
        };
        self.completions.push_back(Completion {
            kind: CompletionKind::Recv,
            context,
            tagged: recv.tagged,
            len: 0,
            buf: recv.buffer.base_addr(),
            tag: recv.tag,
            data: None,
            src: None,
            error: Some(CompletionError::Canceled),
        });
        true
    }

    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    pub fn has_completions(&self) -> bool {
        !self.completions.is_empty()
    }

    // ----- matching and delivery ----------------------------------------------------

    /// Attach a receive to an incoming message (unexpected or just matched).
    fn bind_receive(&mut self, p: usize, msg_id: u16, mut recv: RecvOp) {
        let Some(inb) = self.peers[p].inbound.get_mut(&msg_id) else {
            return;
        };
        if let InboundState::Staged(stage) | InboundState::Unexpected(stage) = &inb.state {
            // Parts not yet arrived are zero here and overwritten on arrival.
            if !stage.is_empty() {
                let n = stage.len().min(recv.buffer.len());
                recv.buffer.write_at(0, &stage[..n]);
            }
        }
        inb.state = InboundState::Posted(recv);
        self.finish_if_complete(p, msg_id);
    }

    fn discard(&mut self, p: usize, msg_id: u16) {
        if let Some(inb) = self.peers[p].inbound.get_mut(&msg_id) {
            inb.state = InboundState::Discard;
        }
        self.finish_if_complete(p, msg_id);
    }

    /// Match every message whose turn has come, in the sender's order.
    fn match_in_order(&mut self, p: usize) {
        loop {
            let peer = &mut self.peers[p];
            let seq = peer.next_match_seq;
            let id = seq as u16;
            let header = match peer.inbound.get(&id) {
                Some(inb) if inb.seq == seq && matches!(inb.state, InboundState::Staged(_)) => {
                    inb.header
                }
                _ => return,
            };
            peer.next_match_seq += 1;
            let src = peer.addr;
            match self.posted.take_match(src, header.tagged, header.tag) {
                Some(recv) => self.bind_receive(p, id, recv),
                None => {
                    if let Some(inb) = self.peers[p].inbound.get_mut(&id) {
                        if let InboundState::Staged(stage) = &mut inb.state {
                            inb.state = InboundState::Unexpected(std::mem::take(stage));
                        }
                    }
                    self.unexpected.push_back(Unexpected {
                        peer: p,
                        src,
                        msg_id: id,
                        tagged: header.tagged,
                        tag: header.tag,
                        claimed: None,
                    });
                }
            }
        }
    }

    /// Complete a matched (or discarded) message once all its bytes are in.
    fn finish_if_complete(&mut self, p: usize, msg_id: u16) {
        let peer = &mut self.peers[p];
        let done = peer.inbound.get(&msg_id).is_some_and(|m| {
            m.complete() && matches!(m.state, InboundState::Posted(_) | InboundState::Discard)
        });
        if !done {
            return;
        }
        let Some(inb) = peer.inbound.remove(&msg_id) else {
            return;
        };
        let h = inb.header;
        if let InboundState::Posted(recv) = inb.state {
            let cap = recv.buffer.len() as u64;
            let error = (h.len > cap).then(|| CompletionError::Truncated {
                overflow: (h.len - cap) as usize,
            });
            if recv.signal || error.is_some() {
                self.completions.push_back(Completion {
                    kind: CompletionKind::Recv,
                    context: recv.context,
                    tagged: h.tagged,
                    len: h.len.min(cap) as usize,
                    buf: recv.buffer.base_addr(),
                    tag: h.tag,
                    data: h.cq_data,
                    src: Some(peer.addr),
                    error,
                });
            }
        }
    }

    // ----- datagram input -------------------------------------------------------------

    pub fn handle_datagram(&mut self, now: u64, from: SocketAddr, data: &[u8]) {
        let Ok(prologue) = Prologue::parse(data) else {
            self.stats.malformed += 1;
            return;
        };
        match prologue.ptype {
            PacketType::RudRequest => self.on_request(now, from, data),
            PacketType::AckCc => self.on_ack(now, from, data),
            _ => self.stats.malformed += 1,
        }
    }

    fn on_request(&mut self, now: u64, from: SocketAddr, data: &[u8]) {
        let Ok(req) = RequestRepr::parse(data) else {
            self.stats.malformed += 1;
            return;
        };
        let body = &data[RequestRepr::LEN..];
        // Parse the SES header before the PSN is accepted, so a packet that
        // fails a check leaves no trace.
        let ses = match req.next {
            NextHeader::SesRequest => match SesRequestRepr::parse(body) {
                Ok(s) if self.request_is_sane(&s, body.len() - SesRequestRepr::LEN) => {
                    Ses::Request(s)
                }
                _ => {
                    self.stats.malformed += 1;
                    return;
                }
            },
            NextHeader::SesResponse => match SesResponseRepr::parse(body) {
                Ok(s) => Ses::Response(s),
                Err(_) => {
                    self.stats.malformed += 1;
                    return;
                }
            },
            NextHeader::None => {
                self.stats.malformed += 1;
                return;
            }
        };
        let p = self.peer_index(from);
        if !self.rx_context(p, &req) {
            self.stats.unknown_pdc += 1;
            return;
        }
        if let Ses::Request(s) = &ses {
            // Later packets must agree with the length the first one set.
            if let Some(inb) = self.peers[p].inbound.get(&s.message_id) {
                let payload_len = (body.len() - SesRequestRepr::LEN) as u64;
                if s.buffer_offset + payload_len > inb.header.len {
                    self.stats.malformed += 1;
                    return;
                }
            }
        }
        let Some(rx) = self.peers[p].rx.as_mut() else {
            return;
        };
        let arrival = rx.arrive(req.psn);
        rx.last_psn = req.psn;
        rx.last_was_retx = req.flags & pflags::RETX != 0;
        let payload_len = body.len().saturating_sub(match ses {
            Ses::Request(_) => SesRequestRepr::LEN,
            Ses::Response(_) => SesResponseRepr::LEN,
        });
        match arrival {
            Arrival::OutOfWindow => {
                self.stats.out_of_window += 1;
                return;
            }
            Arrival::Duplicate => {
                self.stats.duplicates += 1;
                self.queue_ack(p);
                return;
            }
            Arrival::New => {}
        }
        self.stats.packets_received += 1;
        rx.rcvd_bytes += payload_len as u64;
        rx.unacked_bytes += payload_len.max(1);
        let immediate = req.flags & (pflags::AR | pflags::SYN) != 0
            || rx.unacked_bytes >= ACK_COALESCE_BYTES
            || req.flags & pflags::RETX != 0;
        if immediate {
            self.queue_ack(p);
        } else if !rx.ack_pending {
            rx.ack_pending = true;
            rx.ack_due = now + ACK_DELAY_NS;
            if self.ack_timer == 0 || rx.ack_due < self.ack_timer {
                self.ack_timer = rx.ack_due;
            }
        }
        match ses {
            Ses::Request(s) => self.on_ses_request(p, &s, &body[SesRequestRepr::LEN..]),
            Ses::Response(r) => self.on_ses_response(p, &r),
        }
    }

    fn request_is_sane(&self, s: &SesRequestRepr, payload_len: usize) -> bool {
        matches!(s.opcode(), Ok(SesOpcode::Send | SesOpcode::TaggedSend))
            && s.buffer_offset
                .checked_add(payload_len as u64)
                .is_some_and(|end| end <= s.request_length as u64)
            && s.request_length as usize <= Config::MAX_MSG_SIZE
    }

    /// Find or establish the receive PDC a request belongs to. False when
    /// the packet belongs to no context we know.
    fn rx_context(&mut self, p: usize, req: &RequestRepr) -> bool {
        if req.syn() {
            let start = req.psn.wrapping_sub(req.dpdcid as u32);
            let same = self.peers[p]
                .rx
                .as_ref()
                .is_some_and(|rx| rx.remote_id == req.spdcid && rx.start_psn == start);
            if !same {
                // A new context from this peer (first contact or a restart):
                // whatever the old one was receiving is gone with it.
                let id = self.alloc_pdc_id();
                let window = self.window;
                let peer = &mut self.peers[p];
                if let Some(old) = peer.rx.take() {
                    self.rx_by_id.remove(&old.local_id);
                }
                peer.rx = Some(RxPdc::new(id, req.spdcid, start, window));
                peer.inbound.clear();
                peer.next_match_seq = 0;
                self.unexpected.retain(|u| u.peer != p);
                self.rx_by_id.insert(id, p);
            }
            return true;
        }
        self.rx_by_id.get(&req.dpdcid) == Some(&p)
            && self.peers[p]
                .rx
                .as_ref()
                .is_some_and(|rx| rx.remote_id == req.spdcid)
    }

    fn on_ses_request(&mut self, p: usize, s: &SesRequestRepr, payload: &[u8]) {
        let peer = &mut self.peers[p];
        let id = s.message_id;
        if !peer.inbound.contains_key(&id) {
            // Message IDs are consecutive per peer; the distance from the next
            // one to match recovers the full sequence number.
            let ahead = id.wrapping_sub(peer.next_match_seq as u16) as u64;
            peer.inbound.insert(
                id,
                Inbound {
                    seq: peer.next_match_seq + ahead,
                    header: MsgHeader {
                        tagged: s.opcode == SesOpcode::TaggedSend as u8,
                        tag: s.match_bits,
                        len: s.request_length as u64,
                        cq_data: None,
                        want_response: s.flags & sflags::DC != 0,
                    },
                    received: 0,
                    state: InboundState::Staged(Vec::new()),
                },
            );
        }
        let Some(inb) = peer.inbound.get_mut(&id) else {
            return;
        };
        if s.flags & sflags::SOM != 0 && s.flags & sflags::HD != 0 {
            inb.header.cq_data = Some(s.header_data);
        }
        inb.place(s.buffer_offset, payload);
        // Delivery complete (fi_cq(3)): the message was processed here once
        // all its bytes are in, whether placed in a posted buffer or held
        // as unexpected until the application posts one.
        if inb.complete() && inb.header.want_response {
            let len = inb.header.len.min(u32::MAX as u64) as u32;
            peer.queue.push_back(TxItem::Response { msg_id: id, len });
            self.mark_ready(p);
        }
        self.match_in_order(p);
        self.finish_if_complete(p, id);
    }

    fn on_ses_response(&mut self, p: usize, r: &SesResponseRepr) {
        let peer = &mut self.peers[p];
        let Some(m) = peer.messages.get_mut(&r.message_id) else {
            return;
        };
        if m.level != CompletionLevel::Delivery || m.delivered {
            return;
        }
        m.delivered = true;
        if !m.completed {
            m.completed = true;
            self.completions
                .push_back(Completion::send(m.context, m.tagged, m.len() as usize));
        }
        if Self::retire_message(peer, r.message_id) {
            self.sends_outstanding -= 1;
        }
    }

    fn on_ack(&mut self, now: u64, from: SocketAddr, data: &[u8]) {
        let Ok(ack) = AckRepr::parse(data) else {
            self.stats.malformed += 1;
            return;
        };
        let Some(&p) = self.tx_by_id.get(&ack.dpdcid) else {
            self.stats.unknown_pdc += 1;
            return;
        };
        if self.peers[p].addr != from || self.peers[p].tx.remote_id.is_some_and(|r| r != ack.spdcid)
        {
            self.stats.unknown_pdc += 1;
            return;
        }
        self.stats.acks_received += 1;
        let mut out = std::mem::take(&mut self.ack_scratch);
        self.peers[p].tx.on_ack_into(&ack, now, &mut out);
        for &kind in &out.newly_acked {
            if let SlotKind::Data { msg_id, .. } = kind {
                self.on_packet_acked(p, msg_id);
            }
        }
        self.ack_scratch = out;
        self.mark_ready(p);
    }

    fn on_packet_acked(&mut self, p: usize, msg_id: u16) {
        let peer = &mut self.peers[p];
        let Some(m) = peer.messages.get_mut(&msg_id) else {
            return;
        };
        m.unacked_packets = m.unacked_packets.saturating_sub(1);
        if !m.fully_acked() {
            return;
        }
        if m.level == CompletionLevel::Transmit && !m.completed {
            m.completed = true;
            self.completions
                .push_back(Completion::send(m.context, m.tagged, m.len() as usize));
        }
        if Self::retire_message(peer, msg_id) {
            self.sends_outstanding -= 1;
        }
    }

    /// Drop a message whose completion is out and whose packets are all
    /// acked; true when it was dropped.
    fn retire_message(peer: &mut Peer, msg_id: u16) -> bool {
        let done = peer.messages.get(&msg_id).is_some_and(|m| {
            m.fully_acked()
                && m.completed
                && (m.level != CompletionLevel::Delivery || m.delivered || !m.signal)
        });
        if done {
            peer.messages.remove(&msg_id);
        }
        done
    }

    // ----- timers -----------------------------------------------------------------------

    pub fn next_timeout(&self) -> Option<u64> {
        let rto = self
            .peers
            .iter()
            .map(|p| p.tx.rto_due)
            .filter(|&t| t != 0)
            .min();
        let ack = (self.ack_timer != 0).then_some(self.ack_timer);
        match (rto, ack) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn handle_timeout(&mut self, now: u64) {
        if self.ack_timer != 0 && self.ack_timer <= now {
            self.ack_timer = 0;
            for p in 0..self.peers.len() {
                let Some(rx) = self.peers[p].rx.as_ref() else {
                    continue;
                };
                if rx.ack_pending {
                    if rx.ack_due <= now {
                        self.queue_ack(p);
                    } else if self.ack_timer == 0 || rx.ack_due < self.ack_timer {
                        self.ack_timer = rx.ack_due;
                    }
                }
            }
        }
        for p in 0..self.peers.len() {
            let due = self.peers[p].tx.rto_due;
            if due == 0 || due > now {
                continue;
            }
            let worst = self.peers[p].tx.on_timeout(now, self.rto_min, self.rto_max);
            if worst > self.max_retries {
                self.fail_peer(p);
            } else {
                self.mark_ready(p);
            }
        }
    }

    /// The peer stopped answering: fail everything in flight to it and start
    /// a fresh delivery context for whatever is posted later.
    fn fail_peer(&mut self, p: usize) {
        self.stats.peers_failed += 1;
        let id = self.alloc_pdc_id();
        let start = self.rng.gen();
        let peer = &mut self.peers[p];
        peer.tx.abandon();
        self.tx_by_id.remove(&peer.tx.local_id);
        peer.tx = TxPdc::new(id, start);
        self.tx_by_id.insert(id, p);
        peer.queue.clear();
        let mut failed: Vec<(u16, TxMessage)> = peer.messages.drain().collect();
        self.sends_outstanding -= failed.len();
        failed.sort_by_key(|(id, _)| *id);
        for (_, m) in failed {
            if !m.completed {
                self.completions.push_back(Completion {
                    error: Some(CompletionError::PeerUnreachable),
                    ..Completion::send(m.context, m.tagged, 0)
                });
            }
        }
    }

    // ----- datagram output --------------------------------------------------------------

    /// Write the next datagram to send into `buf` (at least `mtu` bytes).
    /// Control (ACKs) goes ahead of data; peers with data take turns.
    pub fn poll_transmit(&mut self, now: u64, buf: &mut [u8]) -> Option<Transmit> {
        while let Some(p) = self.ack_queue.pop_front() {
            let peer = &mut self.peers[p];
            peer.in_ack_queue = false;
            if let Some(rx) = peer.rx.as_mut() {
                let ack = rx.build_ack();
                ack.emit(buf);
                self.stats.acks_sent += 1;
                return Some(Transmit {
                    dest: peer.addr,
                    len: AckRepr::LEN,
                });
            }
        }
        // Each ready peer gets at most one turn per call, so a peer that
        // cannot send after all does not spin here.
        for _ in 0..self.send_ring.len() {
            let Some(p) = self.send_ring.pop_front() else {
                break;
            };
            self.peers[p].in_send_ring = false;
            let sent = self.next_packet(p, now, buf);
            self.mark_ready(p);
            if sent.is_some() {
                return sent;
            }
        }
        None
    }

    fn next_packet(&mut self, p: usize, now: u64, buf: &mut [u8]) -> Option<Transmit> {
        let max_payload = self.max_payload();
        let window = self.window;
        let rto = self.peers[p].tx.rto(self.rto_min, self.rto_max, 0);
        let peer = &mut self.peers[p];
        // Retransmissions first.
        while let Some(psn) = peer.tx.retransmit.pop_front() {
            let Some(slot) = peer.tx.resend(psn, now) else {
                continue;
            };
            self.stats.retransmits += 1;
            self.stats.packets_sent += 1;
            let len = build_packet(peer, psn, slot.kind, pflags::RETX | pflags::AR, buf);
            return Some(Transmit {
                dest: peer.addr,
                len,
            });
        }
        if peer.tx.in_flight() >= window {
            return None;
        }
        let (kind, last_of_item) = match *peer.queue.front()? {
            TxItem::Response { msg_id, len } => (SlotKind::Response { msg_id, len }, true),
            TxItem::Message(id) => {
                let Some(m) = peer.messages.get_mut(&id) else {
                    peer.queue.pop_front();
                    return None;
                };
                let offset = m.next_offset;
                let len = (m.len() - offset).min(max_payload as u64);
                m.next_offset += len;
                m.started = true;
                m.unacked_packets += 1;
                (
                    SlotKind::Data {
                        msg_id: id,
                        offset,
                        len: len as u32,
                    },
                    m.fully_sent(),
                )
            }
        };
        if last_of_item {
            peer.queue.pop_front();
        }
        let psn = peer.tx.push(kind, now, rto);
        // Ask for an immediate ACK when the backlog empties or the window fills.
        let ar = peer.queue.is_empty() || peer.tx.in_flight() >= window;
        let len = build_packet(peer, psn, kind, if ar { pflags::AR } else { 0 }, buf);
        self.stats.packets_sent += 1;
        Some(Transmit {
            dest: peer.addr,
            len,
        })
    }
}

enum Ses {
    Request(SesRequestRepr),
    Response(SesResponseRepr),
}

/// Serialise the packet a PSN carries (first send or retransmission).
fn build_packet(peer: &Peer, psn: u32, kind: SlotKind, flags: u8, buf: &mut [u8]) -> usize {
    let (dpdcid, syn) = match peer.tx.remote_id {
        Some(id) => (id, 0),
        // Until the first ACK names the receiver's context, SYN carries the
        // offset from the start PSN. The window keeps it under 4096.
        None => (peer.tx.syn_offset(psn).unwrap_or(0), pflags::SYN),
    };
    let next = match kind {
        SlotKind::Data { .. } => NextHeader::SesRequest,
        SlotKind::Response { .. } => NextHeader::SesResponse,
    };
    RequestRepr {
        ptype: PacketType::RudRequest,
        next,
        flags: flags | syn,
        clear_psn_offset: 0,
        psn,
        spdcid: peer.tx.local_id,
        dpdcid,
    }
    .emit(buf);
    let body = &mut buf[RequestRepr::LEN..];
    match kind {
        SlotKind::Data {
            msg_id,
            offset,
            len,
        } => {
            let Some(m) = peer.messages.get(&msg_id) else {
                // The message was failed or retired; send an empty shell so
                // the PSN is still consumed at the receiver.
                return RequestRepr::LEN;
            };
            let som = offset == 0;
            let eom = offset + len as u64 >= m.len();
            let mut f = 0;
            if som {
                f |= sflags::SOM;
            }
            if eom {
                f |= sflags::EOM;
            }
            if som && m.cq_data.is_some() {
                f |= sflags::HD;
            }
            if m.level == CompletionLevel::Delivery && m.signal {
                f |= sflags::DC;
            }
            let header_data = match (som, m.cq_data) {
                (true, Some(d)) => d,
                _ => ((len as u64 & 0x3fff) << 32) | (offset & 0xffff_ffff),
            };
            SesRequestRepr {
                opcode: if m.tagged {
                    SesOpcode::TaggedSend as u8
                } else {
                    SesOpcode::Send as u8
                },
                flags: f,
                message_id: msg_id,
                buffer_offset: offset,
                match_bits: m.tag,
                header_data,
                request_length: m.len() as u32,
                ..SesRequestRepr::default()
            }
            .emit(body);
            let start = SesRequestRepr::LEN;
            m.payload
                .read_at(offset as usize, &mut body[start..start + len as usize]);
            DATA_HEADERS + len as usize
        }
        SlotKind::Response { msg_id, len } => {
            SesResponseRepr {
                opcode: SesOpcode::Response as u8,
                return_code: 0,
                message_id: msg_id,
                job_id: 0,
                modified_length: len,
            }
            .emit(body);
            RequestRepr::LEN + SesResponseRepr::LEN
        }
    }
}
