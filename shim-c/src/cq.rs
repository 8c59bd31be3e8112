//! Completion queues. Reading a CQ progresses every endpoint bound to it;
//! each endpoint routes its completions to the CQ bound for that direction
//! (which may be another CQ), so entries land where the application expects.

use std::collections::VecDeque;
use std::mem::{offset_of, size_of};
use std::os::raw::{c_char, c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use uet::{Completion, CompletionError, CompletionKind};

use crate::bindings::*;
use crate::domain::{self, DomainInner};
use crate::endpoint::EpInner;
use crate::errors::{guard, ret_int, ret_ssize, FiResult};
use crate::object::{self, fid_ops, ops_ptr};
use crate::wait::{self, Waker};

/// One completion waiting to be read, with its sender's fi_addr resolved.
pub(crate) struct Entry {
    pub(crate) c: Completion,
    pub(crate) src: fi_addr_t,
    /// Flags beyond what the completion implies (FI_MULTI_RECV).
    pub(crate) flags: u64,
    /// FI_SOURCE_ERR: the sender is not in the AV; reported as an error
    /// entry (FI_EADDRNOTAVAIL) carrying the address as err_data.
    pub(crate) unknown_source: Option<Vec<u8>>,
}

impl Entry {
    pub(crate) fn new(c: Completion, src: fi_addr_t) -> Entry {
        Entry {
            c,
            src,
            flags: 0,
            unknown_source: None,
        }
    }

    fn is_error(&self) -> bool {
        self.c.error.is_some() || self.unknown_source.is_some()
    }
}

pub(crate) struct CqInner {
    format: fi_cq_format,
    /// The fabric's API version: fixes the fi_cq_err_entry layout.
    api_version: u32,
    queue: Mutex<VecDeque<Entry>>,
    /// err_data of the last error entry read (valid until the next readerr).
    err_data: Mutex<Vec<u8>>,
    /// Endpoints whose progress may produce entries for this CQ.
    eps: Mutex<Vec<Weak<EpInner>>>,
    signaled: AtomicBool,
    waker: Waker,
    wait_obj: fi_wait_obj,
    /// How long fi_cq_sread polls before it sleeps (FI_UET_WAIT_SPIN_US).
    wait_spin: Duration,
}

impl CqInner {
    pub(crate) fn push(&self, e: Entry) {
        self.queue.lock().push_back(e);
        self.waker.wake();
    }

    /// Remember an endpoint to progress when this CQ is read.
    pub(crate) fn attach(&self, ep: &Arc<EpInner>) {
        wait::attach(&self.eps, ep);
        // On failure fi_trywait tries again (and reports it).
        let _ = self.waker.sync(&wait::live(&self.eps));
    }

    /// fi_trywait: -FI_EAGAIN when entries are waiting (progressing first).
    pub(crate) fn trywait(&self) -> FiResult<()> {
        self.waker.sync(&wait::live(&self.eps))?;
        // Drain first: a wake-up after this point stays pending on the fd.
        self.waker.drain();
        self.progress();
        if self.queue.lock().is_empty() && !wait::input_waiting(&self.eps) {
            Ok(())
        } else {
            Err(FI_EAGAIN)
        }
    }

    fn wait_fd(&self) -> FiResult<std::os::fd::RawFd> {
        if self.wait_obj == FI_WAIT_NONE {
            return Err(FI_EINVAL);
        }
        self.waker.epoll_fd(&wait::live(&self.eps))
    }

    /// Progress every live bound endpoint (never under our queue lock: an
    /// endpoint pushes into CQ queues while it holds its own lock).
    fn progress(&self) {
        wait::for_each_live(&self.eps, |ep| ep.progress());
    }
}

#[repr(C)]
pub(crate) struct Cq {
    fid: fid_cq,
    pub(crate) inner: Arc<CqInner>,
    _domain: Arc<DomainInner>,
    /// Keeps the domain's close at -FI_EBUSY while this object is open.
    _open: crate::object::ChildOf,
}

pub(crate) static FI_OPS: fi_ops = fid_ops!(cq_close, object::fid_bind_enosys, cq_control);
static OPS: fi_ops_cq = fi_ops_cq {
    size: size_of::<fi_ops_cq>(),
    read: Some(cq_read),
    readfrom: Some(cq_readfrom),
    readerr: Some(cq_readerr),
    sread: Some(cq_sread),
    sreadfrom: Some(cq_sreadfrom),
    signal: Some(cq_signal),
    strerror: Some(cq_strerror),
};

/// The CQ behind a fid, if it is ours.
///
/// # Safety
/// `p` must be NULL or a live fid.
pub(crate) unsafe fn from_fid<'a>(p: *const fid) -> Option<&'a Cq> {
    // SAFETY: guaranteed by the caller.
    unsafe { object::obj::<Cq>(p, &FI_OPS) }
}

fn from_ptr<'a>(p: *mut fid_cq) -> Option<&'a Cq> {
    // SAFETY: a fid_cq starts with its fid; obj checks it is one of ours.
    unsafe { from_fid(p.cast()) }
}

pub(crate) unsafe extern "C" fn open(
    domain: *mut fid_domain,
    attr: *mut fi_cq_attr,
    cq: *mut *mut fid_cq,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        ret_int((|| {
            let dom = domain::from_ptr(domain).ok_or(FI_EINVAL)?;
            if cq.is_null() {
                return Err(FI_EINVAL);
            }
            let mut format = FI_CQ_FORMAT_CONTEXT;
            let mut wait_obj = FI_WAIT_NONE;
            // SAFETY: attr is NULL or a valid fi_cq_attr.
            if let Some(a) = unsafe { attr.as_ref() } {
                format = match a.format {
                    FI_CQ_FORMAT_UNSPEC => FI_CQ_FORMAT_CONTEXT,
                    f @ (FI_CQ_FORMAT_CONTEXT | FI_CQ_FORMAT_MSG | FI_CQ_FORMAT_DATA
                    | FI_CQ_FORMAT_TAGGED) => f,
                    _ => return Err(FI_ENOSYS),
                };
                wait_obj = match a.wait_obj {
                    w @ (FI_WAIT_NONE | FI_WAIT_UNSPEC | FI_WAIT_FD | FI_WAIT_YIELD) => w,
                    _ => return Err(FI_ENOSYS),
                };
                if a.flags & FI_AFFINITY as u64 != 0 {
                    return Err(FI_ENOSYS);
                }
            }
            let obj = Box::new(Cq {
                fid: fid_cq {
                    fid: fid {
                        fclass: FI_CLASS_CQ as usize,
                        context,
                        ops: ops_ptr(&FI_OPS),
                    },
                    ops: ops_ptr(&OPS),
                },
                inner: Arc::new(CqInner {
                    format,
                    api_version: dom.inner.api_version,
                    queue: Mutex::default(),
                    err_data: Mutex::default(),
                    eps: Mutex::default(),
                    signaled: AtomicBool::new(false),
                    waker: Waker::new()?,
                    wait_obj,
                    wait_spin: Duration::from_micros(dom.inner.config.wait_spin_us),
                }),
                _domain: Arc::clone(&dom.inner),
                _open: dom.inner.children.child(),
            });
            // SAFETY: cq is a valid out-pointer (checked above).
            unsafe { *cq = &mut Box::leak(obj).fid };
            Ok(())
        })())
    })
}

