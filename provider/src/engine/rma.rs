//! RMA: writes into and reads from a peer's registered memory.
//!
//! Wire (SES standard request header, see DESIGN.md section 4):
//! - Write (opcode 1): `buffer_offset` is the target address of the packet's
//!   first byte, `match_bits` the memory key, `request_length` the write's
//!   length; `header_data` is the remote CQ data on the first packet (HD
//!   flag), otherwise payload length and message offset as for sends. The
//!   DC flag is always set: the target answers with an SES response whose
//!   return code is 0, or [`ACCESS_DENIED`] when the key, the range or the
//!   permission does not check out (the payload is then dropped and the
//!   memory left untouched).
//! - Read (opcode 2): one packet without payload; `buffer_offset` is the
//!   target address, `match_bits` the key, `request_length` the read length.
//!   The target answers with the data as a message of its own on its own
//!   PDC, opcode 0x11 (read response): `buffer_offset` = offset in the read,
//!   `match_bits` = the read request's message ID. A refused read gets an
//!   SES response with [`ACCESS_DENIED`] for the request's message ID.
//!
//! Both kinds take a message ID from the sender's message sequence, so the
//! receiver lets them take their turn in the matching order (they match no
//! receive). The target resolves every access through
//! [`MemoryRegions::resolve`] (key, range and permission) before it touches
//! memory.

use super::*;
use crate::ses::RmaTx;

/// SES response return code for a refused RMA access.
pub const ACCESS_DENIED: u8 = 0x01;
/// SES response return code for a delivery-complete send whose receive
/// failed at the target (its rendezvous remainder could not be had).
pub const RECEIVE_FAILED: u8 = 0x02;

/// A read this endpoint asked for, waiting for the target's data.
pub(crate) struct PendingRead {
    /// Taken into the inbound state when the first data packet arrives.
    buffer: Option<Box<dyn MsgBuffer>>,
    /// Message ID of the data that took `buffer`.
    data_id: Option<u16>,
    context: Context,
    signal: bool,
    len: usize,
    base: usize,
    /// A fetching atomic: completes as FetchAtomic.
    atomic: bool,
}

impl RmaTx {
    /// Rewrite a message packet's SES header for this RMA operation;
    /// `offset` is the packet's offset within the operation.
    pub(crate) fn describe(&self, ses: &mut SesRequestRepr, offset: u64) {
        match *self {
            RmaTx::Write { addr, key } => {
                ses.opcode = SesOpcode::Write as u8;
                ses.buffer_offset = addr.wrapping_add(offset);
                ses.match_bits = key;
                ses.flags |= sflags::DC;
            }
            RmaTx::Read { addr, key, len } => {
                ses.opcode = SesOpcode::Read as u8;
                ses.buffer_offset = addr;
                ses.match_bits = key;
                ses.request_length = len as u32;
                ses.header_data = 0;
                ses.flags &= !(sflags::DC | sflags::HD);
            }
            RmaTx::Atomic {
                addr,
                key,
                code,
                fetch,
            } => {
                ses.opcode = if fetch {
                    SesOpcode::FetchingAtomic as u8
                } else {
                    SesOpcode::Atomic as u8
                };
                ses.buffer_offset = addr;
                ses.match_bits = key;
                // The initiator field names the sender's canonical port (peer
                // identity); the op and datatype travel in the job ID.
                ses.job_id = code as u32;
                ses.header_data = 0;
                ses.flags &= !sflags::HD;
                if fetch {
                    ses.flags &= !sflags::DC;
                } else {
                    ses.flags |= sflags::DC;
                }
            }
            RmaTx::ReadData { read_id } => {
                ses.opcode = SesOpcode::ReadResponse as u8;
                ses.match_bits = read_id as u64;
                ses.flags &= !(sflags::DC | sflags::HD);
            }
            RmaTx::Rendezvous { .. } => {
                ses.opcode = if ses.opcode == SesOpcode::TaggedSend as u8 {
                    SesOpcode::RendezvousTaggedSend as u8
                } else {
                    SesOpcode::RendezvousSend as u8
                };
            }
            RmaTx::Pull {
                key,
                addr,
                len,
                token,
            } => {
                ses.opcode = SesOpcode::Read as u8;
                ses.resource_index = super::RENDEZVOUS_RESOURCE;
                ses.buffer_offset = addr;
                ses.match_bits = key;
                ses.request_length = len as u32;
                ses.header_data = token;
                ses.flags &= !(sflags::DC | sflags::HD);
            }
            RmaTx::PullData { token, .. } => {
                ses.opcode = SesOpcode::ReadResponse as u8;
                ses.match_bits = token;
                ses.flags &= !(sflags::DC | sflags::HD);
            }
        }
    }
}

