//! Endpoints: one `uet::Endpoint` (a bound UDP socket and its engine) each,
//! created at fi_endpoint time so fi_getname works before FI_ENABLE. Binding,
//! enabling, op flags, options, names and cancel live here; the data
//! operations are in `msg.rs` and `tagged.rs`.

use std::collections::hash_map::Entry as MapEntry;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::os::raw::{c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use uet::{
    CompletionKind, CompletionLevel, Config, MsgBuffer, Payload, ProbeFlags, RecvOp, RmaKind,
    RmaOp, SendOp,
};

use crate::addr::{self, Family};
use crate::av::{self, AvInner, FI_ADDR_NOTAVAIL, FI_ADDR_UNSPEC};
use crate::bindings::*;
use crate::buffers::{IovBuffer, MultiBuffer, MultiState};
use crate::cntr::{self, CntrInner};
use crate::cq::{self, CqInner, Entry};
use crate::domain::{self, DomainInner};
use crate::eq::{self, EqInner};
use crate::errors::{fi_errno, guard, ret_int, unsupported, FiResult};
use crate::getinfo::{CAPS, IOV_LIMIT, ROD_ORDER};
use crate::object::{self, fid_ops, ops_ptr};
use crate::progress::IdleTimer;
use crate::{msg, rma_atomic, tagged};

/// What an endpoint is bound to, and its mutable state.
pub(crate) struct EpState {
    /// `None` once fi_close ran: the provider endpoint (sockets, engine,
    /// the application's buffers it holds) is dropped inside fi_close, even
    /// when a progress thread or a wait still holds this state.
    ep: Option<uet::Endpoint>,
    enabled: bool,
    av: Option<Arc<AvInner>>,
    tx_cq: Option<Arc<CqInner>>,
    rx_cq: Option<Arc<CqInner>>,
    tx_selective: bool,
    rx_selective: bool,
    _eq: Option<Arc<EqInner>>,
    tx_op_flags: u64,
    rx_op_flags: u64,
    /// Names the provider endpoint's sockets (see [`EpInner::wait_set`]).
    socket_set: u64,
    /// Counters bumped by local sends and receives (FI_SEND / FI_RECV).
    tx_cntr: Option<Arc<CntrInner>>,
    rx_cntr: Option<Arc<CntrInner>>,
    /// Counters of RMA this endpoint initiates (FI_WRITE / FI_READ) and of
    /// peers' RMA into its memory (FI_REMOTE_WRITE / FI_REMOTE_READ).
    write_cntr: Option<Arc<CntrInner>>,
    read_cntr: Option<Arc<CntrInner>>,
    remote_write_cntr: Option<Arc<CntrInner>>,
    remote_read_cntr: Option<Arc<CntrInner>>,
    /// With a counter bound, every operation asks the engine for a
    /// completion so the counter sees it; the engine then carries a token
    /// instead of the application's context, and this table says which
    /// context it stands for and whether the CQ gets an entry too.
    pending: HashMap<u64, Pending>,
    next_token: u64,
    /// FI_OPT_MIN_MULTI_RECV: a multi-receive buffer with less room left
    /// than this is released.
    min_multi_recv: usize,
    /// FI_CLAIM receives in flight on an endpoint with an FI_RECV counter,
    /// by context: counted when they complete. They cannot go under a
    /// token: the engine finds the claimed message by the context the
    /// FI_PEEK|FI_CLAIM gave, which the claim repeats.
    claims: HashMap<u64, usize>,
}

/// The next [`EpState::socket_set`].
static NEXT_SOCKET_SET: AtomicU64 = AtomicU64::new(0);

fn new_socket_set() -> u64 {
    NEXT_SOCKET_SET.fetch_add(1, Ordering::Relaxed)
}

/// Default FI_OPT_MIN_MULTI_RECV.
const DEFAULT_MIN_MULTI_RECV: usize = 64;

struct Pending {
    context: u64,
    signal: bool,
    /// A multi-receive buffer: completes once per message.
    multi: Option<Arc<Mutex<MultiState>>>,
}

/// Tokens have bit 63 set: never a user-space address, so they cannot be
/// confused with a context that reached the engine untranslated (probes).
const TOKEN_BASE: u64 = 1 << 63;

impl EpState {
    /// Drop every binding (at close).
    fn unbind(&mut self) {
        self.enabled = false;
        self.av = None;
        self.tx_cq = None;
        self.rx_cq = None;
        self._eq = None;
        self.tx_cntr = None;
        self.rx_cntr = None;
        self.write_cntr = None;
        self.read_cntr = None;
        self.remote_write_cntr = None;
        self.remote_read_cntr = None;
    }

    /// The provider endpoint, until fi_close.
    fn endpoint(&mut self) -> FiResult<&mut uet::Endpoint> {
        self.ep.as_mut().ok_or(FI_EOPBADSTATE)
    }

    /// The context the engine carries for an operation of the application's
    /// `own`: a token when a counter must see its completion, or when `own`
    /// itself looks like a token (bit 63; an integer context, never an
    /// address), so that it comes back as given. True with a token, which
    /// a post that fails must take back.
    fn engine_context(&mut self, own: u64, counted: bool, signal: bool) -> (u64, bool) {
        if counted || own & TOKEN_BASE != 0 {
            (self.token(own, signal), true)
        } else {
            (own, false)
        }
    }

    fn token(&mut self, context: u64, signal: bool) -> u64 {
        let t = TOKEN_BASE | self.next_token;
        self.next_token = (self.next_token + 1) & !TOKEN_BASE;
        self.pending.insert(
            t,
            Pending {
                context,
                signal,
                multi: None,
            },
        );
        t
    }
}

pub(crate) struct EpInner {
    state: Mutex<EpState>,
    domain: Arc<DomainInner>,
    caps: u64,
    /// Endpoint time (`Endpoint::clock_ns`) of the application's last
    /// progress call; the domain's idle-progress thread reads it to tell
    /// whether the application still polls.
    app_progressed_at: AtomicU64,
    /// Fires when the application may have stopped polling (manual
    /// progress with the idle-progress thread on; see `progress.rs`).
    idle_timer: Option<IdleTimer>,
    /// fi_endpoint's context: the op_context of errors of operations that
    /// have none of their own (the inject calls; fi_endpoint(3)).
    ep_context: u64,
    /// Blocking waits asleep on this endpoint's sockets, by the eventfd
    /// that wakes each. A poll(2) keeps the sockets it sleeps on open (their
    /// port bound) until it returns, however soon they are closed, so
    /// fi_close wakes these and waits for them first.
    sleepers: Mutex<Vec<RawFd>>,
    sleepers_left: Condvar,
}

/// What [`EpInner::begin_sleep`] allows.
pub(crate) enum Sleep {
    /// Sleep on these sockets.
    On(Vec<RawFd>),
    /// Input waits already: progress instead.
    InputWaiting,
    /// Closed: nothing to sleep on.
    Closed,
}

/// A send as the data-operation entry points describe it.
pub(crate) struct Tx {
    pub(crate) buf: IovBuffer,
    pub(crate) dest: fi_addr_t,
    pub(crate) tag: Option<u64>,
    pub(crate) data: Option<u64>,
    pub(crate) context: *mut c_void,
    /// Operation flags (`*msg` calls); `None` = the endpoint's tx op flags.
    pub(crate) flags: Option<u64>,
    /// fi_inject / fi_injectdata / fi_tinject*: no completion at all.
    pub(crate) inject: bool,
}

/// An RMA operation as the data-operation entry points describe it.
pub(crate) struct Rma {
    pub(crate) write: bool,
    /// Local source (writes) or destination (reads).
    pub(crate) buf: IovBuffer,
    pub(crate) dest: fi_addr_t,
    pub(crate) addr: u64,
    pub(crate) key: u64,
    /// Remote CQ data (fi_writedata, fi_inject_writedata, FI_REMOTE_CQ_DATA).
    pub(crate) data: Option<u64>,
    pub(crate) context: *mut c_void,
    pub(crate) flags: Option<u64>,
    /// fi_inject_write / fi_inject_writedata: no completion at all.
    pub(crate) inject: bool,
}

/// An atomic as the data-operation entry points describe it.
pub(crate) struct Atomic {
    /// libfabric `fi_op` and `fi_datatype` codes (checked by the caller).
    pub(crate) op: u8,
    pub(crate) datatype: u8,
    pub(crate) operand: Vec<u8>,
    pub(crate) compare: Vec<u8>,
    /// Where fetching and compare atomics return the old values.
    pub(crate) result: Option<IovBuffer>,
    pub(crate) dest: fi_addr_t,
    pub(crate) addr: u64,
    pub(crate) key: u64,
    pub(crate) context: *mut c_void,
    pub(crate) flags: Option<u64>,
    /// fi_inject_atomic: no completion at all.
    pub(crate) inject: bool,
}

/// A receive as the data-operation entry points describe it.
pub(crate) struct Rx {
    pub(crate) buf: IovBuffer,
    pub(crate) src: fi_addr_t,
    pub(crate) tagged: bool,
    pub(crate) tag: u64,
    pub(crate) ignore: u64,
    pub(crate) context: *mut c_void,
    pub(crate) flags: Option<u64>,
}

/// Completion level requested by op flags, if any.
fn level_of(flags: u64) -> Option<CompletionLevel> {
    if flags & FI_DELIVERY_COMPLETE as u64 != 0 {
        Some(CompletionLevel::Delivery)
    } else if flags & FI_TRANSMIT_COMPLETE as u64 != 0 {
        Some(CompletionLevel::Transmit)
    } else if flags & FI_INJECT_COMPLETE as u64 != 0 {
        Some(CompletionLevel::Inject)
    } else {
        None
    }
}

impl EpInner {
    /// Move packets, then route finished operations to the bound CQs; for
    /// the application, which may answer what it reads before this call's
    /// ACKs leave (`FI_UET_DEFER_ACKS`).
    pub(crate) fn progress(&self) {
        let mut guard = self.state.lock();
        self.progress_locked(&mut guard, true);
        if let Some(at) = guard.ep.as_ref().map(|e| e.progressed_at()) {
            self.app_progressed_at.store(at, Ordering::Relaxed);
            if let Some(timer) = &self.idle_timer {
                timer.push_out(at);
            }
        }
    }

    /// [`progress`](Self::progress) for the domain's auto-progress thread:
    /// nobody answers from here, so ACKs leave at once.
    pub(crate) fn progress_background(&self) {
        let mut guard = self.state.lock();
        self.progress_locked(&mut guard, false);
    }

    /// Progress on behalf of an application that has made no progress call
    /// for `grace_ns` (manual progress), never waiting for the lock: an
    /// application holding it is in a call. Otherwise the idle timer is set
    /// for the moment the application will have been quiet that long.
    /// Returns whether the endpoint was idle.
    pub(crate) fn progress_if_idle(&self, grace_ns: u64) -> bool {
        if let Some(timer) = &self.idle_timer {
            timer.drain();
        }
        let Some(mut guard) = self.state.try_lock() else {
            // Not every call that holds the lock pushes the timer out (a
            // post does not): look again soon.
            if let Some(timer) = &self.idle_timer {
                timer.fire_in(grace_ns / 2);
            }
            return false;
        };
        let Some(now) = guard.ep.as_ref().map(|e| e.clock_ns()) else {
            return true;
        };
        let quiet = now.saturating_sub(self.app_progressed_at.load(Ordering::Relaxed));
        if quiet < grace_ns {
            if let Some(timer) = &self.idle_timer {
                timer.fire_in(grace_ns - quiet);
            }
            return false;
        }
        self.progress_locked(&mut guard, false);
        true
    }

    /// The idle timer's descriptor, for the idle-progress thread's sleep.
    pub(crate) fn idle_timer_fd(&self) -> Option<RawFd> {
        self.idle_timer.as_ref().map(IdleTimer::fd)
    }

    fn progress_locked(&self, st: &mut EpState, app: bool) {
        let Some(ep) = st.ep.as_mut() else {
            return;
        };
        if app {
            ep.progress_app();
        } else {
            ep.progress();
        }
        while let Some(mut c) = st.ep.as_mut().and_then(|ep| ep.poll_completion()) {
            let (cq, cntr) = match c.kind {
                CompletionKind::Send => (st.tx_cq.as_ref(), st.tx_cntr.as_ref()),
                CompletionKind::Recv => (st.rx_cq.as_ref(), st.rx_cntr.as_ref()),
                CompletionKind::Write => (st.tx_cq.as_ref(), st.write_cntr.as_ref()),
                CompletionKind::Read => (st.tx_cq.as_ref(), st.read_cntr.as_ref()),
                CompletionKind::RemoteWrite => (st.rx_cq.as_ref(), st.remote_write_cntr.as_ref()),
                CompletionKind::RemoteRead => (None, st.remote_read_cntr.as_ref()),
                CompletionKind::Atomic => (st.tx_cq.as_ref(), st.write_cntr.as_ref()),
                CompletionKind::FetchAtomic => (st.tx_cq.as_ref(), st.read_cntr.as_ref()),
            };
            let (cq, cntr) = (cq.cloned(), cntr.cloned());
            // Peers' RMA: counted (endpoint counters, and FI_RMA_EVENT
            // counters bound to the region, whose key the event carries);
            // only remote CQ data makes a CQ entry.
            if matches!(
                c.kind,
                CompletionKind::RemoteWrite | CompletionKind::RemoteRead
            ) {
                if let Some(k) = &cntr {
                    k.completed(true);
                }
                self.domain
                    .regions
                    .count_remote(c.tag, c.kind == CompletionKind::RemoteWrite);
                c.tag = 0; // not a tag: keep it out of the CQ entry
                if c.data.is_none() {
                    continue;
                }
            }
            let mut signal = true;
            let mut flags = 0;
            let context_token = c.context;
            // Only tokens are pending; skip the lookup for plain contexts.
            let pending = match c.context & TOKEN_BASE {
                0 => {
                    if c.kind == CompletionKind::Recv {
                        if let MapEntry::Occupied(mut e) = st.claims.entry(c.context) {
                            *e.get_mut() -= 1;
                            if *e.get() == 0 {
                                e.remove();
                            }
                            if let Some(k) = &cntr {
                                k.completed(c.error.is_none());
                            }
                        }
                    }
                    None
                }
                _ => match st.pending.remove(&c.context) {
                    Some(p) => Some(p),
                    None => {
                        // Reporting it would hand the application a context
                        // it never gave us.
                        crate::log::warn(
                            FI_LOG_CQ,
                            &format!("dropped a completion of unknown token {:#x}", c.context),
                        );
                        continue;
                    }
                },
            };
            if let Some(p) = pending {
                c.context = p.context;
                signal = p.signal;
                if let Some(k) = &cntr {
                    k.completed(c.error.is_none());
                }
                if let Some(m) = &p.multi {
                    // The buffer is the application's again once it is used
                    // up or cancelled and no message is still landing in it;
                    // the entry of the last of these carries FI_MULTI_RECV
                    // (fi_cq(3)). A cancel is no message: it only ends the
                    // posting.
                    let mut ms = m.lock();
                    if c.error == Some(uet::CompletionError::Canceled) {
                        ms.cancelled = true;
                    } else {
                        ms.outstanding = ms.outstanding.saturating_sub(1);
                    }
                    let released = ms.outstanding == 0 && (ms.whole_taken || ms.cancelled);
                    drop(ms);
                    if released {
                        flags |= FI_MULTI_RECV as u64;
                    } else {
                        st.pending.insert(context_token, p);
                    }
                }
            }
            // Errors reach the CQ even for unsignalled operations.
            if !signal && c.error.is_none() {
                continue;
            }
            let Some(cq) = cq else { continue };
            let src = match (c.src, st.av.as_ref()) {
                (Some(a), Some(av)) => av.table.lock().lookup_addr(&a),
                _ => FI_ADDR_NOTAVAIL,
            };
            let mut entry = Entry::new(c, src);
            entry.flags = flags;
            if self.caps & FI_SOURCE_ERR != 0 && entry.c.error.is_none() && src == FI_ADDR_NOTAVAIL
            {
                entry.unknown_source = entry.c.src.map(|a| addr::to_bytes(&a));
            }
            cq.push(entry);
        }
    }

    /// An RMA write or read (fi_write*, fi_read*, fi_inject_write*).
    pub(crate) fn rma(&self, r: Rma) -> FiResult<()> {
        let mut st = self.state.lock();
        if !st.enabled {
            return Err(FI_EOPBADSTATE);
        }
        if self.caps & FI_RMA as u64 == 0 {
            return Err(FI_EINVAL);
        }
        let len = MsgBuffer::len(&r.buf);
        if len > Config::MAX_MSG_SIZE {
            return Err(FI_EMSGSIZE);
        }
        let flags = r.flags.unwrap_or(st.tx_op_flags);
        let inject_size = self.domain.config.inject_size;
        if r.inject && !r.write {
            return Err(FI_EINVAL);
        }
        // FI_INJECT means nothing to a read (fi_rma(3): writes only).
        let injecting = r.inject || (r.write && flags & FI_INJECT as u64 != 0);
        if injecting && len > inject_size {
            return Err(FI_EINVAL);
        }
        let dest = Self::peer(&st, r.dest)?;
        let signal = !r.inject
            && st.tx_cq.is_some()
            && (!st.tx_selective || flags & FI_COMPLETION as u64 != 0);
        let counted = if r.write {
            st.write_cntr.is_some()
        } else {
            st.read_cntr.is_some()
        };
        let own = if r.inject {
            self.ep_context
        } else {
            r.context as u64
        };
        let (context, tokened) = st.engine_context(own, counted, signal);
        let kind = if r.write {
            // Writes complete on the target's answer; a copy keeps the
            // source free for injects and small writes.
            let payload = if injecting || len <= inject_size {
                Payload::Owned(r.buf.copy_into(st.endpoint()?.payload_buffer()))
            } else {
                Payload::Borrowed(Box::new(r.buf))
            };
            RmaKind::Write {
                payload,
                cq_data: r.data,
            }
        } else {
            RmaKind::Read {
                buffer: Box::new(r.buf),
            }
        };
        let op = RmaOp {
            dest,
            kind,
            addr: r.addr,
            key: r.key,
            context,
            signal: signal || tokened,
        };
        let res = st.endpoint()?.rma(op).map_err(|e| fi_errno(&e));
        if res.is_err() && tokened {
            st.pending.remove(&context);
        }
        res
    }

    /// An atomic (fi_atomic, fi_fetch_atomic, fi_compare_atomic).
    pub(crate) fn atomic(&self, a: Atomic) -> FiResult<()> {
        let mut st = self.state.lock();
        if !st.enabled {
            return Err(FI_EOPBADSTATE);
        }
        if self.caps & FI_ATOMIC as u64 == 0 {
            return Err(FI_EINVAL);
        }
        let flags = a.flags.unwrap_or(st.tx_op_flags);
        let dest = Self::peer(&st, a.dest)?;
        let signal = !a.inject
            && st.tx_cq.is_some()
            && (!st.tx_selective || flags & FI_COMPLETION as u64 != 0);
        let counted = if a.result.is_some() {
            st.read_cntr.is_some()
        } else {
            st.write_cntr.is_some()
        };
        let own = if a.inject {
            self.ep_context
        } else {
            a.context as u64
        };
        let (context, tokened) = st.engine_context(own, counted, signal);
        let op = RmaOp {
            dest,
            kind: RmaKind::Atomic {
                op: a.op,
                datatype: a.datatype,
                operand: a.operand,
                compare: a.compare,
                result: a.result.map(|r| Box::new(r) as Box<dyn MsgBuffer>),
            },
            addr: a.addr,
            key: a.key,
            context,
            signal: signal || tokened,
        };
        let res = st.endpoint()?.rma(op).map_err(|e| fi_errno(&e));
        if res.is_err() && tokened {
            st.pending.remove(&context);
        }
        res
    }

    /// The sockets an FI_GETWAIT descriptor watches, with the socket set
    /// they belong to (it changes when fi_setname binds new ones); `None`
    /// once closed.
    pub(crate) fn wait_set(&self) -> Option<(u64, Vec<RawFd>)> {
        let st = self.state.lock();
        st.ep.as_ref().map(|e| (st.socket_set, e.wait_fds()))
    }

    /// How long a blocking wait may sleep before this endpoint needs progress.
    pub(crate) fn idle_budget(&self) -> Option<std::time::Duration> {
        self.state.lock().ep.as_ref().and_then(|e| e.idle_budget())
    }

    /// A blocking wait, woken through the eventfd `wake_fd`, is about to
    /// sleep on this endpoint's sockets: which they are, unless input waits
    /// already (same-host rings) or the endpoint is closed. [`Sleep::On`]
    /// obliges a later [`end_sleep`](Self::end_sleep).
    pub(crate) fn begin_sleep(&self, wake_fd: RawFd) -> Sleep {
        let st = self.state.lock();
        let Some(e) = st.ep.as_ref() else {
            return Sleep::Closed;
        };
        if !e.begin_sleep() {
            return Sleep::InputWaiting;
        }
        self.sleepers.lock().push(wake_fd);
        Sleep::On(e.wait_fds())
    }

    pub(crate) fn end_sleep(&self, wake_fd: RawFd) {
        if let Some(e) = &self.state.lock().ep {
            e.end_sleep();
        }
        let mut sleepers = self.sleepers.lock();
        if let Some(i) = sleepers.iter().position(|&fd| fd == wake_fd) {
            sleepers.swap_remove(i);
        }
        if sleepers.is_empty() {
            self.sleepers_left.notify_all();
        }
    }

    /// Wake the blocking waits asleep on this endpoint's sockets and wait
    /// until they are all awake (fi_close, after taking the endpoint away,
    /// so no new one starts).
    fn wake_sleepers(&self) {
        let mut sleepers = self.sleepers.lock();
        for &fd in sleepers.iter() {
            crate::wait::wake_event_fd(fd);
        }
        while !sleepers.is_empty() {
            self.sleepers_left.wait(&mut sleepers);
        }
    }

    /// Input waits that the descriptors do not show (fi_trywait).
    pub(crate) fn input_waiting(&self) -> bool {
        self.state
            .lock()
            .ep
            .as_ref()
            .is_some_and(|e| e.input_waiting())
    }

    /// The application sleeps on these descriptors itself (FI_GETWAIT).
    pub(crate) fn wake_on_every_arrival(&self) {
        if let Some(e) = &self.state.lock().ep {
            e.wake_on_every_arrival();
        }
    }

    fn peer(st: &EpState, fi_addr: fi_addr_t) -> FiResult<SocketAddr> {
        st.av
            .as_ref()
            .and_then(|av| av.table.lock().get(fi_addr))
            .ok_or(FI_EINVAL)
    }

    pub(crate) fn send(&self, tx: Tx) -> FiResult<()> {
        let mut st = self.state.lock();
        if !st.enabled {
            return Err(FI_EOPBADSTATE);
        }
        let len = uet::MsgBuffer::len(&tx.buf);
        if len > Config::MAX_MSG_SIZE {
            return Err(FI_EMSGSIZE);
        }
        let inject_size = self.domain.config.inject_size;
        let flags = tx.flags.unwrap_or(st.tx_op_flags);
        let injecting = tx.inject || flags & FI_INJECT as u64 != 0;
        if injecting && len > inject_size {
            return Err(FI_EINVAL);
        }
        let dest = Self::peer(&st, tx.dest)?;
        let level = if tx.inject {
            CompletionLevel::Inject
        } else {
            level_of(flags)
                .or(level_of(st.tx_op_flags))
                .unwrap_or_default()
        };
        let copy = injecting || level == CompletionLevel::Inject || len <= inject_size;
        let payload = if copy {
            Payload::Owned(tx.buf.copy_into(st.endpoint()?.payload_buffer()))
        } else {
            Payload::Borrowed(st.endpoint()?.boxed_buffer(tx.buf))
        };
        let signal = !tx.inject
            && st.tx_cq.is_some()
            && (!st.tx_selective || flags & FI_COMPLETION as u64 != 0);
        let counted = st.tx_cntr.is_some();
        let own = if tx.inject {
            self.ep_context
        } else {
            tx.context as u64
        };
        let (context, tokened) = st.engine_context(own, counted, signal);
        let op = SendOp {
            dest,
            payload,
            tag: tx.tag,
            cq_data: tx.data,
            context,
            level,
            signal: signal || tokened,
        };
        if tx.flags.is_some_and(|f| f & FI_MORE as u64 != 0) {
            st.endpoint()?.expect_more_sends();
        }
        let r = st.endpoint()?.send(op).map_err(|e| fi_errno(&e));
        if r.is_err() && tokened {
            st.pending.remove(&context);
        }
        r
    }

    pub(crate) fn recv(&self, rx: Rx) -> FiResult<()> {
        let mut st = self.state.lock();
        if !st.enabled {
            return Err(FI_EOPBADSTATE);
        }
        let mut flags = rx.flags.unwrap_or(st.rx_op_flags);
        if rx.tagged && rx.flags.is_none() {
            // The endpoint's default FI_MULTI_RECV is for untagged
            // receives: only an explicit one makes a tagged receive wrong.
            flags &= !(FI_MULTI_RECV as u64);
        }
        let multi = flags & FI_MULTI_RECV as u64 != 0;
        if multi && (rx.tagged || self.caps & FI_MULTI_RECV as u64 == 0) {
            return Err(FI_EINVAL);
        }
        let src = if rx.src == FI_ADDR_UNSPEC || self.caps & FI_DIRECTED_RECV == 0 {
            None
        } else {
            Some(Self::peer(&st, rx.src)?)
        };
        let probe = if rx.tagged {
            ProbeFlags {
                peek: flags & FI_PEEK as u64 != 0,
                claim: flags & FI_CLAIM != 0,
                discard: flags & FI_DISCARD != 0,
            }
        } else {
            ProbeFlags::default()
        };
        let signal = st.rx_cq.is_some()
            && (probe.peek || probe.claim || !st.rx_selective || flags & FI_COMPLETION as u64 != 0);
        // Probes keep the application's context (FI_CLAIM finds its message
        // by it); claims are counted through `claims`, peeks not at all.
        let counted = (st.rx_cntr.is_some() && probe == ProbeFlags::default()) || multi;
        let claim_counted = st.rx_cntr.is_some() && probe.claim && !probe.peek;
        // Probes keep the application's context (see above), whatever it is.
        let (context, tokened) = if probe == ProbeFlags::default() {
            st.engine_context(rx.context as u64, counted, signal)
        } else {
            (rx.context as u64, false)
        };
        let buffer: Box<dyn MsgBuffer> = if multi {
            let m = MultiBuffer::new(rx.buf, st.min_multi_recv);
            if let Some(p) = st.pending.get_mut(&context) {
                p.multi = Some(Arc::clone(&m.state));
            }
            Box::new(m)
        } else {
            st.endpoint()?.boxed_buffer(rx.buf)
        };
        let op = RecvOp {
            src,
            tagged: rx.tagged,
            tag: rx.tag,
            ignore: rx.ignore,
            buffer,
            context,
            signal: signal || tokened,
            probe,
        };
        let r = st.endpoint()?.recv(op).map_err(|e| fi_errno(&e));
        if r.is_err() && tokened {
            st.pending.remove(&context);
        }
        // Its completion, even one the engine queued in this call, is
        // routed later under this lock: it finds the entry.
        if r.is_ok() && claim_counted {
            *st.claims.entry(context).or_default() += 1;
        }
        r
    }
}

#[repr(C)]
pub(crate) struct Ep {
    fid: fid_ep,
    pub(crate) inner: Arc<EpInner>,
    /// Keeps the domain's close at -FI_EBUSY while this endpoint is open.
    _open: object::ChildOf,
}

static FI_OPS: fi_ops = fi_ops {
    ops_open: Some(crate::stats_ext::ep_ops_open),
    ..fid_ops!(ep_close, ep_bind, ep_control)
};
static OPS: fi_ops_ep = fi_ops_ep {
    size: std::mem::size_of::<fi_ops_ep>(),
    cancel: Some(ep_cancel),
    getopt: Some(ep_getopt),
    setopt: Some(ep_setopt),
    tx_ctx: Some(tx_ctx),
    rx_ctx: Some(rx_ctx),
    rx_size_left: Some(size_left),
    tx_size_left: Some(size_left),
};
static CM_OPS: fi_ops_cm = fi_ops_cm {
    size: std::mem::size_of::<fi_ops_cm>(),
    setname: Some(ep_setname),
    getname: Some(ep_getname),
    getpeer: Some(cm_getpeer),
    connect: Some(cm_connect),
    listen: Some(cm_listen),
    accept: Some(cm_accept),
    reject: Some(cm_reject),
    shutdown: Some(cm_shutdown),
    join: Some(cm_join),
};

unsupported! {
    tx_ctx(*mut fid_ep, c_int, *mut fi_tx_attr, *mut *mut fid_ep, *mut c_void) -> c_int = FI_ENOSYS;
    rx_ctx(*mut fid_ep, c_int, *mut fi_rx_attr, *mut *mut fid_ep, *mut c_void) -> c_int = FI_ENOSYS;
    size_left(*mut fid_ep) -> isize = FI_ENOSYS;
    cm_getpeer(*mut fid_ep, *mut c_void, *mut usize) -> c_int = FI_ENOSYS;
    cm_connect(*mut fid_ep, *const c_void, *const c_void, usize) -> c_int = FI_ENOSYS;
    cm_listen(*mut fid_pep) -> c_int = FI_ENOSYS;
    cm_accept(*mut fid_ep, *const c_void, usize) -> c_int = FI_ENOSYS;
    cm_reject(*mut fid_pep, fid_t, *const c_void, usize) -> c_int = FI_ENOSYS;
    cm_shutdown(*mut fid_ep, u64) -> c_int = FI_ENOSYS;
    cm_join(*mut fid_ep, *const c_void, u64, *mut *mut fid_mc, *mut c_void) -> c_int = FI_ENOSYS;
}

/// The endpoint behind a fid, if it is ours.
fn from_fid<'a>(p: *const fid) -> Option<&'a Ep> {
    // SAFETY: libfabric hands us fids it got from us (or application
    // garbage, which the ops-table check rejects when it is a live fid).
    unsafe { object::obj::<Ep>(p, &FI_OPS) }
}

impl EpInner {
    /// Run `f` on the provider endpoint (for the statistics extension);
    /// `None` once closed.
    pub(crate) fn with_endpoint<R>(&self, f: impl FnOnce(&uet::Endpoint) -> R) -> Option<R> {
        self.state.lock().ep.as_ref().map(f)
    }

    /// The address an fi_addr_t names in the bound AV.
    pub(crate) fn peer_addr(&self, fi_addr: fi_addr_t) -> FiResult<SocketAddr> {
        Self::peer(&self.state.lock(), fi_addr)
    }
}

/// The endpoint state behind a `fid_ep`, for the data operations.
pub(crate) fn inner<'a>(ep: *mut fid_ep) -> Option<&'a EpInner> {
    from_fid(ep.cast()).map(|e| &*e.inner)
}

pub(crate) unsafe extern "C" fn open(
    domain: *mut fid_domain,
    info: *mut fi_info,
    ep: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    guard(|| ret_int(create(domain, info, ep, context)))
}

pub(crate) unsafe extern "C" fn open2(
    domain: *mut fid_domain,
    info: *mut fi_info,
    ep: *mut *mut fid_ep,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    if flags != 0 {
        return -(FI_ENOSYS as c_int);
    }
    guard(|| ret_int(create(domain, info, ep, context)))
}

fn create(
    domain: *mut fid_domain,
    info: *mut fi_info,
    ep: *mut *mut fid_ep,
    context: *mut c_void,
) -> FiResult<()> {
    let dom = domain::from_ptr(domain).ok_or(FI_EINVAL)?;
    // SAFETY: info is NULL or a valid fi_info.
    let info = unsafe { info.as_ref() }.ok_or(FI_EINVAL)?;
    if ep.is_null() {
        return Err(FI_EINVAL);
    }
    // SAFETY: the attribute pointers are NULL or valid.
    let (ep_attr, tx_attr, rx_attr) = unsafe {
        (
            info.ep_attr.as_ref(),
            info.tx_attr.as_ref(),
            info.rx_attr.as_ref(),
        )
    };
    if ep_attr.is_some_and(|a| a.type_ != FI_EP_RDM && a.type_ != FI_EP_UNSPEC) {
        return Err(FI_EINVAL);
    }
    let family = Family::from_format(info.addr_format).unwrap_or(dom.inner.family);
    let mut config = dom.inner.config.clone();
    // Data ordering asked for in the transmit attributes: ordered delivery.
    if tx_attr.is_some_and(|a| a.msg_order & ROD_ORDER != 0) {
        config.ordered = true;
    }
    let config = &config;
    // SAFETY: src_addr/dest_addr hold src_addrlen/dest_addrlen bytes.
    let (src, dest) = unsafe {
        (
            addr::from_raw(info.src_addr, info.src_addrlen),
            addr::from_raw(info.dest_addr, info.dest_addrlen),
        )
    };
    let bind_to = match (src, dest) {
        (Some(s), _) => s,
        (None, Some(d)) => addr::source_for(&d, config.port),
        (None, None) => addr::default_source(family, config.port),
    };
    let mut endpoint = uet::Endpoint::bind(config, bind_to).map_err(|e| {
        crate::log::warn(FI_LOG_EP_CTRL, &format!("binding {bind_to}: {e}"));
        fi_errno(&e)
    })?;
    crate::log::info(
        FI_LOG_EP_CTRL,
        &format!("endpoint bound to {}", endpoint.local_addr()),
    );
    endpoint.set_memory_regions(dom.inner.regions.clone());
    let caps = if info.caps == 0 { CAPS } else { info.caps };
    let inner = EpInner {
        state: Mutex::new(EpState {
            ep: Some(endpoint),
            socket_set: new_socket_set(),
            enabled: false,
            av: None,
            tx_cq: None,
            rx_cq: None,
            tx_selective: false,
            rx_selective: false,
            _eq: None,
            tx_op_flags: tx_attr.map_or(0, |a| a.op_flags),
            rx_op_flags: rx_attr.map_or(0, |a| a.op_flags),
            tx_cntr: None,
            rx_cntr: None,
            write_cntr: None,
            read_cntr: None,
            remote_write_cntr: None,
            remote_read_cntr: None,
            min_multi_recv: DEFAULT_MIN_MULTI_RECV,
            claims: HashMap::new(),
            pending: HashMap::new(),
            next_token: 0,
        }),
        domain: Arc::clone(&dom.inner),
        caps,
        app_progressed_at: AtomicU64::new(0),
        idle_timer: dom
            .inner
            .auto_progress
            .as_ref()
            .and_then(|p| p.idle_grace_ns())
            .and_then(IdleTimer::new),
        ep_context: context as u64,
        sleepers: Mutex::default(),
        sleepers_left: Condvar::new(),
    };
    let obj = Box::new(Ep {
        fid: fid_ep {
            fid: fid {
                fclass: FI_CLASS_EP as usize,
                context,
                ops: ops_ptr(&FI_OPS),
            },
            ops: ops_ptr(&OPS),
            cm: ops_ptr(&CM_OPS),
            msg: ops_ptr(&msg::OPS),
            rma: ops_ptr(&rma_atomic::RMA_OPS),
            tagged: ops_ptr(&tagged::OPS),
            atomic: ops_ptr(&crate::atomic::ATOMIC_OPS),
            collective: ptr::null_mut(),
        },
        inner: Arc::new(inner),
        _open: dom.inner.children.child(),
    });
    if let Some(p) = &dom.inner.auto_progress {
        p.add(&obj.inner);
    }
    crate::wait::attach(&dom.inner.eps, &obj.inner);
    for c in dom.inner.regions.counters() {
        c.attach(&obj.inner);
    }
    // SAFETY: ep is a valid out-pointer (checked above).
    unsafe { *ep = &mut Box::leak(obj).fid };
    Ok(())
}

extern "C" fn ep_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: take verifies the fid is one of our endpoints. CQs hold
        // only weak references, so the socket closes here.
        match unsafe { object::take::<Ep>(f, &FI_OPS) } {
            Some(b) => {
                // Release the bound objects and the provider endpoint now,
                // even if a progress thread or a wait still holds this
                // state: their close must not see it as a user, and once
                // fi_close returns nothing may touch the application's
                // buffers or hold the address. Pending operations are
                // dropped with the engine, without completions
                // (fi_endpoint(3)).
                let provider_ep = {
                    let mut st = b.inner.state.lock();
                    st.unbind();
                    st.ep.take()
                };
                b.inner.wake_sleepers();
                // Its drop flushes, answers peers a moment and resends what they
                // have not acknowledged (up to 2 x FI_UET_RTO_MAX_US):
                // not under the lock, which a progress thread may want.
                drop(provider_ep);
                drop(b);
                0
            }
            None => -(FI_EINVAL as c_int),
        }
    })
}

