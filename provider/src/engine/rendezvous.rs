//! Rendezvous sends: the receiver pulls large messages once they match.
//!
//! A send longer than `FI_UET_RENDEZVOUS_BYTES` travels as a rendezvous send
//! (SES opcode 6, or 0x0A tagged): packets carrying its first `eager` =
//! `FI_UET_RENDEZVOUS_BYTES` bytes, the first of them with the rendezvous
//! extension header ([`crate::wire::RendezvousRepr`]), whose
//! `read_key` names the send (`(unique number << 16) | message ID`: no
//! application memory registration is involved; the engine keeps the send's
//! payload until the pull is over) and whose `read_address` is the message
//! offset of the remainder. Unmatched, the message costs the receiver only
//! the eager bytes (staged and budgeted like any unexpected payload).
//!
//! Once the message is matched (on arrival, or when the application posts
//! or claims a receive) and its first packet is in, the receiver sends a
//! pull, so its round trip overlaps the rest of the eager part: an SES read (opcode 2)
//! with resource index [`RENDEZVOUS_RESOURCE`], `match_bits` = the key,
//! `buffer_offset` = the address, `request_length` = the bytes it wants
//! (what fits its buffer; 0 when it discards the message or its buffer
//! holds no more than the eager part) and `header_data` = a token of its
//! own. The sender answers on its own delivery context with read-response
//! data (opcode 0x11, `match_bits` = the token, `buffer_offset` = offset in
//! the pull), which the receiver writes straight into the receive buffer.
//! The pulled data rides the PDS like any message (retransmission, NSCC,
//! spraying); it takes a message ID in the sender's order and is skipped by
//! matching like RMA data.
//!
//! The send completes, and its payload is released, once its eager packet
//! is acknowledged and the pull's data is acknowledged (or a zero-length
//! pull said none is wanted). A key that names no waiting send gets an SES
//! response with [`ACCESS_DENIED`](super::rma::ACCESS_DENIED); the receive then fails.
//!
//! Same host: an endpoint given [`HostMemory`] (`FI_UET_HOST_READ=1`)
//! describes the remainder of a rendezvous send that lies in one piece of
//! memory with a host memory descriptor ([`crate::wire::HostMemoryRepr`]:
//! host, process, address). A receiver on the same host (same boot, same
//! PID namespace) that was given [`HostMemory`] as well copies the
//! remainder straight from the sender's memory into the receive buffer once
//! the message is matched: one copy instead of a round through both
//! kernels' network stacks. A remainder of [`HOST_SPLIT_MIN`] or more is
//! shared: the receiver copies its first page at once (which shows the
//! kernel lets it), sends a pull for the back half whose payload describes
//! where that half goes in its buffer, and copies the front half once the
//! pull has left ([`Engine::run_host_copies`]); the sender writes the back
//! half into the buffer and answers with an SES response of return code 0,
//! so both processors copy at the same time. The sender keeps the send (and
//! the application its buffer) until the receiver, having answered for its
//! own half as well, releases it with a second pull of length 0: completing
//! on the write alone would let the application free or reuse memory the
//! receiver is still copying from. Otherwise the receiver copies
//! it all and sends a pull of length 0 (its descriptor, address 0, still
//! tells the sender the peer is on its host: see `rendezvous_eager`). The
//! sender completes the send on that pull, or on the release after it has
//! written. The bytes so copied bypass the
//! network and its congestion control. A copy the kernel refuses, or a
//! buffer in pieces, falls back to the pull over the network (a sender that
//! cannot write sends its half as read response data, and so does one
//! that sees the pull after its expiry); a receiver's half that fails after
//! the pull left fails the receive, as does a sender that fails, but only
//! once the sender has answered or can no longer be writing into the
//! buffer ([`HOST_WRITE_HOLD_NS`] after the pull left), so the application
//! never gets back memory another process may still write.
//!
//! Liveness: while an endpoint waits on a peer for a rendezvous (a send not
//! yet pulled, or a pull not yet in) and has nothing in flight to it, a peer
//! that dies would go unnoticed. So when nothing was heard from such a peer
//! for `FI_UET_RTO_MAX_US`, an ACK request probes it, with the usual
//! backoff; after `FI_UET_MAX_RETRIES` unanswered probes the peer is failed
//! like one that stopped acknowledging (`FI_EIO`). Without a send context
//! to the peer no probe can leave: while packets queued to it wait for a
//! context ID that wait counts nothing (their retransmissions watch the
//! peer once they leave); with nothing queued, each silent period counts
//! as an unanswered probe.

use super::rma::RECEIVE_FAILED;
use super::*;
use crate::ses::{PullState, RmaTx};
use crate::wire::HostMemoryRepr;
use smallvec::SmallVec;
use std::collections::hash_map::Entry;
use std::net::SocketAddr;

/// The resource index that marks an SES read as a rendezvous pull (the
/// highest 12-bit index; RMA reads use index 0).
pub const RENDEZVOUS_RESOURCE: u16 = 0xfff;

/// Copies from the memory of other processes on this host, for rendezvous
/// between processes of one host (the driver's is `process_vm_readv`).
///
/// A peer may only name its own memory. Each side offers the other a token
/// in its descriptors (sent to the peer's address) and copies only for a
/// descriptor that returns it: proof that its sender receives what is sent
/// to that address, which a process that merely sends from it (another
/// socket on the port, `IP_PKTINFO`) does not. The memory says which token
/// it wants back, and checks that the process named holds the socket bound
/// to the peer's address.
pub trait HostMemory: Send {
    /// This process as a receiver on the same host names it: (host, pid).
    /// The host value stands for one boot and one PID namespace.
    fn this_process(&self) -> (u64, u32);
    /// The token to offer the peer at `peer` whose descriptors name
    /// process `pid`: one of its descriptors is copied for only when it
    /// returns the token. 0 while there is none (nothing will be copied).
    fn offer(&self, peer: SocketAddr, pid: u32) -> u64;
    /// The peer at `peer` named process `pid` in a descriptor: find out now
    /// whether that process holds the peer's socket (a look through the
    /// process's descriptors, once), so that our descriptors to it offer a
    /// token before our first copy for it is asked. A copy finds it out too.
    fn meet(&self, _peer: SocketAddr, _pid: u32) {}
    /// Fill `dst` with the bytes at `address` of the process the claim
    /// names, which must hold the socket bound to its peer address and
    /// have returned our token; `Done` only when every byte was copied.
    fn read(&self, claim: &HostClaim, address: u64, dst: &mut [u8]) -> HostAccess;
    /// Copy `src` to `address` of the process the claim names, under the
    /// same rule.
    fn write(&self, claim: &HostClaim, address: u64, src: &[u8]) -> HostAccess;
    /// The host's monotonic clock in milliseconds (the same in every
    /// process of the host, unlike engine time), wrapping.
    fn clock_ms(&self) -> u32;
    /// A datagram reached the engine. Until the next one, every datagram
    /// that named memory had arrived before any check made since, so one
    /// check that a peer still holds its socket covers all copies it named.
    fn datagram_arrived(&self) {}
}

