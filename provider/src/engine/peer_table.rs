//! Eviction from the peer table. Every address that sends a SYN or is sent
//! to gets an entry (about 2 KiB); without eviction, sources that open and
//! close contexts from ever new ports (restarted clients, scanners, spoofed
//! SYNs) would grow the table for ever. An entry with no state left (no
//! context either way, nothing queued, held, being received or waited
//! for) that has been quiet for a while is freed, and the next new peer
//! takes it. The wait keeps the record of the receive context the peer
//! closed last (a late copy of its SYN must not reopen it) well past any
//! packet's life in the network, and keeps the congestion state of peers
//! that merely pause.

use super::*;

impl Engine {
    /// How long an entry must have been without state before it may go.
    fn peer_linger(&self) -> u64 {
        2 * self.pdc_idle.max(self.rto_max)
    }

    /// Free the entries of peers quiet for [`Self::peer_linger`]; run when
    /// a new peer comes, at most once per linger time, so the cost is one
    /// pass over the table per that time, and none while no new peer comes.
    pub(super) fn sweep_peers(&mut self, now: u64) {
        if now < self.next_peer_sweep {
            return;
        }
        let linger = self.peer_linger();
        self.next_peer_sweep = now.saturating_add(linger);
        let mut busy: FastMap<usize, ()> = FastMap::default();
        let unexpected = self.unexpected.iter().map(|u| u.peer);
        let reads = self.reads.keys().map(|&(p, _)| p);
        for p in self.rendezvous_peers().chain(reads).chain(unexpected) {
            busy.insert(p, ());
        }
        if let Some(hint) = self.landing_hint {
            busy.insert(hint.peer(), ());
        }
        for p in 0..self.peers.len() {
            let peer = &self.peers[p];
            let quiet_since = peer.tx_active_at.max(peer.rx_gone_at);
            if self.peer_by_addr.get(&peer.addr) != Some(&p)
                || busy.contains_key(&p)
                || peer.watch.is_some()
                || !peer.stateless()
                || now < quiet_since.saturating_add(linger)
            {
                continue;
            }
            self.peer_by_addr.remove(&peer.addr);
            self.rdv_forget_peer(p);
            if self.last_peer == p {
                self.last_peer = usize::MAX;
            }
            self.free_peers.push(p);
            self.stats.peers_evicted += 1;
        }
    }

    /// Peers in the table (entries not freed).
    pub fn peer_count(&self) -> usize {
        self.peers.len() - self.free_peers.len()
    }
}

impl Peer {
    /// Nothing of this peer is held but its entry: no context either way
    /// (nor a close under way), nothing queued, unacknowledged or being
    /// received, no pending ACK, no data held back by the driver.
    fn stateless(&self) -> bool {
        self.rx.is_none()
            && self.tx.local_id == 0
            && self.tx.remote_id.is_none()
            && self.closing.is_none()
            && self.tx_idle()
            && !self.holds_messages()
            && !self.in_send_ring
            && !self.in_ack_queue
            && !self.data_held
    }
}
