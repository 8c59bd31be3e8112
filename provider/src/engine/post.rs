//! Application operations: post sends and receives, probes, cancel, completions.

use super::*;

impl Engine {
    // ----- application operations -------------------------------------------------

    /// Admit one outgoing operation of `len` bytes to `dest`: within the
    /// message size, the endpoint's queue and the peer's message IDs.
    /// Counts it as outstanding and returns the peer's index.
    pub(super) fn admit_send(&mut self, now: u64, dest: SocketAddr, len: usize) -> Result<usize> {
        if len > Config::MAX_MSG_SIZE {
            return Err(Error::MessageTooLong {
                len,
                max: Config::MAX_MSG_SIZE,
            });
        }
        if self.sends_outstanding >= Config::QUEUE_DEPTH {
            return Err(Error::Again);
        }
        let p = self.peer_index(dest, now);
        let peer = &mut self.peers[p];
        // Half the 16-bit message IDs have gone by since the oldest send
        // still held (a rendezvous send whose receive is not posted yet):
        // this one waits until that one is done.
        if peer.messages.len() >= MAX_MSGS_PER_PEER || !peer.msg_ids_left() {
            return Err(Error::Again);
        }
        self.sends_outstanding += 1;
        Ok(p)
    }

    pub fn post_send(&mut self, now: u64, op: SendOp) -> Result<()> {
        let len = op.payload.len();
        let p = self.admit_send(now, op.dest, len)?;
        let mut payload = op.payload;
        let mut completed = false;
        if op.level == CompletionLevel::Inject {
            // The source buffer is free once this call returns.
            if let Payload::Borrowed(b) = &payload {
                let mut copy = self.spares.payload();
                copy.resize(b.len(), 0);
                b.read_at(0, &mut copy);
                payload = Payload::Owned(copy);
            }
            if op.signal {
                self.completions
                    .push_back(Completion::send(op.context, op.tag.is_some(), len));
                completed = true;
            }
        }
        // A send that reports only failure (fi_cq(3): errors are due even
        // when no completion was asked for) is done with once every packet
        // is acknowledged, whatever level it named; until then a failure
        // of the peer reports it.
        let level = if op.signal {
            op.level
        } else {
            CompletionLevel::Transmit
        };
        let peer = &mut self.peers[p];
        peer.tx_active_at = now;
        let id = peer.next_msg_id;
        peer.next_msg_id = id.wrapping_add(1);
        // Large sends are pulled by the receiver once matched.
        let rma = self
            .rendezvous_eager(p, len)
            .map(|eager| self.new_rendezvous(p, id, eager, &payload, now));
        let peer = &mut self.peers[p];
        peer.add_message(
            id,
            TxMessage {
                tagged: op.tag.is_some(),
                tag: op.tag.unwrap_or(0),
                cq_data: op.cq_data,
                payload,
                context: op.context,
                level,
                signal: op.signal,
                next_offset: 0,
                started: false,
                unacked_packets: 0,
                completed,
                delivered: false,
                failed: false,
                rma,
            },
        );
        peer.queue.push_back(TxItem::Message(id));
        self.mark_ready(p);
        // A delivery-complete send waits for the peer's response (a
        // rendezvous send is watched already, by new_rendezvous).
        if level == CompletionLevel::Delivery {
            self.watch_if_awaited(p, id, now);
        }
        Ok(())
    }

    pub fn post_recv(&mut self, now: u64, op: RecvOp) -> Result<()> {
        self.rendezvous_time(now);
        let probe = op.probe;
        if probe.peek || probe.claim || probe.discard {
            return self.probe(op);
        }
        let mut op = op;
        let mut took_messages = false;
        while !self.unexpected.is_empty() {
            let found = self.unexpected.find(&op);
            let Some(u) = found.and_then(|slot| self.unexpected.remove(slot)) else {
                break;
            };
            let Some(at) = self.locate(u.peer, u.seq) else {
                // Cannot happen: an unexpected entry always has its
                // inbound state.
                continue;
            };
            // A multi-receive buffer takes every waiting message it has
            // room for and stays posted with the rest.
            let len = self.inbound_at(u.peer, at).map(|m| m.header.len);
            match len.and_then(|l| op.carve(l)) {
                Some(piece) => {
                    self.bind_receive(u.peer, at, piece);
                    took_messages = true;
                }
                None => {
                    self.bind_receive(u.peer, at, op);
                    return Ok(());
                }
            }
        }
        // A buffer that took messages already is in, full queue or not:
        // refusing it now would leave them in a buffer its owner thinks
        // was never posted.
        if !took_messages && self.posted.len() >= Config::QUEUE_DEPTH {
            return Err(Error::Again);
        }
        self.posted.push(op);
        Ok(())
    }