/// Who a same-host descriptor says sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostClaim {
    /// The peer's address: where its socket is bound, which our datagrams
    /// to it (and our tokens) go to.
    pub peer: SocketAddr,
    /// The process it names as the one whose memory it is.
    pub pid: u32,
    /// The token of ours it returned.
    pub echo: u64,
}

impl HostClaim {
    /// What descriptor `d` from the peer at `peer` claims.
    fn of(peer: SocketAddr, d: &HostMemoryRepr) -> HostClaim {
        HostClaim {
            peer,
            pid: d.pid,
            echo: d.echo,
        }
    }
}

/// What became of a same-host copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostAccess {
    /// Every byte was copied.
    Done,
    /// The descriptor did not return the token we offer for that claim (or
    /// none is offered yet): nothing was copied, and it was not tried.
    Unproven,
    /// The copy could not be made: the process does not hold the peer's
    /// socket, or the kernel refused.
    Failed,
}

/// What the latest same-host descriptor of a peer said.
#[derive(Clone, Copy, Debug)]
struct HostToken {
    /// The process it named.
    pid: u32,
    /// The token it offered, returned in our descriptors to it.
    echo: u64,
}

impl HostToken {
    /// What descriptor `d` names and offers.
    fn of(d: &HostMemoryRepr) -> HostToken {
        HostToken {
            pid: d.pid,
            echo: d.offer,
        }
    }
}

/// Rendezvous bookkeeping of an endpoint.
pub(super) struct RendezvousState {
    /// Sends longer than this go as rendezvous sends (0 = never).
    threshold: usize,
    /// Source of send keys and pull tokens; tokens start above the 16-bit
    /// read IDs that RMA read data carries in the same field.
    next_number: u64,
    /// Pulls this endpoint asked for, by (peer, token).
    pulls: PullTable,
    /// The latest `now` the engine was given (arms watches from paths
    /// without a clock of their own).
    clock: u64,
    /// Same-host copies, when enabled.
    host: Option<Box<dyn HostMemory>>,
    /// Our shares of split same-host copies, run once the pulls that hand
    /// the senders theirs have left ([`Engine::run_host_copies`]).
    copies: Vec<HostCopy>,
    /// Peers that copied one of our sends in place (they are on this
    /// host), and the threshold of sends to them.
    host_peers: FastMap<usize, ()>,
    host_threshold: usize,
    /// Same-host peers' latest descriptors: what our descriptors to them
    /// offer and return.
    host_tokens: FastMap<usize, HostToken>,
}

/// Our share of a same-host copy: `len` bytes at `address` of the process
/// the claim names into inbound message `msg_id` of peer `p` at message
/// offset `offset`.
#[derive(Clone, Copy, Debug)]
struct HostCopy {
    p: usize,
    msg_id: u16,
    claim: HostClaim,
    address: u64,
    offset: u64,
    len: u64,
    /// The sender wrote its share before we copied ours: the release
    /// (key, address) it waits for, sent once our copy is over.
    release: Option<(u64, u64)>,
}

/// How a same-host copy of a rendezvous remainder began.
struct HostStart {
    /// Bytes copied already.
    copied: u64,
    /// Bytes from the start of the remainder that are ours to copy; the
    /// rest, if any, is the sender's.
    ours: u64,
    /// Where the sender's share goes in the buffer, and the host clock's
    /// millisecond from which it may no longer be written (none: it has no
    /// share).
    share: Option<(u64, u32)>,
}

/// Begin copying `want` bytes of a rendezvous remainder, described by `h`
/// (from the process `claim` names), into `buffer` at message offset `eager`:
/// all of it at once when short, or when the sender is not to share
/// (`share` false: it went silent, see `Peer::given_up`); otherwise its
/// first page (proof that the kernel lets us), keeping the
/// front half for after the pull has left and handing the back half to
/// the sender. An error when the copy cannot be made (not proven yet, the
/// buffer is in pieces, the kernel refuses): pull as usual.
fn start_host_copy(
    m: &dyn HostMemory,
    h: &HostMemoryRepr,
    claim: &HostClaim,
    buffer: &mut dyn MsgBuffer,
    (eager, want): (u64, u64),
    share: bool,
) -> Result<HostStart, HostAccess> {
    let dst = buffer
        .slice_at_mut(eager as usize, want as usize)
        .ok_or(HostAccess::Failed)?;
    let whole = want < HOST_SPLIT_MIN || !share;
    let first = if whole { want } else { HOST_PROBE_BYTES };
    match m.read(claim, h.address, &mut dst[..first as usize]) {
        HostAccess::Done => {}
        refused => return Err(refused),
    }
    if whole {
        return Ok(HostStart {
            copied: want,
            ours: want,
            share: None,
        });
    }
    let ours = (want / 2).next_multiple_of(HOST_PROBE_BYTES);
    let expires = m.clock_ms().wrapping_add(HOST_WRITE_WINDOW_MS);
    Ok(HostStart {
        copied: first,
        ours,
        share: Some((dst.as_ptr() as u64 + ours, expires)),
    })
}

/// How long a sender may start writing its share after the pull left,
/// by the host's clock; later it sends the data instead.
const HOST_WRITE_WINDOW_MS: u32 = 1000;
/// A receive whose buffer a sender may write into fails no earlier than
/// this long after the pull left (engine time): the window, and as long
/// again for a write under way to end. Failing it sooner would let the
/// application reuse memory another process is still writing.
const HOST_WRITE_HOLD_NS: u64 = 2 * HOST_WRITE_WINDOW_MS as u64 * 1_000_000;

/// A same-host copy at least this long is shared with the sender.
const HOST_SPLIT_MIN: u64 = 256 << 10;
/// Bytes of a same-host copy made at once, before the pull leaves: they
/// show the kernel lets us read the sender's memory.
const HOST_PROBE_BYTES: u64 = 4096;

impl RendezvousState {
    /// See [`HostMemory::datagram_arrived`].
    pub(super) fn datagram_arrived(&self) {
        if let Some(m) = &self.host {
            m.datagram_arrived();
        }
    }

    pub(super) fn new(config: &Config) -> Self {
        RendezvousState {
            threshold: config.rendezvous_bytes,
            next_number: 1 << 16,
            pulls: PullTable::default(),
            clock: 0,
            host: None,
            copies: Vec::new(),
            host_peers: FastMap::default(),
            host_threshold: config.host_rendezvous_bytes,
            host_tokens: FastMap::default(),
        }
    }