extern "C" fn cq_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: take_idle verifies the fid is one of our CQs. An open
        // endpoint bound to it holds its own Arc: -FI_EBUSY then.
        match unsafe { object::take_idle::<Cq>(f, &FI_OPS, |c| object::shared(&c.inner)) } {
            Ok(b) => {
                drop(b);
                0
            }
            Err(rc) => rc,
        }
    })
}

/// Completion flags of an entry.
pub(crate) fn comp_flags(c: &Completion) -> u64 {
    let rma = FI_RMA as u64;
    let dir = match c.kind {
        CompletionKind::Send => FI_SEND as u64,
        CompletionKind::Recv => FI_RECV as u64,
        CompletionKind::Write => return rma | FI_WRITE as u64,
        CompletionKind::Read => return rma | FI_READ as u64,
        CompletionKind::RemoteWrite => {
            let data = if c.data.is_some() {
                FI_REMOTE_CQ_DATA as u64
            } else {
                0
            };
            return rma | FI_REMOTE_WRITE as u64 | data;
        }
        CompletionKind::RemoteRead => return rma | FI_REMOTE_READ as u64,
        CompletionKind::Atomic => return FI_ATOMIC as u64 | FI_WRITE as u64,
        CompletionKind::FetchAtomic => return FI_ATOMIC as u64 | FI_READ as u64,
    };
    let class = if c.tagged {
        FI_TAGGED as u64
    } else {
        FI_MSG as u64
    };
    let data = if c.kind == CompletionKind::Recv && c.data.is_some() {
        FI_REMOTE_CQ_DATA as u64
    } else {
        0
    };
    dir | class | data
}