impl Engine {
    /// Incoming messages and RMA operations not finished yet, over all
    /// peers (diagnostics and tests).
    pub fn inbound_len(&self) -> usize {
        self.peers.iter().map(|p| p.inbound.len()).sum::<usize>() + self.parked.len()
    }

    /// Memory peers may write and read (domain-wide registrations).
    pub fn set_memory_regions(&mut self, regions: std::sync::Arc<dyn MemoryRegions>) {
        self.regions = Some(regions);
    }

    /// Opcodes this engine handles.
    pub(super) fn carries_known_opcode(s: &SesRequestRepr) -> bool {
        matches!(
            s.opcode(),
            Ok(SesOpcode::Send
                | SesOpcode::TaggedSend
                | SesOpcode::RendezvousSend
                | SesOpcode::RendezvousTaggedSend
                | SesOpcode::Write
                | SesOpcode::Read
                | SesOpcode::Atomic
                | SesOpcode::FetchingAtomic
                | SesOpcode::ReadResponse)
        )
    }

    /// Offset of a packet's payload within its message or operation.
    pub(super) fn message_offset(s: &SesRequestRepr) -> u64 {
        match s.opcode() {
            Ok(SesOpcode::Write) if s.flags & sflags::SOM == 0 => s.header_data & 0xffff_ffff,
            Ok(SesOpcode::Write | SesOpcode::Read) => 0,
            Ok(SesOpcode::Atomic | SesOpcode::FetchingAtomic) => 0,
            _ => s.buffer_offset,
        }
    }

