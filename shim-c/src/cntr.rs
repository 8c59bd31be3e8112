//! Counters (fi_cntr): a success and an error count that endpoints bump as
//! operations complete, in the directions the counter was bound for.
//! Reading or waiting on a counter progresses every endpoint bound to it.

use std::os::fd::RawFd;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use crate::bindings::*;
use crate::domain::{self, DomainInner};
use crate::endpoint::EpInner;
use crate::errors::{guard, ret_int, FiResult};
use crate::object::{self, fid_ops, ops_ptr};
use crate::wait::{self, Waker};

pub(crate) struct CntrInner {
    value: AtomicU64,
    errors: AtomicU64,
    eps: Mutex<Vec<Weak<EpInner>>>,
    waker: Waker,
    wait_obj: fi_wait_obj,
    /// How long fi_cntr_wait polls before it sleeps (FI_UET_WAIT_SPIN_US).
    wait_spin: Duration,
}

impl CntrInner {
    /// One operation finished (successfully or not).
    pub(crate) fn completed(&self, ok: bool) {
        if ok {
            self.value.fetch_add(1, Ordering::AcqRel);
        } else {
            self.errors.fetch_add(1, Ordering::AcqRel);
        }
        self.waker.wake();
    }

    /// A fresh counter outside any domain (unit tests).
    #[cfg(test)]
    pub(crate) fn for_test() -> Arc<CntrInner> {
        Arc::new(CntrInner {
            value: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            eps: Mutex::default(),
            waker: Waker::new().expect("eventfd"),
            wait_obj: FI_WAIT_NONE,
            wait_spin: Duration::ZERO,
        })
    }

    /// The success count, without progress (unit tests).
    #[cfg(test)]
    pub(crate) fn value(&self) -> u64 {
        self.value.load(Ordering::Acquire)
    }

    pub(crate) fn attach(&self, ep: &Arc<EpInner>) {
        wait::attach(&self.eps, ep);
        // On failure fi_trywait tries again (and reports it).
        let _ = self.waker.sync(&wait::live(&self.eps));
    }

    fn progress(&self) {
        wait::for_each_live(&self.eps, |ep| ep.progress());
    }

    fn read(&self) -> u64 {
        self.progress();
        self.value.load(Ordering::Acquire)
    }

    fn read_err(&self) -> u64 {
        self.progress();
        self.errors.load(Ordering::Acquire)
    }

    /// fi_cntr_wait: 0 once the value reaches `threshold`, -FI_EAVAIL when
    /// the error count changes meanwhile, -FI_ETIMEDOUT at the deadline.
    fn wait(&self, threshold: u64, timeout: c_int) -> FiResult<()> {
        let errors = self.errors.load(Ordering::Acquire);
        let spin = wait::Spin::new(self.wait_obj, self.wait_spin);
        wait::block(
            &self.eps,
            &self.waker,
            spin,
            wait::deadline(timeout),
            || {
                self.progress();
                if self.value.load(Ordering::Acquire) >= threshold {
                    Some(Ok(()))
                } else if self.errors.load(Ordering::Acquire) != errors {
                    Some(Err(FI_EAVAIL))
                } else {
                    None
                }
            },
        )
        .unwrap_or(Err(FI_ETIMEDOUT))
    }

    /// 0 when nothing is pending a wait could miss (fi_trywait).
    pub(crate) fn trywait(&self) -> FiResult<()> {
        self.waker.sync(&wait::live(&self.eps))?;
        // Drain first: a wake-up after this point stays pending on the fd.
        self.waker.drain();
        self.progress();
        if wait::input_waiting(&self.eps) {
            return Err(FI_EAGAIN);
        }
        Ok(())
    }

    pub(crate) fn wait_fd(&self) -> FiResult<RawFd> {
        if self.wait_obj == FI_WAIT_NONE {
            return Err(FI_EINVAL);
        }
        self.waker.epoll_fd(&wait::live(&self.eps))
    }
}

#[repr(C)]
pub(crate) struct Cntr {
    fid: fid_cntr,
    pub(crate) inner: Arc<CntrInner>,
    _domain: Arc<DomainInner>,
    /// Keeps the domain's close at -FI_EBUSY while this object is open.
    _open: crate::object::ChildOf,
}

pub(crate) static FI_OPS: fi_ops = fid_ops!(cntr_close, object::fid_bind_enosys, cntr_control);
static OPS: fi_ops_cntr = fi_ops_cntr {
    size: std::mem::size_of::<fi_ops_cntr>(),
    read: Some(cntr_read),
    readerr: Some(cntr_readerr),
    add: Some(cntr_add),
    set: Some(cntr_set),
    wait: Some(cntr_wait),
    adderr: Some(cntr_adderr),
    seterr: Some(cntr_seterr),
};

/// The counter behind a fid, if it is ours.
///
/// # Safety
/// `p` must be NULL or a live fid.
pub(crate) unsafe fn from_fid<'a>(p: *const fid) -> Option<&'a Cntr> {
    // SAFETY: guaranteed by the caller.
    unsafe { object::obj::<Cntr>(p, &FI_OPS) }
}