    /// fi_trecvmsg with FI_PEEK / FI_CLAIM / FI_DISCARD.
    pub(super) fn probe(&mut self, op: RecvOp) -> Result<()> {
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
            self.unexpected.find(&op)
        } else {
            self.unexpected.find_claimed(op.context)
        };
        let Some((i, u)) = found.and_then(|i| self.unexpected.get(i).map(|&u| (i, u))) else {
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
        let found = self.locate(u.peer, u.seq);
        let header = found
            .and_then(|at| self.inbound_at(u.peer, at))
            .map(|m| m.header);
        let (Some(at), Some(header)) = (found, header) else {
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
                self.discard(u.peer, at);
            } else if claim {
                self.unexpected.claim(i, op.context);
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
            self.discard(u.peer, at);
        } else {
            self.bind_receive(u.peer, at, op);
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

    /// Keep queued ACKs back while `held`: the transmit calls return only
    /// control packets and data. A driver holds them while the application
    /// has a message just completed to answer, so the answer does not queue
    /// behind an ACK; ACKs are cumulative, so one sent later says as much.
    pub fn hold_acks(&mut self, held: bool) {
        self.acks_held = held;
    }

    /// True when ACKs are queued to send.
    pub fn has_queued_acks(&self) -> bool {
        !self.ack_queue.is_empty()
    }

    /// The peer of the first queued ACK: whose message an answer would
    /// answer.
    pub fn first_queued_ack_peer(&self) -> Option<SocketAddr> {
        self.ack_queue.front().map(|&p| self.peers[p].addr)
    }

    /// Whether every queued ACK may wait for the application's next send
    /// (`FI_UET_DEFER_ACKS`). `replies_follow`: the application has been
    /// seen answering the messages it takes.
    ///
    /// A reply (nothing of ours to that peer is unacknowledged, or an ACK
    /// for all of ours came riding on it) may wait once the application is
    /// seen answering. A request that crossed ours in flight (both ends sent
    /// before either took the other's, as in a halo exchange) is no reply:
    /// its sender may wait for this ACK to complete its own send, and
    /// holding it for an answer already sent would stall that peer until
    /// the hold runs out, or until our next call if the application goes
    /// elsewhere. Unless its sender said nothing of its waits for the ACK
    /// (`NO_WAIT`, as after an `fi_inject`; ACKs nobody asked for, such
    /// as those of a stream's every 16 KiB, are no such ACKs: they clock
    /// the sender's window): holding it then stalls nobody,
    /// so it waits for our next send whatever the application did before,
    /// and an exchange whose ranks compute between rounds spends no system
    /// call on it either.
    pub fn queued_acks_may_wait(&self, replies_follow: bool) -> bool {
        self.ack_queue.iter().all(|&p| {
            let peer = &self.peers[p];
            // A trailer for only some of ours (our next round's message
            // crossed it) makes no reply of this one.
            let reply = peer.tx.in_flight() == 0
                || self
                    .trailer_acks
                    .iter()
                    .any(|a| a.from == peer.addr && peer.tx.acked_through_last(a.cack_psn()));
            if reply {
                replies_follow
            } else {
                peer.rx
                    .as_ref()
                    .is_some_and(|rx| rx.ack_may_wait && !rx.ack_awaited)
            }
        })
    }

    /// True when control packets or data (of a peer the window lets send)
    /// are queued: anything besides ACKs.
    pub fn has_queued_data(&self) -> bool {
        !self.control_queue.is_empty() || !self.send_ring.is_empty()
    }

    /// Whether a peer still waits for something this endpoint took on:
    /// packets it has not acknowledged, data and control packets queued, or
    /// the rest of a rendezvous send the application was already told is
    /// done (inject complete) or will never hear of. A closing endpoint
    /// keeps going while this holds, so such a send is not lost to a close
    /// that follows it. A rendezvous send whose completion the application
    /// still awaits is one it gave up by closing, unless a receiver on
    /// this host is copying out of its memory: the application may free
    /// that memory once the close returns.
    pub fn owes_peers(&self) -> bool {
        // Data queued behind a close handshake is in no send ring yet.
        self.has_queued_data()
            || self.peers.iter().any(|p| {
                p.tx.in_flight() > 0
                    || !p.queue.is_empty()
                    || p.messages
                        .values()
                        .any(|m| m.lent() || (m.pull_pending() && !m.completion_awaited()))
            })
    }
}
