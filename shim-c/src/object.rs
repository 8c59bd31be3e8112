//! Plumbing shared by every fid object: finding our struct behind a `fid`
//! pointer, and the `fi_ops` slots no object implements.

use std::os::raw::{c_char, c_int, c_void};

use crate::bindings::*;
use crate::errors::unsupported;

/// Pointer to a static ops table in the form the public structs store.
/// libfabric only reads through it.
pub(crate) fn ops_ptr<T>(table: &'static T) -> *mut T {
    (table as *const T).cast_mut()
}

/// Our object behind `p`, if `p` is a fid this provider created with the
/// generic ops table `ops` (which identifies the object type).
///
/// # Safety
/// `p` must be NULL or point to a live `struct fid`; if its ops pointer is
/// `ops`, it is the first field of a live `T`.
pub(crate) unsafe fn obj<'a, T>(p: *const fid, ops: &'static fi_ops) -> Option<&'a T> {
    // SAFETY: guaranteed by the caller.
    let f = unsafe { p.as_ref()? };
    if !std::ptr::eq(f.ops.cast_const(), ops) {
        return None;
    }
    // SAFETY: every object with this ops table is a #[repr(C)] T whose first
    // field starts with the fid.
    Some(unsafe { &*p.cast::<T>() })
}

/// Take back ownership of an object for `close`.
///
/// # Safety
/// As for [`obj`]; additionally the object must have been created with
/// `Box::into_raw` and must not be used after this call.
pub(crate) unsafe fn take<T>(p: *mut fid, ops: &'static fi_ops) -> Option<Box<T>> {
    // SAFETY: guaranteed by the caller.
    unsafe { obj::<T>(p, ops)? };
    // SAFETY: as above; ownership returns to Rust exactly once (close).
    Some(unsafe { Box::from_raw(p.cast::<T>()) })
}

unsupported! {
    pub(crate) fid_bind_enosys(*mut fid, *mut fid, u64) -> c_int = FI_ENOSYS;
    pub(crate) fid_control_enosys(*mut fid, c_int, *mut c_void) -> c_int = FI_ENOSYS;
    pub(crate) fid_ops_open_enosys(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int = FI_ENOSYS;
    pub(crate) fid_tostr_enosys(*const fid, *mut c_char, usize) -> c_int = FI_ENOSYS;
    pub(crate) fid_ops_set_enosys(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int = FI_ENOSYS;
}

/// A complete `fi_ops` table from a close function and optional bind/control.
macro_rules! fid_ops {
    ($close:expr) => {
        fid_ops!(
            $close,
            $crate::object::fid_bind_enosys,
            $crate::object::fid_control_enosys
        )
    };
    ($close:expr, $bind:expr, $control:expr) => {
        $crate::bindings::fi_ops {
            size: std::mem::size_of::<$crate::bindings::fi_ops>(),
            close: Some($close),
            bind: Some($bind),
            control: Some($control),
            ops_open: Some($crate::object::fid_ops_open_enosys),
            tostr: Some($crate::object::fid_tostr_enosys),
            ops_set: Some($crate::object::fid_ops_set_enosys),
        }
    };
}
pub(crate) use fid_ops;