fn bind(ep: &Ep, bfid: *mut fid, flags: u64) -> FiResult<()> {
    // SAFETY: bfid is NULL or a live fid; as_ref checks NULL.
    let class = unsafe { bfid.as_ref() }.ok_or(FI_EINVAL)?.fclass as u32;
    let mut st = ep.inner.state.lock();
    if st.enabled {
        return Err(FI_EOPBADSTATE);
    }
    match class {
        FI_CLASS_AV => {
            // SAFETY: bfid is a live fid (checked above).
            let av = unsafe { av::from_fid(bfid) }.ok_or(FI_EINVAL)?;
            if st.av.is_some() {
                return Err(FI_EINVAL);
            }
            st.av = Some(Arc::clone(&av.inner));
        }
        FI_CLASS_CQ => {
            // SAFETY: as above.
            let cq = unsafe { cq::from_fid(bfid) }.ok_or(FI_EINVAL)?;
            let (tx, rx) = (flags & FI_TRANSMIT as u64 != 0, flags & FI_RECV as u64 != 0);
            if !tx && !rx {
                return Err(FI_EINVAL);
            }
            let selective = flags & FI_SELECTIVE_COMPLETION != 0;
            if tx {
                st.tx_cq = Some(Arc::clone(&cq.inner));
                st.tx_selective = selective;
            }
            if rx {
                st.rx_cq = Some(Arc::clone(&cq.inner));
                st.rx_selective = selective;
            }
            drop(st);
            cq.inner.attach(&ep.inner);
        }
        FI_CLASS_EQ => {
            // SAFETY: as above.
            let eq = unsafe { eq::from_fid(bfid) }.ok_or(FI_EINVAL)?;
            st._eq = Some(Arc::clone(&eq.inner));
        }
        FI_CLASS_CNTR => {
            // SAFETY: as above.
            let c = unsafe { cntr::from_fid(bfid) }.ok_or(FI_EINVAL)?;
            let known =
                (FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE) as u64;
            if flags & known == 0 || flags & !known != 0 {
                return Err(FI_EINVAL);
            }
            let s = &mut *st;
            let slots = [
                (FI_SEND, &mut s.tx_cntr),
                (FI_RECV, &mut s.rx_cntr),
                (FI_WRITE, &mut s.write_cntr),
                (FI_READ, &mut s.read_cntr),
                (FI_REMOTE_WRITE, &mut s.remote_write_cntr),
                (FI_REMOTE_READ, &mut s.remote_read_cntr),
            ];
            for (bit, slot) in slots {
                if flags & bit as u64 != 0 {
                    *slot = Some(Arc::clone(&c.inner));
                }
            }
            drop(st);
            c.inner.attach(&ep.inner);
        }
        _ => return Err(FI_EINVAL),
    }
    Ok(())
}