/// Bytes one entry of `format` takes.
fn entry_size(format: fi_cq_format) -> usize {
    match format {
        FI_CQ_FORMAT_MSG => size_of::<fi_cq_msg_entry>(),
        FI_CQ_FORMAT_DATA => size_of::<fi_cq_data_entry>(),
        FI_CQ_FORMAT_TAGGED => size_of::<fi_cq_tagged_entry>(),
        _ => size_of::<fi_cq_entry>(),
    }
}

/// The tagged entry (a superset of every format's fields) for `c`.
fn tagged_entry(c: &Completion) -> fi_cq_tagged_entry {
    fi_cq_tagged_entry {
        op_context: c.context as *mut c_void,
        flags: comp_flags(c),
        len: c.len,
        buf: c.buf as *mut c_void,
        data: c.data.unwrap_or(0),
        tag: if c.kind == CompletionKind::Recv {
            c.tag
        } else {
            0
        },
    }
}

/// Write `c` as entry `i` of a buffer of `format` entries.
///
/// # Safety
/// `buf` must hold at least `i + 1` entries of `format`.
unsafe fn write_entry(format: fi_cq_format, buf: *mut c_void, i: usize, e: &Entry) {
    let mut t = tagged_entry(&e.c);
    t.flags |= e.flags;
    // SAFETY: guaranteed by the caller; unaligned writes tolerate any buffer.
    unsafe {
        let p = buf.cast::<u8>().add(i * entry_size(format));
        match format {
            FI_CQ_FORMAT_MSG => ptr::write_unaligned(
                p.cast(),
                fi_cq_msg_entry {
                    op_context: t.op_context,
                    flags: t.flags,
                    len: t.len,
                },
            ),
            FI_CQ_FORMAT_DATA => ptr::write_unaligned(
                p.cast(),
                fi_cq_data_entry {
                    op_context: t.op_context,
                    flags: t.flags,
                    len: t.len,
                    buf: t.buf,
                    data: t.data,
                },
            ),
            FI_CQ_FORMAT_TAGGED => ptr::write_unaligned(p.cast(), t),
            _ => ptr::write_unaligned(
                p.cast(),
                fi_cq_entry {
                    op_context: t.op_context,
                },
            ),
        }
    }
}

