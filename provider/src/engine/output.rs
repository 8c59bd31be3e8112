//! Datagram output: ACKs ahead of data (unless held), peers taking turns, packet building.

use super::*;
use crate::ses::RmaTx;
use crate::wire::{ack_trailer, RendezvousRepr};

impl Engine {
    // ----- datagram output --------------------------------------------------------------

    /// Write the next datagram to send into `buf` (at least `mtu` bytes).
    /// Control (ACKs) goes ahead of data; peers with data take turns.
    pub fn poll_transmit(&mut self, now: u64, buf: &mut [u8]) -> Option<Transmit> {
        self.next_transmit(now, buf, false).map(|(t, _)| t)
    }

    /// [`poll_transmit`](Self::poll_transmit) for a driver that sends with
    /// a gather list: when a data packet's payload lies in one piece of the
    /// message's memory and is not short (`GATHER_MIN_BYTES`), `buf[..t.len]`
    /// receives the datagram without it (a hole at
    /// [`PayloadRef::at`]) and the payload comes back by reference, to take
    /// its place on the wire without a copy. What follows the hole is an
    /// ACK riding at the end (`wire::ack_trailer`), if any.
    pub fn poll_transmit_gather(
        &mut self,
        now: u64,
        buf: &mut [u8],
    ) -> Option<(Transmit, Option<Gather<'_>>)> {
        let (t, payload) = self.poll_transmit_ref(now, buf)?;
        Some((t, payload.and_then(|r| Some((r, self.payload(r)?)))))
    }

    /// [`poll_transmit_gather`](Self::poll_transmit_gather) naming the
    /// payload instead of lending it, so a driver can take several packets
    /// before it sends any (to batch them) and then look every payload up
    /// with [`payload`](Self::payload).
    pub fn poll_transmit_ref(
        &mut self,
        now: u64,
        buf: &mut [u8],
    ) -> Option<(Transmit, Option<PayloadRef>)> {
        let (t, gathered) = self.next_transmit(now, buf, true)?;
        let payload = gathered.map(|(peer, msg_id, offset, len, at)| PayloadRef {
            peer,
            msg_id,
            offset,
            len,
            at,
        });
        Some((t, payload))
    }

    /// The bytes a [`PayloadRef`] names: valid until the engine next takes
    /// input or fires timers (which may retire the message), `None` when
    /// the message is gone.
    pub fn payload(&self, r: PayloadRef) -> Option<&[u8]> {
        self.peers
            .get(r.peer)?
            .messages
            .get(&r.msg_id)?
            .payload
            .slice_at(r.offset as usize, r.len as usize)
    }

    /// The next datagram; with `gather`, also (peer, message, offset,
    /// length, place in the datagram) of a payload left out of `buf` (see
    /// `poll_transmit_gather`).
    #[inline]
    fn next_transmit(
        &mut self,
        now: u64,
        buf: &mut [u8],
        gather: bool,
    ) -> Option<(Transmit, Option<Gathered>)> {
        // Drivers poll until nothing is left: that last call stays cheap.
        if self.control_queue.is_empty()
            && (self.acks_held || self.ack_queue.is_empty())
            && self.send_ring.is_empty()
        {
            return None;
        }
        self.take_transmit(now, buf, gather)
    }