extern "C" fn ep_bind(f: *mut fid, bfid: *mut fid, flags: u64) -> c_int {
    guard(|| match from_fid(f) {
        Some(ep) => ret_int(bind(ep, bfid, flags)),
        None => -(FI_EINVAL as c_int),
    })
}

fn control(ep: &Ep, command: c_int, arg: *mut c_void) -> FiResult<()> {
    let mut st = ep.inner.state.lock();
    let caps = ep.inner.caps;
    let sends = caps & FI_SEND as u64 != 0 || caps & (FI_SEND | FI_RECV) as u64 == 0;
    let recvs = caps & FI_RECV as u64 != 0 || caps & (FI_SEND | FI_RECV) as u64 == 0;
    match command as u32 {
        FI_ENABLE => {
            // Completions go to a CQ or a counter (or both).
            let tx_bound = st.tx_cq.is_some() || st.tx_cntr.is_some();
            let rx_bound = st.rx_cq.is_some() || st.rx_cntr.is_some();
            if (sends && !tx_bound) || (recvs && !rx_bound) {
                return Err(FI_ENOCQ);
            }
            if st.av.is_none() {
                return Err(FI_ENOAV);
            }
            st.enabled = true;
            Ok(())
        }
        FI_GETOPSFLAG | FI_SETOPSFLAG => {
            // SAFETY: arg is NULL or points to a u64 of flags.
            let flags = unsafe { arg.cast::<u64>().as_mut() }.ok_or(FI_EINVAL)?;
            let dirs = FI_TRANSMIT as u64 | FI_RECV as u64;
            let slot = match *flags & dirs {
                d if d == FI_TRANSMIT as u64 => &mut st.tx_op_flags,
                d if d == FI_RECV as u64 => &mut st.rx_op_flags,
                _ => return Err(FI_EINVAL),
            };
            if command as u32 == FI_GETOPSFLAG {
                *flags = *slot | (*flags & dirs);
            } else {
                *slot = *flags & !dirs;
            }
            Ok(())
        }
        _ => Err(FI_ENOSYS),
    }
}

