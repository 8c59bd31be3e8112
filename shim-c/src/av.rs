//! Address vectors (being written).
use crate::bindings::*;
use std::os::raw::{c_int, c_void};
pub(crate) unsafe extern "C" fn open(
    _d: *mut fid_domain,
    _a: *mut fi_av_attr,
    _av: *mut *mut fid_av,
    _c: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