    /// [`next_transmit`](Self::next_transmit) with something queued.
    fn take_transmit(
        &mut self,
        now: u64,
        buf: &mut [u8],
        gather: bool,
    ) -> Option<(Transmit, Option<Gathered>)> {
        if let Some((dest, pkt)) = self.control_queue.pop_front() {
            let len = match pkt {
                ControlOut::Nack(n) => {
                    n.emit(buf);
                    NackRepr::LEN
                }
                ControlOut::Control(c) => {
                    c.emit(buf);
                    ControlRepr::LEN
                }
            };
            return Some((
                Transmit {
                    dest,
                    len,
                    entropy: 0,
                    ecn: Ecn::NotEct,
                },
                None,
            ));
        }
        if !self.acks_held {
            if let Some(response) = self.take_response_carrying_ack(now, buf) {
                return Some((response, None));
            }
            if let Some(ack) = self.take_ack(now, buf) {
                return Some((ack, None));
            }
        }
        // Each ready peer gets at most one turn per call, so a peer that
        // cannot send after all does not spin here.
        for _ in 0..self.send_ring.len() {
            let Some(p) = self.send_ring.pop_front() else {
                break;
            };
            self.peers[p].in_send_ring = false;
            // Held since it was queued: it rejoins when released.
            if self.peers[p].data_held {
                continue;
            }
            let sent = self.next_packet(p, now, buf, gather);
            self.mark_ready(p);
            if let Some((mut t, g, trailer_here)) = sent {
                let gathered = g.map(|(msg_id, offset, len)| {
                    (p, msg_id, offset, len, (t.len - len as usize) as u32)
                });
                // A receiver lands large payloads straight into the
                // application's buffer, but not those of a datagram with a
                // trailer: a datagram that large (headers and all, so
                // copied payloads and gathered ones alike) goes without.
                if t.len < LANDING_MIN_PAYLOAD && trailer_here && self.acks_held {
                    t.len = self.attach_ack(p, now, buf, t.len);
                }
                return Some((t, gathered));
            }
        }
        None
    }

    /// The ACK first in line, at the end of an SES response to the same
    /// peer when that response is next in its queue: the peer gets both in
    /// one datagram. That is the pair a delivery-complete message leaves
    /// behind (the ACK of its packets and the response that it was
    /// delivered), and its sender completes only once both are in; alone,
    /// the ACK would leave first in a datagram of its own.
    fn take_response_carrying_ack(&mut self, now: u64, buf: &mut [u8]) -> Option<Transmit> {
        let &p = self.ack_queue.front()?;
        let peer = &self.peers[p];
        // Retransmissions would go first: then the ACK waits its turn.
        if !self.ack_piggyback
            || !peer.in_send_ring
            || peer.data_held
            || !peer.tx.retransmit.is_empty()
            || !matches!(peer.queue.front(), Some(TxItem::Response { .. }))
        {
            return None;
        }
        // The peer keeps its place in the send ring: the ring's next look
        // at it finds whatever it has left.
        let (mut t, _, _) = self.next_packet(p, now, buf, false)?;
        t.len = self.attach_ack(p, now, buf, t.len);
        Some(t)
    }

    /// A request to peer `p` was just built in `buf[..len]` (all of it, or
    /// with a hole where a gathered payload goes): when an ACK for that
    /// peer is queued, it rides at the end (`wire::ack_trailer`) if the
    /// datagram stays within the MTU. Returns the datagram's length. Held
    /// ACKs are those of messages the application is answering, so this
    /// is the reply to what they acknowledge; without the trailer they
    /// would follow it in a datagram of their own.
    fn attach_ack(&mut self, p: usize, now: u64, buf: &mut [u8], len: usize) -> usize {
        let end = len + ack_trailer::LEN;
        if !self.ack_piggyback || end > self.mtu || end > buf.len() {
            return len;
        }
        let peer = &mut self.peers[p];
        if !peer.in_ack_queue {
            return len;
        }
        let Some(rx) = peer.rx.as_mut() else {
            return len;
        };
        rx.build_ack(now).emit(&mut buf[len..end]);
        ack_trailer::mark(&mut buf[..end]);
        peer.in_ack_queue = false;
        // Held ACKs are the few of one progress call's arrivals.
        if let Some(i) = self.ack_queue.iter().position(|&q| q == p) {
            self.ack_queue.remove(i);
        }
        self.stats.acks_sent += 1;
        self.stats.acks_piggybacked += 1;
        end
    }