    /// Post an RMA write or read.
    pub fn post_rma(&mut self, now: u64, op: RmaOp) -> Result<()> {
        let len = match &op.kind {
            RmaKind::Write { payload, .. } => payload.len(),
            RmaKind::Read { buffer } => buffer.len(),
            RmaKind::Atomic {
                operand, compare, ..
            } => {
                // One packet: the target applies it in one go.
                let n = operand.len() + compare.len();
                if n > self.max_payload() {
                    return Err(Error::MessageTooLong {
                        len: n,
                        max: self.max_payload(),
                    });
                }
                n
            }
        };
        let p = self.admit_send(now, op.dest, len)?;
        let peer = &mut self.peers[p];
        let id = peer.next_msg_id;
        peer.next_msg_id = id.wrapping_add(1);
        let (payload, cq_data, rma, level, completed) = match op.kind {
            RmaKind::Write { payload, cq_data } => (
                payload,
                cq_data,
                RmaTx::Write {
                    addr: op.addr,
                    key: op.key,
                },
                // The target's response says whether the access was allowed.
                CompletionLevel::Delivery,
                false,
            ),
            RmaKind::Atomic {
                op: code,
                datatype,
                mut operand,
                compare,
                result,
            } => {
                let fetch = result.is_some();
                if let Some(buffer) = result {
                    self.reads.insert(
                        (p, id),
                        PendingRead {
                            base: buffer.base_addr(),
                            len: buffer.len(),
                            buffer: Some(buffer),
                            data_id: None,
                            context: op.context,
                            signal: op.signal,
                            atomic: true,
                        },
                    );
                }
                operand.extend_from_slice(&compare);
                (
                    Payload::Owned(operand),
                    None,
                    RmaTx::Atomic {
                        addr: op.addr,
                        key: op.key,
                        code: (code as u16) << 8 | datatype as u16,
                        fetch,
                    },
                    if fetch {
                        CompletionLevel::Transmit
                    } else {
                        CompletionLevel::Delivery
                    },
                    fetch,
                )
            }
            RmaKind::Read { buffer } => {
                self.reads.insert(
                    (p, id),
                    PendingRead {
                        base: buffer.base_addr(),
                        buffer: Some(buffer),
                        data_id: None,
                        context: op.context,
                        signal: op.signal,
                        len,
                        atomic: false,
                    },
                );
                (
                    Payload::Owned(Vec::new()),
                    None,
                    RmaTx::Read {
                        addr: op.addr,
                        key: op.key,
                        len: len as u64,
                    },
                    // The read completes when its data is in, not on ACK;
                    // its request stays until then (`answer_pending`).
                    CompletionLevel::Transmit,
                    true,
                )
            }
        };
        let peer = &mut self.peers[p];
        peer.add_message(
            id,
            TxMessage {
                tagged: false,
                tag: 0,
                cq_data,
                payload,
                context: op.context,
                level,
                signal: op.signal,
                next_offset: 0,
                started: false,
                unacked_packets: 0,
                completed,
                delivered: false,
                failed: false,
                rma: Some(rma),
            },
        );
        peer.queue.push_back(TxItem::Message(id));
        self.mark_ready(p);
        self.watch_if_awaited(p, id, now);
        Ok(())
    }

    /// Handle an RMA request packet (write, read request, read data). False
    /// when the packet is a message for the normal path.
    pub(super) fn on_rma_request(
        &mut self,
        p: usize,
        s: &SesRequestRepr,
        payload: PacketPayload,
    ) -> bool {
        // Only pulled data lands in place (see `Engine::landing`); writes
        // and atomics always bring their bytes.
        let bytes = payload.bytes().unwrap_or_default();
        let rma = matches!(
            s.opcode(),
            Ok(SesOpcode::Write
                | SesOpcode::Read
                | SesOpcode::ReadResponse
                | SesOpcode::Atomic
                | SesOpcode::FetchingAtomic)
        );
        // A message ID names one operation: an RMA request under the ID of
        // a message being received would complete or retire that message
        // (its receive and staged bytes lost with it).
        let clash = self.peers[p]
            .inbound
            .get(&s.message_id)
            .is_some_and(|inb| !matches!(inb.state, InboundState::Rma(_)));
        if rma && clash {
            self.stats.malformed += 1;
            return true;
        }
        match s.opcode() {
            Ok(SesOpcode::Write) => self.on_write(p, s, bytes),
            Ok(SesOpcode::Read) => self.on_read_request(p, s, bytes),
            Ok(SesOpcode::ReadResponse) => self.on_read_data(p, s, payload),
            Ok(SesOpcode::Atomic) => self.on_atomic(p, s, bytes, false),
            Ok(SesOpcode::FetchingAtomic) => self.on_atomic(p, s, bytes, true),
            _ => return false,
        }
        true
    }

    /// Register an RMA operation's place in the sender's message order;
    /// `len` is the payload bytes it carries in all.
    pub(super) fn rma_inbound(
        &mut self,
        p: usize,
        s: &SesRequestRepr,
        len: u64,
        resolve: impl FnOnce(&mut Self) -> Option<Box<dyn MsgBuffer>>,
    ) -> bool {
        if self.peers[p].inbound.contains_key(&s.message_id) {
            return false;
        }
        let state = InboundState::Rma(resolve(self));
        let peer = &mut self.peers[p];
        let ahead = s.message_id.wrapping_sub(peer.next_match_seq as u16) as u64;
        peer.inbound.insert(
            s.message_id,
            Inbound {
                seq: peer.next_match_seq + ahead,
                header: MsgHeader {
                    tagged: false,
                    tag: s.match_bits,
                    len,
                    cq_data: None,
                    want_response: s.flags & sflags::DC != 0,
                },
                received: 0,
                carried: 0,
                high_water: 0,
                state,
                rendezvous: None,
            },
        );
        true
    }

