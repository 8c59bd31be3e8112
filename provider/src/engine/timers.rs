//! Timers: delayed ACKs, retransmission timeouts, peer failure.

use super::*;
use crate::ses::RmaTx;

impl Engine {
    // ----- timers -----------------------------------------------------------------------

    /// The earliest timer deadline of any kind, if any. Peers' deadlines
    /// come from their index (`engine/peer_deadlines.rs`): the cost does not
    /// grow with the number of peers.
    pub fn next_timeout(&self) -> Option<u64> {
        let peers = Some(self.earliest_peer_deadline()).filter(|&t| t != 0);
        #[cfg(debug_assertions)]
        self.check_deadline_index(peers);
        match (peers, self.rendezvous_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The earliest deadline of peer `p`'s timers (0 = none): the send
    /// side's (retransmission, close handshake, idle close), its probe,
    /// its delayed ACK, the reclaim of its receive context and the watch
    /// of a rendezvous step waiting on it. Only `p`'s
    /// entry and the engine's fixed settings count, apart from the
    /// scarcity of context IDs (see [`Self::earliest_peer_deadline`]).
    fn peer_deadline(&self, p: &Peer) -> u64 {
        // Once queued, the ACK waits for the driver, not the clock.
        let ack = match p.rx.as_ref() {
            Some(rx) if rx.ack_pending && !p.in_ack_queue => rx.ack_due,
            _ => 0,
        };
        [
            self.tx_deadline(p),
            Self::probe_due(p),
            self.rx_reclaim_due(p),
            ack,
            p.watch.map_or(0, |w| w.due),
        ]
        .into_iter()
        .filter(|&t| t != 0)
        .min()
        .unwrap_or(0)
    }

    /// Whether context IDs are scarce enough that idle receive contexts
    /// are reclaimed (see [`Self::rx_reclaim_due`]).
    fn pdc_ids_scarce(&self) -> bool {
        self.pdc_idle != 0 && 2 * self.pdc_ids_in_use() >= self.max_pdcs
    }

    /// The earliest of all peers' deadlines (0 = none), the index brought
    /// up to date first.
    fn earliest_peer_deadline(&self) -> u64 {
        let mut index = self.peers.deadlines();
        index.set_ids_scarce(self.pdc_ids_scarce(), self.peers.len());
        index.refresh(|p| self.peer_deadline(&self.peers[p]))
    }

    /// Debug builds (every test): the index agrees with a scan of every
    /// peer, so a write that escaped it cannot go unnoticed.
    #[cfg(debug_assertions)]
    fn check_deadline_index(&self, indexed: Option<u64>) {
        let scanned = self
            .peers
            .iter()
            .map(|p| self.peer_deadline(p))
            .filter(|&t| t != 0)
            .min();
        assert_eq!(indexed, scanned, "peer deadline index out of date");
    }

    pub fn handle_timeout(&mut self, now: u64) {
        // No timer may act on state an ACK already in hand changes.
        self.handle_trailer_acks();
        self.rendezvous_timer(now);
        let mut due = std::mem::take(&mut self.timers_due);
        due.clear();
        self.earliest_peer_deadline();
        self.peers.deadlines().take_due(now, &mut due);
        // Watches first, as when they had a pass of their own.
        for &p in &due {
            self.watch_timer(p, now);
        }
        for &p in &due {
            let owed = match self.peers[p].rx.as_ref() {
                Some(rx) => rx.ack_pending && rx.ack_due <= now,
                None => false,
            };
            if owed {
                self.queue_ack(p);
            }
        }
        for &p in &due {
            self.close_timer(p, now);
            self.rx_reclaim_timer(p, now);
            self.probe_timer(p, now);
            let rto_due = self.peers[p].tx.rto_due;
            if rto_due == 0 || rto_due > now {
                continue;
            }
            let peer = &mut self.peers[p];
            let (cc, lb) = (&mut peer.cc, &mut peer.lb);
            let mut expired = std::mem::take(&mut self.timeout_scratch);
            let worst =
                peer.tx
                    .on_timeout_with(now, self.rto_min, self.rto_max, |bytes, entropy| {
                        cc.on_timeout(now, bytes as u64);
                        lb.on_feedback(now, entropy, PathFeedback::Timeout);
                        expired.push(entropy);
                    });
            peer.forget_lost();
            self.stats.timeouts += expired.len() as u64;
            for entropy in expired.drain(..) {
                self.record(p, now, TraceKind::Timeout, entropy, 0, false);
            }
            self.timeout_scratch = expired;
            if worst > self.max_retries {
                self.give_up_on(p);
            } else {
                self.mark_ready(p);
            }
        }
        self.timers_due = due;
    }

    /// The round trip probes are timed with: the congestion control's base
    /// RTT, else the smoothed RTT (0 = none known yet).
    pub(super) fn probe_rtt(p: &Peer) -> u64 {
        match p.cc.base_rtt() {
            0 => p.tx.srtt(),
            b => b,
        }
    }

    /// When peer `p` should be probed (0 = not): after three base RTTs of
    /// silence with packets outstanding (NSCC.md section 5).
    fn probe_due(p: &Peer) -> u64 {
        p.tx.probe_due(3 * Self::probe_rtt(p))
    }

    /// Send a probe (control type 6) when due; the receiver answers with an
    /// ACK, and a prompt answer turns what is still missing into
    /// retransmissions (`TxPdc::probe_answered`).
    fn probe_timer(&mut self, p: usize, now: u64) {
        let due = Self::probe_due(&self.peers[p]);
        if due == 0 || due > now {
            return;
        }
        let peer = &mut self.peers[p];
        let Some(probe) = peer.tx.control(ControlType::Probe, peer.tx.next_psn()) else {
            return;
        };
        peer.tx.probe_sent(now);
        self.stats.probes_sent += 1;
        let to = peer.addr;
        self.control_queue
            .push_back((to, ControlOut::Control(probe)));
    }

    /// The earliest send-side deadline of a peer: its retransmission timer,
    /// its close handshake's resend, or the moment it becomes idle long
    /// enough to close (0 = none).
    fn tx_deadline(&self, p: &Peer) -> u64 {
        let idle = match p.closing {
            Some(c) => c.sent_at + p.tx.rto(self.rto_min, self.rto_max, c.tries),
            None if self.pdc_idle > 0 && p.tx.remote_id.is_some() && p.tx_idle() => {
                p.tx_active_at + self.pdc_idle
            }
            None => 0,
        };
        match (p.tx.rto_due, idle) {
            (0, t) | (t, 0) => t,
            (a, b) => a.min(b),
        }
    }

    /// Close handshake, send side: start it once the context has been idle
    /// for `pdc_idle`, resend the close until the receiver answers, and give
    /// up (forget the context anyway) after `max_retries`.
    fn close_timer(&mut self, p: usize, now: u64) {
        let (rto_min, rto_max) = (self.rto_min, self.rto_max);
        let peer = &mut self.peers[p];
        if peer.tx.remote_id.is_none() {
            return;
        }
        let closing = match peer.closing {
            Some(c) if now >= c.sent_at + peer.tx.rto(rto_min, rto_max, c.tries) => {
                if c.tries >= self.max_retries {
                    self.reset_tx_pdc(p);
                    return;
                }
                Closing {
                    sent_at: now,
                    tries: c.tries + 1,
                    ..c
                }
            }
            None if self.pdc_idle > 0
                && peer.tx_idle()
                && now >= peer.tx_active_at + self.pdc_idle =>
            {
                return self.start_close(p, now);
            }
            _ => return,
        };
        self.send_close(p, closing);
    }

    /// Receive side: when to act on a context its sender has shown no sign
    /// of holding for twice `pdc_idle` (a live sender closes an idle one
    /// itself after `pdc_idle`), 0 = not. A context with a message of the
    /// sender still here (being received, or waiting for a receive) stays,
    /// and so does every context while at least half the context IDs are
    /// free: a sender that keeps idle contexts open (its own
    /// `FI_UET_PDC_IDLE_US` is larger, or 0) and is merely stopped for a
    /// while (a debugger) would otherwise find its context gone and its
    /// next message failed.
    ///
    /// Except a sender silent in the middle of a message (packets of it
    /// still to come, after twice the larger of `rto_max` and `pdc_idle`:
    /// a live one resends sooner): it is asked the same way, whatever the
    /// IDs, and one that never answers has its unfinished messages
    /// dropped with the context ([`abandon_incoming`]). Otherwise a sender
    /// that crashed mid-message would hold the receive matched to it, or
    /// the bytes staged for it, for ever. A sender stopped that long in a
    /// debugger loses the message, as its own operations waiting on us
    /// fail after as many unanswered probes.
    ///
    /// Whether a message has packets still to come is only known by a
    /// pass over the peer's incoming messages, which thousands of
    /// unexpected ones make long; a deadline is asked for after every
    /// arrival. So while the context holds messages the deadline assumes
    /// one is unfinished, and the timer makes the pass: finding them all
    /// in, it notes when (`reclaim_checked`) and looks again a quiet
    /// period later, asked to close or not. A message that starts arriving
    /// after that look moves `quiet_since` past it, so an unfinished
    /// message is reclaimed when it was before, or up to a quiet period
    /// later if every packet of it that came was turned away by
    /// backpressure (those do not count as signs of the sender).
    ///
    /// [`abandon_incoming`]: Self::abandon_incoming
    fn rx_reclaim_due(&self, p: &Peer) -> u64 {
        let Some(rx) = p.rx.as_ref() else {
            return 0;
        };
        if !p.inbound.is_empty() {
            let since = rx.quiet_since.max(rx.reclaim_checked);
            let asking = rx.close_asks > 0 && rx.reclaim_checked <= rx.quiet_since;
            return match asking {
                false => since + 2 * self.rto_max.max(self.pdc_idle),
                true => since + self.rto_max,
            };
        }
        if self.pdc_idle == 0 || 2 * self.pdc_ids_in_use() < self.max_pdcs {
            return 0;
        }
        match rx.close_asks {
            0 => rx.quiet_since + 2 * self.pdc_idle,
            _ => rx.quiet_since + self.rto_max,
        }
    }

    /// Ask the sender of a long-silent receive context to close it (it
    /// closes it if idle, or answers with an ACK request if busy); after
    /// `max_retries` requests nobody answered, the sender is gone (a
    /// crashed process, a spoofed SYN) and the context is dropped, so dead
    /// senders do not hold context IDs for ever.
    fn rx_reclaim_timer(&mut self, p: usize, now: u64) {
        let due = self.rx_reclaim_due(&self.peers[p]);
        if due == 0 || due > now {
            return;
        }
        let peer = &mut self.peers[p];
        // Parked messages need no context (see `MsgRef`).
        let waiting_only =
            !peer.inbound.is_empty() && !peer.inbound.values().any(Inbound::awaits_packets);
        let Some(rx) = peer.rx.as_mut() else {
            return;
        };
        if waiting_only {
            // Its messages wait for receives only: it stays.
            rx.reclaim_checked = now;
            return;
        }
        if u32::from(rx.close_asks) >= self.max_retries {
            self.stats.rx_pdcs_reclaimed += 1;
            self.abandon_incoming(p);
            self.drop_rx_context(p, now);
            return;
        }
        rx.close_asks = rx.close_asks.saturating_add(1);
        rx.quiet_since = now;
        self.ask_to_close(p);
    }

    /// Queue a close request for peer `p`'s receive context, if open.
    pub(super) fn ask_to_close(&mut self, p: usize) {
        let peer = &self.peers[p];
        let Some(rx) = peer.rx.as_ref() else {
            return;
        };
        let ask = ControlRepr {
            ctl_type: ControlType::CloseRequest,
            flags: 0,
            probe_opaque: 0,
            psn: rx.cack().wrapping_add(1),
            spdcid: rx.local_id,
            dpdcid: rx.remote_id,
            payload: 0,
        };
        let to = peer.addr;
        self.control_queue.push_back((to, ControlOut::Control(ask)));
    }

    /// Start the close handshake of peer `p`'s idle send context.
    pub(super) fn start_close(&mut self, p: usize, now: u64) {
        let closing = Closing {
            psn: self.peers[p].tx.next_psn(),
            sent_at: now,
            tries: 0,
        };
        self.send_close(p, closing);
    }

    fn send_close(&mut self, p: usize, closing: Closing) {
        let peer = &mut self.peers[p];
        // Every close packet carries a fresh attempt number, which the
        // answer echoes: a refusal of an earlier attempt, answered before
        // the receiver could let the context go, must not cancel the close
        // whose later attempt it confirms (it drops its context then).
        peer.close_attempts = peer.close_attempts.wrapping_add(1);
        peer.closing = Some(closing);
        let Some(mut close) = peer.tx.control(ControlType::Close, closing.psn) else {
            return;
        };
        close.payload = peer.close_attempts.into();
        let to = peer.addr;
        self.control_queue
            .push_back((to, ControlOut::Control(close)));
    }

    /// Start a fresh send context for this peer (after a close or a
    /// failure): new PDC ID, new random start PSN, SYN on the next packets.
    /// Message IDs restart too, as the receiver's matching does.
    pub(super) fn reset_tx_pdc(&mut self, p: usize) {
        let start = self.rng.gen();
        let peer = &mut self.peers[p];
        peer.tx.abandon();
        self.tx_by_id.remove(&peer.tx.local_id);
        // The ID goes back to the pool; the next packet takes a fresh one.
        peer.tx = TxPdc::new(0, start);
        peer.closing = None;
        peer.close_attempts = 0;
        // The congestion state stays (same path, same peer); what was in
        // flight on the old context is gone.
        peer.in_flight_bytes = 0;
        peer.rcvd_units = 0;
        self.renumber_queued(p);
        self.mark_ready(p);
    }

    /// Message IDs restart at 0 with a fresh context, as the receiver's
    /// matching does. Messages still queued (posted while a close was
    /// under way, so none has left) took IDs of the old context: they take
    /// the new one's first IDs, in order, or the receiver would wait for
    /// the IDs before them for ever.
    fn renumber_queued(&mut self, p: usize) {
        let peer = &mut self.peers[p];
        let mut moved = Vec::new();
        // An entry whose message is gone would take an ID and send nothing.
        let messages = &peer.messages;
        peer.queue.retain(|item| match item {
            TxItem::Message(id) => messages.contains_key(id),
            TxItem::Response { .. } => true,
        });
        for item in peer.queue.iter_mut() {
            if let TxItem::Message(id) = item {
                let new = moved.len() as u16;
                moved.push((*id, new));
                *id = new;
            }
        }
        peer.next_msg_id = moved.len() as u16;
        peer.oldest_msg_id = 0;
        if moved.is_empty() {
            return;
        }
        // Everything out first: old and new IDs may overlap.
        let taken: Vec<_> = moved
            .iter()
            .filter_map(|&(old, new)| peer.messages.remove(&old).map(|m| (new, m)))
            .collect();
        for (new, mut m) in taken {
            if let Some(RmaTx::Rendezvous { key, .. }) = &mut m.rma {
                // The key names the send by its message ID.
                *key = *key & !0xffff | new as u64;
            }
            peer.messages.insert(new, m);
        }
        let reads: Vec<_> = moved
            .iter()
            .filter_map(|&(old, new)| self.reads.remove(&(p, old)).map(|r| (new, r)))
            .collect();
        for (new, r) in reads {
            self.reads.insert((p, new), r);
        }
        self.renumber_pull_requests(p, &moved);
    }

    /// The peer went silent (our retransmissions or probes went
    /// unanswered): fail it, and offer it no share of a same-host copy
    /// until it is heard from ([`Peer::given_up`]).
    pub(super) fn give_up_on(&mut self, p: usize) {
        self.peers[p].given_up = true;
        self.fail_peer(p);
    }

    /// The peer stopped answering, or lost our context: fail everything in
    /// flight to it and start a fresh delivery context for whatever is
    /// posted later.
    pub(super) fn fail_peer(&mut self, p: usize) {
        self.stats.peers_failed += 1;
        self.peers[p].queue.clear();
        self.reset_tx_pdc(p);
        let peer = &mut self.peers[p];
        let mut failed: Vec<(u16, TxMessage)> = peer.messages.drain().collect();
        peer.message_counts = MessageCounts::default();
        failed.sort_by_key(|(id, _)| *id);
        for (_, m) in failed {
            if !m.completed {
                self.completions.push_back(Completion {
                    error: Some(CompletionError::PeerUnreachable),
                    ..Self::op_completion(&m)
                });
            }
            let answer = m.is_answer();
            self.message_gone(m.payload, answer);
        }
        self.fail_reads(p);
    }
}