    /// The next queued ACK (the caller checked that ACKs are not held).
    /// ACKs are ECN-capable like data, so one can share a segmented send
    /// with the data before it; a CE mark on an ACK is ignored.
    fn take_ack(&mut self, now: u64, buf: &mut [u8]) -> Option<Transmit> {
        loop {
            let p = self.ack_queue.pop_front()?;
            let peer = &mut self.peers[p];
            peer.in_ack_queue = false;
            if let Some(rx) = peer.rx.as_mut() {
                let ack = rx.build_ack(now);
                ack.emit(buf);
                self.stats.acks_sent += 1;
                return Some(Transmit {
                    dest: peer.addr,
                    len: AckRepr::LEN,
                    entropy: 0,
                    ecn: Ecn::Ect0,
                });
            }
        }
    }

    pub(super) fn next_packet(
        &mut self,
        p: usize,
        now: u64,
        buf: &mut [u8],
        gather: bool,
    ) -> Option<(Transmit, Option<PeerPayload>, bool)> {
        if !self.ensure_tx_pdc_id(p) {
            return None;
        }
        let max_payload = self.max_payload();
        let window = self.window;
        let rto = self.peers[p].tx.rto(self.rto_min, self.rto_max, 0);
        let ordered = self.ordered;
        let opts = BuildOptions {
            initiator: self.local.port(),
            ordered,
            gather,
        };
        let peer = &mut self.peers[p];
        // Retransmissions first, on a path the load balancer picks anew.
        // NACKed packets wait for room in the window.
        while let Some(psn) = peer
            .next_retransmit(ordered)
            .and_then(|i| peer.tx.retransmit.remove(i))
        {
            // A slot SACKed while it waited is not resent (below): no
            // entropy is drawn, or counted, for it.
            let entropy = match peer.tx.slot(psn).filter(|s| !s.acked).map(|s| s.kind) {
                Some(kind) => packet_entropy(&mut peer.lb, kind, ordered, now, None),
                None => 0,
            };
            let Some(slot) = peer.tx.resend(psn, now, rto, entropy) else {
                continue;
            };
            if !slot.in_flight {
                // A NACK took it out of flight; it counts again now.
                peer.in_flight_bytes += slot.bytes as u64;
            }
            self.stats.retransmits += 1;
            peer.retransmits += 1;
            self.stats.packets_sent += 1;
            let flags = pflags::RETX | pflags::AR;
            let (len, gathered) = build_packet(peer, psn, slot.kind, flags, &opts, buf);
            return Some((
                Transmit {
                    dest: peer.addr,
                    len,
                    entropy,
                    ecn: Ecn::Ect0,
                },
                gathered,
                true,
            ));
        }
        if peer.tx.in_flight() >= window {
            return None;
        }
        // NSCC.md section 6: send only while in_flight + packet <= cwnd.
        let (kind, next_bytes, last_of_item, trailer_here) = match *peer.queue.front()? {
            TxItem::Response { msg_id, len, code } => {
                if !peer.cc.can_send(peer.in_flight_bytes, RESPONSE_BYTES) {
                    return None;
                }
                (
                    SlotKind::Response { msg_id, len, code },
                    RESPONSE_BYTES,
                    true,
                    true,
                )
            }
            TxItem::Message(id) => {
                let Some(m) = peer.messages.get_mut(&id) else {
                    if peer.cc.can_send(peer.in_flight_bytes, 0) {
                        peer.queue.pop_front();
                    }
                    return None;
                };
                let offset = m.next_offset;
                let (len, bytes) = next_piece(m, max_payload);
                if !peer.cc.can_send(peer.in_flight_bytes, bytes) {
                    return None;
                }
                let first = offset == 0;
                m.next_offset += len;
                m.started = true;
                m.unacked_packets += 1;
                let kind = SlotKind::Data {
                    msg_id: id,
                    offset,
                    len: len as u32,
                };
                let last = m.fully_sent();
                let trailer_here = if first && !last {
                    !trailer_rides_last(m, max_payload)
                } else {
                    last
                };
                (kind, bytes, last, trailer_here)
            }
        };
        if last_of_item {
            peer.queue.pop_front();
        }
        // A sender resuming after its pipe drained starts afresh: a new
        // window for NSCC, a new pick for the load balancer.
        let restart = std::mem::take(&mut peer.pipe_drained) && peer.in_flight_bytes == 0;
        if restart {
            peer.lb.end_unit();
        }
        let entropy = packet_entropy(&mut peer.lb, kind, ordered, now, Some(next_bytes));
        if restart {
            peer.cc.on_idle_restart();
        }
        if std::mem::take(&mut peer.drained_by_trailer) {
            peer.restart_owed = true;
        }
        let psn = peer.tx.push(kind, now, rto, next_bytes as u32, entropy);
        peer.in_flight_bytes += next_bytes;
        // Ask for an immediate ACK when the backlog empties or the next
        // packet would not fit the window (NSCC.md section 6). When only
        // the backlog emptied, no send of ours waits for its ACKs and the
        // window still has room for a full packet (whatever is posted next
        // leaves without this ACK), say so (NO_WAIT): the receiver may then
        // let the ACK ride on its reply even if that reply is already on
        // its way to us.
        let window_full =
            peer.tx.in_flight() >= window || !peer.cc.can_send(peer.in_flight_bytes, next_bytes);
        debug_assert!(peer.message_counts_hold());
        // Nothing here waits for a response's own ACK: what of ours waits
        // for ACKs went out before it, and either nothing else is in flight
        // or the packet before it asked for an immediate ACK, which reports
        // everything up to there.
        let response_alone = matches!(kind, SlotKind::Response { .. })
            && (peer.tx.in_flight() == 1 || peer.tail_asked_ack);
        let flags = if window_full {
            pflags::AR
        } else if !peer.queue.is_empty() {
            0
        } else if peer.tx.in_flight() + 1 >= window
            || !peer.full_packet_fits(max_payload)
            || (peer.message_counts.awaits_ack() && !response_alone)
        {
            pflags::AR
        } else {
            pflags::AR | pflags::NO_WAIT
        };
        peer.tail_asked_ack = flags & pflags::AR != 0 && flags & pflags::NO_WAIT == 0;
        let (len, gathered) = build_packet(peer, psn, kind, flags, &opts, buf);
        self.stats.packets_sent += 1;
        Some((
            Transmit {
                dest: peer.addr,
                len,
                entropy,
                ecn: Ecn::Ect0,
            },
            gathered,
            trailer_here,
        ))
    }
}

