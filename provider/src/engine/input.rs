//! Datagram input: requests, SES payload and responses, ACKs.

use std::collections::hash_map::Entry;

use super::*;
use crate::ses::{RendezvousRx, RmaTx};
use crate::wire::{ack_trailer, RendezvousRepr};

impl Engine {
    // ----- datagram input -------------------------------------------------------------

    /// One arriving datagram: its source, the IP TOS byte it arrived with
    /// (ECN codepoint and DSCP; 0 when the driver cannot read it) and its
    /// bytes.
    pub fn handle_datagram(&mut self, now: u64, from: SocketAddr, tos: u8, data: &[u8]) {
        self.rdv.datagram_arrived();
        let Ok(prologue) = Prologue::parse(data) else {
            self.stats.malformed += 1;
            return;
        };
        match prologue.ptype {
            PacketType::RudRequest | PacketType::RodRequest
                if prologue.flags & ack_trailer::FLAG != 0 =>
            {
                self.on_request_with_ack(now, from, tos, data)
            }
            PacketType::RudRequest | PacketType::RodRequest => {
                self.on_request(now, from, tos, data, None)
            }
            PacketType::AckCc => self.on_ack(now, from, data),
            PacketType::Nack => self.on_nack(now, from, data),
            PacketType::Control => self.on_control(now, from, data),
            _ => self.stats.malformed += 1,
        }
    }

    /// A request carrying an ACK for us at its end (`wire::ack_trailer`):
    /// the request, then the ACK, as if it had followed in a datagram of
    /// its own from the sender's canonical address (a sprayed request
    /// comes from another of its ports).
    fn on_request_with_ack(&mut self, now: u64, from: SocketAddr, tos: u8, data: &[u8]) {
        let trimmed = crate::wire::ip::trim_of(tos).is_some();
        let Some((request, ack)) = ack_trailer::split(data, trimmed) else {
            self.stats.malformed += 1;
            return;
        };
        self.on_request(now, from, tos, request, None);
        let Some(ack) = ack else { return };
        let from = request_origin(from, request);
        match <[u8; AckRepr::LEN]>::try_from(ack) {
            Ok(bytes) if self.trailer_acks_deferred && !self.completes_signaled_send(&bytes) => {
                self.note_trailer_drain(from, &bytes);
                self.trailer_acks.push(TrailerAck {
                    at: now,
                    from,
                    bytes,
                });
            }
            _ => {
                let last = !self.trailer_acks.iter().any(|a| a.from == from);
                self.on_trailer_ack(now, from, ack, last);
            }
        }
    }

    /// Whether the ACK in `ack` is for a peer we have a send to whose
    /// completion the application will see (not an inject): it may be
    /// waiting for that completion before it answers, so the ACK is taken
    /// at once rather than deferred.
    fn completes_signaled_send(&self, ack: &[u8; AckRepr::LEN]) -> bool {
        let dpdcid = crate::wire::ack::Packet::new_unchecked(&ack[..]).dpdcid();
        self.tx_by_id.get(&dpdcid).is_some_and(|&p| {
            let peer = &self.peers[p];
            debug_assert!(peer.message_counts_hold());
            peer.message_counts.completion_awaited()
        })
    }

    /// A deferred ACK from `from` that acknowledges every packet sent to
    /// that peer while nothing waits to be sent or resent would have
    /// emptied the pipe (see `Peer::drained_by_trailer`).
    fn note_trailer_drain(&mut self, from: SocketAddr, ack: &[u8; AckRepr::LEN]) {
        let Ok(ack) = AckRepr::parse(ack) else {
            return;
        };
        let Some(&p) = self.tx_by_id.get(&ack.dpdcid) else {
            return;
        };
        let peer = &mut self.peers[p];
        if peer.addr == from
            && peer.tx.in_flight() > 0
            && peer.tx.acked_through_last(ack.cack_psn)
            && peer.queue.is_empty()
            && peer.tx.retransmit.is_empty()
        {
            peer.drained_by_trailer = true;
        }
    }

    /// `last`: no other ACK from that peer waits (an owed restart is
    /// applied after the last one, so no older one reopens the window).
    fn on_trailer_ack(&mut self, now: u64, from: SocketAddr, ack: &[u8], last: bool) {
        let acked = self.stats.acks_received;
        self.on_ack(now, from, ack);
        self.stats.piggybacked_acks_received += self.stats.acks_received - acked;
        if let Some(&p) = self.peer_by_addr.get(&from).filter(|_| last) {
            // Nothing sent since it arrived: the ACK itself told whether
            // the pipe is empty.
            let peer = &mut self.peers[p];
            peer.drained_by_trailer = false;
            if std::mem::take(&mut peer.restart_owed) {
                peer.cc.on_idle_restart();
            }
        }
    }

    /// While `deferred`, an ACK that arrives at the end of a request waits
    /// until [`handle_trailer_acks`](Self::handle_trailer_acks) (or the
    /// next timer call) instead of being taken with the request. The
    /// request is most likely what the application waits for and answers
    /// at once: a driver defers the ACK's work (a congestion-control
    /// update) until the answer has left, where a separate ACK datagram
    /// would have been taken while the application was busy anyway. Its
    /// arrival time is kept for the round-trip sample. An ACK for a peer
    /// with a send whose completion the application will see is taken at
    /// once all the same: the application may be waiting for it.
    pub fn defer_trailer_acks(&mut self, deferred: bool) {
        self.trailer_acks_deferred = deferred;
    }

    /// True when ACKs wait for [`handle_trailer_acks`](Self::handle_trailer_acks).
    pub fn has_trailer_acks(&self) -> bool {
        !self.trailer_acks.is_empty()
    }

    /// Take the ACKs deferred by [`defer_trailer_acks`](Self::defer_trailer_acks),
    /// in arrival order, each dated when it arrived.
    pub fn handle_trailer_acks(&mut self) {
        if self.trailer_acks.is_empty() {
            return;
        }
        let mut acks = std::mem::take(&mut self.trailer_acks);
        for (i, a) in acks.iter().enumerate() {
            let last = !acks[i + 1..].iter().any(|b| b.from == a.from);
            self.on_trailer_ack(a.at, a.from, &a.bytes, last);
        }
        // Keep the allocation for the next ones.
        acks.clear();
        self.trailer_acks = acks;
    }