extern "C" fn ep_control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    guard(|| match from_fid(f) {
        Some(ep) => ret_int(control(ep, command, arg)),
        None => -(FI_EINVAL as c_int),
    })
}

extern "C" fn ep_cancel(f: fid_t, context: *mut c_void) -> isize {
    guard(|| match from_fid(f) {
        Some(ep) => {
            let mut st = ep.inner.state.lock();
            // An operation the engine carries under a token (counted, or
            // with a context that has bit 63 set) is found by it. Several
            // tokens may stand for one context (a multi-receive buffer
            // cancelled earlier whose last message still lands, reposted
            // with the same context): try each.
            let tokens: Vec<u64> = st
                .pending
                .iter()
                .filter(|(_, p)| p.context == context as u64)
                .map(|(t, _)| *t)
                .collect();
            let Some(e) = st.ep.as_mut() else {
                return -(FI_ENOENT as isize);
            };
            if tokens.into_iter().any(|t| e.cancel(t)) || e.cancel(context as u64) {
                0
            } else {
                -(FI_ENOENT as isize)
            }
        }
        None => -(FI_EINVAL as isize),
    })
}

fn is_min_multi_recv(level: c_int, name: c_int) -> bool {
    level as u32 == FI_OPT_ENDPOINT && name as u32 == FI_OPT_MIN_MULTI_RECV
}

