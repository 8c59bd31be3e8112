//! Semantic sublayer: messages and tag matching.
//!
//! Outgoing messages ([`TxMessage`]) are segmented lazily as the window
//! opens. Incoming messages ([`Inbound`]) are matched against posted receives
//! strictly in the sender's message order, even though their packets may
//! arrive in any order; until a message is matched its payload is staged,
//! afterwards it is written straight into the application's buffer.

pub mod atomic;
pub mod matching;

pub use matching::{tag_matches, PostedQueues, Unexpected, UnexpectedQueue, UnexpectedSlot};

use crate::copy::copy_bytes;
use crate::ops::{CompletionLevel, Context, Payload, RecvOp};

/// What a message's header says (from whichever packet arrived first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsgHeader {
    pub tagged: bool,
    pub tag: u64,
    pub len: u64,
    /// Remote CQ data; carried by the first packet only.
    pub cq_data: Option<u64>,
    /// The sender asked for delivery completion (an SES response).
    pub want_response: bool,
}

/// An outgoing message and its progress.
pub struct TxMessage {
    pub tagged: bool,
    pub tag: u64,
    pub cq_data: Option<u64>,
    pub payload: Payload,
    pub context: Context,
    pub level: CompletionLevel,
    pub signal: bool,
    /// Bytes already cut into packets.
    pub next_offset: u64,
    /// The first packet went out (a zero-length message has exactly one).
    pub started: bool,
    /// Packets sent and not yet acknowledged.
    pub unacked_packets: u32,
    /// Nothing is left to report: the application got its completion, or
    /// (without `signal`) the message was acknowledged, or it is the
    /// engine's own. Until then a failure of the peer reports an error.
    pub completed: bool,
    /// The peer's SES response arrived (delivery complete).
    pub delivered: bool,
    /// That response said the receive failed at the target: the send
    /// completes with an error.
    pub failed: bool,
    /// RMA write, read request or read data, or a rendezvous send and its
    /// pulls (`None` for eager messages).
    pub rma: Option<RmaTx>,
}

/// How an RMA or rendezvous packet differs from a message packet (see
/// `engine/rma.rs` and `engine/rendezvous.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RmaTx {
    /// Write to `addr` under `key`.
    Write { addr: u64, key: u64 },
    /// Read request for `len` bytes at `addr` under `key` (no payload).
    Read { addr: u64, key: u64, len: u64 },
    /// Data answering the peer's read request `read_id`.
    ReadData { read_id: u16 },
    /// Atomic at `addr` under `key`: `code` = op << 8 | datatype; `fetch`
    /// for fetching and compare atomics (answered with the old values).
    Atomic {
        addr: u64,
        key: u64,
        code: u16,
        fetch: bool,
    },
    /// A rendezvous send: its packets carry the first `eager` bytes; the
    /// receiver pulls the rest with a read naming `key`, or, on this host,
    /// copies it from where `host_read` says (see `engine/rendezvous.rs`).
    Rendezvous {
        key: u64,
        eager: u64,
        pull: PullState,
        host_read: Option<crate::wire::HostMemoryRepr>,
    },
    /// A rendezvous receiver's read of `len` bytes at message offset `addr`
    /// of the send named by `key`; `token` comes back in the data.
    Pull {
        key: u64,
        addr: u64,
        len: u64,
        token: u64,
    },
    /// Data answering a pull: `len` bytes of the rendezvous send `send_id`
    /// from message offset `offset` (read from that send's payload).
    PullData {
        token: u64,
        send_id: u16,
        offset: u64,
        len: u64,
    },
}

/// Where the remainder of a rendezvous send stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullState {
    /// The receiver has not asked for it yet (unmatched).
    Waiting,
    /// Its data is on the way.
    Pulling,
    /// Written into the receiver's buffer (same host), while the receiver
    /// still copies its own share from our memory: the payload must stay
    /// until the receiver releases it with a pull of length 0.
    Lent,
    /// Pulled and acknowledged, or the receiver wants no more.
    Done,
}

impl TxMessage {
    /// The operation's length: the whole message, or a pull's bytes.
    pub fn len(&self) -> u64 {
        match self.rma {
            Some(RmaTx::PullData { len, .. }) => len,
            _ => self.payload.len() as u64,
        }
    }

    /// Bytes this message's own packets carry (a rendezvous send only its
    /// eager part).
    pub fn wire_len(&self) -> u64 {
        match self.rma {
            Some(RmaTx::Rendezvous { eager, .. }) => eager,
            _ => self.len(),
        }
    }

    /// A rendezvous send whose receiver has not finished pulling.
    pub fn pull_pending(&self) -> bool {
        matches!(self.rma, Some(RmaTx::Rendezvous { pull, .. }) if pull != PullState::Done)
    }

