//! Matching incoming messages to posted receives, in each sender's order, and
//! completing them.

use std::collections::hash_map::Entry;

use super::*;

/// Where one of a peer's incoming messages is kept: under its 16-bit ID
/// (`Peer::inbound`), or, whole and unexpected once the sender's IDs came
/// round to its own, under its sequence number (`Engine::parked`). Only a
/// message under its ID gets packets, and only such a message can be a
/// rendezvous send waiting for its pull (its sender holds the ID until
/// then).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MsgRef {
    Live(u16),
    Parked(u64),
}

/// Message `at` of peer `p`, from the tables themselves (so the caller may
/// change other fields of the engine meanwhile).
fn inbound_in<'a>(
    peers: &'a mut PeerTable,
    parked: &'a mut FastMap<(usize, u64), Inbound>,
    p: usize,
    at: MsgRef,
) -> Option<&'a mut Inbound> {
    match at {
        MsgRef::Live(id) => peers.get_mut(p)?.inbound.get_mut(&id),
        MsgRef::Parked(seq) => parked.get_mut(&(p, seq)),
    }
}

/// [`Engine::locate`], from the tables themselves.
pub(super) fn locate_in(
    peers: &PeerTable,
    parked: &FastMap<(usize, u64), Inbound>,
    p: usize,
    seq: u64,
) -> Option<MsgRef> {
    let id = seq as u16;
    let peer = peers.get(p)?;
    if peer.inbound.get(&id).is_some_and(|m| m.seq == seq) {
        Some(MsgRef::Live(id))
    } else if peer.parked > 0 && parked.contains_key(&(p, seq)) {
        Some(MsgRef::Parked(seq))
    } else {
        None
    }
}

impl Peer {
    /// Some message of this peer is here: being received, waiting for its
    /// turn, or waiting for a receive.
    pub(super) fn holds_messages(&self) -> bool {
        !self.inbound.is_empty() || self.parked > 0
    }
}

impl Engine {
    /// Where message `seq` of peer `p` (an unexpected queue entry's) is
    /// kept.
    pub(super) fn locate(&self, p: usize, seq: u64) -> Option<MsgRef> {
        locate_in(&self.peers, &self.parked, p, seq)
    }

    pub(super) fn inbound_at(&self, p: usize, at: MsgRef) -> Option<&Inbound> {
        match at {
            MsgRef::Live(id) => self.peers.get(p)?.inbound.get(&id),
            MsgRef::Parked(seq) => self.parked.get(&(p, seq)),
        }
    }

    /// Move message `m` of peer `p` to the parked ones.
    pub(super) fn park(&mut self, p: usize, m: Inbound) {
        self.peers[p].parked += 1;
        self.parked.insert((p, m.seq), m);
    }

    /// Park peer `p`'s message under `id` if it waits, whole, for a
    /// receive: when the sender's IDs came round to its own, or start again
    /// in a new context. False when it may still get packets (or is a
    /// rendezvous send, whose pull names it by ID): it stays.
    pub(super) fn park_if_waiting(&mut self, p: usize, id: u16) -> bool {
        let peer = &mut self.peers[p];
        let waiting = peer
            .inbound
            .get(&id)
            .is_some_and(|m| m.waits_for_a_receive(peer.next_match_seq) && m.rendezvous.is_none());
        if let Some(m) = waiting.then(|| peer.inbound.remove(&id)).flatten() {
            self.park(p, m);
        }
        waiting
    }
}

/// The message under `key`, taken out once it is complete and bound to a
/// receive or discarded (one lookup: this runs for every message).
fn take_finished<K: std::hash::Hash + Eq>(
    map: &mut FastMap<K, Inbound>,
    key: K,
) -> Option<Inbound> {
    let Entry::Occupied(entry) = map.entry(key) else {
        return None;
    };
    let m = entry.get();
    (m.complete() && m.bound_or_discarded()).then(|| entry.remove())
}

impl Engine {
    // ----- matching and delivery ----------------------------------------------------

    /// Attach a receive to an incoming message (unexpected or just matched).
    pub(super) fn bind_receive(&mut self, p: usize, at: MsgRef, recv: RecvOp) {
        let Some(inb) = inbound_in(&mut self.peers, &mut self.parked, p, at) else {
            return;
        };
        self.staged_bytes = self.staged_bytes.saturating_sub(inb.bind(recv));
        let (rendezvous, complete) = (inb.rendezvous.is_some(), inb.complete());
        self.after_bind(p, at, rendezvous, complete);
    }

    /// What follows binding a receive to message `at` (`rendezvous`: it is
    /// a rendezvous send; `complete`: all its bytes are in).
    pub(super) fn after_bind(&mut self, p: usize, at: MsgRef, rendezvous: bool, complete: bool) {
        // A rendezvous message pulls its remainder into the buffer now
        // (which may complete it: the part it does not pull counts as in).
        if let (true, MsgRef::Live(id)) = (rendezvous, at) {
            self.start_pull(p, id);
        }
        if rendezvous || complete {
            self.finish_if_complete(p, at);
        }
    }

    pub(super) fn discard(&mut self, p: usize, at: MsgRef) {
        if let Some(inb) = inbound_in(&mut self.peers, &mut self.parked, p, at) {
            self.staged_bytes = self.staged_bytes.saturating_sub(inb.staged_bytes());
            inb.state = InboundState::Discard;
        }
        // A rendezvous sender learns that nothing will be pulled.
        if let MsgRef::Live(id) = at {
            self.start_pull(p, id);
        }
        self.finish_if_complete(p, at);
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
                (p, src),
                inb,
            );
            if let Some((rendezvous, complete)) = bound {
                watched_bound |= seq == watch;
                self.after_bind(p, MsgRef::Live(id), rendezvous, complete);
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
        (p, src): (usize, SocketAddr),
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
                    seq: inb.seq,
                    tagged: header.tagged,
                    tag: header.tag,
                    claimed: None,
                });
                None
            }
        }
    }

    /// Complete a matched (or discarded) message once all its bytes are in.
    pub(super) fn finish_if_complete(&mut self, p: usize, at: MsgRef) {
        let peer = &mut self.peers[p];
        let finished = match at {
            MsgRef::Live(id) => take_finished(&mut peer.inbound, id),
            MsgRef::Parked(seq) => {
                let m = take_finished(&mut self.parked, (p, seq));
                peer.parked -= u32::from(m.is_some());
                m
            }
        };
        if let Some(m) = finished {
            let addr = peer.addr;
            Self::deliver(&mut self.completions, &mut self.spares, addr, m);
        }
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