/// Progress, then move up to `count` successful entries out. An error entry
/// at the head stops the read with FI_EAVAIL.
fn read(cq: &CqInner, buf: *mut c_void, count: usize, src_addr: *mut fi_addr_t) -> FiResult<usize> {
    if buf.is_null() && count > 0 {
        return Err(FI_EINVAL);
    }
    cq.progress();
    let mut q = cq.queue.lock();
    match q.front() {
        None => return Err(FI_EAGAIN),
        Some(e) if e.is_error() => return Err(FI_EAVAIL),
        Some(_) => {}
    }
    let mut n = 0;
    while n < count {
        match q.front() {
            Some(e) if !e.is_error() => {}
            _ => break,
        }
        let Some(e) = q.pop_front() else { break };
        // SAFETY: buf holds `count` entries of the CQ's format, src_addr is
        // NULL or holds `count` fi_addr_t (fi_cq_read/readfrom contract).
        unsafe {
            write_entry(cq.format, buf, n, &e);
            if !src_addr.is_null() {
                *src_addr.add(n) = e.src;
            }
        }
        n += 1;
    }
    Ok(n)
}

/// Wait (progressing) until `read` has something, the timeout (ms, negative
/// = forever) expires, or fi_cq_signal is called.
fn sread(
    cq: &CqInner,
    buf: *mut c_void,
    count: usize,
    src_addr: *mut fi_addr_t,
    timeout: c_int,
) -> FiResult<usize> {
    let spin = wait::Spin::new(cq.wait_obj, cq.wait_spin);
    wait::block(
        &cq.eps,
        &cq.waker,
        spin,
        wait::deadline(timeout),
        || match read(cq, buf, count, src_addr) {
            Err(FI_EAGAIN) if !cq.signaled.swap(false, Ordering::AcqRel) => None,
            r => Some(r),
        },
    )
    .unwrap_or(Err(FI_EAGAIN))
}

extern "C" fn cq_control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    guard(|| {
        // SAFETY: f is a live fid handed to us by libfabric.
        let Some(c) = (unsafe { from_fid(f) }) else {
            return -(FI_EINVAL as c_int);
        };
        ret_int(crate::cntr::wait_control(command, arg, || {
            c.inner.wait_fd()
        }))
    })
}

extern "C" fn cq_read(cq: *mut fid_cq, buf: *mut c_void, count: usize) -> isize {
    guard(|| match from_ptr(cq) {
        Some(c) => ret_ssize(read(&c.inner, buf, count, ptr::null_mut())),
        None => -(FI_EINVAL as isize),
    })
}

extern "C" fn cq_readfrom(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src_addr: *mut fi_addr_t,
) -> isize {
    guard(|| match from_ptr(cq) {
        Some(c) => ret_ssize(read(&c.inner, buf, count, src_addr)),
        None => -(FI_EINVAL as isize),
    })
}

extern "C" fn cq_sread(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    _cond: *const c_void,
    timeout: c_int,
) -> isize {
    guard(|| match from_ptr(cq) {
        Some(c) => ret_ssize(sread(&c.inner, buf, count, ptr::null_mut(), timeout)),
        None => -(FI_EINVAL as isize),
    })
}

extern "C" fn cq_sreadfrom(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src_addr: *mut fi_addr_t,
    _cond: *const c_void,
    timeout: c_int,
) -> isize {
    guard(|| match from_ptr(cq) {
        Some(c) => ret_ssize(sread(&c.inner, buf, count, src_addr, timeout)),
        None => -(FI_EINVAL as isize),
    })
}

/// Positive FI_E* number and overflow length of a failed operation.
pub(crate) fn error_code(e: CompletionError) -> (u32, usize) {
    match e {
        CompletionError::Truncated { overflow } => (FI_ETRUNC, overflow),
        CompletionError::Canceled => (FI_ECANCELED, 0),
        CompletionError::NoMessage => (FI_ENOMSG, 0),
        CompletionError::PeerUnreachable => (FI_EIO, 0),
        CompletionError::AccessDenied => (FI_EACCES, 0),
    }
}

