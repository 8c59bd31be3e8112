//! Timers: delayed ACKs, retransmission timeouts, peer failure.

use super::*;

impl Engine {
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
    pub(super) fn fail_peer(&mut self, p: usize) {
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
                    ..Self::op_completion(&m)
                });
            }
        }
        self.fail_reads(p);
    }
}
