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

/// How many objects opened from a parent (fabric, domain) are still open:
/// the parent's close answers -FI_EBUSY until they are all closed.
#[derive(Default)]
pub(crate) struct OpenChildren(std::sync::Arc<std::sync::atomic::AtomicUsize>);

/// Held by an open child object; dropping it (at the child's close)
/// releases the parent.
pub(crate) struct ChildOf(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl OpenChildren {
    pub(crate) fn child(&self) -> ChildOf {
        self.0.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        ChildOf(std::sync::Arc::clone(&self.0))
    }

    pub(crate) fn busy(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire) > 0
    }
}

impl Drop for ChildOf {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// fi_close: -FI_EBUSY while `busy` says other objects still use it
/// (fi_cq(3), fi_cntr(3), fi_av(3), fi_eq(3), fi_domain(3), fi_fabric(3)),
/// else ownership back for the close.
///
/// # Safety
/// As for [`take`].
pub(crate) unsafe fn take_idle<T>(
    p: *mut fid,
    ops: &'static fi_ops,
    busy: impl Fn(&T) -> bool,
) -> Result<Box<T>, c_int> {
    // SAFETY: guaranteed by the caller.
    let o = unsafe { obj::<T>(p, ops) }.ok_or(-(FI_EINVAL as c_int))?;
    if busy(o) {
        return Err(-(FI_EBUSY as c_int));
    }
    // SAFETY: as above.
    unsafe { take::<T>(p, ops) }.ok_or(-(FI_EINVAL as c_int))
}

/// Someone besides the object itself holds its shared state: an endpoint
/// bound to it, or a memory region bound to a counter.
pub(crate) fn shared<I>(inner: &std::sync::Arc<I>) -> bool {
    std::sync::Arc::strong_count(inner) > 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parent_is_busy_until_every_child_is_closed() {
        let parent = OpenChildren::default();
        assert!(!parent.busy());
        let a = parent.child();
        let b = parent.child();
        drop(a);
        assert!(parent.busy());
        drop(b);
        assert!(!parent.busy());
    }
}