    /// A rendezvous send a receiver on this host still copies out of our
    /// memory ([`PullState::Lent`]).
    pub fn lent(&self) -> bool {
        matches!(
            self.rma,
            Some(RmaTx::Rendezvous {
                pull: PullState::Lent,
                ..
            })
        )
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn fully_sent(&self) -> bool {
        self.started && self.next_offset >= self.wire_len()
    }

    /// A read or fetching atomic whose answer (data naming its message ID)
    /// is not in yet: it holds its message ID until then, so that no later
    /// message comes round to the ID and is taken for it.
    pub fn answer_pending(&self) -> bool {
        matches!(
            self.rma,
            Some(RmaTx::Read { .. } | RmaTx::Atomic { fetch: true, .. })
        ) && !self.delivered
    }

    /// Read data or fetched atomic values this endpoint sends as the
    /// answer to a peer's request (counted in `FI_UET_ANSWER_BYTES`).
    pub fn is_answer(&self) -> bool {
        matches!(self.rma, Some(RmaTx::ReadData { .. }))
    }

    /// Something at this end waits for this message's ACKs: a completion
    /// or a counter the application will see, or, for reads, atomics,
    /// rendezvous sends and their answers, the engine (answer budgets,
    /// pulls). Only eager sends and RMA writes that report nothing but
    /// failure (fi_inject, selective completion), or whose completion is
    /// out already, leave nobody waiting.
    pub fn awaits_ack(&self) -> bool {
        self.waits_beyond_acks() || self.completion_awaited()
    }

    /// The application will see this message's completion and has not yet.
    pub fn completion_awaited(&self) -> bool {
        self.signal && !self.completed
    }

    /// A read, atomic, rendezvous send or answer: the engine waits on it
    /// for more than its ACKs, whatever the application asked to see.
    pub fn waits_beyond_acks(&self) -> bool {
        !matches!(self.rma, None | Some(RmaTx::Write { .. }))
    }

    /// Something only the peer can still do for this message: pull it,
    /// answer it, or confirm its delivery (SES response).
    pub fn awaits_peer(&self) -> bool {
        self.pull_pending()
            || self.answer_pending()
            || (self.level == CompletionLevel::Delivery && !self.delivered)
    }

    /// Every packet acknowledged, for a rendezvous send the rest pulled,
    /// and for a read or fetching atomic the answer in: the payload is no
    /// longer needed.
    pub fn fully_acked(&self) -> bool {
        self.fully_sent()
            && self.unacked_packets == 0
            && !self.pull_pending()
            && !self.answer_pending()
    }
}

/// Counts over one peer's messages in flight that the per-packet paths ask
/// about (is a completion awaited? does anything wait for ACKs?), kept
/// current where a message is added, completes and leaves, so that no
/// path scans the messages: a peer may have thousands queued.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessageCounts {
    /// Messages with [`TxMessage::completion_awaited`].
    completion_awaited: u32,
    /// Messages with [`TxMessage::waits_beyond_acks`].
    beyond_acks: u32,
}

impl MessageCounts {
    /// The counts of `messages`, taken one by one (for checks).
    pub fn of<'a>(messages: impl IntoIterator<Item = &'a TxMessage>) -> Self {
        let mut c = Self::default();
        for m in messages {
            c.add(m);
        }
        c
    }

    /// `m` joins the messages.
    pub fn add(&mut self, m: &TxMessage) {
        self.completion_awaited += u32::from(m.completion_awaited());
        self.beyond_acks += u32::from(m.waits_beyond_acks());
    }

    /// `m` leaves the messages.
    pub fn remove(&mut self, m: &TxMessage) {
        self.completion_awaited -= u32::from(m.completion_awaited());
        self.beyond_acks -= u32::from(m.waits_beyond_acks());
    }

    /// Mark `m`, one of the messages, completed.
    pub fn complete(&mut self, m: &mut TxMessage) {
        self.completion_awaited -= u32::from(m.completion_awaited());
        m.completed = true;
    }

    /// Some message awaits a completion the application will see.
    pub fn completion_awaited(&self) -> bool {
        self.completion_awaited > 0
    }

    /// Some message has [`TxMessage::awaits_ack`].
    pub fn awaits_ack(&self) -> bool {
        self.completion_awaited > 0 || self.beyond_acks > 0
    }
}

/// Where the payload of an incoming message goes.
pub enum InboundState {
    /// Earlier messages of this peer are not matched yet, or it sits in the
    /// unexpected queue: payload is staged here.
    Staged(Vec<u8>),
    /// In the unexpected queue (staged; `Unexpected` entries refer to it).
    Unexpected(Vec<u8>),
    /// Matched: payload goes straight into the application's buffer.
    Posted(RecvOp),
    /// The application discarded it (FI_DISCARD): payload is dropped.
    Discard,
    /// An RMA write into registered memory, or the data of a read this
    /// endpoint asked for: placed into that memory (`None`: the access was
    /// refused, payload is dropped). Never matched against receives.
    Rma(Option<Box<dyn crate::ops::MsgBuffer>>),
}