/// The entropy (source socket) a packet of `kind` leaves with: a first
/// send `Some(bytes)` long on the wire, or a resend (`None`), which gets a
/// pick of its own. Only data is sprayed, and ordered delivery keeps it to
/// one path (counted all the same); SES responses leave from socket 0, so
/// their source address is the canonical one the peer knows.
fn packet_entropy(
    lb: &mut LoadBalancer,
    kind: SlotKind,
    ordered: bool,
    now: u64,
    bytes: Option<u64>,
) -> u16 {
    match (kind, bytes) {
        (SlotKind::Data { .. }, Some(bytes)) if !ordered => lb.next_entropy(now, bytes),
        (SlotKind::Data { .. }, None) if !ordered => lb.resend_entropy(now),
        (SlotKind::Data { .. }, _) => lb.fixed_entropy(),
        (SlotKind::Response { .. }, _) => 0,
    }
}

/// A response packet on the wire.
const RESPONSE_BYTES: u64 = (RequestRepr::LEN + SesResponseRepr::LEN) as u64;

/// The next packet of message `m`: its payload length and its size on the
/// wire (headers and any extension header included).
fn next_piece(m: &TxMessage, max_payload: usize) -> (u64, u64) {
    let offset = m.next_offset;
    let extension = extension_len(m, offset);
    let len = (m.wire_len() - offset)
        .min(packet_payload(m.wire_len(), max_payload as u64))
        .min((max_payload - extension) as u64);
    (len, DATA_HEADERS as u64 + extension as u64 + len)
}

