//! Event queues. An RDM endpoint produces no connection events, but
//! applications (fi_pingpong) open and bind one anyway; fi_eq_write'n events
//! are stored and read back.

use std::collections::VecDeque;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::bindings::*;
use crate::errors::{guard, ret_int, ret_ssize, FiResult};
use crate::object::{self, fid_ops, ops_ptr};
use crate::wait::{self, Waker};

pub(crate) struct EqInner {
    events: Mutex<VecDeque<(u32, Vec<u8>)>>,
    waker: Waker,
    wait_obj: fi_wait_obj,
}

impl EqInner {
    /// fi_trywait: -FI_EAGAIN when events are waiting.
    pub(crate) fn trywait(&self) -> FiResult<()> {
        self.waker.drain();
        if self.events.lock().is_empty() {
            Ok(())
        } else {
            Err(FI_EAGAIN)
        }
    }
}

#[repr(C)]
pub(crate) struct Eq {
    fid: fid_eq,
    pub(crate) inner: Arc<EqInner>,
    /// Keeps the fabric's close at -FI_EBUSY while this EQ is open.
    _open: object::ChildOf,
}

pub(crate) static FI_OPS: fi_ops = fid_ops!(eq_close, object::fid_bind_enosys, eq_control);
static OPS: fi_ops_eq = fi_ops_eq {
    size: std::mem::size_of::<fi_ops_eq>(),
    read: Some(eq_read),
    readerr: Some(eq_readerr),
    write: Some(eq_write),
    sread: Some(eq_sread),
    strerror: Some(eq_strerror),
};

/// The EQ behind a fid, if it is ours.
///
/// # Safety
/// `p` must be NULL or a live fid.
pub(crate) unsafe fn from_fid<'a>(p: *const fid) -> Option<&'a Eq> {
    // SAFETY: guaranteed by the caller.
    unsafe { object::obj::<Eq>(p, &FI_OPS) }
}

fn from_ptr<'a>(p: *mut fid_eq) -> Option<&'a Eq> {
    // SAFETY: a fid_eq starts with its fid; obj checks it is one of ours.
    unsafe { from_fid(p.cast()) }
}

pub(crate) unsafe extern "C" fn open(
    fabric: *mut fid_fabric,
    attr: *mut fi_eq_attr,
    eq: *mut *mut fid_eq,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        ret_int((|| {
            let fab = crate::fabric::from_ptr(fabric).ok_or(FI_EINVAL)?;
            if eq.is_null() {
                return Err(FI_EINVAL);
            }
            let mut wait_obj = FI_WAIT_NONE;
            // SAFETY: attr is NULL or a valid fi_eq_attr.
            if let Some(a) = unsafe { attr.as_ref() } {
                wait_obj = match a.wait_obj {
                    w @ (FI_WAIT_NONE | FI_WAIT_UNSPEC | FI_WAIT_FD | FI_WAIT_YIELD) => w,
                    _ => return Err(FI_ENOSYS),
                };
            }
            let obj = Box::new(Eq {
                fid: fid_eq {
                    fid: fid {
                        fclass: FI_CLASS_EQ as usize,
                        context,
                        ops: ops_ptr(&FI_OPS),
                    },
                    ops: ops_ptr(&OPS),
                },
                inner: Arc::new(EqInner {
                    events: Mutex::default(),
                    waker: Waker::new()?,
                    wait_obj,
                }),
                _open: fab.children.child(),
            });
            // SAFETY: eq is a valid out-pointer (checked above).
            unsafe { *eq = &mut Box::leak(obj).fid };
            Ok(())
        })())
    })
}

extern "C" fn eq_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: take_idle verifies the fid is one of our EQs; an open
        // endpoint bound to it makes the close -FI_EBUSY.
        match unsafe { object::take_idle::<Eq>(f, &FI_OPS, |e| object::shared(&e.inner)) } {
            Ok(b) => {
                drop(b);
                0
            }
            Err(rc) => rc,
        }
    })
}

fn read_one(eq: &Eq, event: *mut u32, buf: *mut c_void, len: usize, flags: u64) -> FiResult<usize> {
    let mut q = eq.inner.events.lock();
    let Some((ev, data)) = q.front() else {
        return Err(FI_EAGAIN);
    };
    if data.len() > len || (buf.is_null() && !data.is_empty()) {
        return Err(FI_ETOOSMALL);
    }
    let n = data.len();
    // SAFETY: buf holds len >= n bytes (checked); event is NULL or writable.
    unsafe {
        if n > 0 {
            std::ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>(), n);
        }
        if let Some(e) = event.as_mut() {
            *e = *ev;
        }
    }
    if flags & FI_PEEK as u64 == 0 {
        q.pop_front();
    }
    Ok(n)
}

extern "C" fn eq_control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    guard(|| {
        // SAFETY: f is a live fid handed to us by libfabric.
        let Some(e) = (unsafe { from_fid(f) }) else {
            return -(FI_EINVAL as c_int);
        };
        ret_int(crate::cntr::wait_control(command, arg, || {
            if e.inner.wait_obj == FI_WAIT_NONE {
                return Err(FI_EINVAL);
            }
            e.inner.waker.epoll_fd(&[])
        }))
    })
}

extern "C" fn eq_read(
    eq: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
) -> isize {
    guard(|| match from_ptr(eq) {
        Some(e) => ret_ssize(read_one(e, event, buf, len, flags)),
        None => -(FI_EINVAL as isize),
    })
}

extern "C" fn eq_sread(
    eq: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    timeout: c_int,
    flags: u64,
) -> isize {
    guard(|| {
        let Some(e) = from_ptr(eq) else {
            return -(FI_EINVAL as isize);
        };
        // Only fi_eq_write produces events: sleep on the eventfd alone.
        let no_endpoints = Mutex::new(Vec::new());
        let r = wait::block(
            &no_endpoints,
            &e.inner.waker,
            wait::Spin::none(),
            wait::deadline(timeout),
            || match read_one(e, event, buf, len, flags) {
                Err(FI_EAGAIN) => None,
                r => Some(r),
            },
        );
        ret_ssize(r.unwrap_or(Err(FI_EAGAIN)))
    })
}

extern "C" fn eq_readerr(eq: *mut fid_eq, _buf: *mut fi_eq_err_entry, _flags: u64) -> isize {
    guard(|| match from_ptr(eq) {
        // No operation reports errors through an EQ.
        Some(_) => -(FI_EAGAIN as isize),
        None => -(FI_EINVAL as isize),
    })
}

extern "C" fn eq_write(
    eq: *mut fid_eq,
    event: u32,
    buf: *const c_void,
    len: usize,
    _flags: u64,
) -> isize {
    guard(|| {
        let Some(e) = from_ptr(eq) else {
            return -(FI_EINVAL as isize);
        };
        if buf.is_null() && len > 0 {
            return -(FI_EINVAL as isize);
        }
        let data = if len == 0 {
            Vec::new()
        } else {
            // SAFETY: buf holds len readable bytes (fi_eq_write contract).
            unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }.to_vec()
        };
        e.inner.events.lock().push_back((event, data));
        e.inner.waker.wake();
        isize::try_from(len).unwrap_or(isize::MAX)
    })
}

extern "C" fn eq_strerror(
    _eq: *mut fid_eq,
    prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    crate::cq::strerror_into(prov_errno, buf, len)
}