extern "C" fn ep_getopt(
    f: fid_t,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut usize,
) -> c_int {
    guard(|| {
        let Some(ep) = from_fid(f) else {
            return -(FI_EINVAL as c_int);
        };
        if !is_min_multi_recv(level, name) {
            return -(FI_ENOPROTOOPT as c_int);
        }
        if val.is_null() || len.is_null() {
            return -(FI_EINVAL as c_int);
        }
        // SAFETY: len is valid (checked); val holds *len bytes.
        unsafe {
            if *len < std::mem::size_of::<usize>() {
                *len = std::mem::size_of::<usize>();
                return -(FI_ETOOSMALL as c_int);
            }
            *val.cast::<usize>() = ep.inner.state.lock().min_multi_recv;
            *len = std::mem::size_of::<usize>();
        }
        0
    })
}

extern "C" fn ep_setopt(
    f: fid_t,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: usize,
) -> c_int {
    guard(|| {
        let Some(ep) = from_fid(f) else {
            return -(FI_EINVAL as c_int);
        };
        if !is_min_multi_recv(level, name) {
            return -(FI_ENOPROTOOPT as c_int);
        }
        if val.is_null() || len != std::mem::size_of::<usize>() {
            return -(FI_EINVAL as c_int);
        }
        // SAFETY: val points to a size_t (checked length).
        let v = unsafe { *val.cast::<usize>() };
        ep.inner.state.lock().min_multi_recv = v;
        0
    })
}