    /// A pull's target: the inbound message its data lands in, the offset
    /// there of the pull's first byte, and the pull's length.
    pub(super) fn pull_target(&self, p: usize, token: u64) -> Option<(u16, u64, u64)> {
        self.pulls
            .get(&(p, token))
            .map(|q| (q.msg_id, q.offset, q.len))
    }

    fn number(&mut self) -> u64 {
        let n = self.next_number;
        self.next_number += 1;
        n
    }
}

/// A pull on its way: its data lands in inbound message `msg_id` at
/// message offset `offset` + its own offset.
#[derive(Clone, Copy, Debug)]
struct PendingPull {
    msg_id: u16,
    offset: u64,
    len: u64,
    /// The send's key and the pull's address there (a release names them).
    key: u64,
    addr: u64,
    /// Message ID of the pull request (a refusal names it).
    request_id: u16,
    /// Engine time until which the sender may write into the receive
    /// buffer (a same-host share); 0 when it may not.
    written_until: u64,
    /// The receive fails once the sender answers, or once it can no
    /// longer write (`written_until`), whichever comes first.
    doomed: bool,
    /// Doomed by our own share's failure while the sender lives: the
    /// sender hears that the receive failed (a delivery-complete send
    /// waits for that), and one that wrote holds its send until we release
    /// it, so dropping the pull without its answer (lost, or later than
    /// `written_until`) sends the release too.
    sender_lives: bool,
}

impl PendingPull {
    fn release_on_drop(&self) -> bool {
        self.sender_lives && self.written_until != 0
    }
}

/// The pulls in progress, by (peer, token), and by the message ID of their
/// request: the sender's answer (a refusal, or the end of its same-host
/// write) names the request, and every SES response from a peer is first
/// looked up as such an answer, so that lookup must not pass over them.
/// Counted by fate too, so that neither the timers nor a peer's watch
/// pass over them.
#[derive(Default)]
struct PullTable {
    pulls: FastMap<(usize, u64), PendingPull>,
    /// (peer, request message ID) -> tokens, oldest first. More than one
    /// when IDs were used again during a pull's life: the 16-bit ID came
    /// round, or a fresh context to the peer numbered its messages from 0
    /// while pulls asked for on the old one wait (doomed, or for a
    /// same-host write). Inline up to two, so a pull allocates nothing.
    by_request: FastMap<(usize, u16), SmallVec<[u64; 2]>>,
    /// How many pulls are doomed: only then do the timers pass over them.
    doomed: usize,
    /// Peer -> how many of its pulls are not doomed (absent: none). A
    /// watch that fires asks whether we still wait on its peer.
    live: FastMap<usize, usize>,
}

impl PullTable {
    fn len(&self) -> usize {
        self.pulls.len()
    }

    fn any_doomed(&self) -> bool {
        self.doomed != 0
    }

    /// Whether a pull from peer `p` is live (not doomed): it waits on the
    /// peer's data.
    fn any_live(&self, p: usize) -> bool {
        self.live.contains_key(&p)
    }

    /// Count a pull of peer `p` with that fate in (`add`) or out.
    fn tally(&mut self, p: usize, doomed: bool, add: bool) {
        if doomed {
            if add {
                self.doomed += 1;
            } else {
                self.doomed -= 1;
            }
            return;
        }
        if add {
            *self.live.entry(p).or_default() += 1;
        } else if let Some(n) = self.live.get_mut(&p) {
            *n -= 1;
            if *n == 0 {
                self.live.remove(&p);
            }
        }
    }

    fn get(&self, k: &(usize, u64)) -> Option<&PendingPull> {
        self.pulls.get(k)
    }

    /// Set pull `k`'s fate (see [`PendingPull::doomed`]); its other
    /// fields, `request_id` above all (only [`Self::renumber`] changes it,
    /// the index following), stay.
    fn set_fate(&mut self, k: &(usize, u64), doomed: bool, sender_lives: bool) {
        if let Some(pull) = self.pulls.get_mut(k) {
            let was = std::mem::replace(&mut pull.doomed, doomed);
            pull.sender_lives = sender_lives;
            self.tally(k.0, was, false);
            self.tally(k.0, doomed, true);
        }
    }

    fn iter(&self) -> impl Iterator<Item = (&(usize, u64), &PendingPull)> {
        self.pulls.iter()
    }

    fn insert(&mut self, k: (usize, u64), pull: PendingPull) {
        if let Some(old) = self.pulls.insert(k, pull) {
            self.unindex(k, old.request_id);
            self.tally(k.0, old.doomed, false);
        }
        self.tally(k.0, pull.doomed, true);
        self.index(k, pull.request_id);
    }

    fn remove(&mut self, k: &(usize, u64)) -> Option<PendingPull> {
        let pull = self.pulls.remove(k)?;
        self.unindex(*k, pull.request_id);
        self.tally(k.0, pull.doomed, false);
        Some(pull)
    }

    fn index(&mut self, (p, token): (usize, u64), request_id: u16) {
        self.by_request
            .entry((p, request_id))
            .or_default()
            .push(token);
    }

    fn unindex(&mut self, (p, token): (usize, u64), request_id: u16) {
        if let Some(tokens) = self.by_request.get_mut(&(p, request_id)) {
            tokens.retain(|t| *t != token);
            if tokens.is_empty() {
                self.by_request.remove(&(p, request_id));
            }
        }
    }

    /// The newest pull to peer `p` whose request had message ID
    /// `request_id`: when IDs were used again, the answers that come now
    /// are to the requests on the peer's current context.
    fn by_request(&self, p: usize, request_id: u16) -> Option<((usize, u64), PendingPull)> {
        let token = *self.by_request.get(&(p, request_id))?.last()?;
        let pull = self.pulls.get(&(p, token))?;
        Some(((p, token), *pull))
    }

    /// Peer `p`'s pull requests were renumbered (`moved`: old and new
    /// message ID). Rare (a fresh context to the peer): a pass over the
    /// pulls, and the peer's index entries rebuilt.
    fn renumber(&mut self, p: usize, moved: &[(u16, u16)]) {
        let mut mine: Vec<(u64, u16)> = Vec::new();
        for (&(_, token), pull) in self.pulls.iter_mut().filter(|(&(q, _), _)| q == p) {
            if let Some(&(_, new)) = moved.iter().find(|&&(old, _)| old == pull.request_id) {
                pull.request_id = new;
            }
            mine.push((token, pull.request_id));
        }
        mine.sort_unstable();
        self.by_request.retain(|&(q, _), _| q != p);
        for (token, request_id) in mine {
            self.index((p, token), request_id);
        }
    }