    fn on_write(&mut self, p: usize, s: &SesRequestRepr, payload: &[u8]) {
        let offset = Self::message_offset(s);
        let base = s.buffer_offset.wrapping_sub(offset);
        let (key, len) = (s.match_bits, s.request_length as u64);
        self.rma_inbound(p, s, len, |e| {
            e.regions
                .as_ref()
                .and_then(|r| r.resolve(key, base, len, true))
        });
        let id = s.message_id;
        let peer = &mut self.peers[p];
        let Some(inb) = peer.inbound.get_mut(&id) else {
            return;
        };
        if s.flags & sflags::SOM != 0 && s.flags & sflags::HD != 0 {
            inb.header.cq_data = Some(s.header_data);
        }
        inb.place(offset, PacketPayload::Bytes(payload));
        if !inb.complete() {
            return;
        }
        let allowed = matches!(inb.state, InboundState::Rma(Some(_)));
        let cq_data = inb.header.cq_data;
        if inb.header.want_response {
            peer.queue.push_back(TxItem::Response {
                msg_id: id,
                len: len.min(u32::MAX as u64) as u32,
                code: if allowed { 0 } else { ACCESS_DENIED },
            });
        }
        let src = peer.addr;
        if allowed {
            self.completions.push_back(Completion {
                kind: CompletionKind::RemoteWrite,
                context: 0,
                tagged: false,
                len: len as usize,
                buf: base as usize,
                tag: key,
                data: cq_data,
                src: Some(src),
                error: None,
            });
        }
        self.mark_ready(p);
        self.retire_rma_inbound(p, id);
    }

    fn on_read_request(&mut self, p: usize, s: &SesRequestRepr, bytes: &[u8]) {
        if s.resource_index == super::RENDEZVOUS_RESOURCE {
            self.rma_inbound(p, s, 0, |_| None);
            self.retire_rma_inbound(p, s.message_id);
            self.on_pull_request(p, s, bytes);
            return;
        }
        let (key, addr, len) = (s.match_bits, s.buffer_offset, s.request_length as u64);
        let memory = self
            .regions
            .as_ref()
            .and_then(|r| r.resolve(key, addr, len, false));
        // The request is one packet without payload: complete on arrival.
        self.rma_inbound(p, s, 0, |_| None);
        self.retire_rma_inbound(p, s.message_id);
        let peer = &mut self.peers[p];
        let Some(memory) = memory else {
            self.deny_access(p, s.message_id);
            return;
        };
        let mut data = vec![0u8; memory.len()];
        memory.read_at(0, &mut data);
        self.answer_bytes += data.len();
        peer.queue_internal(
            Payload::Owned(data),
            RmaTx::ReadData {
                read_id: s.message_id,
            },
        );
        let src = peer.addr;
        self.sends_outstanding += 1;
        self.completions.push_back(Completion {
            kind: CompletionKind::RemoteRead,
            context: 0,
            tagged: false,
            len: len as usize,
            buf: addr as usize,
            tag: key,
            data: None,
            src: Some(src),
            error: None,
        });
        self.mark_ready(p);
    }