/// An incoming message being received.
pub struct Inbound {
    /// Position in the sender's message order.
    pub seq: u64,
    pub header: MsgHeader,
    /// Payload bytes received so far (each packet counted once), plus
    /// those of a rendezvous remainder that will not be pulled.
    pub received: u64,
    /// Of those, the bytes that came in the message's own packets (a
    /// rendezvous send's remainder is pulled, not carried).
    pub carried: u64,
    /// End of the highest byte placed so far: every byte past it is still
    /// to come, so a payload may be received straight into that part of a
    /// posted buffer before its packet is checked (see `Engine::landing`).
    pub high_water: u64,
    pub state: InboundState,
    /// A rendezvous send: where its remainder is to be pulled from.
    pub rendezvous: Option<RendezvousRx>,
}

impl RendezvousRx {
    /// From the extension header of a packet.
    pub fn new(r: &crate::wire::RendezvousRepr) -> Self {
        RendezvousRx {
            key: r.read_key,
            addr: r.read_address,
            eager: r.eager_length as u64,
            requested: false,
            host_read: r.host_read,
        }
    }
}

/// The receiver's view of a rendezvous send (from its extension header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RendezvousRx {
    pub key: u64,
    /// Sender's address of the remainder's first byte.
    pub addr: u64,
    /// Message bytes carried by the send itself; the pull lands after them.
    pub eager: u64,
    /// The pull (or the word that none is wanted) was requested.
    pub requested: bool,
    /// Where the remainder lies in the memory of a process on the sender's
    /// host.
    pub host_read: Option<crate::wire::HostMemoryRepr>,
}

impl Inbound {
    pub fn complete(&self) -> bool {
        self.received >= self.header.len
    }

    /// Received whole, its turn in the matching order past (`next_seq` is
    /// the next one to match), and no receive has taken it: an unexpected
    /// message, which may wait for one as long as the application likes,
    /// while no packet of its own can still come.
    pub fn waits_for_a_receive(&self, next_seq: u64) -> bool {
        self.seq < next_seq && self.complete() && matches!(self.state, InboundState::Unexpected(_))
    }

    /// Bytes the message's own packets carry: all of it, or a rendezvous
    /// send's eager part (the rest comes only when pulled).
    pub fn carried_len(&self) -> u64 {
        self.rendezvous
            .map_or(self.header.len, |r| r.eager.min(self.header.len))
    }

    /// Packets of this message are still to come from its sender on their
    /// own (not a rendezvous remainder, which comes when pulled).
    pub fn awaits_packets(&self) -> bool {
        match self.state {
            InboundState::Rma(_) => !self.complete(),
            _ => self.carried < self.carried_len(),
        }
    }

    /// Matched to a receive, or discarded: no longer waits for one.
    pub fn bound_or_discarded(&self) -> bool {
        matches!(self.state, InboundState::Posted(_) | InboundState::Discard)
    }

    /// Bytes of staging memory this message holds.
    pub fn staged_bytes(&self) -> usize {
        match &self.state {
            InboundState::Staged(stage) | InboundState::Unexpected(stage) => stage.len(),
            _ => 0,
        }
    }

    /// Staging memory that placing `len` bytes at `offset` would add. The
    /// stage grows with what arrives (up to the highest byte so far), never
    /// to the length a header merely claims.
    pub fn stage_growth(&self, offset: u64, len: usize) -> usize {
        match &self.state {
            InboundState::Staged(stage) | InboundState::Unexpected(stage) if len > 0 => {
                (offset as usize + len).saturating_sub(stage.len())
            }
            _ => 0,
        }
    }

    /// Take the application's buffer for this message: what is staged
    /// moves into it. Returns the staging bytes freed.
    pub fn bind(&mut self, mut recv: RecvOp) -> usize {
        let staged = self.staged_bytes();
        if let InboundState::Staged(stage) | InboundState::Unexpected(stage) = &self.state {
            // Parts not yet arrived are zero here and overwritten on arrival.
            if !stage.is_empty() {
                let n = stage.len().min(recv.buffer.len());
                recv.buffer.write_at(0, &stage[..n]);
            }
        }
        self.state = InboundState::Posted(recv);
        staged
    }

