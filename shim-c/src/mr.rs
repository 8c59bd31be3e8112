//! Memory regions. Messaging needs no registration; RMA targets must be
//! registered: each MR enters the domain's table (`mr_table.rs`) under its
//! key (provider-chosen with FI_MR_PROV_KEY or FI_MR_BASIC, otherwise the
//! application's requested key, which must be unique) with its access
//! permissions, and leaves it on close.

use std::os::raw::{c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::bindings::*;
use crate::buffers::IovBuffer;
use crate::domain::{self, DomainInner};
use crate::errors::{guard, ret_int, FiResult};
use crate::object::{self, fid_ops, ops_ptr};

#[repr(C)]
pub(crate) struct Mr {
    fid: fid_mr,
    domain: Arc<DomainInner>,
    /// FI_MR_ENDPOINT: fi_mr_bind to an endpoint happened.
    ep_bound: AtomicBool,
    /// Keeps the domain's close at -FI_EBUSY while this region is open.
    _open: crate::object::ChildOf,
}

static FI_OPS: fi_ops = fid_ops!(mr_close, mr_bind, mr_control);
pub(crate) static DOMAIN_MR_OPS: fi_ops_mr = fi_ops_mr {
    size: std::mem::size_of::<fi_ops_mr>(),
    reg: Some(mr_reg),
    regv: Some(mr_regv),
    regattr: Some(mr_regattr),
};

/// Remote-access permissions a region may grant.
const ACCESS_BITS: u64 =
    (FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE) as u64;

fn register(
    fd: *mut fid,
    mem: IovBuffer,
    access: u64,
    requested_key: u64,
    context: *mut c_void,
    mr: *mut *mut fid_mr,
) -> FiResult<()> {
    if mr.is_null() || access & !ACCESS_BITS != 0 {
        return Err(FI_EINVAL);
    }
    let dom = domain::from_ptr(fd.cast()).ok_or(FI_EINVAL)?;
    let mode = dom.inner.mr_mode;
    let prov_key = mode == FI_MR_BASIC as c_int || mode & FI_MR_PROV_KEY as c_int != 0;
    let key = if prov_key {
        dom.inner.next_mr_key()
    } else {
        requested_key
    };
    dom.inner.regions.insert(key, mem, access)?;
    let obj = Box::new(Mr {
        fid: fid_mr {
            fid: fid {
                fclass: FI_CLASS_MR as usize,
                context,
                ops: ops_ptr(&FI_OPS),
            },
            mem_desc: ptr::null_mut(),
            key,
        },
        domain: Arc::clone(&dom.inner),
        ep_bound: AtomicBool::new(false),
        _open: dom.inner.children.child(),
    });
    // SAFETY: mr is a valid out-pointer (checked above).
    unsafe { *mr = &mut Box::leak(obj).fid };
    Ok(())
}

#[allow(clippy::too_many_arguments)]
extern "C" fn mr_reg(
    fd: *mut fid,
    buf: *const c_void,
    len: usize,
    access: u64,
    _offset: u64,
    requested_key: u64,
    _flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        ret_int((|| {
            let mem = IovBuffer::single(buf, len)?;
            register(fd, mem, access, requested_key, context, mr)
        })())
    })
}

#[allow(clippy::too_many_arguments)]
extern "C" fn mr_regv(
    fd: *mut fid,
    iov: *const iovec,
    count: usize,
    access: u64,
    _offset: u64,
    requested_key: u64,
    _flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        ret_int((|| {
            if count > crate::getinfo::IOV_LIMIT {
                return Err(FI_EINVAL);
            }
            // SAFETY: the application passes `count` iovecs.
            let mem = unsafe { IovBuffer::from_iov(iov, count) }?;
            register(fd, mem, access, requested_key, context, mr)
        })())
    })
}

extern "C" fn mr_regattr(
    fd: *mut fid,
    attr: *const fi_mr_attr,
    _flags: u64,
    mr: *mut *mut fid_mr,
) -> c_int {
    guard(|| {
        ret_int((|| {
            // SAFETY: attr is NULL or a valid fi_mr_attr.
            let a = unsafe { attr.as_ref() }.ok_or(FI_EINVAL)?;
            if a.iov_count > crate::getinfo::IOV_LIMIT {
                return Err(FI_EINVAL);
            }
            // SAFETY: mr_iov holds iov_count iovecs.
            let mem = unsafe { IovBuffer::from_iov(a.mr_iov, a.iov_count) }?;
            register(fd, mem, a.access, a.requested_key, a.context, mr)
        })())
    })
}

extern "C" fn mr_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: take verifies the fid is one of our MRs.
        match unsafe { object::take::<Mr>(f, &FI_OPS) } {
            Some(b) => {
                b.domain.regions.remove(b.fid.key);
                drop(b);
                0
            }
            None => -(FI_EINVAL as c_int),
        }
    })
}

/// fi_mr_bind: an endpoint (FI_MR_ENDPOINT regions are bound to one before
/// fi_mr_enable; the table is domain-wide, so the binding only gates), or
/// a counter with FI_REMOTE_WRITE and/or FI_REMOTE_READ (FI_RMA_EVENT):
/// it then counts the peers' accesses to this region.
extern "C" fn mr_bind(f: *mut fid, bfid: *mut fid, flags: u64) -> c_int {
    guard(|| {
        ret_int((|| {
            // SAFETY: f is NULL or a live fid; obj checks it is one of our MRs.
            let mr = unsafe { object::obj::<Mr>(f, &FI_OPS) }.ok_or(FI_EINVAL)?;
            // SAFETY: bfid is NULL or a live fid.
            let class = unsafe { bfid.as_ref() }.ok_or(FI_EINVAL)?.fclass as u32;
            match class {
                FI_CLASS_EP => {
                    crate::endpoint::inner(bfid.cast()).ok_or(FI_EINVAL)?;
                    mr.ep_bound.store(true, Ordering::Release);
                    Ok(())
                }
                FI_CLASS_CNTR => {
                    // SAFETY: bfid is a live fid (checked above).
                    let c = unsafe { crate::cntr::from_fid(bfid) }.ok_or(FI_EINVAL)?;
                    let events = (FI_REMOTE_WRITE | FI_REMOTE_READ) as u64;
                    if flags & events == 0 || flags & !events != 0 {
                        return Err(FI_EINVAL);
                    }
                    mr.domain.regions.bind_counter(mr.fid.key, &c.inner, flags);
                    // Reading or waiting on the counter progresses the
                    // endpoints that may serve the region.
                    for ep in crate::wait::live(&mr.domain.eps) {
                        c.inner.attach(&ep);
                    }
                    Ok(())
                }
                _ => Err(FI_EINVAL),
            }
        })())
    })
}

extern "C" fn mr_control(f: *mut fid, command: c_int, _arg: *mut c_void) -> c_int {
    // SAFETY: f is NULL or a live fid; obj checks it is one of our MRs.
    let Some(mr) = (unsafe { object::obj::<Mr>(f, &FI_OPS) }) else {
        return -(FI_EINVAL as c_int);
    };
    if command == FI_ENABLE as c_int {
        // FI_MR_ENDPOINT: a region is enabled after its endpoint binding.
        if mr.domain.regions.endpoint_mode && !mr.ep_bound.load(Ordering::Acquire) {
            return -(FI_EINVAL as c_int);
        }
        mr.domain.regions.enable(mr.fid.key);
        0
    } else {
        -(FI_ENOSYS as c_int)
    }
}
