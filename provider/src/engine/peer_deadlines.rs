//! The peer table, with an index of its entries' timer deadlines.
//!
//! Every peer has deadlines (retransmission, probe, close handshake,
//! delayed ACK, receive-context reclaim, the watch of a rendezvous step
//! waiting on it), and the endpoint asks for the
//! earliest after every busy progress call. A scan over all peers made that
//! question, and every timer firing, cost time in proportion to the peers
//! an endpoint has talked to: about 10 us per progress call at 1024 peers,
//! an MPI job's all-to-all. Here each entry's earliest deadline is cached
//! in a min-heap, and only entries written since (any `&mut` access to an
//! entry marks it) are computed again, so a progress call costs the same
//! with one peer or thousands.
//!
//! Heap items are never removed in place: an item whose deadline is no
//! longer its entry's (`queued`) is dropped when it reaches the top, and
//! the heap is rebuilt when such items outnumber the entries.

use std::cell::{RefCell, RefMut};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::{Index, IndexMut};

use super::Peer;

pub(super) struct PeerTable {
    entries: Vec<Peer>,
    deadlines: RefCell<Deadlines>,
}

#[derive(Default)]
pub(super) struct Deadlines {
    /// Entries written since their deadline was last computed.
    stale: Vec<usize>,
    is_stale: Vec<bool>,
    /// The deadline of each entry's live heap item (0 = none).
    queued: Vec<u64>,
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    /// The receive-reclaim deadlines of every entry depend on whether the
    /// context IDs are scarce: a change recomputes them all.
    ids_scarce: bool,
}

impl Deadlines {
    /// Mark entry `p` stale; `is_stale` and `queued` cover every entry
    /// (sized by [`PeerTable::push`]), so this stays a load and a branch
    /// on the engine's every write to a peer.
    #[inline(always)]
    fn touch(&mut self, p: usize) {
        if !self.is_stale[p] {
            self.mark_stale(p);
        }
    }

    #[inline(never)]
    fn mark_stale(&mut self, p: usize) {
        self.is_stale[p] = true;
        self.stale.push(p);
    }

    fn touch_all(&mut self, n: usize) {
        for p in 0..n {
            self.touch(p);
        }
    }

    /// Recompute the stale entries with `deadline`, then drop dead items
    /// from the top: the earliest deadline, 0 = none.
    pub(super) fn refresh(&mut self, mut deadline: impl FnMut(usize) -> u64) -> u64 {
        while let Some(p) = self.stale.pop() {
            self.is_stale[p] = false;
            let d = deadline(p);
            if d != self.queued[p] {
                self.queued[p] = d;
                if d != 0 {
                    self.heap.push(Reverse((d, p)));
                }
            }
        }
        if self.heap.len() > 2 * self.queued.len() + 64 {
            self.heap.clear();
            for (p, &d) in self.queued.iter().enumerate() {
                if d != 0 {
                    self.heap.push(Reverse((d, p)));
                }
            }
        }
        while let Some(&Reverse((d, p))) = self.heap.peek() {
            if self.queued[p] == d {
                return d;
            }
            self.heap.pop();
        }
        0
    }

    /// After [`refresh`](Self::refresh): take the entries due by `now` into
    /// `due` (ascending, each once). They count as stale until their timers
    /// have run and they are computed again.
    pub(super) fn take_due(&mut self, now: u64, due: &mut Vec<usize>) {
        while let Some(&Reverse((d, p))) = self.heap.peek() {
            if d > now {
                break;
            }
            self.heap.pop();
            if self.queued[p] == d {
                self.queued[p] = 0;
                due.push(p);
                self.touch(p);
            }
        }
        due.sort_unstable();
    }

    /// Set whether context IDs are scarce (see `ids_scarce`).
    pub(super) fn set_ids_scarce(&mut self, scarce: bool, entries: usize) {
        if scarce != self.ids_scarce {
            self.ids_scarce = scarce;
            self.touch_all(entries);
        }
    }
}

impl PeerTable {
    pub(super) fn new() -> PeerTable {
        PeerTable {
            entries: Vec::new(),
            deadlines: RefCell::new(Deadlines::default()),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn push(&mut self, peer: Peer) {
        self.entries.push(peer);
        let d = self.deadlines.get_mut();
        d.is_stale.push(false);
        d.queued.push(0);
        d.touch(self.entries.len() - 1);
    }

    pub(super) fn get(&self, p: usize) -> Option<&Peer> {
        self.entries.get(p)
    }

    #[inline]
    pub(super) fn get_mut(&mut self, p: usize) -> Option<&mut Peer> {
        let peer = self.entries.get_mut(p)?;
        self.deadlines.get_mut().touch(p);
        Some(peer)
    }

    pub(super) fn iter(&self) -> std::slice::Iter<'_, Peer> {
        self.entries.iter()
    }

    /// The deadline index, for the engine's timers (`engine/timers.rs`).
    /// Not to be held across a write to an entry.
    pub(super) fn deadlines(&self) -> RefMut<'_, Deadlines> {
        self.deadlines.borrow_mut()
    }
}

impl Index<usize> for PeerTable {
    type Output = Peer;

    #[inline]
    fn index(&self, p: usize) -> &Peer {
        &self.entries[p]
    }
}

impl IndexMut<usize> for PeerTable {
    /// Any write may move the entry's deadlines: it is computed again
    /// before the next question.
    #[inline]
    fn index_mut(&mut self, p: usize) -> &mut Peer {
        let peer = &mut self.entries[p];
        self.deadlines.get_mut().touch(p);
        peer
    }
}
