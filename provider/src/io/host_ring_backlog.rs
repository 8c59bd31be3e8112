//! Datagrams for same-host lanes that were full, per destination, in order.
//!
//! A full lane means its receiver is not taking (it computes, or sleeps
//! between its idle-progress looks). Its datagrams wait here, copied, while
//! the engine holds that peer's data (`Engine::hold_data_for`), so traffic
//! to every other peer goes on. Only what was already on its way waits: the
//! packets of the batch being sent, ACKs and control packets, so a
//! destination's queue stays short; past [`MAX_WAITING`] a datagram is
//! dropped, as a full network queue would, and the engine's loss recovery
//! sends it again.

use std::collections::VecDeque;
use std::net::SocketAddr;

/// Datagrams one destination may have waiting.
pub const MAX_WAITING: usize = 256;
/// Copy buffers kept for reuse (a stall does not allocate once warm).
const SPARE_BUFFERS: usize = 64;

/// One datagram waiting for room.
pub struct Waiting {
    pub tos: u8,
    pub bytes: Vec<u8>,
}

#[derive(Default)]
pub struct Backlog {
    /// Destinations with datagrams waiting (few: a linear search).
    queues: Vec<(SocketAddr, VecDeque<Waiting>)>,
    spare: Vec<Vec<u8>>,
    /// Destinations whose queue began, and those whose queue emptied,
    /// since the last [`take_change`](Self::take_change).
    new: Vec<SocketAddr>,
    emptied: Vec<SocketAddr>,
    /// Datagrams dropped over [`MAX_WAITING`].
    pub dropped: u64,
}

impl Backlog {
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Whether datagrams for `to` wait (a later one must wait behind them).
    pub fn holds(&self, to: SocketAddr) -> bool {
        !self.queues.is_empty() && self.queues.iter().any(|(a, _)| *a == to)
    }

    /// Copy the datagram made of `parts` behind those waiting for `to`.
    pub fn add(&mut self, to: SocketAddr, tos: u8, parts: &[&[u8]]) {
        let i = match self.queues.iter().position(|(a, _)| *a == to) {
            Some(i) => i,
            None => {
                self.queues.push((to, VecDeque::new()));
                self.new.push(to);
                self.queues.len() - 1
            }
        };
        let queue = &mut self.queues[i].1;
        if queue.len() >= MAX_WAITING {
            self.dropped += 1;
            return;
        }
        let mut bytes = self.spare.pop().unwrap_or_default();
        bytes.clear();
        for part in parts {
            bytes.extend_from_slice(part);
        }
        queue.push_back(Waiting { tos, bytes });
    }

    /// The next change to tell the engine: `(destination, true)` when its
    /// queue began, `(destination, false)` when it emptied. A queue that
    /// emptied and began again reports both, in that order.
    pub fn take_change(&mut self) -> Option<(SocketAddr, bool)> {
        if let Some(to) = self.emptied.pop() {
            return Some((to, false));
        }
        self.new.pop().map(|to| (to, true))
    }

    /// Offer each destination's waiting datagrams, oldest first, to `send`,
    /// which returns false when that destination has no room for one (it
    /// stays, and so do those behind it).
    pub fn drain(&mut self, mut send: impl FnMut(SocketAddr, &Waiting) -> bool) {
        let mut i = 0;
        while i < self.queues.len() {
            let (to, queue) = &mut self.queues[i];
            while let Some(w) = queue.front() {
                if !send(*to, w) {
                    break;
                }
                if let Some(w) = queue.pop_front() {
                    if self.spare.len() < SPARE_BUFFERS {
                        self.spare.push(w.bytes);
                    }
                }
            }
            if queue.is_empty() {
                let to = *to;
                self.queues.swap_remove(i);
                // Begun and emptied between two looks: nothing to tell but
                // the release (harmless for a peer never held).
                self.new.retain(|a| *a != to);
                self.emptied.push(to);
            } else {
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn changes(b: &mut Backlog) -> Vec<(SocketAddr, bool)> {
        std::iter::from_fn(|| b.take_change()).collect()
    }

    #[test]
    fn each_destination_keeps_its_order_and_waits_alone() {
        let mut b = Backlog::default();
        b.add(addr(1), 0, &[b"a1"]);
        b.add(addr(2), 0, &[b"b", b"1"]);
        b.add(addr(1), 2, &[b"a2"]);
        assert!(b.holds(addr(1)) && b.holds(addr(2)) && !b.holds(addr(3)));
        let mut begun = changes(&mut b);
        begun.sort();
        assert_eq!(begun, vec![(addr(1), true), (addr(2), true)]);

        // Destination 1 has room for one datagram, 2 for all.
        let mut room1 = 1;
        let mut sent = Vec::new();
        b.drain(|to, w| {
            if to == addr(1) {
                if room1 == 0 {
                    return false;
                }
                room1 -= 1;
            }
            sent.push((to, w.tos, w.bytes.clone()));
            true
        });
        sent.sort();
        assert_eq!(
            sent,
            vec![(addr(1), 0, b"a1".to_vec()), (addr(2), 0, b"b1".to_vec())]
        );
        assert_eq!(changes(&mut b), vec![(addr(2), false)]);
        assert!(b.holds(addr(1)) && !b.holds(addr(2)));

        let mut rest = Vec::new();
        b.drain(|_, w| {
            rest.push((w.tos, w.bytes.clone()));
            true
        });
        assert_eq!(rest, vec![(2, b"a2".to_vec())]);
        assert_eq!(changes(&mut b), vec![(addr(1), false)]);
        assert!(b.is_empty());
    }

    #[test]
    fn a_queue_that_empties_and_begins_again_ends_held() {
        let mut b = Backlog::default();
        b.add(addr(1), 0, &[b"x"]);
        b.drain(|_, _| true);
        b.add(addr(1), 0, &[b"y"]);
        // Told in order, the last word is "held".
        assert_eq!(changes(&mut b), vec![(addr(1), false), (addr(1), true)]);

        // Begun and emptied between two looks: only the release.
        b.drain(|_, _| true);
        b.add(addr(2), 0, &[b"z"]);
        b.drain(|_, _| true);
        let mut last = changes(&mut b);
        last.sort();
        assert_eq!(last, vec![(addr(1), false), (addr(2), false)]);
    }

    #[test]
    fn a_destination_that_never_takes_costs_a_bounded_queue() {
        let mut b = Backlog::default();
        for k in 0..MAX_WAITING + 10 {
            b.add(addr(1), 0, &[&k.to_le_bytes()]);
        }
        assert_eq!(b.dropped, 10);
        let mut firsts = Vec::new();
        b.drain(|_, w| {
            firsts.push(w.bytes.clone());
            false
        });
        assert_eq!(firsts, vec![0usize.to_le_bytes().to_vec()]);
        assert_eq!(changes(&mut b), vec![(addr(1), true)]);
    }
}
