//! The fabric object: opens domains and event queues.

use std::os::raw::{c_int, c_void};

use crate::bindings::*;
use crate::errors::{guard, ret_int, unsupported};
use crate::object::{self, fid_ops, ops_ptr};
use crate::{addr, domain, eq, FABRIC_NAME};

#[repr(C)]
pub(crate) struct Fabric {
    pub(crate) fid: fid_fabric,
    /// Domains and EQs opened from this fabric and still open.
    pub(crate) children: object::OpenChildren,
}

static FI_OPS: fi_ops = fid_ops!(fabric_close);
static OPS: fi_ops_fabric = fi_ops_fabric {
    size: std::mem::size_of::<fi_ops_fabric>(),
    domain: Some(domain::open),
    passive_ep: Some(passive_ep),
    eq_open: Some(eq::open),
    wait_open: Some(wait_open),
    trywait: Some(trywait),
    domain2: Some(domain::open2),
};

unsupported! {
    passive_ep(*mut fid_fabric, *mut fi_info, *mut *mut fid_pep, *mut c_void) -> c_int = FI_ENOSYS;
    wait_open(*mut fid_fabric, *mut fi_wait_attr, *mut *mut fid_wait) -> c_int = FI_ENOSYS;
}

/// fi_trywait: 0 when every object may be waited on (nothing is pending),
/// -FI_EAGAIN when one already has something to read.
extern "C" fn trywait(fabric: *mut fid_fabric, fids: *mut *mut fid, count: c_int) -> c_int {
    guard(|| {
        ret_int((|| {
            from_ptr(fabric).ok_or(FI_EINVAL)?;
            let n = usize::try_from(count).map_err(|_| FI_EINVAL)?;
            if fids.is_null() && n > 0 {
                return Err(FI_EINVAL);
            }
            for i in 0..n {
                // SAFETY: fids holds count fid pointers (fi_trywait contract);
                // each from_fid checks the object is one of ours.
                unsafe {
                    let f = *fids.add(i);
                    if let Some(c) = crate::cq::from_fid(f) {
                        c.inner.trywait()?;
                    } else if let Some(c) = crate::cntr::from_fid(f) {
                        c.inner.trywait()?;
                    } else if let Some(e) = eq::from_fid(f) {
                        e.inner.trywait()?;
                    } else {
                        return Err(FI_EINVAL);
                    }
                }
            }
            Ok(())
        })())
    })
}

/// The fabric behind `p`, if it is ours.
pub(crate) fn from_ptr<'a>(p: *mut fid_fabric) -> Option<&'a Fabric> {
    // SAFETY: a fid_fabric starts with its fid; obj checks it is one of ours.
    unsafe { object::obj::<Fabric>(p.cast(), &FI_OPS) }
}

/// The API version the application opened the fabric with.
pub(crate) fn api_version(f: &Fabric) -> u32 {
    if f.fid.api_version == 0 {
        crate::API_VERSION
    } else {
        f.fid.api_version
    }
}

/// `provider->fabric`: open the fabric described by `attr`.
pub(crate) unsafe extern "C" fn uet_fabric(
    attr: *mut fi_fabric_attr,
    fabric: *mut *mut fid_fabric,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        ret_int((|| {
            if fabric.is_null() {
                return Err(FI_EINVAL);
            }
            // SAFETY: attr is NULL or a valid fi_fabric_attr from the core.
            let (name, version) = match unsafe { attr.as_ref() } {
                // SAFETY: name is NULL or a NUL-terminated string.
                Some(a) => (unsafe { addr::c_str(a.name) }, a.api_version),
                None => (None, crate::API_VERSION),
            };
            if name.as_deref().is_some_and(|n| n != FABRIC_NAME) {
                return Err(FI_EINVAL);
            }
            let f = Box::new(Fabric {
                fid: fid_fabric {
                    fid: fid {
                        fclass: FI_CLASS_FABRIC as usize,
                        context,
                        ops: ops_ptr(&FI_OPS),
                    },
                    ops: ops_ptr(&OPS),
                    api_version: version,
                },
                children: object::OpenChildren::default(),
            });
            // SAFETY: fabric is a valid out-pointer (checked above).
            unsafe { *fabric = &mut Box::leak(f).fid };
            Ok(())
        })())
    })
}

extern "C" fn fabric_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: libfabric passes the fid it got from uet_fabric;
        // take_idle verifies it is ours. Open domains or EQs: -FI_EBUSY.
        match unsafe { object::take_idle::<Fabric>(f, &FI_OPS, |b| b.children.busy()) } {
            Ok(b) => {
                drop(b);
                0
            }
            Err(rc) => rc,
        }
    })
}
