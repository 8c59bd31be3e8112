//! Application-facing operations and their completions.
//!
//! These are the only types the libfabric shim hands to the engine: a send or
//! receive request with an opaque context, and completions that carry the
//! context back. Buffers are reached through [`MsgBuffer`] so that the engine
//! can place payload straight into application memory without knowing how
//! that memory is described (the shim implements it over raw iovecs).

use std::net::SocketAddr;

use crate::copy::copy_bytes;

/// The application's opaque operation context (`void *context` in libfabric),
/// carried through unchanged.
pub type Context = u64;

/// A message buffer the engine reads payload from (sends) or writes payload
/// into (receives), at byte offsets within the message.
pub trait MsgBuffer: Send {
    /// Total capacity in bytes.
    fn len(&self) -> usize;
    /// True when the buffer holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copy `out.len()` bytes starting at `offset` into `out`.
    /// The caller guarantees `offset + out.len() <= self.len()`.
    fn read_at(&self, offset: usize, out: &mut [u8]);
    /// Copy `data` into the buffer at `offset`.
    /// The caller guarantees `offset + data.len() <= self.len()`.
    fn write_at(&mut self, offset: usize, data: &[u8]);
    /// Address of the first byte, reported in completions (`buf` field).
    fn base_addr(&self) -> usize {
        0
    }
    /// Bytes `offset..offset + len` as one slice when they lie in one piece
    /// of memory, so the driver can hand them to the kernel without copying
    /// them first; `None` (the default) means they are read with `read_at`.
    /// The caller guarantees `offset + len <= self.len()`.
    fn slice_at(&self, _offset: usize, _len: usize) -> Option<&[u8]> {
        None
    }
    /// Bytes `offset..offset + len` as one writable slice when they lie in
    /// one piece of memory, so the driver can receive a packet's payload
    /// straight into them; `None` (the default) means payloads are copied in
    /// with `write_at`. The caller guarantees `offset + len <= self.len()`.
    fn slice_at_mut(&mut self, _offset: usize, _len: usize) -> Option<&mut [u8]> {
        None
    }
    /// FI_MULTI_RECV: carve the first `len` bytes off as a buffer of their
    /// own for one message and stay posted with the rest. `None` (the
    /// default) means the message takes this whole buffer, which is then no
    /// longer posted.
    fn split_front(&mut self, _len: usize) -> Option<Box<dyn MsgBuffer>> {
        None
    }
    /// The buffer as `Any`, when a finished receive's box may be refilled
    /// with the next receive's buffer of the same type (the engine keeps a
    /// few, so posting a receive allocates nothing); `None` (the default)
    /// frees the box with the receive.
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        None
    }
}

impl MsgBuffer for Vec<u8> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn read_at(&self, offset: usize, out: &mut [u8]) {
        copy_bytes(out, &self[offset..offset + out.len()]);
    }
    fn write_at(&mut self, offset: usize, data: &[u8]) {
        copy_bytes(&mut self[offset..offset + data.len()], data);
    }
    fn base_addr(&self) -> usize {
        self.as_ptr() as usize
    }
    fn slice_at(&self, offset: usize, len: usize) -> Option<&[u8]> {
        self.get(offset..offset + len)
    }
    fn slice_at_mut(&mut self, offset: usize, len: usize) -> Option<&mut [u8]> {
        self.get_mut(offset..offset + len)
    }
}

/// The payload of a send.
pub enum Payload {
    /// Bytes the engine owns (injected data, or a copy the shim made).
    Owned(Vec<u8>),
    /// Application memory that stays valid until the send completes.
    Borrowed(Box<dyn MsgBuffer>),
}

impl Payload {
    pub fn len(&self) -> usize {
        match self {
            Payload::Owned(v) => v.len(),
            Payload::Borrowed(b) => b.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub(crate) fn read_at(&self, offset: usize, out: &mut [u8]) {
        match self {
            Payload::Owned(v) => v.read_at(offset, out),
            Payload::Borrowed(b) => b.read_at(offset, out),
        }
    }
    pub(crate) fn slice_at(&self, offset: usize, len: usize) -> Option<&[u8]> {
        match self {
            Payload::Owned(v) => v.get(offset..offset + len),
            Payload::Borrowed(b) => b.slice_at(offset, len),
        }
    }
}

/// When a send's completion is generated (libfabric completion levels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CompletionLevel {
    /// FI_INJECT_COMPLETE: the source buffer may be reused. The engine copies
    /// borrowed payload at post time and completes on the next progress.
    Inject,
    /// FI_TRANSMIT_COMPLETE: every packet of the message was acknowledged by
    /// the peer's delivery layer.
    #[default]
    Transmit,
    /// FI_DELIVERY_COMPLETE: the peer processed the whole message: placed it
    /// into a posted receive buffer, or holds it until one is posted.
    Delivery,
}

/// A message (tagged or untagged) to send.
pub struct SendOp {
    pub dest: SocketAddr,
    pub payload: Payload,
    /// `Some(tag)` for tagged sends (FI_TAGGED), `None` for FI_MSG sends.
    pub tag: Option<u64>,
    /// Remote CQ data delivered with the receive completion (FI_REMOTE_CQ_DATA).
    pub cq_data: Option<u64>,
    pub context: Context,
    pub level: CompletionLevel,
    /// Generate a completion entry. False for fi_inject and for operations
    /// without FI_COMPLETION on an endpoint bound with FI_SELECTIVE_COMPLETION:
    /// those report only failure (fi_cq(3)).
    pub signal: bool,
}

/// How a tagged receive treats a message found in the unexpected queue
/// (fi_trecvmsg flags FI_PEEK, FI_CLAIM, FI_DISCARD).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ProbeFlags {
    pub peek: bool,
    pub claim: bool,
    pub discard: bool,
}