impl Peer {
    /// Size on the wire of the next packet of new data (or response) this
    /// peer would send; `None` when nothing is queued. A queued message
    /// that no longer exists counts 0 bytes: it is dropped from the queue
    /// without sending anything.
    pub(super) fn next_new_bytes(&self, max_payload: usize) -> Option<u64> {
        Some(match *self.queue.front()? {
            TxItem::Response { .. } => RESPONSE_BYTES,
            TxItem::Message(id) => self
                .messages
                .get(&id)
                .map_or(0, |m| next_piece(m, max_payload).1),
        })
    }
}

/// Whether an ACK held for message `m` (a reply) rides its last packet
/// rather than its first: so when the message has three packets or more
/// and the last, shorter one has room for it. The packets then keep one
/// size but for the last and leave in one segmented send; on the first
/// packet the ACK would make that one longer than the rest and split the
/// send in two. (With two packets the first takes it: the second may be as
/// long as the first.) Should the last packet wait for the window, the ACK
/// leaves on its own.
fn trailer_rides_last(m: &TxMessage, max_payload: usize) -> bool {
    let len = m.wire_len();
    let per = packet_payload(len, max_payload as u64);
    if per == 0 || extension_len(m, 0) != 0 {
        return false;
    }
    let packets = len.div_ceil(per);
    let last = len - (packets - 1) * per;
    packets >= 3 && last + ack_trailer::LEN as u64 <= per
}

/// Payload of every packet but the last of a message of `len` bytes: as
/// many packets as `max_payload` needs, evened out (in multiples of 64
/// bytes). A 4 KiB message with 4 KiB packets goes as 2048 + 2048 bytes, not
/// as 4040 + 56, so a stream of such messages makes packets of one size,
/// which leave together in one segmented send and arrive as one coalesced
/// receive. Large messages keep full packets.
pub(super) fn packet_payload(len: u64, max_payload: u64) -> u64 {
    if len <= max_payload || max_payload == 0 {
        return len;
    }
    let packets = len.div_ceil(max_payload);
    len.div_ceil(packets)
        .next_multiple_of(PAYLOAD_ALIGN)
        .min(max_payload)
}

/// Shortest payload left in message memory for a gathering send: a shorter
/// one is copied behind its headers, so the datagram goes out in one piece
/// (a second iovec costs the kernel more than copying a few hundred bytes).
const GATHER_MIN_BYTES: u32 = 256;

/// Granule of evened-out packet payloads: keeps payload offsets at cache
/// line boundaries of the message.
const PAYLOAD_ALIGN: u64 = 64;

/// Bytes of extension header in front of the payload of the packet at
/// `offset` of `m` (the rendezvous header on a rendezvous send's first).
fn extension_len(m: &TxMessage, offset: u64) -> usize {
    match m.rma {
        Some(RmaTx::Rendezvous { host_read, .. }) if offset == 0 => RendezvousRepr {
            host_read,
            ..RendezvousRepr::default()
        }
        .wire_len(),
        _ => 0,
    }
}

/// What every packet of one endpoint is built with.
#[derive(Clone, Copy)]
struct BuildOptions {
    /// The canonical port named in the SES initiator field.
    initiator: u16,
    /// ROD packet type instead of RUD.
    ordered: bool,
    /// Leave a payload in one piece out of the buffer (see `PeerPayload`).
    gather: bool,
}

/// A payload left out of the packet buffer: (peer, message, offset, length,
/// its place in the datagram).
type Gathered = (usize, u16, u64, u32, u32);
/// The same within one peer: (message, offset, length).
type PeerPayload = (u16, u64, u32);

/// A gathered payload: where it goes in its datagram, and its bytes.
pub type Gather<'a> = (PayloadRef, &'a [u8]);