extern "C" fn ep_getname(f: fid_t, out: *mut c_void, addrlen: *mut usize) -> c_int {
    guard(|| {
        let Some(ep) = from_fid(f) else {
            return -(FI_EINVAL as c_int);
        };
        if addrlen.is_null() {
            return -(FI_EINVAL as c_int);
        }
        let Some(local) = ep.inner.state.lock().ep.as_ref().map(|e| e.local_addr()) else {
            return -(FI_EOPBADSTATE as c_int);
        };
        let bytes = addr::to_bytes(&local);
        // SAFETY: addrlen is valid (checked); out is NULL or holds *addrlen bytes.
        unsafe {
            let room = *addrlen;
            *addrlen = bytes.len();
            if room < bytes.len() || out.is_null() {
                return -(FI_ETOOSMALL as c_int);
            }
            ptr::copy_nonoverlapping(bytes.as_ptr(), out.cast::<u8>(), bytes.len());
        }
        0
    })
}

extern "C" fn ep_setname(f: fid_t, a: *mut c_void, addrlen: usize) -> c_int {
    guard(|| {
        let Some(ep) = from_fid(f) else {
            return -(FI_EINVAL as c_int);
        };
        // SAFETY: a holds addrlen bytes.
        let Some(new) = (unsafe { addr::from_raw(a, addrlen) }) else {
            return -(FI_EINVAL as c_int);
        };
        if !ep.inner.domain.family.admits(&new) {
            return -(FI_EINVAL as c_int);
        }
        let mut st = ep.inner.state.lock();
        if st.enabled {
            return -(FI_EOPBADSTATE as c_int);
        }
        let Some(ordered) = st.ep.as_ref().map(|e| e.ordered()) else {
            return -(FI_EOPBADSTATE as c_int);
        };
        let mut config = ep.inner.domain.config.clone();
        config.ordered = ordered;
        match uet::Endpoint::bind(&config, new) {
            Ok(mut e) => {
                e.set_memory_regions(ep.inner.domain.regions.clone());
                st.ep = Some(e);
                st.socket_set = new_socket_set();
                // The new endpoint's clock starts at zero: times taken from
                // the old one would make the application look busy.
                ep.inner.app_progressed_at.store(0, Ordering::Relaxed);
                if let Some(timer) = &ep.inner.idle_timer {
                    timer.restart_clock();
                }
                0
            }
            Err(e) => -(fi_errno(&e) as c_int),
        }
    })
}

/// Most iovecs an operation may carry.
pub(crate) const fn iov_limit() -> usize {
    IOV_LIMIT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_flags_pick_the_completion_level() {
        assert_eq!(level_of(0), None);
        assert_eq!(
            level_of(FI_INJECT_COMPLETE as u64),
            Some(CompletionLevel::Inject)
        );
        assert_eq!(
            level_of(FI_TRANSMIT_COMPLETE as u64),
            Some(CompletionLevel::Transmit)
        );
        assert_eq!(
            level_of(FI_DELIVERY_COMPLETE as u64 | FI_TRANSMIT_COMPLETE as u64),
            Some(CompletionLevel::Delivery)
        );
    }
}