/// A receive buffer posted by the application.
pub struct RecvOp {
    /// Only accept messages from this peer (FI_DIRECTED_RECV); `None` = any.
    pub src: Option<SocketAddr>,
    /// Tagged receives match only tagged sends and vice versa.
    pub tagged: bool,
    pub tag: u64,
    /// Bits of `tag` that are ignored when matching.
    pub ignore: u64,
    pub buffer: Box<dyn MsgBuffer>,
    pub context: Context,
    /// Generate a completion entry (see [`SendOp::signal`]).
    pub signal: bool,
    /// Peek/claim/discard semantics; all false for a plain receive.
    pub probe: ProbeFlags,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionKind {
    Send,
    Recv,
    /// An RMA write this endpoint initiated.
    Write,
    /// An RMA read this endpoint initiated.
    Read,
    /// A peer's RMA write into this endpoint's memory finished (carries the
    /// remote CQ data of fi_writedata, if any).
    RemoteWrite,
    /// A peer's RMA read of this endpoint's memory was served.
    RemoteRead,
    /// An atomic update this endpoint initiated (fi_atomic).
    Atomic,
    /// A fetching or compare atomic this endpoint initiated; the old values
    /// are in its result buffer.
    FetchAtomic,
}

/// Memory a peer may access with RMA, looked up by key on every access.
pub trait MemoryRegions: Send + Sync {
    /// The memory `[addr, addr + len)` of the region registered under `key`,
    /// when the whole range lies inside it and the region allows remote
    /// writes (`write`) or remote reads. Offset 0 of the buffer is `addr`.
    fn resolve(&self, key: u64, addr: u64, len: u64, write: bool) -> Option<Box<dyn MsgBuffer>>;
}

/// What an RMA operation does.
pub enum RmaKind {
    /// Write `payload` to the peer's memory; `cq_data` raises a completion
    /// at the target (fi_writedata).
    Write {
        payload: Payload,
        cq_data: Option<u64>,
    },
    /// Read the peer's memory into `buffer` (its length is the read length).
    Read { buffer: Box<dyn MsgBuffer> },
    /// Apply `op` (libfabric `fi_op` code) on `datatype` (`fi_datatype`)
    /// elements at the target with `operand` (and `compare` for compare
    /// operations); `result` receives the old values of fetching and
    /// compare atomics. Carried in one packet.
    Atomic {
        op: u8,
        datatype: u8,
        operand: Vec<u8>,
        compare: Vec<u8>,
        result: Option<Box<dyn MsgBuffer>>,
    },
}

/// An RMA operation (fi_write*, fi_read*).
pub struct RmaOp {
    pub dest: SocketAddr,
    pub kind: RmaKind,
    /// Target address as the application gives it (a virtual address or an
    /// offset into the region, depending on the MR mode) and memory key.
    pub addr: u64,
    pub key: u64,
    pub context: Context,
    pub signal: bool,
}

/// Why an operation completed in error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionError {
    /// The message was longer than the receive buffer; `overflow` bytes were
    /// dropped (FI_ETRUNC, olen = overflow).
    Truncated { overflow: usize },
    /// Cancelled by the application (FI_ECANCELED).
    Canceled,
    /// FI_PEEK / FI_CLAIM found no matching message (FI_ENOMSG).
    NoMessage,
    /// The peer stopped acknowledging; the operation's fate is unknown (FI_EIO).
    PeerUnreachable,
    /// The target refused an RMA access: unknown key, range outside the
    /// region, or no permission (FI_EACCES). Its memory is untouched.
    AccessDenied,
}

/// A finished operation, handed back to the application through a CQ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    pub kind: CompletionKind,
    pub context: Context,
    pub tagged: bool,
    /// Bytes transferred (for receives: bytes placed; for a peek: the
    /// message's length).
    pub len: usize,
    /// Base address of the receive buffer (0 for sends and peeks).
    pub buf: usize,
    /// The message's tag (receives); for `RemoteWrite` / `RemoteRead`, the
    /// memory key the peer accessed (counters bound to that region count it).
    pub tag: u64,
    /// Remote CQ data carried by the message, if any.
    pub data: Option<u64>,
    /// The sender of a received message.
    pub src: Option<SocketAddr>,
    pub error: Option<CompletionError>,
}

impl Completion {
    pub(crate) fn send(context: Context, tagged: bool, len: usize) -> Self {
        Completion {
            kind: CompletionKind::Send,
            context,
            tagged,
            len,
            buf: 0,
            tag: 0,
            data: None,
            src: None,
            error: None,
        }
    }
}