    /// Forget every pull to peer `p`.
    fn forget_peer(&mut self, p: usize) {
        let mut doomed = 0;
        self.pulls.retain(|&(q, _), pull| {
            doomed += usize::from(q == p && pull.doomed);
            q != p
        });
        self.doomed -= doomed;
        self.live.remove(&p);
        self.by_request.retain(|&(q, _), _| q != p);
    }
}

/// A peer this endpoint waits on for a rendezvous step (kept in its
/// [`Peer`] entry, so its deadline is indexed with the peer's others).
#[derive(Clone, Copy, Debug)]
pub(super) struct Watch {
    pub(super) due: u64,
    probes: u32,
    /// The peer opened a new context while we wait for its answer to a
    /// read: it may have restarted, so only an ACK of our own context (it
    /// still knows it) clears the doubt, not any packet from it.
    suspect: bool,
}

impl Engine {
    /// Copy the remainder of rendezvous sends between processes of this
    /// host through `host` instead of pulling it over the network (both
    /// ends must have it).
    pub fn enable_host_read(&mut self, host: Box<dyn HostMemory>) {
        self.rdv.host = Some(host);
    }

    /// The eager part of a send of `len` bytes to peer `p` when it goes as
    /// a rendezvous send: the first `FI_UET_RENDEZVOUS_BYTES`, which travel
    /// while the receiver's pull makes its round trip. A peer known to be on this host (it copied one of our sends in
    /// place) has its own threshold, `FI_UET_HOST_RENDEZVOUS_BYTES`: the
    /// copy beats the network from a few pages on.
    pub(super) fn rendezvous_eager(&self, p: usize, len: usize) -> Option<u64> {
        let t = match self.rdv.host_peers.contains_key(&p) {
            true => self.rdv.host_threshold,
            false => self.rdv.threshold,
        };
        (t > 0 && len > t).then_some(t as u64)
    }

    /// The description of a new rendezvous send of `payload` with message
    /// ID `id`.
    pub(super) fn new_rendezvous(
        &mut self,
        p: usize,
        id: u16,
        eager: u64,
        payload: &Payload,
        now: u64,
    ) -> RmaTx {
        self.rdv.clock = self.rdv.clock.max(now);
        self.watch_peer(p);
        // The remainder's address, when it lies in one piece.
        let peer = self.peers[p].addr;
        let token = self.rdv.host_tokens.get(&p).copied();
        let host_read = self.rdv.host.as_ref().and_then(|h| {
            let (host, pid) = h.this_process();
            let rest = payload.slice_at(eager as usize, payload.len() - eager as usize)?;
            Some(HostMemoryRepr {
                host,
                pid,
                expires_ms: 0,
                address: rest.as_ptr() as u64,
                offer: token.map_or(0, |t| h.offer(peer, t.pid)),
                echo: token.map_or(0, |t| t.echo),
            })
        });
        RmaTx::Rendezvous {
            key: self.rdv.number() << 16 | id as u64,
            eager,
            pull: PullState::Waiting,
            host_read,
        }
    }

    /// Pulls this endpoint waits for, over all peers (diagnostics, tests).
    pub fn pulls_pending(&self) -> usize {
        self.rdv.pulls.len()
    }

    /// Messages of peer `p` whose pulls are still held (a doomed one waits
    /// until the sender can no longer write into the buffer).
    pub(super) fn pulled_messages(&self, p: usize) -> Vec<u16> {
        self.rdv
            .pulls
            .iter()
            .filter(|(&(q, _), _)| q == p)
            .map(|(_, pull)| pull.msg_id)
            .collect()
    }

    // ----- receiver ---------------------------------------------------------------

    /// A rendezvous message was matched (or discarded): ask the sender for
    /// what the receive buffer has room for past the eager part, or tell it
    /// none is wanted. Its bytes not pulled count as received.
    pub(super) fn start_pull(&mut self, p: usize, msg_id: u16) {
        let share = !self.peers[p].given_up;
        let peer_addr = self.peers[p].addr;
        let peer = &mut self.peers[p];
        let Some(inb) = peer.inbound.get_mut(&msg_id) else {
            return;
        };
        // Only a matched or discarded message whose first packet (with the
        // extension header) is in.
        if !matches!(inb.state, InboundState::Posted(_) | InboundState::Discard) {
            return;
        }
        let Some(r) = inb.rendezvous.as_mut() else {
            return;
        };
        if r.requested {
            return;
        }
        r.requested = true;
        self.stats.rendezvous_pulls += 1;
        let number = self.rdv.number();
        let (key, addr, eager, host_read) = (r.key, r.addr, r.eager, r.host_read);
        let cap = match &inb.state {
            InboundState::Posted(recv) => recv.buffer.len() as u64,
            _ => 0,
        };
        let rest = inb.header.len.saturating_sub(eager);
        let mut want = rest.min(cap.saturating_sub(eager));
        let was_complete = inb.complete();
        inb.received += rest - want;
        // On the sender's host: copy the remainder in place (a large one
        // shared with the sender, see `start_host_copy`). The pull's
        // descriptor says so, offers our token and returns the sender's.
        let mut pull_at = eager;
        let mut descriptor = Vec::new();
        let mut written_until = 0;
        if let (Some(h), Some(m), InboundState::Posted(recv)) =
            (host_read, self.rdv.host.as_deref(), &mut inb.state)
        {
            if want > 0 && m.this_process().0 == h.host {
                self.rdv.host_tokens.insert(p, HostToken::of(&h));
                let claim = HostClaim::of(peer_addr, &h);
                let buffer = recv.buffer.as_mut();
                let mut share_at = None;
                match start_host_copy(m, &h, &claim, buffer, (eager, want), share) {
                    Ok(start) => {
                        self.stats.host_reads += 1;
                        self.stats.host_read_bytes += start.copied;
                        inb.received += start.copied;
                        if start.ours < want {
                            // Shared: the sender writes the rest.
                            written_until = self.rdv.clock + HOST_WRITE_HOLD_NS;
                            self.rdv.copies.push(HostCopy {
                                p,
                                msg_id,
                                claim,
                                address: h.address + start.copied,
                                offset: eager + start.copied,
                                len: start.ours - start.copied,
                                release: None,
                            });
                        }
                        share_at = start.share;
                        pull_at += start.ours;
                        want -= start.ours;
                    }
                    Err(HostAccess::Unproven) => self.stats.host_unproven += 1,
                    Err(_) => self.stats.host_read_failures += 1,
                }
                // Asked after the copy, which may have found the holder
                // (and so made the token) for the first time.
                let (host, pid) = m.this_process();
                let (address, expires_ms) = share_at.unwrap_or((0, 0));
                let told = HostMemoryRepr {
                    host,
                    pid,
                    expires_ms,
                    address,
                    offer: m.offer(peer_addr, h.pid),
                    echo: h.offer,
                };
                descriptor = vec![0u8; HostMemoryRepr::LEN];
                told.emit(&mut descriptor);
            }
        }
        let completed = !was_complete && inb.complete();
        let pull_addr = addr + (pull_at - eager);
        let id = self.queue_pull(p, descriptor, (key, pull_addr), want, number);
        if want > 0 {
            self.rdv.pulls.insert(
                (p, number),
                PendingPull {
                    msg_id,
                    offset: pull_at,
                    len: want,
                    key,
                    addr: pull_addr,
                    request_id: id,
                    written_until,
                    doomed: false,
                    sender_lives: false,
                },
            );
            self.watch_peer(p);
        }
        if completed {
            self.rendezvous_complete(p, msg_id);
        }
    }