    /// An atomic: check, apply in one go, answer (old values for fetching
    /// atomics, a return code otherwise).
    fn on_atomic(&mut self, p: usize, s: &SesRequestRepr, payload: &[u8], fetch: bool) {
        use crate::ses::atomic::{apply, AtomicOp, Datatype};
        self.rma_inbound(p, s, payload.len() as u64, |_| None);
        if let Some(inb) = self.peers[p].inbound.get_mut(&s.message_id) {
            inb.received = inb.header.len;
        }
        self.retire_rma_inbound(p, s.message_id);
        let op = AtomicOp::from_code(s.job_id >> 8 & 0xff);
        let dt = Datatype::from_code(s.job_id & 0xff);
        let target = match (op, dt) {
            (Some(op), Some(dt)) if op.supports(dt) => {
                let operand_len = if op.is_compare() {
                    payload.len() / 2
                } else {
                    payload.len()
                };
                let (key, addr) = (s.match_bits, s.buffer_offset);
                let regions = self.regions.as_ref();
                // Fetching needs read permission too.
                let readable = !fetch
                    || regions
                        .and_then(|r| r.resolve(key, addr, operand_len as u64, false))
                        .is_some();
                let mem = regions.and_then(|r| r.resolve(key, addr, operand_len as u64, true));
                match mem {
                    Some(m) if readable && operand_len % dt.size() == 0 => {
                        Some((op, dt, m, operand_len))
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        let peer_addr = self.peers[p].addr;
        let Some((op, dt, mut mem, n)) = target else {
            self.deny_access(p, s.message_id);
            return;
        };
        let mut cur = vec![0u8; n];
        mem.read_at(0, &mut cur);
        let old = cur.clone();
        apply(op, dt, &mut cur, &payload[..n], &payload[n..]);
        mem.write_at(0, &cur);
        self.completions.push_back(Completion {
            kind: CompletionKind::RemoteWrite,
            context: 0,
            tagged: false,
            len: n,
            buf: s.buffer_offset as usize,
            tag: s.match_bits,
            data: None,
            src: Some(peer_addr),
            error: None,
        });
        let peer = &mut self.peers[p];
        if fetch {
            self.answer_bytes += old.len();
            peer.queue_internal(
                Payload::Owned(old),
                RmaTx::ReadData {
                    read_id: s.message_id,
                },
            );
            self.sends_outstanding += 1;
        } else if s.flags & sflags::DC != 0 {
            peer.queue.push_back(TxItem::Response {
                msg_id: s.message_id,
                len: n as u32,
                code: 0,
            });
        }
        self.mark_ready(p);
    }

    /// Answer request `msg_id` of peer `p` with [`ACCESS_DENIED`].
    pub(super) fn deny_access(&mut self, p: usize, msg_id: u16) {
        self.peers[p].queue.push_back(TxItem::Response {
            msg_id,
            len: 0,
            code: ACCESS_DENIED,
        });
        self.mark_ready(p);
    }

    fn on_read_data(&mut self, p: usize, s: &SesRequestRepr, payload: PacketPayload) {
        if s.match_bits > u16::MAX as u64 {
            self.on_pull_data(p, s, payload);
            return;
        }
        let read_id = s.match_bits as u16;
        let expected = self.reads.get(&(p, read_id)).map(|r| r.len as u64);
        let len = s.request_length as u64;
        let id = s.message_id;
        self.rma_inbound(p, s, len, |e| {
            // Data longer than the read asked for is not ours to place.
            let r = e.reads.get_mut(&(p, read_id))?;
            if expected != Some(len) {
                return None;
            }
            r.data_id = Some(id);
            r.buffer.take()
        });
        let Some(inb) = self.peers[p].inbound.get_mut(&id) else {
            return;
        };
        inb.place(Self::message_offset(s), payload);
        if !inb.complete() {
            return;
        }
        self.retire_rma_inbound(p, id);
        if let Some(r) = self.reads.remove(&(p, read_id)) {
            let error = (expected != Some(len)).then_some(CompletionError::AccessDenied);
            self.complete_read(r, error);
            self.release_read(p, read_id);
        }
    }

    /// Read (or fetching atomic) `id` to peer `p` was answered: its
    /// request, held until now, goes once acknowledged, and its message
    /// ID with it.
    fn release_read(&mut self, p: usize, id: u16) {
        let peer = &mut self.peers[p];
        if let Some(m) = peer.messages.get_mut(&id) {
            m.delivered = true;
        }
        self.retire_message(p, id);
    }

    fn complete_read(&mut self, r: PendingRead, error: Option<CompletionError>) {
        if !r.signal && error.is_none() {
            return;
        }
        self.completions.push_back(Completion {
            kind: if r.atomic {
                CompletionKind::FetchAtomic
            } else {
                CompletionKind::Read
            },
            context: r.context,
            tagged: false,
            len: if error.is_some() { 0 } else { r.len },
            buf: r.base,
            tag: 0,
            data: None,
            src: None,
            error,
        });
    }

    /// The completion a failed outgoing message or RMA write reports.
    pub(super) fn op_completion(m: &TxMessage) -> Completion {
        let mut c = Completion::send(m.context, m.tagged, 0);
        match m.rma {
            Some(RmaTx::Write { .. }) => c.kind = CompletionKind::Write,
            Some(RmaTx::Atomic { fetch: false, .. }) => c.kind = CompletionKind::Atomic,
            _ => {}
        }
        c
    }

    /// The peer failed: its outstanding reads and pulls fail too.
    pub(super) fn fail_reads(&mut self, p: usize) {
        self.fail_pulls(p);
        let mut ids: Vec<u16> = self
            .reads
            .keys()
            .filter(|(q, _)| *q == p)
            .map(|(_, id)| *id)
            .collect();
        ids.sort_unstable();
        for id in ids {
            if let Some(r) = self.reads.remove(&(p, id)) {
                // The buffer goes back to the application: data still on
                // its way (the peer's context to us may outlive ours to
                // it) is dropped instead of written into it.
                let landing = r.data_id.and_then(|d| self.peers[p].inbound.get_mut(&d));
                if let Some(inb) = landing {
                    if matches!(inb.state, InboundState::Rma(Some(_))) {
                        inb.state = InboundState::Rma(None);
                    }
                }
                self.complete_read(r, Some(CompletionError::PeerUnreachable));
            }
        }
    }

    /// Drop a finished RMA inbound entry once the matcher has passed it.
    pub(super) fn retire_rma_inbound(&mut self, p: usize, id: u16) {
        let peer = &mut self.peers[p];
        let passed = peer
            .inbound
            .get(&id)
            .is_some_and(|inb| inb.complete() && inb.seq < peer.next_match_seq);
        if passed {
            peer.inbound.remove(&id);
        } else {
            // Its turn may have come: let the matcher skip it.
            self.match_in_order(p);
        }
    }

    /// An SES response for one of our RMA operations. False when it is a
    /// message's delivery response.
    pub(super) fn on_rma_response(&mut self, p: usize, r: &SesResponseRepr) -> bool {
        if self.on_pull_answered(p, r) {
            return true;
        }
        // A read is only ever answered with a response when it was refused
        // (its data is the success answer).
        if let Some(read) = self.reads.remove(&(p, r.message_id)) {
            self.complete_read(read, Some(CompletionError::AccessDenied));
            self.release_read(p, r.message_id);
            return true;
        }
        let peer = &mut self.peers[p];
        let Some(m) = peer.messages.get_mut(&r.message_id) else {
            return false;
        };
        let kind = match m.rma {
            Some(RmaTx::Write { .. }) => CompletionKind::Write,
            Some(RmaTx::Atomic { fetch: false, .. }) => CompletionKind::Atomic,
            _ => return false,
        };
        if m.delivered {
            return true;
        }
        m.delivered = true;
        if !m.completed {
            peer.message_counts.complete(m);
            let error = (r.return_code != 0).then_some(CompletionError::AccessDenied);
            if m.signal || error.is_some() {
                self.completions.push_back(Completion {
                    kind,
                    context: m.context,
                    tagged: false,
                    len: m.len() as usize,
                    buf: 0,
                    tag: 0,
                    data: None,
                    src: None,
                    error,
                });
            }
        }
        self.retire_message(p, r.message_id);
        true
    }
}