fn from_ptr<'a>(p: *mut fid_cntr) -> Option<&'a Cntr> {
    // SAFETY: a fid_cntr starts with its fid; obj checks it is one of ours.
    unsafe { from_fid(p.cast()) }
}

pub(crate) unsafe extern "C" fn open(
    domain: *mut fid_domain,
    attr: *mut fi_cntr_attr,
    cntr: *mut *mut fid_cntr,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        ret_int((|| {
            let dom = domain::from_ptr(domain).ok_or(FI_EINVAL)?;
            if cntr.is_null() {
                return Err(FI_EINVAL);
            }
            let mut wait_obj = FI_WAIT_UNSPEC;
            // SAFETY: attr is NULL or a valid fi_cntr_attr.
            if let Some(a) = unsafe { attr.as_ref() } {
                if a.events != FI_CNTR_EVENTS_COMP || a.flags != 0 {
                    return Err(FI_ENOSYS);
                }
                wait_obj = match a.wait_obj {
                    w @ (FI_WAIT_NONE | FI_WAIT_UNSPEC | FI_WAIT_FD | FI_WAIT_YIELD) => w,
                    _ => return Err(FI_ENOSYS),
                };
            }
            let obj = Box::new(Cntr {
                fid: fid_cntr {
                    fid: fid {
                        fclass: FI_CLASS_CNTR as usize,
                        context,
                        ops: ops_ptr(&FI_OPS),
                    },
                    ops: ops_ptr(&OPS),
                },
                inner: Arc::new(CntrInner {
                    value: AtomicU64::new(0),
                    errors: AtomicU64::new(0),
                    eps: Mutex::default(),
                    waker: Waker::new()?,
                    wait_obj,
                    wait_spin: Duration::from_micros(dom.inner.config.wait_spin_us),
                }),
                _domain: Arc::clone(&dom.inner),
                _open: dom.inner.children.child(),
            });
            // SAFETY: cntr is a valid out-pointer (checked above).
            unsafe { *cntr = &mut Box::leak(obj).fid };
            Ok(())
        })())
    })
}

extern "C" fn cntr_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: take_idle verifies the fid is one of our counters. An
        // open endpoint or region bound to it holds its own Arc: -FI_EBUSY.
        match unsafe { object::take_idle::<Cntr>(f, &FI_OPS, |c| object::shared(&c.inner)) } {
            Ok(b) => {
                drop(b);
                0
            }
            Err(rc) => rc,
        }
    })
}

extern "C" fn cntr_control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    guard(|| {
        // SAFETY: f is a live fid handed to us by libfabric.
        let Some(c) = (unsafe { from_fid(f) }) else {
            return -(FI_EINVAL as c_int);
        };
        ret_int(wait_control(command, arg, || c.inner.wait_fd()))
    })
}

/// FI_GETWAIT for CQs, counters and EQs: store the descriptor in `arg`.
pub(crate) fn wait_control(
    command: c_int,
    arg: *mut c_void,
    fd: impl FnOnce() -> FiResult<RawFd>,
) -> FiResult<()> {
    if command as u32 != FI_GETWAIT {
        return Err(FI_ENOSYS);
    }
    if arg.is_null() {
        return Err(FI_EINVAL);
    }
    let fd = fd()?;
    // SAFETY: for FI_WAIT_FD objects FI_GETWAIT's argument points to an int.
    unsafe { *arg.cast::<c_int>() = fd };
    Ok(())
}

extern "C" fn cntr_read(c: *mut fid_cntr) -> u64 {
    guard(|| from_ptr(c).map_or(0, |c| c.inner.read()))
}

extern "C" fn cntr_readerr(c: *mut fid_cntr) -> u64 {
    guard(|| from_ptr(c).map_or(0, |c| c.inner.read_err()))
}

fn update(c: *mut fid_cntr, f: impl FnOnce(&CntrInner)) -> c_int {
    guard(|| match from_ptr(c) {
        Some(c) => {
            f(&c.inner);
            c.inner.waker.wake();
            0
        }
        None => -(FI_EINVAL as c_int),
    })
}

extern "C" fn cntr_add(c: *mut fid_cntr, v: u64) -> c_int {
    update(c, |c| {
        c.value.fetch_add(v, Ordering::AcqRel);
    })
}

extern "C" fn cntr_set(c: *mut fid_cntr, v: u64) -> c_int {
    update(c, |c| c.value.store(v, Ordering::Release))
}

extern "C" fn cntr_adderr(c: *mut fid_cntr, v: u64) -> c_int {
    update(c, |c| {
        c.errors.fetch_add(v, Ordering::AcqRel);
    })
}

extern "C" fn cntr_seterr(c: *mut fid_cntr, v: u64) -> c_int {
    update(c, |c| c.errors.store(v, Ordering::Release))
}

extern "C" fn cntr_wait(c: *mut fid_cntr, threshold: u64, timeout: c_int) -> c_int {
    guard(|| match from_ptr(c) {
        Some(c) => ret_int(c.inner.wait(threshold, timeout)),
        None => -(FI_EINVAL as c_int),
    })
}