/// Bytes of fi_cq_err_entry the application's headers declare: no
/// err_data_size before API 1.5; src_addr (1.20+) is past our struct and
/// written on its own ([`has_src_addr`]).
fn err_entry_len(api_version: u32) -> usize {
    if api_version < crate::fi_version(1, 5) {
        offset_of!(fi_cq_err_entry, err_data_size)
    } else {
        size_of::<fi_cq_err_entry>()
    }
}

/// Whether the application's fi_cq_err_entry ends with `fi_addr_t
/// src_addr` (API 1.20 on), right after the struct of our headers.
fn has_src_addr(api_version: u32) -> bool {
    api_version >= crate::fi_version(1, 20)
}

extern "C" fn cq_readerr(cq: *mut fid_cq, buf: *mut fi_cq_err_entry, _flags: u64) -> isize {
    guard(|| {
        let Some(cq) = from_ptr(cq) else {
            return -(FI_EINVAL as isize);
        };
        if buf.is_null() {
            return -(FI_EINVAL as isize);
        }
        let mut q = cq.inner.queue.lock();
        let e = match q.front() {
            Some(e) if e.is_error() => q.pop_front(),
            _ => None,
        };
        drop(q);
        let Some(e) = e else {
            return -(FI_EAGAIN as isize);
        };
        let (err, olen) = match (e.c.error, &e.unknown_source) {
            (Some(x), _) => error_code(x),
            (None, Some(_)) => (FI_EADDRNOTAVAIL, 0),
            (None, None) => (FI_EOTHER, 0),
        };
        let mut t = tagged_entry(&e.c);
        t.flags |= e.flags;
        let n = err_entry_len(cq.inner.api_version);
        // err_data: into the application's buffer when it offers one (API
        // 1.5+, err_data_size > 0), else a buffer of ours kept until the
        // next readerr.
        let (err_data, err_data_size) = match &e.unknown_source {
            None => (ptr::null_mut(), 0),
            Some(bytes) => {
                // SAFETY: buf is a valid fi_cq_err_entry of at least n bytes;
                // err_data_size is inside it when n covers it.
                let (app_buf, app_len) = unsafe {
                    if n == size_of::<fi_cq_err_entry>() {
                        ((*buf).err_data, (*buf).err_data_size)
                    } else {
                        (ptr::null_mut(), 0)
                    }
                };
                if !app_buf.is_null() && app_len > 0 {
                    let k = app_len.min(bytes.len());
                    // SAFETY: the application's err_data holds app_len bytes.
                    unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), app_buf.cast::<u8>(), k) };
                    (app_buf, k)
                } else {
                    let mut keep = cq.inner.err_data.lock();
                    keep.clone_from(bytes);
                    (keep.as_mut_ptr().cast::<c_void>(), keep.len())
                }
            }
        };
        let entry = fi_cq_err_entry {
            op_context: t.op_context,
            flags: t.flags,
            len: t.len,
            buf: t.buf,
            data: t.data,
            tag: t.tag,
            olen,
            err: err as c_int,
            prov_errno: err as c_int,
            err_data,
            err_data_size,
        };
        // SAFETY: the application's fi_cq_err_entry (for its API version)
        // holds at least n bytes; we copy exactly those.
        unsafe {
            ptr::copy_nonoverlapping(
                (&entry as *const fi_cq_err_entry).cast::<u8>(),
                buf.cast::<u8>(),
                n,
            )
        };
        if has_src_addr(cq.inner.api_version) {
            // No error of ours names a source in fi_addr form.
            // SAFETY: an application of API 1.20+ passes an entry whose
            // src_addr follows the fields above (err_data_size, at the end
            // of our struct, is 8-aligned and 8 bytes long).
            unsafe {
                buf.cast::<u8>()
                    .add(size_of::<fi_cq_err_entry>())
                    .cast::<fi_addr_t>()
                    .write_unaligned(crate::av::FI_ADDR_NOTAVAIL)
            };
        }
        1
    })
}