    /// Pulls to peer `p` whose request was renumbered (`moved`: old and
    /// new message ID) for a fresh context follow it.
    pub(super) fn renumber_pull_requests(&mut self, p: usize, moved: &[(u16, u16)]) {
        self.rdv.pulls.renumber(p, moved);
    }

    /// Queue a pull of `len` bytes at `addr` of the send named `key`,
    /// carrying `descriptor`; returns its message ID.
    fn queue_pull(
        &mut self,
        p: usize,
        descriptor: Vec<u8>,
        (key, addr): (u64, u64),
        len: u64,
        token: u64,
    ) -> u16 {
        let id = self.peers[p].queue_internal(
            Payload::Owned(descriptor),
            RmaTx::Pull {
                key,
                addr,
                len,
                token,
            },
        );
        self.sends_outstanding += 1;
        self.mark_ready(p);
        id
    }

    /// Read-response data of one of our pulls (the token is above the
    /// 16-bit RMA read IDs). Data for no known pull is dropped.
    pub(super) fn on_pull_data(&mut self, p: usize, s: &SesRequestRepr, payload: PacketPayload) {
        let token = s.match_bits;
        let len = s.request_length as u64;
        let found = self
            .rdv
            .pulls
            .get(&(p, token))
            .copied()
            .filter(|q| q.len == len);
        // The sender completes once this data is acknowledged, and may then
        // free the memory our share of the copy comes from: make it first.
        if found.is_some_and(|q| self.pending_copy(p, q.msg_id).is_some()) {
            self.run_host_copies();
        }
        // A doomed pull's data goes nowhere; its receive fails once it is in.
        let doomed = found.filter(|q| q.doomed);
        let pull = found.filter(|q| !q.doomed);
        self.rma_inbound(p, s, len, |_| None);
        let id = s.message_id;
        let peer = &mut self.peers[p];
        let Some(inb) = peer.inbound.get_mut(&id) else {
            return;
        };
        inb.place(s.buffer_offset, payload);
        let pulled = inb.complete();
        let mut landed = false;
        let mut open = false;
        if let Some(q) = pull {
            if let Some(target) = peer.inbound.get_mut(&q.msg_id) {
                if matches!(target.state, InboundState::Posted(_)) {
                    let was_complete = target.complete();
                    target.place(q.offset + s.buffer_offset, payload);
                    landed = !was_complete && target.complete();
                    open = !pulled && !landed;
                }
            }
        }
        self.expect_after(open, p, id, Some(token), s.buffer_offset, payload.len());
        if pulled {
            self.retire_rma_inbound(p, id);
            self.rdv.pulls.remove(&(p, token));
            if let Some(q) = doomed {
                self.fail_bound_receive(p, q.msg_id, q.sender_lives);
            }
        }
        if let (Some(q), true) = (pull, landed) {
            self.rendezvous_complete(p, q.msg_id);
        }
    }

    /// All bytes of a rendezvous message are in (or will not come): answer
    /// a delivery-complete request and complete the receive.
    fn rendezvous_complete(&mut self, p: usize, msg_id: u16) {
        let peer = &mut self.peers[p];
        if let Some(inb) = peer.inbound.get(&msg_id) {
            if inb.header.want_response {
                peer.queue.push_back(TxItem::Response {
                    msg_id,
                    len: inb.header.len.min(u32::MAX as u64) as u32,
                    code: 0,
                });
                self.mark_ready(p);
            }
        }
        self.finish_if_complete(p, MsgRef::Live(msg_id));
    }

    /// An SES response to one of our pulls: the sender wrote the bytes into
    /// our buffer (return code 0, same host), or refused the pull (it no
    /// longer has the message: the receive fails). False when it is about
    /// no pull.
    pub(super) fn on_pull_answered(&mut self, p: usize, r: &SesResponseRepr) -> bool {
        let found = self.rdv.pulls.by_request(p, r.message_id);
        let Some((k, pull)) = found else {
            return false;
        };
        if r.return_code == 0 && pull.written_until == 0 {
            // We offered no write: the data is still to come.
            return true;
        }
        self.rdv.pulls.remove(&k);
        if r.return_code == 0 {
            // The sender wrote and waits for us to be done with its memory.
            self.release_after_copy(p, pull);
        }
        if r.return_code != 0 || pull.doomed {
            // A refusal: the sender no longer has the message to tell.
            let tell = r.return_code == 0 && pull.sender_lives;
            self.fail_bound_receive(p, pull.msg_id, tell);
            return true;
        }
        let Some(target) = self.peers[p].inbound.get_mut(&pull.msg_id) else {
            return true;
        };
        if matches!(target.state, InboundState::Posted(_)) {
            let was_complete = target.complete();
            target.received += pull.len;
            if !was_complete && target.complete() {
                self.rendezvous_complete(p, pull.msg_id);
            }
        }
        true
    }

    /// Whether shares of same-host copies wait for [`run_host_copies`].
    ///
    /// [`run_host_copies`]: Self::run_host_copies
    pub fn has_host_copies(&self) -> bool {
        !self.rdv.copies.is_empty()
    }

    /// Our share of a copy into message `msg_id` of peer `p`, while it is
    /// still to be made.
    fn pending_copy(&mut self, p: usize, msg_id: u16) -> Option<&mut HostCopy> {
        self.rdv
            .copies
            .iter_mut()
            .find(|c| c.p == p && c.msg_id == msg_id)
    }

    /// The sender of `pull` wrote its share and keeps its memory until we
    /// release it: now, or once our own share is copied.
    fn release_after_copy(&mut self, p: usize, pull: PendingPull) {
        let release = (pull.key, pull.addr);
        match self.pending_copy(p, pull.msg_id) {
            Some(c) => c.release = Some(release),
            None => self.send_release(p, release),
        }
    }

    /// Tell the sender of the send `key` that we no longer read its memory:
    /// a pull of length 0 at `addr`.
    fn send_release(&mut self, p: usize, send: (u64, u64)) {
        let token = self.rdv.number();
        self.queue_pull(p, Vec::new(), send, 0, token);
    }

