//! Memory regions. Messaging needs no registration, so an MR only records a
//! key (provider-chosen when the domain uses FI_MR_PROV_KEY, otherwise the
//! application's requested key) for fi_mr_key / fi_mr_desc to report.

use std::os::raw::{c_int, c_void};
use std::ptr;
use std::sync::Arc;

use crate::bindings::*;
use crate::domain::{self, DomainInner};
use crate::errors::{guard, ret_int, FiResult};
use crate::object::{self, fid_ops, ops_ptr};

#[repr(C)]
pub(crate) struct Mr {
    fid: fid_mr,
    _domain: Arc<DomainInner>,
}

static FI_OPS: fi_ops = fid_ops!(mr_close, mr_bind, mr_control);
pub(crate) static DOMAIN_MR_OPS: fi_ops_mr = fi_ops_mr {
    size: std::mem::size_of::<fi_ops_mr>(),
    reg: Some(mr_reg),
    regv: Some(mr_regv),
    regattr: Some(mr_regattr),
};

fn register(
    fd: *mut fid,
    requested_key: u64,
    context: *mut c_void,
    mr: *mut *mut fid_mr,
) -> FiResult<()> {
    if mr.is_null() {
        return Err(FI_EINVAL);
    }
    let dom = domain::from_ptr(fd.cast()).ok_or(FI_EINVAL)?;
    let key = if dom.inner.mr_mode & FI_MR_PROV_KEY as c_int != 0 {
        dom.inner.next_mr_key()
    } else {
        requested_key
    };
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
        _domain: Arc::clone(&dom.inner),
    });
    // SAFETY: mr is a valid out-pointer (checked above).
    unsafe { *mr = &mut Box::leak(obj).fid };
    Ok(())
}

#[allow(clippy::too_many_arguments)]
extern "C" fn mr_reg(
    fd: *mut fid,
    _buf: *const c_void,
    _len: usize,
    _access: u64,
    _offset: u64,
    requested_key: u64,
    _flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    guard(|| ret_int(register(fd, requested_key, context, mr)))
}

#[allow(clippy::too_many_arguments)]
extern "C" fn mr_regv(
    fd: *mut fid,
    _iov: *const iovec,
    count: usize,
    _access: u64,
    _offset: u64,
    requested_key: u64,
    _flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        if count > crate::getinfo::IOV_LIMIT {
            return -(FI_EINVAL as c_int);
        }
        ret_int(register(fd, requested_key, context, mr))
    })
}

extern "C" fn mr_regattr(
    fd: *mut fid,
    attr: *const fi_mr_attr,
    _flags: u64,
    mr: *mut *mut fid_mr,
) -> c_int {
    guard(|| {
        // SAFETY: attr is NULL or a valid fi_mr_attr.
        let Some(a) = (unsafe { attr.as_ref() }) else {
            return -(FI_EINVAL as c_int);
        };
        if a.iov_count > crate::getinfo::IOV_LIMIT {
            return -(FI_EINVAL as c_int);
        }
        ret_int(register(fd, a.requested_key, a.context, mr))
    })
}

extern "C" fn mr_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: take verifies the fid is one of our MRs.
        match unsafe { object::take::<Mr>(f, &FI_OPS) } {
            Some(b) => {
                drop(b);
                0
            }
            None => -(FI_EINVAL as c_int),
        }
    })
}

/// FI_MR_ENDPOINT binds an MR to an endpoint; nothing to record.
extern "C" fn mr_bind(f: *mut fid, bfid: *mut fid, _flags: u64) -> c_int {
    // SAFETY: f and bfid are NULL or live fids.
    let ok = unsafe { object::obj::<Mr>(f, &FI_OPS).is_some() && !bfid.is_null() };
    if ok {
        0
    } else {
        -(FI_EINVAL as c_int)
    }
}

extern "C" fn mr_control(_f: *mut fid, command: c_int, _arg: *mut c_void) -> c_int {
    if command == FI_ENABLE as c_int {
        0
    } else {
        -(FI_ENOSYS as c_int)
    }
}