extern "C" fn cq_signal(cq: *mut fid_cq) -> c_int {
    guard(|| match from_ptr(cq) {
        Some(c) => {
            c.inner.signaled.store(true, Ordering::Release);
            c.inner.waker.wake();
            0
        }
        None => -(FI_EINVAL as c_int),
    })
}

extern "C" fn cq_strerror(
    _cq: *mut fid_cq,
    prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    strerror_into(prov_errno, buf, len)
}

/// Text for a provider error number (we report FI_E* numbers as prov_errno),
/// copied into `buf` when one is given.
pub(crate) fn strerror_into(prov_errno: c_int, buf: *mut c_char, len: usize) -> *const c_char {
    guard(|| {
        // SAFETY: fi_strerror returns a static string for any number.
        let text = unsafe { fi_strerror(prov_errno.saturating_abs()) };
        if text.is_null() {
            return c"uet provider error".as_ptr();
        }
        if buf.is_null() || len == 0 {
            return text;
        }
        // SAFETY: text is NUL-terminated; buf holds len bytes.
        unsafe {
            let n = libc::strlen(text).min(len - 1);
            ptr::copy_nonoverlapping(text, buf, n);
            *buf.add(n) = 0;
        }
        buf.cast_const()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(kind: CompletionKind, tagged: bool, data: Option<u64>) -> Completion {
        Completion {
            kind,
            context: 0x1000,
            tagged,
            len: 5,
            buf: 0x2000,
            tag: 7,
            data,
            src: None,
            error: None,
        }
    }

    #[test]
    fn flags_follow_kind_class_and_data() {
        let c = completion(CompletionKind::Send, false, None);
        assert_eq!(comp_flags(&c), FI_SEND as u64 | FI_MSG as u64);
        let c = completion(CompletionKind::Recv, true, Some(3));
        assert_eq!(
            comp_flags(&c),
            FI_RECV as u64 | FI_TAGGED as u64 | FI_REMOTE_CQ_DATA as u64
        );
    }

    #[test]
    fn entries_are_written_in_each_format() {
        let c = completion(CompletionKind::Recv, true, Some(9));
        let mut buf = [fi_cq_tagged_entry::default(); 2];
        // SAFETY: buf holds two tagged entries.
        let e = Entry::new(c, 0);
        unsafe { write_entry(FI_CQ_FORMAT_TAGGED, buf.as_mut_ptr().cast(), 1, &e) };
        assert_eq!(buf[1].tag, 7);
        assert_eq!(buf[1].data, 9);
        assert_eq!(buf[1].op_context as usize, 0x1000);
        let mut ctx = [fi_cq_entry::default(); 3];
        // SAFETY: ctx holds three context entries.
        unsafe { write_entry(FI_CQ_FORMAT_CONTEXT, ctx.as_mut_ptr().cast(), 2, &e) };
        assert_eq!(ctx[2].op_context as usize, 0x1000);
        assert!(ctx[1].op_context.is_null());
    }

    #[test]
    fn error_entry_layout_depends_on_api_version() {
        assert_eq!(
            err_entry_len(crate::fi_version(1, 4)),
            offset_of!(fi_cq_err_entry, err_data_size)
        );
        assert_eq!(
            err_entry_len(crate::fi_version(1, 17)),
            size_of::<fi_cq_err_entry>()
        );
        assert!(!has_src_addr(crate::fi_version(1, 17)));
        assert!(has_src_addr(crate::fi_version(1, 20)));
        assert!(has_src_addr(crate::fi_version(2, 5)));
        // src_addr follows err_data_size directly in 1.20+.
        assert_eq!(
            offset_of!(fi_cq_err_entry, err_data_size) + size_of::<usize>(),
            size_of::<fi_cq_err_entry>()
        );
        assert_eq!(
            error_code(CompletionError::Truncated { overflow: 4 }),
            (FI_ETRUNC, 4)
        );
        assert_eq!(error_code(CompletionError::NoMessage).0, FI_ENOMSG);
    }
}
