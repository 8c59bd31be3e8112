//! Endpoints (being written).
use crate::bindings::*;
use std::os::raw::{c_int, c_void};
pub(crate) unsafe extern "C" fn open(
    _d: *mut fid_domain,
    _i: *mut fi_info,
    _ep: *mut *mut fid_ep,
    _c: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
pub(crate) unsafe extern "C" fn open2(
    _d: *mut fid_domain,
    _i: *mut fi_info,
    _ep: *mut *mut fid_ep,
    _f: u64,
    _c: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
