//! Matching incoming messages to posted receives, in each sender's order, and
//! completing them.

use std::collections::hash_map::Entry;

use super::*;

impl Engine {
    // ----- matching and delivery ----------------------------------------------------

    /// Attach a receive to an incoming message (unexpected or just matched).
    pub(super) fn bind_receive(&mut self, p: usize, msg_id: u16, recv: RecvOp) {
        let Some(inb) = self.peers[p].inbound.get_mut(&msg_id) else {
            return;
        };
        self.staged_bytes = self.staged_bytes.saturating_sub(inb.bind(recv));
        let (rendezvous, complete) = (inb.rendezvous.is_some(), inb.complete());
        self.after_bind(p, msg_id, rendezvous, complete);
    }

    /// What follows binding a receive to message `msg_id` (`rendezvous`:
    /// it is a rendezvous send; `complete`: all its bytes are in).
    pub(super) fn after_bind(&mut self, p: usize, msg_id: u16, rendezvous: bool, complete: bool) {
        // A rendezvous message pulls its remainder into the buffer now
        // (which may complete it: the part it does not pull counts as in).
        if rendezvous {
            self.start_pull(p, msg_id);
        }
        if rendezvous || complete {
            self.finish_if_complete(p, msg_id);
        }
    }

    pub(super) fn discard(&mut self, p: usize, msg_id: u16) {
        if let Some(inb) = self.peers[p].inbound.get_mut(&msg_id) {
            self.staged_bytes = self.staged_bytes.saturating_sub(inb.staged_bytes());
            inb.state = InboundState::Discard;
        }
        // A rendezvous sender learns that nothing will be pulled.
        self.start_pull(p, msg_id);
        self.finish_if_complete(p, msg_id);
    }

    /// Match every message whose turn has come, in the sender's order.
    pub(super) fn match_in_order(&mut self, p: usize) {
        self.match_watching(p, u64::MAX);
    }

    /// [`match_in_order`](Self::match_in_order), telling whether the
    /// message at sequence number `watch` got a receive.
    pub(super) fn match_watching(&mut self, p: usize, watch: u64) -> bool {
        let mut watched_bound = false;
        loop {
            let peer = &mut self.peers[p];
            let seq = peer.next_match_seq;
            let id = seq as u16;
            // Alone in the table: no later message to look for next
            // (binding only ever removes entries).
            let last = peer.inbound.len() == 1;
            let Some(inb) = peer.inbound.get_mut(&id) else {
                return watched_bound;
            };
            if inb.seq != seq {
                return watched_bound;
            }
            match inb.state {
                InboundState::Staged(_) => {}
                // RMA takes its turn in the sender's message order but
                // matches no receive.
                InboundState::Rma(_) => {
                    peer.next_match_seq += 1;
                    if inb.complete() {
                        peer.inbound.remove(&id);
                    }
                    continue;
                }
                _ => return watched_bound,
            }
            peer.next_match_seq += 1;
            let src = peer.addr;
            let bound = Self::take_turn(
                &mut self.posted,
                &mut self.unexpected,
                &mut self.staged_bytes,
                (p, src, id),
                inb,
            );
            if let Some((rendezvous, complete)) = bound {
                watched_bound |= seq == watch;
                self.after_bind(p, id, rendezvous, complete);
            }
            if last {
                return watched_bound;
            }
        }
    }

    /// Message `id` of peer `p` (at `src`) has its turn: bind it to the
    /// first posted receive that accepts it, or queue it as unexpected.
    /// When bound, returns (rendezvous send, complete) for
    /// [`after_bind`](Self::after_bind).
    pub(super) fn take_turn(
        posted: &mut PostedQueues,
        unexpected: &mut UnexpectedQueue,
        staged_bytes: &mut usize,
        (p, src, id): (usize, SocketAddr, u16),
        inb: &mut Inbound,
    ) -> Option<(bool, bool)> {
        let header = inb.header;
        match posted.take_match_len(src, header.tagged, header.tag, header.len) {
            Some(recv) => {
                *staged_bytes = staged_bytes.saturating_sub(inb.bind(recv));
                Some((inb.rendezvous.is_some(), inb.complete()))
            }
            None => {
                if let InboundState::Staged(stage) = &mut inb.state {
                    inb.state = InboundState::Unexpected(std::mem::take(stage));
                }
                unexpected.push(Unexpected {
                    peer: p,
                    src,
                    msg_id: id,
                    tagged: header.tagged,
                    tag: header.tag,
                    claimed: None,
                });
                None
            }
        }
    }

    /// Complete a matched (or discarded) message once all its bytes are in.
    pub(super) fn finish_if_complete(&mut self, p: usize, msg_id: u16) {
        let peer = &mut self.peers[p];
        let Entry::Occupied(entry) = peer.inbound.entry(msg_id) else {
            return;
        };
        let m = entry.get();
        if !(m.complete() && m.bound_or_discarded()) {
            return;
        }
        let addr = peer.addr;
        Self::deliver(
            &mut self.completions,
            &mut self.spares,
            addr,
            entry.remove(),
        );
    }

    /// The receive completion of a finished message (if it had a receive
    /// that wants one).
    pub(super) fn deliver(
        completions: &mut VecDeque<Completion>,
        spares: &mut Spares,
        src: SocketAddr,
        inb: Inbound,
    ) {
        let h = inb.header;
        if let InboundState::Posted(recv) = inb.state {
            let cap = recv.buffer.len() as u64;
            let error = (h.len > cap).then(|| CompletionError::Truncated {
                overflow: (h.len - cap) as usize,
            });
            if recv.signal || error.is_some() {
                completions.push_back(Completion {
                    kind: CompletionKind::Recv,
                    context: recv.context,
                    tagged: h.tagged,
                    len: h.len.min(cap) as usize,
                    buf: recv.buffer.base_addr(),
                    tag: h.tag,
                    data: h.cq_data,
                    src: Some(src),
                    error,
                });
            }
            spares.keep_box(recv.buffer);
        }
    }
}
