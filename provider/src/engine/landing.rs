//! Landing: a large packet's payload received straight into the posted
//! buffer it belongs to, so the kernel's copy is the only one.
//!
//! The packets of a large message arrive one after the other, so the next
//! one usually continues where the last one ended. The engine remembers
//! that place ([`LandingHint`]); the driver asks for it with
//! [`Engine::landing`], receives the next datagram with its headers into a
//! scratch area and its payload into that part of the posted buffer, and
//! hands the headers back with [`Engine::handle_landed`]. When the datagram
//! is not the predicted packet, the engine refuses it without a trace and
//! the driver puts the bytes back together for
//! [`Engine::handle_datagram`].
//!
//! A wrong guess writes foreign bytes into the buffer, so a landing only
//! ever covers bytes that are still to come: past the highest byte placed in
//! that message so far (`Inbound::high_water`), within what the packets of
//! that message carry and within the buffer. Every such byte is written
//! again by its own packet before the receive completes.

use super::*;

/// Payloads shorter than this are copied, never landed. Scattering a
/// datagram over a header area and application memory costs the kernel more
/// than a user-space copy of a few KiB saves: raw UDP on loopback moved 7.1
/// GB/s with a copy and 8.8 with landing for 65000-byte datagrams, but 6.9
/// against 7.3 for coalesced 4 KiB segments. Landing whole GRO arrivals of
/// 4 KiB packets through the provider (two iovecs per packet, each packet
/// checked in turn) was tried and gained nothing: with 4 KiB packets a 1
/// MiB ping-pong took 276-295 us one way against 261-285 with the copy, and
/// streaming moved 4.2-4.3 GB/s against 4.2-4.6. The kernel's copy into the
/// colder application buffer grew by about what the user-space copy cost.
pub const LANDING_MIN_PAYLOAD: usize = 16 << 10;

/// Where the packet after the last one placed is expected to go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LandingHint {
    p: usize,
    /// The message the packets belong to: a send, or the read response
    /// that carries a pull.
    msg_id: u16,
    /// The pull's token, when the packets are pulled data.
    pull: Option<u64>,
    /// Offset of the next packet's payload in its own message.
    next: u64,
    /// Payload bytes of the last packet, and most likely of the next.
    payload: usize,
}

/// A landing the driver may receive the next datagram into: its first
/// `header_len` bytes go to a scratch area, the next `payload_len` bytes to
/// the region [`Engine::landing`] returned with it, the rest (if any) after
/// them in the scratch area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Landing {
    pub header_len: usize,
    pub payload_len: usize,
    hint: LandingHint,
    /// Where the region starts in the target's buffer.
    at: u64,
}

impl LandingHint {
    /// The peer the expected packet comes from.
    pub(super) fn peer(&self) -> usize {
        self.p
    }
}

impl Engine {
    /// After `len` payload bytes of message `msg_id` from peer `p` (of
    /// pull `pull`, if pulled data) were placed at `offset`: expect the
    /// next packet right behind them while the message is `open` (posted
    /// and not complete) and its packets are large enough to land.
    pub(super) fn expect_after(
        &mut self,
        open: bool,
        p: usize,
        msg_id: u16,
        pull: Option<u64>,
        offset: u64,
        len: usize,
    ) {
        self.landing_hint = (open && len >= LANDING_MIN_PAYLOAD).then_some(LandingHint {
            p,
            msg_id,
            pull,
            next: offset + len as u64,
            payload: len,
        });
    }

    /// The part of a posted buffer the next data packet's payload is
    /// expected in, as a landing and the region itself, or `None` when no
    /// packet is expected there (or the buffer is not one piece of memory).
    /// [`handle_landed`](Self::handle_landed) answers it; the region must
    /// not be written through once another engine call came between.
    pub fn landing(&mut self) -> Option<(Landing, &mut [u8])> {
        let hint = self.landing_hint?;
        let (at, len) = self.landing_place(&hint)?;
        let inb = self.landing_target(&hint)?;
        let InboundState::Posted(recv) = &mut inb.state else {
            return None;
        };
        let region = recv.buffer.slice_at_mut(at as usize, len)?;
        let landing = Landing {
            header_len: DATA_HEADERS,
            payload_len: len,
            hint,
            at,
        };
        Some((landing, region))
    }