/// A data packet's payload left in its message's memory, to take its
/// place on the wire between the headers and what follows it (see
/// [`Engine::poll_transmit_ref`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PayloadRef {
    peer: usize,
    msg_id: u16,
    offset: u64,
    len: u32,
    at: u32,
}

impl PayloadRef {
    /// Payload bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Where the payload starts in its datagram: the bytes before it are
    /// headers, those after it (up to `Transmit::len`) an ACK trailer.
    pub fn at(&self) -> usize {
        self.at as usize
    }

    /// Where the payload ends in its datagram.
    pub fn end(&self) -> usize {
        self.at() + self.len()
    }

    /// Never true: an empty payload is not gathered.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Serialise the packet a PSN carries (first send or retransmission) and
/// return its length. With `gather`, a payload the message holds in one
/// piece is left out of `buf` and named instead (message, offset, length);
/// the returned length still counts it.
fn build_packet(
    peer: &Peer,
    psn: u32,
    kind: SlotKind,
    flags: u8,
    opts: &BuildOptions,
    buf: &mut [u8],
) -> (usize, Option<PeerPayload>) {
    let BuildOptions {
        initiator,
        ordered,
        gather,
    } = *opts;
    let (dpdcid, syn) = match peer.tx.remote_id {
        Some(id) => (id, 0),
        // Until the first ACK names the receiver's context, SYN carries the
        // offset from the start PSN. The window keeps it under 4096.
        None => (peer.tx.syn_offset(psn).unwrap_or(0), pflags::SYN),
    };
    let next = match kind {
        SlotKind::Data { .. } => NextHeader::SesRequest,
        SlotKind::Response { .. } => NextHeader::SesResponse,
    };
    RequestRepr {
        ptype: if ordered {
            PacketType::RodRequest
        } else {
            PacketType::RudRequest
        },
        next,
        flags: flags | syn,
        clear_psn_offset: 0,
        psn,
        spdcid: peer.tx.local_id,
        dpdcid,
    }
    .emit(buf);
    let body = &mut buf[RequestRepr::LEN..];
    match kind {
        SlotKind::Data {
            msg_id,
            offset,
            len,
        } => {
            let Some(m) = peer.messages.get(&msg_id) else {
                // The message was failed or retired; send an empty shell so
                // the PSN is still consumed at the receiver.
                return (RequestRepr::LEN, None);
            };
            let som = offset == 0;
            let eom = offset + len as u64 >= m.len();
            let mut f = 0;
            if som {
                f |= sflags::SOM;
            }
            if eom {
                f |= sflags::EOM;
            }
            if som && m.cq_data.is_some() {
                f |= sflags::HD;
            }
            if m.level == CompletionLevel::Delivery && m.signal {
                f |= sflags::DC;
            }
            let header_data = match (som, m.cq_data) {
                (true, Some(d)) => d,
                _ => ((len as u64 & 0x3fff) << 32) | (offset & 0xffff_ffff),
            };
            let mut ses = SesRequestRepr {
                opcode: if m.tagged {
                    SesOpcode::TaggedSend as u8
                } else {
                    SesOpcode::Send as u8
                },
                flags: f,
                message_id: msg_id,
                buffer_offset: offset,
                match_bits: m.tag,
                header_data,
                request_length: m.len() as u32,
                // Our canonical port: the source port may be an entropy one.
                initiator: initiator as u32,
                ..SesRequestRepr::default()
            };
            if let Some(r) = &m.rma {
                r.describe(&mut ses, offset);
            }
            ses.emit(body);
            let mut start = SesRequestRepr::LEN;
            if let (
                Some(RmaTx::Rendezvous {
                    key,
                    eager,
                    host_read,
                    ..
                }),
                true,
            ) = (m.rma, som)
            {
                let header = RendezvousRepr {
                    eager_length: eager as u32,
                    read_address: eager,
                    read_key: key,
                    read_length: (m.len() - eager) as u32,
                    host_read,
                    ..RendezvousRepr::default()
                };
                header.emit(&mut body[start..]);
                start += header.wire_len();
            }
            let total = RequestRepr::LEN + start + len as usize;
            // Where the payload lives: pulled data in the rendezvous send's
            // own payload, anything else in this message's.
            let (source_id, source_offset) = match m.rma {
                Some(RmaTx::PullData {
                    send_id,
                    offset: base,
                    ..
                }) => (send_id, base + offset),
                _ => (msg_id, offset),
            };
            let source = if source_id == msg_id {
                m
            } else {
                let Some(source) = peer.messages.get(&source_id) else {
                    return (RequestRepr::LEN, None);
                };
                source
            };
            if gather
                && len >= GATHER_MIN_BYTES
                && source
                    .payload
                    .slice_at(source_offset as usize, len as usize)
                    .is_some()
            {
                return (total, Some((source_id, source_offset, len)));
            }
            source.payload.read_at(
                source_offset as usize,
                &mut body[start..start + len as usize],
            );
            (total, None)
        }
        SlotKind::Response { msg_id, len, code } => {
            SesResponseRepr {
                opcode: SesOpcode::Response as u8,
                return_code: code,
                message_id: msg_id,
                job_id: 0,
                modified_length: len,
            }
            .emit(body);
            (RequestRepr::LEN + SesResponseRepr::LEN, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_that_fit_go_whole() {
        assert_eq!(packet_payload(0, 4040), 0);
        assert_eq!(packet_payload(64, 4040), 64);
        assert_eq!(packet_payload(4040, 4040), 4040);
    }

    #[test]
    fn two_packet_messages_split_evenly() {
        assert_eq!(packet_payload(4096, 4040), 2048);
        assert_eq!(packet_payload(4041, 4040), 2048);
        assert_eq!(packet_payload(8000, 4040), 4032);
    }

    /// Evening out never adds a packet, and packets stay within the limit.
    #[test]
    fn as_many_packets_as_full_ones_would_take() {
        for max in [64u64, 100, 1000, 1416, 4040, 8136, 64944] {
            for len in (1..20 * max).step_by(37).chain([max + 1, 1 << 20, 1 << 24]) {
                let piece = packet_payload(len, max);
                assert!(piece >= 1 && piece <= max, "len {len} max {max}: {piece}");
                assert_eq!(
                    len.div_ceil(piece),
                    len.div_ceil(max),
                    "len {len} max {max}"
                );
            }
        }
    }

    /// A short payload is copied behind its headers (one piece on the
    /// wire); from GATHER_MIN_BYTES on it stays in message memory.
    #[test]
    fn only_payloads_worth_an_iovec_are_gathered() {
        let cfg = crate::Config::default();
        let to: SocketAddr = "10.0.0.2:4793".parse().unwrap();
        let mut e = Engine::new(&cfg, "10.0.0.1:4793".parse().unwrap(), 1);
        let short = GATHER_MIN_BYTES as usize - 1;
        for (len, gathered) in [(short, false), (short + 1, true)] {
            let op = crate::ops::SendOp {
                dest: to,
                payload: crate::ops::Payload::Owned(vec![9; len]),
                tag: None,
                cq_data: None,
                context: 1,
                level: crate::ops::CompletionLevel::Inject,
                signal: false,
            };
            e.post_send(0, op).unwrap();
            let mut buf = vec![0u8; 65536];
            let (t, payload) = e.poll_transmit_ref(0, &mut buf).unwrap();
            assert_eq!(payload.is_some(), gathered, "{len} B");
            let head = t.len - payload.map_or(0, |p| p.len());
            assert_eq!(head, t.len - if gathered { len } else { 0 });
            if !gathered {
                assert!(buf[t.len - len..t.len].iter().all(|&b| b == 9));
            }
        }
    }

    #[test]
    fn large_messages_keep_full_packets() {
        assert_eq!(packet_payload(1 << 20, 4040), 4040);
        assert_eq!(packet_payload(1 << 20, 64944), 61696);
    }
}