    /// `in_place`: `data` holds the headers only, and this many payload
    /// bytes were received straight into a posted buffer (a landing).
    pub(super) fn on_request(
        &mut self,
        now: u64,
        from: SocketAddr,
        tos: u8,
        data: &[u8],
        in_place: Option<usize>,
    ) {
        let Ok(req) = RequestRepr::parse(data) else {
            self.stats.malformed += 1;
            return;
        };
        let body = &data[RequestRepr::LEN..];
        // Parse the SES header before the PSN is accepted, so a packet that
        // fails a check leaves no trace.
        let ses = match req.next {
            NextHeader::SesRequest => match SesRequestRepr::parse(body) {
                Ok(s) => match split_rendezvous(&s, &body[SesRequestRepr::LEN..]) {
                    Some((rdv, payload))
                        if self.request_is_sane(
                            &s,
                            rdv.as_ref(),
                            payload.len() + in_place.unwrap_or(0),
                        ) =>
                    {
                        Ses::Request(s, rdv)
                    }
                    _ => {
                        self.stats.malformed += 1;
                        return;
                    }
                },
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
        let src = canonical_source(from, &ses);
        // Only a SYN with a context ID to spare makes a stranger a peer, so
        // packets from unknown or spoofed sources cost no memory.
        let p = match self.find_peer(src) {
            Some(p) => Some(p),
            None if req.syn() && self.pdc_id_available() => Some(self.peer_index(src, now)),
            None => None,
        };
        let context = match p {
            Some(p) => self.rx_context(p, &req, now),
            None if req.syn() => RxContext::Exhausted,
            None => RxContext::Unknown,
        };
        let code = match context {
            RxContext::Known => None,
            // Not SYN and no context of ours: the sender holds a context we
            // closed or lost (we restarted). Tell it, so it starts afresh.
            RxContext::Unknown => {
                self.stats.unknown_pdc += 1;
                Some(NackCode::InvalidDpdcid)
            }
            // Every context ID is taken: the sender retries later, as for a
            // full buffer, without counting it against us.
            RxContext::Exhausted => {
                self.stats.pdc_exhausted += 1;
                Some(NackCode::NoPacketBuffer)
            }
        };
        if let Some(code) = code {
            // To the sender's canonical address, like every ACK: the port
            // a request left from need not be one it reads.
            let ours = if req.syn() { 0 } else { req.dpdcid };
            self.queue_nack(src, code, req.psn, ours, req.spdcid);
            return;
        }
        let Some(p) = p else { return };
        self.heard_from(p, now, false);
        let payload_at = match ses {
            Ses::Request(_, None) => SesRequestRepr::LEN,
            Ses::Request(_, Some(r)) => SesRequestRepr::LEN + r.wire_len(),
            Ses::Response(_) => SesResponseRepr::LEN,
        };
        let payload_len = body.len().saturating_sub(payload_at) + in_place.unwrap_or(0);
        if let Some(trim) = trimmed(tos, &ses, payload_len) {
            self.on_trimmed(p, &req, trim);
            return;
        }
        // Classified once: nothing changes the receive context until the
        // PSN is recorded below.
        let arrival = self.peers[p].rx.as_ref().map(|rx| rx.classify(req.psn));
        if let Ses::Request(s, _) = &ses {
            let peer = &self.peers[p];
            if let Some(inb) = peer.inbound.get(&s.message_id) {
                // The sender's 16-bit message IDs came round while an older
                // message with this one waits here for a receive: that one
                // moves out of the way (parked), unless packets of it may
                // still come (then the new message waits, the sender
                // resending it, rather than landing in it).
                let next = peer.next_match_seq;
                if arrival == Some(Arrival::New) && inb.waits_for_a_receive(next) {
                    if !self.park_if_waiting(p, s.message_id) {
                        self.stats.message_id_waits += 1;
                        self.refuse_for_now(p, &req);
                        return;
                    }
                    self.stats.messages_parked += 1;
                } else if Self::message_offset(s) + payload_len as u64 > inb.header.len {
                    // Later packets must agree with the length the first
                    // one set.
                    self.stats.malformed += 1;
                    return;
                }
            }
        }
        let mut matched = false;
        let rdv_rx = match &ses {
            Ses::Request(_, Some(r)) => Some(RendezvousRx::new(r)),
            _ => None,
        };
        if let Ses::Request(s, _) = &ses {
            let new = arrival == Some(Arrival::New);
            let send = is_send(s);
            if new
                && send
                && payload_len > 0
                && !self.stage_has_room(p, s, rdv_rx.as_ref(), payload_len)
            {
                self.stats.backpressure += 1;
                self.refuse_for_now(p, &req);
                return;
            }
            matched = new && send && payload_len > 0;
            if new && !self.answer_has_room(p, s) {
                self.stats.backpressure += 1;
                self.refuse_for_now(p, &req);
                return;
            }
        }
        let (Some(rx), Some(arrival)) = (self.peers[p].rx.as_mut(), arrival) else {
            return;
        };
        if arrival == Arrival::New {
            rx.accept(req.psn);
        }
        rx.last_psn = req.psn;
        rx.last_arrival_at = now;
        rx.heard(now);
        rx.last_was_retx = req.flags & pflags::RETX != 0;
        rx.answering_probe = false;
        // Its sender waits for the ACK this packet calls for unless it said
        // otherwise (AR with NO_WAIT); a duplicate or a packet out of order
        // means it retransmits or has to go back, whatever the flags.
        if req.flags & pflags::AR != 0 && req.flags & pflags::NO_WAIT == 0
            || arrival != Arrival::New
        {
            rx.ack_awaited = true;
        } else if req.flags & pflags::AR != 0 {
            rx.ack_may_wait = true;
        }
        let ce = Ecn::from_tos(tos) == Ecn::Ce;
        if ce {
            // Echoed in the next ACK's M flag, which leaves at once.
            self.stats.ecn_ce_received += 1;
            rx.ecn_echo = true;
        }
        match arrival {
            Arrival::OutOfWindow => {
                self.stats.out_of_window += 1;
                return;
            }
            Arrival::OutOfOrder => {
                // Ordered delivery: dropped; the ACK (cumulative PSN
                // unchanged) makes the sender go back.
                self.stats.rod_out_of_order += 1;
                self.queue_ack(p);
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
        // Wire bytes (headers included), as the sender counts in flight.
        rx.rcvd_bytes += (data.len() + in_place.unwrap_or(0)) as u64;
        rx.unacked_bytes += payload_len.max(1);
        // NSCC.md section 6: at once on CE, AR (the sender sets it on
        // retransmissions too) and the first packets (SYN); otherwise every
        // 16 KiB or after a short delay.
        let immediate = ce
            || req.flags & (pflags::AR | pflags::SYN | pflags::RETX) != 0
            || rx.unacked_bytes >= ACK_COALESCE_BYTES;
        if immediate {
            self.queue_ack(p);
        } else if !rx.ack_pending {
            rx.ack_pending = true;
            rx.ack_due = now + ACK_DELAY_NS;
        }
        match ses {
            Ses::Request(s, _) => {
                let payload = match in_place {
                    Some(n) => PacketPayload::InPlace(n),
                    None => PacketPayload::Bytes(&body[payload_at..]),
                };
                self.on_ses_request(p, &s, rdv_rx.as_ref(), payload, matched)
            }
            Ses::Response(r) => self.on_ses_response(p, &r),
        }
    }

    /// `rdv` is the rendezvous header of a rendezvous send's first packet:
    /// it must describe the whole message, its eager part starting with
    /// this packet (a first packet without it was trimmed: no payload).
    pub(super) fn request_is_sane(
        &self,
        s: &SesRequestRepr,
        rdv: Option<&RendezvousRepr>,
        payload_len: usize,
    ) -> bool {
        let rendezvous = s.opcode().is_ok_and(SesOpcode::is_rendezvous);
        let som = s.flags & sflags::SOM != 0;
        let rendezvous_ok = match rdv {
            Some(r) => {
                r.eager_length as usize >= payload_len
                    && r.total_length() == s.request_length as u64
                    && s.buffer_offset == 0
            }
            None => !(rendezvous && som) || payload_len == 0,
        };
        // A read's length is what it asks for; its own payload is at most
        // a host memory descriptor (a rendezvous pull on one host).
        let room = match s.opcode() {
            Ok(SesOpcode::Read) => crate::wire::HostMemoryRepr::LEN as u64,
            _ => s.request_length as u64,
        };
        rendezvous_ok
            && Self::carries_known_opcode(s)
            && Self::message_offset(s)
                .checked_add(payload_len as u64)
                .is_some_and(|end| end <= room)
            && s.request_length as usize <= Config::MAX_MSG_SIZE
    }

    /// Find or establish the receive PDC a request belongs to.
    pub(super) fn rx_context(&mut self, p: usize, req: &RequestRepr, now: u64) -> RxContext {
        if req.syn() {
            let start = req.syn_start_psn();
            let same = self.peers[p]
                .rx
                .as_ref()
                .is_some_and(|rx| rx.opened_by(req));
            if !same && self.peers[p].closed_rx == (req.spdcid, start) {
                // A late copy of a SYN packet of the context its sender
                // closed: stale, whatever context it opened since.
                return RxContext::Unknown;
            }
            if !same {
                // A new context from this peer (first contact or a restart):
                // whatever the old one was receiving is gone with it.
                let Some(id) = self.alloc_pdc_id() else {
                    return RxContext::Exhausted;
                };
                let window = self.window;
                let peer = &mut self.peers[p];
                if let Some(old) = peer.rx.take() {
                    self.rx_by_id.remove(&old.local_id);
                }
                let mut rx = RxPdc::new(id, req.spdcid, start, window);
                rx.heard(now);
                // The sender picks the mode; its SYN's packet type says which.
                peer.rx = Some(if req.ptype == PacketType::RodRequest {
                    rx.ordered()
                } else {
                    rx
                });
                // Pulls from the old context will not be answered, and
                // the messages receives were matched to will not finish:
                // those receives fail rather than wait forever. Whole
                // messages were delivered (their sender was told so): they
                // stay for the application, parked, ahead of the new
                // context's messages, whose IDs start again from 0 at the
                // next round of sequence numbers.
                self.forget_pulls(p);
                self.suspect_restart(p);
                self.drop_unfinished(p, |_| false);
                self.park_whole_unexpected(p);
                self.drop_inbound(p, |id, _| id.is_none());
                let peer = &mut self.peers[p];
                peer.next_match_seq = peer.next_match_seq.next_multiple_of(1 << 16);
                self.rx_by_id.insert(id, p);
            }
            return RxContext::Known;
        }
        let known = self.rx_by_id.get(&req.dpdcid) == Some(&p)
            && self.peers[p]
                .rx
                .as_ref()
                .is_some_and(|rx| rx.remote_id == req.spdcid);
        if known {
            RxContext::Known
        } else {
            RxContext::Unknown
        }
    }

    /// The receive state of a message, created on its first packet (any of
    /// them: each carries the header).
    fn ensure_inbound<'a>(
        inbound: &'a mut FastMap<u16, Inbound>,
        next_match_seq: u64,
        s: &SesRequestRepr,
        rdv: Option<&RendezvousRx>,
    ) -> &'a mut Inbound {
        match inbound.entry(s.message_id) {
            Entry::Occupied(e) => {
                let inb = e.into_mut();
                // A rendezvous send's first packet may come after others.
                if let (Some(r), None) = (rdv, &inb.rendezvous) {
                    inb.rendezvous = Some(*r);
                }
                inb
            }
            Entry::Vacant(e) => {
                // Message IDs are consecutive per peer; the distance from
                // the next one to match recovers the full sequence number.
                let ahead = s.message_id.wrapping_sub(next_match_seq as u16) as u64;
                e.insert(Inbound {
                    seq: next_match_seq + ahead,
                    header: MsgHeader {
                        tagged: matches!(
                            s.opcode(),
                            Ok(SesOpcode::TaggedSend | SesOpcode::RendezvousTaggedSend)
                        ),
                        tag: s.match_bits,
                        len: s.request_length as u64,
                        cq_data: None,
                        want_response: s.flags & sflags::DC != 0,
                    },
                    received: 0,
                    carried: 0,
                    high_water: 0,
                    state: InboundState::Staged(Vec::new()),
                    rendezvous: rdv.copied(),
                })
            }
        }
    }

    /// Backpressure: the sender resends `req` later, without counting it
    /// against the peer (NACK 0x07).
    fn refuse_for_now(&mut self, p: usize, req: &RequestRepr) {
        if let Some(rx) = self.peers[p].rx.as_ref() {
            let (to, ours) = (self.peers[p].addr, rx.local_id);
            self.queue_nack(to, NackCode::NoPacketBuffer, req.psn, ours, req.spdcid);
        }
    }

    /// Whether the payload of a new packet can be taken: always when its
    /// message is matched (it goes to the application's buffer), otherwise
    /// only while staged data of unmatched messages stays within the
    /// endpoint's budget. Matching runs first, so a posted receive absorbs
    /// the message instead of the stage.
    fn stage_has_room(
        &mut self,
        p: usize,
        s: &SesRequestRepr,
        rdv: Option<&RendezvousRx>,
        len: usize,
    ) -> bool {
        let peer = &mut self.peers[p];
        let next = peer.next_match_seq;
        let src = peer.addr;
        let inb = Self::ensure_inbound(&mut peer.inbound, next, s, rdv);
        let (seq, growth) = (inb.seq, inb.stage_growth(s.buffer_offset, len));
        if seq == next && matches!(inb.state, InboundState::Staged(_)) {
            // Its turn (the usual case): matched here, on the entry at hand.
            peer.next_match_seq += 1;
            let id = s.message_id;
            let bound = Self::take_turn(
                &mut self.posted,
                &mut self.unexpected,
                &mut self.staged_bytes,
                (p, src),
                inb,
            );
            // Later messages may have waited for this one (binding only
            // ever removes entries).
            let more = self.peers[p].inbound.len() > 1;
            if let Some((rendezvous, complete)) = bound {
                self.after_bind(p, MsgRef::Live(id), rendezvous, complete);
            }
            if more {
                self.match_in_order(p);
            }
            if bound.is_some() {
                return true;
            }
        } else if self.match_watching(p, seq) {
            // Matching changes the stage only by handing it to a receive.
            return true;
        }
        growth == 0 || self.staged_bytes + growth <= self.stage_budget
    }

    /// `matched`: [`stage_has_room`](Self::stage_has_room) already
    /// created this packet's message and ran the matcher.
    pub(super) fn on_ses_request(
        &mut self,
        p: usize,
        s: &SesRequestRepr,
        rdv: Option<&RendezvousRx>,
        payload: PacketPayload,
        matched: bool,
    ) {
        if self.on_rma_request(p, s, payload) {
            return;
        }
        if s.buffer_offset != 0 {
            self.stats.continuations_received += 1;
        }
        let peer = &mut self.peers[p];
        let id = s.message_id;
        if matched && rdv.is_none() {
            // The usual data packet: stage_has_room created its message and
            // ran the matcher, so only placing and completing are left, on
            // the one entry.
            if let Entry::Occupied(mut entry) = peer.inbound.entry(id) {
                let (complete, response) =
                    Self::take_payload(entry.get_mut(), s, payload, &mut self.staged_bytes);
                let open = !complete && matches!(entry.get().state, InboundState::Posted(_));
                if complete && entry.get().bound_or_discarded() {
                    let addr = peer.addr;
                    Self::deliver(
                        &mut self.completions,
                        &mut self.spares,
                        addr,
                        entry.remove(),
                    );
                }
                if let Some(item) = response {
                    peer.queue.push_back(item);
                    self.mark_ready(p);
                }
                self.expect_after(open, p, id, None, s.buffer_offset, payload.len());
                return;
            }
        }
        let inb = Self::ensure_inbound(&mut peer.inbound, peer.next_match_seq, s, rdv);
        let (complete, response) = Self::take_payload(inb, s, payload, &mut self.staged_bytes);
        if let Some(item) = response {
            peer.queue.push_back(item);
            self.mark_ready(p);
        }
        // Placing bytes changes no message's turn: only a message the
        // matcher has not seen yet needs it.
        if !matched {
            self.match_in_order(p);
        }
        if rdv.is_some() {
            // Matched before its first packet came: pull now.
            self.start_pull(p, id);
        }
        // Only matching or a pull changes `received` after `place`.
        if complete || !matched || rdv.is_some() {
            self.finish_if_complete(p, MsgRef::Live(id));
        }
        // A first packet (a rendezvous send's, or one matched just now)
        // sets the expectation as the usual path does.
        let open = self.peers[p]
            .inbound
            .get(&id)
            .is_some_and(|inb| matches!(inb.state, InboundState::Posted(_)) && !inb.complete());
        self.expect_after(open, p, id, None, s.buffer_offset, payload.len());
    }

    /// Place one packet's payload (and a first packet's CQ data) into its
    /// message. Returns whether the message is complete, and the SES
    /// response to queue when the sender asked for delivery completion.
    fn take_payload(
        inb: &mut Inbound,
        s: &SesRequestRepr,
        payload: PacketPayload,
        staged_bytes: &mut usize,
    ) -> (bool, Option<TxItem>) {
        if s.flags & sflags::SOM != 0 && s.flags & sflags::HD != 0 {
            inb.header.cq_data = Some(s.header_data);
        }
        *staged_bytes += inb.place(s.buffer_offset, payload);
        inb.carried += payload.len() as u64;
        // Delivery complete (fi_cq(3)): the message was processed here once
        // all its bytes are in, whether placed in a posted buffer or held
        // as unexpected until the application posts one.
        let complete = inb.complete();
        let response = (complete && inb.header.want_response).then(|| TxItem::Response {
            msg_id: s.message_id,
            len: inb.header.len.min(u32::MAX as u64) as u32,
            code: 0,
        });
        (complete, response)
    }

    pub(super) fn on_ses_response(&mut self, p: usize, r: &SesResponseRepr) {
        if self.on_rma_response(p, r) {
            return;
        }
        let peer = &mut self.peers[p];
        let Some(m) = peer.messages.get_mut(&r.message_id) else {
            return;
        };
        if m.level != CompletionLevel::Delivery || m.delivered {
            return;
        }
        m.delivered = true;
        // RECEIVE_FAILED: the receive failed at the target.
        m.failed = r.return_code != 0;
        // Completes once every packet is acknowledged and the pull is over
        // too: until then packets may be resent from the application's
        // buffer (a response can overtake the ACK of the last packet, and
        // a failed receive answers before the send's own packets are in).
        self.settle_message(p, r.message_id);
    }

    /// A data packet whose payload the fabric cut: NACK it at once so the
    /// sender retransmits without waiting for a timeout (NSCC.md section 5).
    /// The PSN is not accepted, so the retransmission is a new arrival.
    fn on_trimmed(&mut self, p: usize, req: &RequestRepr, trim: Trim) {
        self.stats.trimmed_received += 1;
        let Some(rx) = self.peers[p].rx.as_ref() else {
            return;
        };
        if rx.has(req.psn) {
            // The full copy already arrived (a duplicate was trimmed).
            self.queue_ack(p);
            return;
        }
        let code = match trim {
            Trim::Fabric => NackCode::Trimmed,
            Trim::LastHop => NackCode::TrimmedLastHop,
        };
        let (to, ours) = (self.peers[p].addr, rx.local_id);
        self.queue_nack(to, code, req.psn, ours, req.spdcid);
    }

    pub(super) fn on_nack(&mut self, now: u64, from: SocketAddr, data: &[u8]) {
        let Ok(nack) = NackRepr::parse(data) else {
            self.stats.malformed += 1;
            return;
        };
        let Some(&p) = self.tx_by_id.get(&nack.dpdcid) else {
            self.stats.unknown_pdc += 1;
            return;
        };
        if self.peers[p].addr != from
            || self.peers[p].tx.remote_id.is_some_and(|r| r != nack.spdcid)
        {
            self.stats.unknown_pdc += 1;
            return;
        }
        self.stats.nacks_received += 1;
        match nack.code {
            NackCode::Trimmed | NackCode::TrimmedLastHop => {
                let last_hop = nack.code == NackCode::TrimmedLastHop;
                let peer = &mut self.peers[p];
                if let Some((bytes, entropy)) = peer.tx.uncount(nack.psn) {
                    peer.in_flight_bytes = peer
                        .in_flight_bytes
                        .saturating_sub(bytes as u64)
                        .min(peer.tx.counted_bytes());
                    peer.cc
                        .on_nack(now, bytes as u64, last_hop, peer.in_flight_bytes);
                    peer.lb
                        .on_feedback(now, entropy, PathFeedback::Nack { last_hop });
                    self.record(p, now, TraceKind::Nack, entropy, 0, false);
                }
                let peer = &mut self.peers[p];
                if peer.tx.nack(nack.psn, now) {
                    self.stats.nack_retransmits += 1;
                    self.mark_ready(p);
                }
            }
            // The receiver is alive but has no room for an unmatched
            // message yet: resend after a fresh timeout, without counting
            // the attempt towards declaring the peer dead.
            NackCode::NoPacketBuffer => self.peers[p].tx.defer(nack.psn, now),
            // Outside the receiver's window: the timer resends it.
            NackCode::PsnOutOfWindow => {}
            // The receiver does not know our context (it restarted, or
            // closed it): what was in flight is lost with it.
            NackCode::InvalidDpdcid | NackCode::Closing | NackCode::InvalidSyn => {
                // Messages still held (a rendezvous send not pulled yet)
                // belong to the lost context as much as packets in flight.
                // Not while we close it: nothing of it is outstanding then
                // (messages posted since wait for the next context), so
                // the receiver not knowing it means the close went through
                // and its confirmation is late or lost.
                let peer = &self.peers[p];
                if peer.closing.is_none() && (peer.tx.in_flight() > 0 || !peer.messages.is_empty())
                {
                    self.fail_peer(p);
                } else {
                    self.reset_tx_pdc(p);
                }
            }
        }
    }

    pub(super) fn on_control(&mut self, now: u64, from: SocketAddr, data: &[u8]) {
        let Ok(ctl) = ControlRepr::parse(data) else {
            self.stats.malformed += 1;
            return;
        };
        match ctl.ctl_type {
            ControlType::Close => self.on_close(now, from, &ctl),
            // Answered with an ACK of the receive context they name.
            ControlType::AckRequest | ControlType::Probe => match self.rx_by_id.get(&ctl.dpdcid) {
                Some(&p) if self.peers[p].addr == from => {
                    self.no_longer_given_up(p);
                    if let Some(rx) = self.peers[p].rx.as_mut() {
                        rx.answering_probe = true;
                        rx.ack_awaited = true;
                        rx.heard(now);
                    }
                    self.queue_ack(p)
                }
                // The sender holds a context we closed or lost (we
                // restarted): tell it, as for its data, instead of letting
                // it probe until it gives up.
                _ => {
                    self.stats.unknown_pdc += 1;
                    let code = NackCode::InvalidDpdcid;
                    self.queue_nack(from, code, ctl.psn, ctl.dpdcid, ctl.spdcid);
                }
            },
            ControlType::CloseRequest => self.on_close_request(now, from, &ctl),
            // Credit-based flow control is not used by this provider.
            ControlType::Credit | ControlType::CreditRequest => self.stats.malformed += 1,
        }
    }

    /// The sender of peer `p`'s receive context is gone in the middle of
    /// sending (it answered none of our close requests): what it was
    /// still sending will not finish. Pulls from it fail (a receive whose
    /// buffer it may still write into only once it no longer can); other
    /// receives bound to its messages fail now, and what it staged goes.
    /// Whole messages stay for the application (see
    /// [`Self::drop_unfinished`]).
    pub(super) fn abandon_incoming(&mut self, p: usize) {
        self.stats.messages_abandoned += self.peers[p]
            .inbound
            .values()
            .filter(|m| m.awaits_packets())
            .count() as u64;
        self.fail_pulls(p);
        let pulled = self.pulled_messages(p);
        self.drop_unfinished(p, |id| pulled.contains(&id));
    }

    /// Peer `p`'s context is gone or replaced: its unfinished messages
    /// will not finish and go (receives bound to them fail), but those
    /// `keep` names by ID. A whole message that waited for the turn of
    /// one that will never come stays all the same (its sender may have
    /// been told it was delivered): it takes its turn now, in the sender's
    /// order.
    pub(super) fn drop_unfinished(&mut self, p: usize, keep: impl Fn(u16) -> bool) {
        self.drop_inbound(p, |id, m| m.complete() || id.is_some_and(&keep));
        let next = self.peers[p].next_match_seq;
        let mut waiting: Vec<u64> = self.peers[p]
            .inbound
            .values()
            .filter(|m| m.seq >= next)
            .map(|m| m.seq)
            .collect();
        waiting.sort_unstable();
        for seq in waiting {
            let peer = &mut self.peers[p];
            peer.next_match_seq = peer.next_match_seq.max(seq);
            self.match_in_order(p);
        }
    }

    /// Move peer `p`'s whole unexpected messages out of the table of
    /// message IDs (see [`MsgRef`]): their sender's IDs start again.
    pub(super) fn park_whole_unexpected(&mut self, p: usize) {
        let ids: Vec<u16> = self.peers[p].inbound.keys().copied().collect();
        for id in ids {
            self.park_if_waiting(p, id);
        }
    }

    /// Drop peer `p`'s incoming messages but those `keep` names (by message
    /// ID; none for a parked one): receives bound to them fail, in the
    /// sender's order, what they staged is given back, and the unexpected
    /// queue lets go of them.
    fn drop_inbound(&mut self, p: usize, keep: impl Fn(Option<u16>, &Inbound) -> bool) {
        let mut gone: Vec<(u64, u16)> = self.peers[p]
            .inbound
            .iter()
            .filter(|&(&id, m)| !keep(Some(id), m))
            .map(|(&id, m)| (m.seq, id))
            .collect();
        gone.sort_unstable();
        for (_, id) in gone {
            self.fail_bound_receive(p, id, false);
            if let Some(m) = self.peers[p].inbound.remove(&id) {
                self.staged_bytes -= m.staged_bytes();
            }
        }
        // Parked messages wait for receives: none is bound.
        if self.peers[p].parked > 0 {
            let (staged, count) = (&mut self.staged_bytes, &mut self.peers[p].parked);
            self.parked.retain(|&(q, _), m| {
                let stays = q != p || keep(None, m);
                if !stays {
                    *staged -= m.staged_bytes();
                    *count -= 1;
                }
                stays
            });
        }
        let (peers, parked) = (&self.peers, &self.parked);
        self.unexpected
            .retain(|u| u.peer != p || locate_in(peers, parked, p, u.seq).is_some());
    }

    /// Our receive context of peer `p` is gone (closed, or reclaimed after
    /// its sender stopped answering).
    pub(super) fn drop_rx_context(&mut self, p: usize, now: u64) {
        let peer = &mut self.peers[p];
        let Some(rx) = peer.rx.take() else {
            return;
        };
        peer.closed_rx = (rx.remote_id, rx.start_psn);
        peer.rx_gone_at = now;
        // `next_match_seq` stays: the next context starts past it (see
        // `rx_context`), behind any whole unexpected message still here.
        peer.in_ack_queue = false;
        self.rx_by_id.remove(&rx.local_id);
        self.ack_queue.retain(|&q| q != p);
    }

    /// The receiver of one of our send contexts asks us to close it (it
    /// heard nothing on it for long): an idle context starts the close
    /// handshake at once; a busy one answers with an ACK request, which
    /// tells the receiver the context is alive.
    fn on_close_request(&mut self, now: u64, from: SocketAddr, ctl: &ControlRepr) {
        let Some(&p) = self.tx_by_id.get(&ctl.dpdcid) else {
            self.stats.unknown_pdc += 1;
            return;
        };
        let peer = &mut self.peers[p];
        let tx = &peer.tx;
        // A sender whose ACKs were all lost learns the receiver's context
        // here, as it would from its first ACK (its ACK request below must
        // name it), but only from a request whose PSN (the receiver's
        // cumulative ACK + 1) lies within what this context sent: a stale
        // or forged one must not point the context elsewhere.
        let learns = tx.remote_id.is_none() && tx.could_expect(ctl.psn);
        if peer.addr != from || !(learns || tx.remote_id == Some(ctl.spdcid)) {
            self.stats.unknown_pdc += 1;
            return;
        }
        peer.tx.remote_id.get_or_insert(ctl.spdcid);
        let peer = &self.peers[p];
        if peer.closing.is_some() {
            // Under way: its close packets answer.
            return;
        }
        if peer.tx_idle() {
            self.start_close(p, now);
        } else if let Some(alive) = peer.tx.control(ControlType::AckRequest, peer.tx.next_psn()) {
            self.control_queue
                .push_back((from, ControlOut::Control(alive)));
        }
    }

    /// A close travels twice: sender -> receiver asks to close the receive
    /// context; receiver -> sender (same packet type, [`CLOSE_CONFIRM`])
    /// confirms it is gone, or refuses ([`CLOSE_REFUSED`]) while it still
    /// holds unmatched messages of the peer or misses packets below the
    /// close PSN.
    fn on_close(&mut self, now: u64, from: SocketAddr, ctl: &ControlRepr) {
        if ctl.flags & CLOSE_CONFIRM != 0 {
            // The answer to our own close; a stale one is dropped, never
            // answered (answering could ping-pong forever).
            if let Some(&p) = self.tx_by_id.get(&ctl.dpdcid) {
                let peer = &mut self.peers[p];
                if peer.addr == from
                    && peer.closing.is_some_and(|c| c.psn == ctl.psn)
                    && peer.tx.remote_id == Some(ctl.spdcid)
                {
                    if ctl.flags & CLOSE_REFUSED != 0 {
                        if ctl.payload != u32::from(peer.close_attempts) {
                            // The answer to an earlier attempt: the latest
                            // one may yet be confirmed (the receiver let
                            // the context go since), and then it is gone.
                            return;
                        }
                        // The receiver still needs the context; try again
                        // after another idle period.
                        peer.closing = None;
                        peer.tx_active_at = now;
                        self.mark_ready(p);
                    } else {
                        self.stats.pdcs_closed += 1;
                        self.reset_tx_pdc(p);
                        self.peers[p].tx_active_at = now;
                    }
                }
            }
            return;
        }
        let confirm = ControlRepr {
            flags: CLOSE_CONFIRM,
            spdcid: ctl.dpdcid,
            dpdcid: ctl.spdcid,
            ..*ctl
        };
        match self.rx_by_id.get(&ctl.dpdcid) {
            Some(&p) if self.peers[p].addr == from => {
                let peer = &mut self.peers[p];
                let Some(rx) = peer.rx.as_ref() else {
                    return;
                };
                if rx.remote_id != ctl.spdcid {
                    self.stats.unknown_pdc += 1;
                    return;
                }
                // Attempts numbered 0 (a sender that does not number them)
                // are all answered.
                if ((ctl.payload as u16).wrapping_sub(rx.close_attempt) as i16) < 0 {
                    // An earlier attempt overtaken by a later one already
                    // answered: its sender waits for that answer.
                    return;
                }
                let Some(rx) = peer.rx.as_mut() else {
                    return;
                };
                rx.close_attempt = ctl.payload as u16;
                // Parked messages need no context (see `MsgRef`).
                if rx.cack() != ctl.psn.wrapping_sub(1) || !peer.inbound.is_empty() {
                    let refuse = ControlRepr {
                        flags: CLOSE_CONFIRM | CLOSE_REFUSED,
                        ..confirm
                    };
                    self.control_queue
                        .push_back((from, ControlOut::Control(refuse)));
                    return;
                }
                self.drop_rx_context(p, now);
                self.control_queue
                    .push_back((from, ControlOut::Control(confirm)));
            }
            // Already closed (our confirmation was lost): confirm again.
            None if self.peer_by_addr.contains_key(&from) => {
                self.control_queue
                    .push_back((from, ControlOut::Control(confirm)));
            }
            _ => self.stats.unknown_pdc += 1,
        }
    }

    pub(super) fn on_ack(&mut self, now: u64, from: SocketAddr, data: &[u8]) {
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
        // An ACK for PSNs never sent is ignored whole: its received bytes
        // and congestion feedback are as bogus as its PSN.
        if !self.peers[p].tx.acks_only_sent(&ack) {
            self.stats.malformed += 1;
            return;
        }
        self.stats.acks_received += 1;
        self.heard_from(p, now, true);
        if ack.flags & pflags::ACK_M != 0 {
            self.stats.ecn_echoes_received += 1;
        }
        let mtu = self.mtu as u64;
        let peer = &mut self.peers[p];
        peer.tx_active_at = now;
        let out = &mut self.ack_scratch;
        peer.tx.on_ack_into(&ack, now, out);
        // In flight is clocked by the receiver's cumulative received bytes
        // (24 bits of 256-byte units, wrapping); an older ACK overtaken by a
        // newer one reports nothing new.
        let delta = ack.rcvd_bytes.wrapping_sub(peer.rcvd_units) & 0x00ff_ffff;
        let newly = if delta < 1 << 23 {
            peer.rcvd_units = ack.rcvd_bytes;
            delta as u64 * 256
        } else {
            0
        };
        // Never more than the packets still counted: this also drops the
        // sub-unit remainder once only NACKed packets (or none) are
        // outstanding, which could otherwise keep their resends out of a
        // one-packet window for good.
        peer.in_flight_bytes = peer
            .in_flight_bytes
            .saturating_sub(newly)
            .min(peer.tx.counted_bytes());
        let ecn = ack.flags & pflags::ACK_M != 0;
        let retx_echo = ack.flags & pflags::ACK_RETX != 0;
        // Congestion control sees the network's round trip: not the time
        // the receiver held the packet before acknowledging it (a delayed
        // ACK, or one held while its application replied). A service time
        // as long as the whole round trip is a clock the receiver read too
        // early, not a sample: zero would become the base RTT.
        let network_rtt = out
            .rtt_raw
            .and_then(|raw| raw.checked_sub(ack.service_time_ns()))
            .filter(|&rtt| rtt > 0);
        peer.cc.on_ack(
            now,
            &AckFeedback {
                newly_acked_bytes: newly,
                in_flight_bytes: peer.in_flight_bytes,
                ecn,
                rtt: network_rtt.map(|raw| {
                    let sample = RttSample::validate(raw, out.trigger_sends, retx_echo);
                    // Only a packet of at least half the MTU sets the base RTT.
                    if (out.trigger_bytes as u64) < mtu / 2 {
                        sample.from_small_packet()
                    } else {
                        sample
                    }
                }),
            },
        );
        if let Some(entropy) = out.trigger_entropy {
            let fb = if ecn {
                PathFeedback::Ecn
            } else {
                PathFeedback::Good
            };
            peer.lb.on_feedback(now, entropy, fb);
        }
        // Loss without trimming: SLEEK on the out-of-order count, and the
        // answer to a probe sent into silence.
        let mut lost = 0;
        // Recovery resends at most one window per ACK.
        let budget = (peer.cc.cwnd() / mtu).max(1) as usize;
        if self.ordered {
            // Every ACK that acknowledges nothing new means the receiver
            // dropped a packet behind a hole: three in a row go back N.
            lost += peer.tx.go_back_n(3, budget);
        } else if peer.tx.sacked() >= 5 || peer.tx.in_recovery() {
            let threshold = (peer.cc.loss_threshold_bytes(mtu) / mtu) as usize;
            // A window that cannot hold the threshold would never trigger.
            let threshold = threshold.min(self.window / 2).max(1);
            lost += peer.tx.sleek(threshold, budget);
        }
        if peer.tx.probe_pending() {
            lost += peer.tx.probe_answered(now, 2 * Self::probe_rtt(peer));
        }
        peer.forget_lost();
        if peer.in_flight_bytes == 0 && peer.queue.is_empty() && peer.tx.retransmit.is_empty() {
            peer.pipe_drained = true;
        }
        self.stats.sleek_retransmits += lost as u64;
        let (entropy, rtt) = (out.trigger_entropy.unwrap_or(0), network_rtt.unwrap_or(0));
        self.record(p, now, TraceKind::Ack, entropy, rtt, ecn);
        // By index: settling a message needs the engine, and leaves the
        // reused outcome alone.
        for i in 0..self.ack_scratch.newly_acked.len() {
            if let SlotKind::Data { msg_id, .. } = self.ack_scratch.newly_acked[i] {
                self.on_packet_acked(p, msg_id);
            }
        }
        self.mark_ready(p);
    }

    pub(super) fn on_packet_acked(&mut self, p: usize, msg_id: u16) {
        let peer = &mut self.peers[p];
        let Entry::Occupied(mut entry) = peer.messages.entry(msg_id) else {
            return;
        };
        let m = entry.get_mut();
        m.unacked_packets = m.unacked_packets.saturating_sub(1);
        let pulled_from = match m.rma {
            Some(RmaTx::PullData { send_id, .. }) if m.fully_acked() => Some(send_id),
            _ => None,
        };
        if Self::settle(m, &mut peer.message_counts, &mut self.completions) {
            let answer = m.is_answer();
            let gone = entry.remove();
            peer.message_counts.remove(&gone);
            self.message_gone(gone.payload, answer);
        }
        if let Some(send_id) = pulled_from {
            self.on_pull_data_acked(p, send_id);
        }
    }

    /// Complete (at transmit level, or at delivery level once the response
    /// came) and retire a message whose packets are all acknowledged.
    pub(super) fn settle_message(&mut self, p: usize, msg_id: u16) {
        let peer = &mut self.peers[p];
        let Entry::Occupied(mut entry) = peer.messages.entry(msg_id) else {
            return;
        };
        if Self::settle(
            entry.get_mut(),
            &mut peer.message_counts,
            &mut self.completions,
        ) {
            let answer = entry.get().is_answer();
            let gone = entry.remove();
            peer.message_counts.remove(&gone);
            self.message_gone(gone.payload, answer);
        }
    }

    /// [`settle_message`](Self::settle_message) on the message itself:
    /// true when it is to be retired.
    fn settle(
        m: &mut TxMessage,
        counts: &mut MessageCounts,
        completions: &mut VecDeque<Completion>,
    ) -> bool {
        if !m.fully_acked() {
            return false;
        }
        let due = match m.level {
            CompletionLevel::Transmit => true,
            CompletionLevel::Delivery => m.delivered,
            CompletionLevel::Inject => false,
        };
        if due && !m.completed {
            counts.complete(m);
            completions.extend(Self::send_done(m));
        }
        Self::retirable(m)
    }

    /// The completion of a finished send: an error whenever the target
    /// reported that its receive failed, otherwise one if it was asked for.
    fn send_done(m: &TxMessage) -> Option<Completion> {
        let done = Completion::send(m.context, m.tagged, m.len() as usize);
        if m.failed {
            return Some(Completion {
                len: 0,
                error: Some(CompletionError::PeerUnreachable),
                ..done
            });
        }
        m.signal.then_some(done)
    }

    /// Its completion is out and its packets are all acked.
    fn retirable(m: &TxMessage) -> bool {
        m.fully_acked()
            && m.completed
            && (m.level != CompletionLevel::Delivery || m.delivered || !m.signal)
    }

    /// Drop a message whose completion is out and whose packets are all
    /// acked.
    pub(super) fn retire_message(&mut self, p: usize, msg_id: u16) {
        let peer = &mut self.peers[p];
        let done = peer.messages.get(&msg_id).is_some_and(Self::retirable);
        if let Some(m) = done.then(|| peer.take_message(msg_id)).flatten() {
            let answer = m.is_answer();
            self.message_gone(m.payload, answer);
        }
    }

    /// A message left its peer's table (retired or failed): its payload is
    /// kept for reuse, and the counts it was part of let it go. `answer`:
    /// it was read data or fetched values ([`TxMessage::is_answer`]).
    /// Takes the payload, not the message: moving the whole of it out of
    /// the map costs a copy per message.
    pub(super) fn message_gone(&mut self, payload: Payload, answer: bool) {
        if answer {
            self.answer_bytes -= payload.len();
        }
        self.spares.keep_payload(payload);
        self.sends_outstanding -= 1;
    }

    /// Whether the answer to a new read or fetching atomic request of peer
    /// `p` fits in what this endpoint holds for its peers (always when it
    /// holds nothing, so one answer larger than the budget still goes).
    fn answer_has_room(&self, p: usize, s: &SesRequestRepr) -> bool {
        // The usual case, asked for every new request: nothing held.
        if self.answer_bytes == 0 {
            return true;
        }
        let answered = match s.opcode() {
            Ok(SesOpcode::Read) => s.resource_index != super::RENDEZVOUS_RESOURCE,
            Ok(SesOpcode::FetchingAtomic) => true,
            _ => false,
        };
        // On an ordered context a refused request holds up everything its
        // sender sent after it, its answers to our own reads included: two
        // endpoints reading from each other past their budgets would each
        // wait for the other to acknowledge answers it drops. Not bounded.
        let ordered = self.peers[p].rx.as_ref().is_some_and(|rx| rx.ordered);
        !answered || ordered || self.answer_bytes + s.request_length as usize <= self.answer_budget
    }
}

enum Ses {
    /// With the rendezvous header of a rendezvous send's packet.
    Request(SesRequestRepr, Option<RendezvousRepr>),
    Response(SesResponseRepr),
}

/// Message payload that matches a receive (eager or rendezvous send).
pub(super) fn is_send(s: &SesRequestRepr) -> bool {
    matches!(
        s.opcode(),
        Ok(SesOpcode::Send
            | SesOpcode::TaggedSend
            | SesOpcode::RendezvousSend
            | SesOpcode::RendezvousTaggedSend)
    )
}

/// The rendezvous header (first packet of a rendezvous send) and the
/// payload after the SES header. A first packet too short for its header
/// has lost it to trimming (no header, no payload); `None` when it is
/// malformed.
fn split_rendezvous<'a>(
    s: &SesRequestRepr,
    rest: &'a [u8],
) -> Option<(Option<RendezvousRepr>, &'a [u8])> {
    let first = s.flags & sflags::SOM != 0;
    if !s.opcode().is_ok_and(SesOpcode::is_rendezvous) || !first || rest.is_empty() {
        return Some((None, rest));
    }
    let r = RendezvousRepr::parse(rest).ok()?;
    Some((Some(r), &rest[r.wire_len()..]))
}

/// Control flag of a close that answers one (receiver -> sender).
pub(super) const CLOSE_CONFIRM: u8 = 0x01;
/// With [`CLOSE_CONFIRM`]: the receiver keeps the context (it still holds
/// unmatched messages of the peer, or misses packets below the close PSN).
pub(super) const CLOSE_REFUSED: u8 = 0x02;

/// Whether a data packet lost its payload in the fabric, and where.
///
/// A switch that trims rewrites the DSCP ([`crate::wire::ip::trim_of`]).
/// When that mark did not survive, the length gives it away: a packet of a
/// message with bytes left always carries some, and packets without
/// immediate data name their payload length (14 bits) in the SES header.
fn trimmed(tos: u8, ses: &Ses, payload_len: usize) -> Option<Trim> {
    if let Some(t) = crate::wire::ip::trim_of(tos) {
        return Some(t);
    }
    let Ses::Request(s, rdv) = ses else {
        return None;
    };
    // Only sends and read data promise payload in every packet (a read
    // request has none); a rendezvous send's packet its header as well.
    let first = s.flags & sflags::SOM != 0;
    if s.opcode().is_ok_and(SesOpcode::is_rendezvous) && first && rdv.is_none() {
        return Some(Trim::Fabric);
    }
    if !is_send(s) && s.opcode() != Ok(SesOpcode::ReadResponse) {
        return None;
    }
    let remaining = (s.request_length as u64).saturating_sub(s.buffer_offset);
    if payload_len == 0 && remaining > 0 {
        return Some(Trim::Fabric);
    }
    let immediate_data = s.flags & sflags::SOM != 0 && s.flags & sflags::HD != 0;
    let claimed = ((s.header_data >> 32) & 0x3fff) as usize;
    (!immediate_data && claimed != payload_len & 0x3fff).then_some(Trim::Fabric)
}

/// The sender's canonical address (its socket 0) for a request.
///
/// Peer identity rule: data packets may come from any of the sender's
/// entropy ports, so they carry the canonical port in the SES `initiator`
/// field and the peer is (source IP, initiator). Everything else (ACKs,
/// NACKs, control, SES responses) is sent from socket 0, so its source
/// address is already canonical. An initiator of 0 (a sender that does not
/// fill it) also means the source address as is.
fn canonical_source(from: SocketAddr, ses: &Ses) -> SocketAddr {
    match ses {
        Ses::Request(s, _) => request_source(from, s),
        _ => from,
    }
}

/// The canonical address of the sender of the request datagram `data`
/// (see [`canonical_source`]); `from` when it does not parse.
fn request_origin(from: SocketAddr, data: &[u8]) -> SocketAddr {
    match RequestRepr::parse(data) {
        Ok(req) if req.next == NextHeader::SesRequest => data
            .get(RequestRepr::LEN..)
            .and_then(|body| SesRequestRepr::parse(body).ok())
            .map_or(from, |s| request_source(from, &s)),
        _ => from,
    }
}

/// The sender's canonical address of an SES request that arrived from
/// `from` (see [`canonical_source`]).
pub(super) fn request_source(from: SocketAddr, s: &SesRequestRepr) -> SocketAddr {
    match s.initiator {
        1..=0xffff => SocketAddr::new(from.ip(), s.initiator as u16),
        _ => from,
    }
}

/// Which receive context an arriving request belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RxContext {
    Known,
    /// Not a SYN and no context of ours.
    Unknown,
    /// A SYN, but every delivery-context ID is in use.
    Exhausted,
}