    /// Store one packet's payload at `offset` (already bounds-checked
    /// against the header's length). Returns the staging bytes added.
    pub fn place(&mut self, offset: u64, payload: PacketPayload) -> usize {
        self.received += payload.len() as u64;
        self.high_water = self.high_water.max(offset + payload.len() as u64);
        let Some(data) = payload.bytes() else {
            // Already in place. A landing is offered only into a posted
            // buffer; a pull's own record (no memory of its own, `Rma(None)`)
            // just counts the bytes its target received.
            debug_assert!(matches!(
                self.state,
                InboundState::Posted(_) | InboundState::Rma(None)
            ));
            return 0;
        };
        match &mut self.state {
            InboundState::Staged(stage) | InboundState::Unexpected(stage) => {
                if data.is_empty() {
                    return 0;
                }
                let o = offset as usize;
                let before = stage.len();
                if stage.len() < o + data.len() {
                    stage.resize(o + data.len(), 0);
                }
                copy_bytes(&mut stage[o..o + data.len()], data);
                stage.len() - before
            }
            InboundState::Posted(recv) => {
                write_clipped(recv, offset, data);
                0
            }
            InboundState::Rma(Some(mem)) => {
                if offset as usize + data.len() <= mem.len() {
                    mem.write_at(offset as usize, data);
                }
                0
            }
            InboundState::Rma(None) | InboundState::Discard => 0,
        }
    }
}

/// The payload of one arriving packet.
#[derive(Clone, Copy, Debug)]
pub enum PacketPayload<'a> {
    /// Its bytes, to be copied where they belong.
    Bytes(&'a [u8]),
    /// This many bytes the driver received straight into the posted buffer
    /// at the packet's offset (a landing the engine predicted and checked).
    InPlace(usize),
}

impl PacketPayload<'_> {
    pub fn len(&self) -> usize {
        match self {
            PacketPayload::Bytes(b) => b.len(),
            PacketPayload::InPlace(n) => *n,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes, when they still need placing.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            PacketPayload::Bytes(b) => Some(b),
            PacketPayload::InPlace(_) => None,
        }
    }
}

/// Write into a receive buffer, dropping what lies past its end (the
/// truncation is reported when the message completes).
pub fn write_clipped(recv: &mut RecvOp, offset: u64, data: &[u8]) {
    let cap = recv.buffer.len() as u64;
    if offset >= cap {
        return;
    }
    let n = (cap - offset).min(data.len() as u64) as usize;
    recv.buffer.write_at(offset as usize, &data[..n]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(signal: bool, completed: bool, rma: Option<RmaTx>) -> TxMessage {
        TxMessage {
            tagged: false,
            tag: 0,
            cq_data: None,
            payload: Payload::Owned(vec![0; 8]),
            context: 0,
            level: CompletionLevel::Transmit,
            signal,
            next_offset: 0,
            started: false,
            unacked_packets: 0,
            completed,
            delivered: false,
            failed: false,
            rma,
        }
    }

    #[test]
    fn only_sends_and_writes_without_a_pending_completion_leave_nobody_waiting() {
        let write = Some(RmaTx::Write { addr: 0, key: 1 });
        // fi_inject, fi_inject_write, and a send whose completion is out.
        assert!(!message(false, false, None).awaits_ack());
        assert!(!message(false, false, write).awaits_ack());
        assert!(!message(true, true, None).awaits_ack());
        // A transmit-complete send or write the application waits for.
        assert!(message(true, false, None).awaits_ack());
        assert!(message(true, false, write).awaits_ack());
        // Engine flows an ACK moves on, completion or not: read answers
        // free answer budget, pulls and their data keep rendezvous going.
        let answer = Some(RmaTx::ReadData { read_id: 3 });
        assert!(message(false, true, answer).awaits_ack());
        let pull = Some(RmaTx::Pull {
            key: 1,
            addr: 0,
            len: 8,
            token: 2,
        });
        assert!(message(false, true, pull).awaits_ack());
    }

    #[test]
    fn message_counts_follow_additions_completions_and_removals() {
        let answer = Some(RmaTx::ReadData { read_id: 3 });
        let mut counts = MessageCounts::default();
        assert!(!counts.awaits_ack() && !counts.completion_awaited());
        // Injects alone: nobody waits.
        let inject = message(false, false, None);
        counts.add(&inject);
        assert!(!counts.awaits_ack() && !counts.completion_awaited());
        // A signaled send, until its completion is out.
        let mut send = message(true, false, None);
        counts.add(&send);
        assert!(counts.awaits_ack() && counts.completion_awaited());
        counts.complete(&mut send);
        assert!(send.completed);
        assert!(!counts.awaits_ack() && !counts.completion_awaited());
        // Completing twice counts once.
        counts.complete(&mut send);
        assert_eq!(counts, MessageCounts::of([&inject, &send]));
        // Read data waits for its ACKs without any completion.
        let data = message(false, true, answer);
        counts.add(&data);
        assert!(counts.awaits_ack() && !counts.completion_awaited());
        assert_eq!(counts, MessageCounts::of([&inject, &send, &data]));
        for m in [&inject, &send, &data] {
            counts.remove(m);
        }
        assert_eq!(counts, MessageCounts::default());
    }
}