    /// Make our shares of split same-host copies. The driver calls it once
    /// the pulls queued with them have left, so the senders copy their
    /// shares meanwhile. A copy that fails now (the sender died, or
    /// unmapped the memory it described) fails its receive.
    pub fn run_host_copies(&mut self) {
        for c in std::mem::take(&mut self.rdv.copies) {
            self.run_host_copy(c);
            if let Some(release) = c.release {
                self.send_release(c.p, release);
            }
        }
    }

    fn run_host_copy(&mut self, c: HostCopy) {
        let Some(m) = self.rdv.host.as_deref() else {
            return;
        };
        let Some(inb) = self.peers[c.p].inbound.get_mut(&c.msg_id) else {
            return;
        };
        let InboundState::Posted(recv) = &mut inb.state else {
            return;
        };
        let copied = recv
            .buffer
            .slice_at_mut(c.offset as usize, c.len as usize)
            .is_some_and(|dst| m.read(&c.claim, c.address, dst) == HostAccess::Done);
        if !copied {
            // The sender may be writing its share into the buffer: the
            // receive fails once it has answered or can no longer write.
            self.stats.host_read_failures += 1;
            let share = self
                .rdv
                .pulls
                .iter()
                .find(|(&(q, _), pull)| q == c.p && pull.msg_id == c.msg_id)
                .map(|(&k, _)| k);
            match share {
                Some(k) => self.doom_pull(k, true),
                None => self.fail_bound_receive(c.p, c.msg_id, true),
            }
            return;
        }
        self.stats.host_read_bytes += c.len;
        let was_complete = inb.complete();
        inb.received += c.len;
        if !was_complete && inb.complete() {
            self.rendezvous_complete(c.p, c.msg_id);
        }
    }

    /// The peer is gone (or its context restarted): every pull from it
    /// fails, and so do their receives.
    pub(super) fn fail_pulls(&mut self, p: usize) {
        let mut keys: Vec<(usize, u64)> = self
            .rdv
            .pulls
            .iter()
            .map(|(&k, _)| k)
            .filter(|&(q, _)| q == p)
            .collect();
        keys.sort_unstable();
        for k in keys {
            self.doom_pull(k, false);
        }
    }

    /// Peer `p` opened a new context: what it sent on the old one will
    /// neither be answered nor written into our buffers any more (a
    /// restarted process knows nothing of it; a live one that started
    /// afresh has given those messages up), so its pulls and our shares of
    /// its copies go at once; their receives fail with the others bound to
    /// its messages. Kept for later, they would name message IDs that its
    /// new context uses again.
    pub(super) fn forget_pulls(&mut self, p: usize) {
        self.rdv.pulls.forget_peer(p);
        self.rdv.copies.retain(|c| c.p != p);
    }

    /// Pull `k` will not deliver: its receive fails, at once unless the
    /// sender may still write into the buffer (then once it no longer can,
    /// or answers). `sender_lives`: our own share failed, so the sender
    /// hears of the failure, and gets a release when the pull is dropped
    /// unanswered.
    fn doom_pull(&mut self, k: (usize, u64), sender_lives: bool) {
        let Some(pull) = self.rdv.pulls.get(&k).copied() else {
            return;
        };
        // Once the peer has failed, a later failure of our own share does
        // not make it live again.
        let sender_lives = sender_lives && (pull.sender_lives || !pull.doomed);
        if pull.written_until > self.rdv.clock {
            self.rdv.pulls.set_fate(&k, true, sender_lives);
            return;
        }
        let pull = PendingPull {
            sender_lives,
            ..pull
        };
        self.rdv.pulls.remove(&k);
        if pull.release_on_drop() {
            self.release_after_copy(k.0, pull);
        }
        self.fail_bound_receive(k.0, pull.msg_id, pull.sender_lives);
    }

    /// An application call at engine time `now` (posting a receive may
    /// start a pull whose deadlines count from now, however long the
    /// endpoint was idle before).
    pub(super) fn rendezvous_time(&mut self, now: u64) {
        self.rdv.clock = self.rdv.clock.max(now);
    }

    /// The receive matched to message `msg_id` of peer `p` will never get
    /// the rest of it (the sender refused a pull, its context is gone, or
    /// our share of a same-host copy failed): it completes with an error.
    /// `tell_sender`: the sender lives and still has the message, so a
    /// delivery-complete send learns that it failed.
    pub(super) fn fail_bound_receive(&mut self, p: usize, msg_id: u16, tell_sender: bool) {
        let peer = &mut self.peers[p];
        let Entry::Occupied(mut entry) = peer.inbound.entry(msg_id) else {
            return;
        };
        let inb = entry.get_mut();
        if !matches!(inb.state, InboundState::Posted(_)) {
            // Not (or no longer) bound to a receive: nothing to fail.
            return;
        }
        let header = inb.header;
        let state = std::mem::replace(&mut inb.state, InboundState::Discard);
        // Packets of the send itself may still be on their way. The record
        // stays, dropping them, until the last is in: one arriving without
        // it would open a new record, whose wrapped message ID would make
        // it the message 65536 sends later. It was matched already, so its
        // turn in the matching order is past.
        let still_to_come = inb.carried_len().saturating_sub(inb.carried);
        // Without a receive context none can come (a new one starts afresh).
        if still_to_come == 0 || peer.rx.is_none() {
            entry.remove();
        } else {
            inb.received = header.len - still_to_come;
            inb.header.want_response = false;
        }
        if let InboundState::Posted(recv) = state {
            self.completions.push_back(Completion {
                kind: CompletionKind::Recv,
                context: recv.context,
                tagged: header.tagged,
                len: 0,
                buf: recv.buffer.base_addr(),
                tag: header.tag,
                data: header.cq_data,
                src: Some(peer.addr),
                error: Some(CompletionError::PeerUnreachable),
            });
        }
        if header.want_response && tell_sender {
            // A delivery-complete send waits for our word: it fails.
            peer.queue.push_back(TxItem::Response {
                msg_id,
                len: 0,
                code: RECEIVE_FAILED,
            });
            self.mark_ready(p);
        }
    }

    // ----- sender -----------------------------------------------------------------

