//! Completion queues (being written).
use crate::bindings::*;
use std::os::raw::{c_char, c_int, c_void};
pub(crate) unsafe extern "C" fn open(
    _d: *mut fid_domain,
    _a: *mut fi_cq_attr,
    _cq: *mut *mut fid_cq,
    _c: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
pub(crate) fn strerror_into(_e: c_int, _buf: *mut c_char, _len: usize) -> *const c_char {
    c"uet provider error".as_ptr()
}
