//! Datagram input: requests, SES payload and responses, ACKs.

use super::*;

impl Engine {
    // ----- datagram input -------------------------------------------------------------

    /// One arriving datagram: its source, the IP TOS byte it arrived with
    /// (ECN codepoint and DSCP; 0 when the driver cannot read it) and its
    /// bytes.
    pub fn handle_datagram(&mut self, now: u64, from: SocketAddr, tos: u8, data: &[u8]) {
        let _ = tos;
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

    pub(super) fn on_request(&mut self, now: u64, from: SocketAddr, data: &[u8]) {
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
                if Self::message_offset(s) + payload_len > inb.header.len {
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

    pub(super) fn request_is_sane(&self, s: &SesRequestRepr, payload_len: usize) -> bool {
        Self::carries_known_opcode(s)
            && Self::message_offset(s)
                .checked_add(payload_len as u64)
                .is_some_and(|end| end <= s.request_length as u64)
            && s.request_length as usize <= Config::MAX_MSG_SIZE
    }

    /// Find or establish the receive PDC a request belongs to. False when
    /// the packet belongs to no context we know.
    pub(super) fn rx_context(&mut self, p: usize, req: &RequestRepr) -> bool {
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

    pub(super) fn on_ses_request(&mut self, p: usize, s: &SesRequestRepr, payload: &[u8]) {
        if self.on_rma_request(p, s, payload) {
            return;
        }
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
            peer.queue.push_back(TxItem::Response {
                msg_id: id,
                len,
                code: 0,
            });
            self.mark_ready(p);
        }
        self.match_in_order(p);
        self.finish_if_complete(p, id);
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
        if !m.completed {
            m.completed = true;
            self.completions
                .push_back(Completion::send(m.context, m.tagged, m.len() as usize));
        }
        if Self::retire_message(peer, r.message_id) {
            self.sends_outstanding -= 1;
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
        self.stats.acks_received += 1;
        let out = self.peers[p].tx.on_ack(&ack, now);
        for kind in out.newly_acked {
            if let SlotKind::Data { msg_id, .. } = kind {
                self.on_packet_acked(p, msg_id);
            }
        }
        self.mark_ready(p);
    }

    pub(super) fn on_packet_acked(&mut self, p: usize, msg_id: u16) {
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
    pub(super) fn retire_message(peer: &mut Peer, msg_id: u16) -> bool {
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
}

enum Ses {
    Request(SesRequestRepr),
    Response(SesResponseRepr),
}