    /// A peer's pull of one of our rendezvous sends; `descriptor`: its
    /// payload, where a receiver on this host wants the bytes written.
    pub(super) fn on_pull_request(&mut self, p: usize, s: &SesRequestRepr, descriptor: &[u8]) {
        let (key, addr, len, token) = (
            s.match_bits,
            s.buffer_offset,
            s.request_length as u64,
            s.header_data,
        );
        let send_id = key as u16;
        let peer = &mut self.peers[p];
        let accepted = peer.messages.get_mut(&send_id).is_some_and(|m| {
            let total = m.len();
            match &mut m.rma {
                Some(RmaTx::Rendezvous {
                    key: k,
                    eager,
                    pull,
                    ..
                }) if *k == key
                    && addr >= *eager
                    && addr.checked_add(len).is_some_and(|end| end <= total) =>
                {
                    // A pull of length 0: none wanted, or (after we wrote
                    // our share) the release.
                    match (*pull, len) {
                        (PullState::Waiting | PullState::Lent, 0) => *pull = PullState::Done,
                        (PullState::Waiting, _) => *pull = PullState::Pulling,
                        _ => return false,
                    }
                    true
                }
                _ => false,
            }
        });
        if !accepted {
            self.deny_access(p, s.message_id);
            return;
        }
        // A pull with a descriptor of our host: the peer is on it, and
        // copied in place when it pulls nothing or hands us a share.
        let ours = self.rdv.host.as_deref().map(|m| m.this_process().0);
        let on_host = HostMemoryRepr::parse(descriptor)
            .ok()
            .filter(|d| Some(d.host) == ours);
        if let Some(d) = on_host {
            self.rdv.host_tokens.insert(p, HostToken::of(&d));
            if let Some(m) = self.rdv.host.as_deref() {
                m.meet(self.peers[p].addr, d.pid);
            }
            if len == 0 || d.address != 0 {
                self.rdv.host_peers.insert(p, ());
            }
        }
        if len == 0 {
            self.settle_message(p, send_id);
            return;
        }
        if on_host.is_some_and(|d| self.write_on_host(p, s, &d)) {
            return;
        }
        let peer = &mut self.peers[p];
        peer.queue_internal(
            Payload::Owned(Vec::new()),
            RmaTx::PullData {
                token,
                send_id,
                offset: addr,
                len,
            },
        );
        self.sends_outstanding += 1;
        self.mark_ready(p);
    }

    /// Answer pull `s` (accepted) by writing its bytes into the receive
    /// buffer descriptor `d` (of our host) names, when it names one and
    /// the peer proves itself and the kernel lets us: then an SES response
    /// (return code 0) tells it, and the send waits for the receiver's
    /// release. False when the data must travel.
    fn write_on_host(&mut self, p: usize, s: &SesRequestRepr, d: &HostMemoryRepr) -> bool {
        let Some(m) = self.rdv.host.as_deref() else {
            return false;
        };
        // No share (the receiver pulls it all), or too late (the receiver
        // may fail the receive soon): send instead.
        let left = d.expires_ms.wrapping_sub(m.clock_ms()) as i32;
        if d.address == 0 || left <= 0 {
            return false;
        }
        let claim = HostClaim::of(self.peers[p].addr, d);
        let (send_id, offset, len) = (s.match_bits as u16, s.buffer_offset, s.request_length);
        let peer = &mut self.peers[p];
        let written = peer
            .messages
            .get(&send_id)
            .and_then(|msg| msg.payload.slice_at(offset as usize, len as usize))
            .map_or(HostAccess::Failed, |src| m.write(&claim, d.address, src));
        match written {
            HostAccess::Done => {}
            HostAccess::Unproven => {
                self.stats.host_unproven += 1;
                return false;
            }
            HostAccess::Failed => {
                self.stats.host_write_failures += 1;
                return false;
            }
        }
        self.stats.host_writes += 1;
        self.stats.host_write_bytes += len as u64;
        if let Some(RmaTx::Rendezvous { pull, .. }) = peer
            .messages
            .get_mut(&send_id)
            .and_then(|msg| msg.rma.as_mut())
        {
            // The receiver still reads its own share from this payload.
            *pull = PullState::Lent;
        }
        peer.queue.push_back(TxItem::Response {
            msg_id: s.message_id,
            len,
            code: 0,
        });
        self.mark_ready(p);
        true
    }

    /// The data of a pull is acknowledged: its send is done.
    pub(super) fn on_pull_data_acked(&mut self, p: usize, send_id: u16) {
        if let Some(m) = self.peers[p].messages.get_mut(&send_id) {
            if let Some(RmaTx::Rendezvous { pull, .. }) = &mut m.rma {
                *pull = PullState::Done;
            }
        }
        self.settle_message(p, send_id);
    }

    // ----- liveness ---------------------------------------------------------------

    /// Message `id` just posted to peer `p` needs the peer after its
    /// packets are acknowledged (an answer, a pull, a delivery
    /// confirmation): the peer is watched in case that never comes (it
    /// died, or restarted).
    pub(super) fn watch_if_awaited(&mut self, p: usize, id: u16, now: u64) {
        if self.peers[p]
            .messages
            .get(&id)
            .is_some_and(TxMessage::awaits_peer)
        {
            self.rendezvous_time(now);
            self.watch_peer(p);
        }
    }