    /// A datagram received into `landing`: `header` holds its headers,
    /// and its `payload_len` payload bytes are in the landing's region.
    /// When it is the packet predicted (same peer, message, offset and
    /// kind, and the region still the right place), it is processed like
    /// any datagram and true comes back. Otherwise nothing happened, and
    /// the caller must reassemble the datagram for
    /// [`handle_datagram`](Self::handle_datagram).
    pub fn handle_landed(
        &mut self,
        now: u64,
        from: SocketAddr,
        tos: u8,
        landing: &Landing,
        header: &[u8],
        payload_len: usize,
    ) -> bool {
        if payload_len == 0 || payload_len > landing.payload_len || header.len() != DATA_HEADERS {
            return false;
        }
        let hint = landing.hint;
        if self.landing_hint != Some(hint) || !self.is_predicted(from, &hint, header) {
            return false;
        }
        // The place is worked out again: it must be the one the region
        // was taken from.
        if self.landing_place(&hint) != Some((landing.at, landing.payload_len)) {
            return false;
        }
        // Taken from here on like any datagram; counted as landed only if
        // accepted (not a duplicate, in the window, in order under ROD).
        self.rdv.datagram_arrived();
        let received = self.stats.packets_received;
        self.on_request(now, from, tos, header, Some(payload_len));
        if self.stats.packets_received > received {
            self.stats.landed += 1;
        }
        true
    }

    /// Whether `header` (exactly a request and an SES header, no
    /// extension) names the packet `hint` predicts.
    fn is_predicted(&self, from: SocketAddr, hint: &LandingHint, header: &[u8]) -> bool {
        let Ok(prologue) = Prologue::parse(header) else {
            return false;
        };
        // A request carrying an ACK (which would sit in the region) is
        // taken whole.
        if !matches!(
            prologue.ptype,
            PacketType::RudRequest | PacketType::RodRequest
        ) || prologue.flags & crate::wire::ack_trailer::FLAG != 0
        {
            return false;
        }
        let Ok(req) = RequestRepr::parse(header) else {
            return false;
        };
        if req.next != NextHeader::SesRequest {
            return false;
        }
        let Ok(s) = SesRequestRepr::parse(&header[RequestRepr::LEN..]) else {
            return false;
        };
        let Some(peer) = self.peers.get(hint.p) else {
            return false;
        };
        // A SYN (the first window's packets carry it) must name the context
        // that is open: one that starts a new context drops what the old
        // one was receiving, this message with it.
        if req.syn() && !peer.rx.as_ref().is_some_and(|rx| rx.opened_by(&req)) {
            return false;
        }
        let first_of_rendezvous =
            s.flags & sflags::SOM != 0 && s.opcode().is_ok_and(SesOpcode::is_rendezvous);
        let kind_ok = match hint.pull {
            None => input::is_send(&s) && !first_of_rendezvous,
            // As `on_pull_data` checks: the data of this pull, whole.
            Some(token) => {
                s.opcode() == Ok(SesOpcode::ReadResponse)
                    && s.match_bits == token
                    && self
                        .rdv
                        .pull_target(hint.p, token)
                        .is_some_and(|(_, _, len)| len == s.request_length as u64)
            }
        };
        input::request_source(from, &s) == peer.addr
            && kind_ok
            && s.message_id == hint.msg_id
            && s.buffer_offset == hint.next
    }

    /// The inbound message whose posted buffer `hint` lands in.
    fn landing_target(&mut self, hint: &LandingHint) -> Option<&mut Inbound> {
        let target = match hint.pull {
            None => hint.msg_id,
            Some(token) => self.rdv.pull_target(hint.p, token)?.0,
        };
        self.peers.get_mut(hint.p)?.inbound.get_mut(&target)
    }

    /// Stop offering the current landing (the driver saw it refused again
    /// and again, or the kernel could not write into it): datagrams go the
    /// usual way until the next large packet is placed.
    pub fn forget_landing(&mut self) {
        self.landing_hint = None;
    }

    /// The buffer offset and length a landing for `hint` may cover: only
    /// bytes still to come, within what this stream of packets carries and
    /// within the buffer.
    fn landing_place(&self, hint: &LandingHint) -> Option<(u64, usize)> {
        let peer = self.peers.get(hint.p)?;
        let (target, at, stop) = match hint.pull {
            None => {
                let inb = peer.inbound.get(&hint.msg_id)?;
                // A rendezvous send's own packets carry its eager part; the
                // pull fills the rest.
                let stop = inb.rendezvous.map_or(inb.header.len, |r| r.eager);
                (inb, hint.next, stop)
            }
            Some(token) => {
                let (target, offset, len) = self.rdv.pull_target(hint.p, token)?;
                // The pull's own record must not have passed the hint either.
                if peer.inbound.get(&hint.msg_id)?.high_water > hint.next {
                    return None;
                }
                (peer.inbound.get(&target)?, offset + hint.next, offset + len)
            }
        };
        let InboundState::Posted(recv) = &target.state else {
            return None;
        };
        let stop = stop.min(recv.buffer.len() as u64);
        if target.high_water > at || at >= stop || target.complete() {
            return None;
        }
        let len = (stop - at).min(hint.payload as u64) as usize;
        Some((at, len))
    }
}