    /// Peers with rendezvous state kept outside their entries (pulls,
    /// copies); a watch is in the entry ([`Peer::watch`]).
    pub(super) fn rendezvous_peers(&self) -> impl Iterator<Item = usize> + '_ {
        let pulls = self.rdv.pulls.iter().map(|(&(p, _), _)| p);
        pulls.chain(self.rdv.copies.iter().map(|c| c.p))
    }

    /// Peer `p`'s entry is freed: what is known of it goes too.
    pub(super) fn rdv_forget_peer(&mut self, p: usize) {
        self.rdv.host_peers.remove(&p);
        self.rdv.host_tokens.remove(&p);
    }

    /// Watch peer `p` while this endpoint waits on it for a pull, a
    /// pulled send or the answer to a read (see [`Self::waits_on`]).
    pub(super) fn watch_peer(&mut self, p: usize) {
        let due = self.rdv.clock + self.rto_max;
        let peer = &mut self.peers[p];
        if peer.watch.is_none() {
            peer.watch = Some(Watch {
                due,
                probes: 0,
                suspect: false,
            });
        }
    }

    /// Peer `p` opened a new receive context to us (a restart, or a reopen
    /// after an idle close). Pulls of our sends, answers to our reads and
    /// delivery confirmations travel on its context to us, and a restarted
    /// process will never send them: ask at once whether it still knows
    /// our context (it NACKs the probe if not).
    pub(super) fn suspect_restart(&mut self, p: usize) {
        if !self.peers[p].messages.values().any(TxMessage::awaits_peer) {
            return;
        }
        self.watch_peer(p);
        if let Some(w) = self.peers[p].watch.as_mut() {
            w.due = self.rdv.clock;
            w.suspect = true;
        }
    }

    /// A packet from peer `p` arrived: it is alive. `acked`: it is an ACK
    /// of our context to it, so the peer also still knows that.
    pub(super) fn heard_from(&mut self, p: usize, now: u64, acked: bool) {
        self.rdv.clock = self.rdv.clock.max(now);
        self.no_longer_given_up(p);
        // Looked at first without writing: a write marks the entry for
        // the deadline index, and most arrivals come with no watch.
        if self.peers[p].watch.is_none() {
            return;
        }
        if let Some(w) = self.peers[p].watch.as_mut() {
            if w.suspect && !acked {
                return;
            }
            w.suspect = false;
            w.probes = 0;
            w.due = now + self.rto_max;
        }
    }

    /// Something valid came from peer `p` (a packet, an ACK, a probe):
    /// it is no longer given up on. Looked at first without
    /// writing, as in [`Self::heard_from`].
    pub(super) fn no_longer_given_up(&mut self, p: usize) {
        if self.peers[p].given_up {
            self.peers[p].given_up = false;
        }
    }

    /// The earliest deadline of a doomed pull (watches count among their
    /// peers' deadlines). The pulls are passed over only while one is
    /// doomed, which only a failure brings.
    pub(super) fn rendezvous_deadline(&self) -> Option<u64> {
        if !self.rdv.pulls.any_doomed() {
            return None;
        }
        let doomed = self.rdv.pulls.iter().filter(|(_, q)| q.doomed);
        doomed.map(|(_, q)| q.written_until).min()
    }

    /// Whether this endpoint waits on peer `p`: for a pull's data, or for
    /// the peer to pull, answer or confirm one of our messages
    /// ([`TxMessage::awaits_peer`]).
    fn waits_on(&self, p: usize) -> bool {
        // A doomed pull waits on the clock, not on the peer.
        self.rdv.pulls.any_live(p) || self.peers[p].messages.values().any(TxMessage::awaits_peer)
    }

    /// Fail the doomed pulls whose senders can no longer write.
    pub(super) fn rendezvous_timer(&mut self, now: u64) {
        self.rdv.clock = self.rdv.clock.max(now);
        if !self.rdv.pulls.any_doomed() {
            return;
        }
        let mut expired: Vec<((usize, u64), bool)> = self
            .rdv
            .pulls
            .iter()
            .filter(|(_, q)| q.doomed && q.written_until <= now)
            .map(|(&k, q)| (k, q.sender_lives))
            .collect();
        expired.sort_unstable();
        for (k, sender_lives) in expired {
            self.doom_pull(k, sender_lives);
        }
    }

    /// Peer `p`'s watch, when due: probe the peer, or fail it once
    /// probes go unanswered.
    pub(super) fn watch_timer(&mut self, p: usize, now: u64) {
        let Some(w) = self.peers[p].watch.filter(|w| w.due <= now) else {
            return;
        };
        if !self.waits_on(p) {
            self.peers[p].watch = None;
            return;
        }
        let peer = &self.peers[p];
        if peer.tx.in_flight() > 0 {
            // Retransmission timers watch the peer already.
            self.peers[p].watch = Some(Watch {
                due: now + self.rto_max,
                ..w
            });
            return;
        }
        if w.probes >= self.max_retries {
            self.peers[p].watch = None;
            self.give_up_on(p);
            return;
        }
        let probe = peer.tx.control(ControlType::AckRequest, peer.tx.next_psn());
        if probe.is_none() && !peer.queue.is_empty() && !peer.data_held {
            // No context to probe on, and our packets to the peer wait
            // to leave for want of a context ID (the pool is exhausted;
            // a free one is taken at the next transmit): backpressure,
            // like NACK 0x07, which counts nothing. Once they leave,
            // retransmissions and probes watch the peer again.
            self.peers[p].watch = Some(Watch {
                due: now + self.rto_max,
                ..w
            });
            return;
        }
        // Without a context and with nothing queued (or the driver
        // holding what is), none will open: only the peer can end the
        // wait, so its silence counts as an unanswered probe.
        if let Some(probe) = probe {
            self.control_queue
                .push_back((peer.addr, ControlOut::Control(probe)));
        }
        let probes = w.probes + 1;
        let wait = peer.tx.rto(self.rto_min, self.rto_max, probes);
        self.peers[p].watch = Some(Watch {
            due: now + wait,
            probes,
            ..w
        });
    }
}

#[cfg(test)]
mod pull_table_tests {
    use super::*;

    fn pull(request_id: u16) -> PendingPull {
        PendingPull {
            msg_id: 0,
            offset: 0,
            len: 1,
            key: 0,
            addr: 0,
            request_id,
            written_until: 0,
            doomed: false,
            sender_lives: false,
        }
    }

    /// What a pass over the pulls finds: the newest (highest token) of
    /// peer `p` with that request ID.
    fn pass(t: &PullTable, p: usize, request_id: u16) -> Option<(usize, u64)> {
        t.iter()
            .filter(|(&(q, _), pull)| q == p && pull.request_id == request_id)
            .map(|(&k, _)| k)
            .max()
    }

    proptest::proptest! {
        /// Lookups by request ID, whether any pull is doomed and whether
        /// a peer has a live one agree with a pass over the pulls, through
        /// inserts (request IDs used again, pulls replaced), removals,
        /// renumbering, changes of fate and a peer's departure.
        #[test]
        fn lookup_by_request_same_as_pass(ops in proptest::collection::vec(
            (0u8..6, 0usize..3, 0u16..5, 0u16..5),
            0..300,
        )) {
            let mut t = PullTable::default();
            for (token, (op, p, a, b)) in ops.into_iter().enumerate() {
                match op {
                    0 => t.insert((p, token as u64), pull(a)),
                    1 => {
                        // Replace the newest pull to `p`, if any.
                        let k = t.iter().map(|(&k, _)| k).filter(|k| k.0 == p).max();
                        t.insert(k.unwrap_or((p, token as u64)), pull(a));
                    }
                    2 => {
                        let victim = t.iter().map(|(&k, _)| k).filter(|k| k.0 == p).min();
                        if let Some(k) = victim {
                            proptest::prop_assert!(t.remove(&k).is_some());
                        }
                    }
                    3 => t.renumber(p, &[(a, b), (b, a)]),
                    4 if a == 0 => t.forget_peer(p),
                    4 | 5 => {
                        let k = t.iter().map(|(&k, _)| k).filter(|k| k.0 == p).max();
                        if let Some(k) = k {
                            t.set_fate(&k, b % 2 == 0, false);
                        }
                    }
                    _ => {}
                }
                for q in 0..3 {
                    for id in 0..5 {
                        let got = t.by_request(q, id).map(|(k, _)| k);
                        proptest::prop_assert_eq!(got, pass(&t, q, id));
                    }
                }
                let doomed = t.iter().any(|(_, pull)| pull.doomed);
                proptest::prop_assert_eq!(t.any_doomed(), doomed);
                for q in 0..3 {
                    let live = t.iter().any(|(&(r, _), pull)| r == q && !pull.doomed);
                    proptest::prop_assert_eq!(t.any_live(q), live);
                }
            }
        }
    }
}
