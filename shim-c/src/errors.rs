//! Error numbers at the ABI boundary: `uet::Error` -> `-FI_E*`, the panic
//! guard every entry point runs under, and the "not supported" stubs that fill
//! ops-table slots.

use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::bindings::*;

/// A libfabric error number (positive `FI_E*` value).
pub(crate) type FiErr = u32;

/// Result of an internal step; the error is a positive `FI_E*` number.
pub(crate) type FiResult<T> = Result<T, FiErr>;

/// Map an engine error to its positive `FI_E*` number.
pub(crate) fn fi_errno(err: &uet::Error) -> FiErr {
    match err {
        uet::Error::InvalidArgument(_) => FI_EINVAL,
        uet::Error::Again => FI_EAGAIN,
        uet::Error::MessageTooLong { .. } => FI_EMSGSIZE,
        uet::Error::Unreachable(_) => FI_EINVAL,
        uet::Error::Io(e) => io_errno(e),
    }
}

/// Socket errors keep their meaning where libfabric has a number for it.
pub(crate) fn io_errno(err: &std::io::Error) -> FiErr {
    match err.raw_os_error() {
        Some(libc::EADDRINUSE) => FI_EADDRINUSE,
        Some(libc::EADDRNOTAVAIL) => FI_EADDRNOTAVAIL,
        Some(libc::EACCES) => FI_EACCES,
        Some(libc::EINVAL) => FI_EINVAL,
        Some(libc::ENOMEM) => FI_ENOMEM,
        _ => FI_EIO,
    }
}

/// Return types of entry points: all carry `-FI_E*` on failure.
pub(crate) trait FromFiErr {
    fn from_fi_err(err: FiErr) -> Self;
}

impl FromFiErr for c_int {
    fn from_fi_err(err: FiErr) -> Self {
        -(err as c_int)
    }
}

impl FromFiErr for isize {
    fn from_fi_err(err: FiErr) -> Self {
        -(err as isize)
    }
}

/// Counter reads have no error channel: a failure reads as 0.
impl FromFiErr for u64 {
    fn from_fi_err(_: FiErr) -> Self {
        0
    }
}

impl FromFiErr for *const std::os::raw::c_char {
    fn from_fi_err(_: FiErr) -> Self {
        std::ptr::null()
    }
}

/// `0` or `-FI_E*` from an internal result.
pub(crate) fn ret_int(r: FiResult<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => c_int::from_fi_err(e),
    }
}

/// A count or `-FI_E*` from an internal result.
pub(crate) fn ret_ssize(r: FiResult<usize>) -> isize {
    match r {
        Ok(n) => isize::try_from(n).unwrap_or(isize::MAX),
        Err(e) => isize::from_fi_err(e),
    }
}

/// Run an entry point's body; a panic becomes `-FI_EOTHER` instead of
/// unwinding into C.
pub(crate) fn guard<R: FromFiErr>(f: impl FnOnce() -> R) -> R {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| R::from_fi_err(FI_EOTHER))
}

/// Define `extern "C"` functions that return `-FI_ENOSYS` (or another error)
/// for ops-table slots the provider does not implement.
macro_rules! unsupported {
    ($( $vis:vis $name:ident ( $($t:ty),* ) -> $r:ty = $err:expr; )*) => {
        $(
            $vis extern "C" fn $name($(_: $t),*) -> $r {
                -(($err) as $r)
            }
        )*
    };
}
pub(crate) use unsupported;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_errors_map_to_fi_numbers() {
        assert_eq!(fi_errno(&uet::Error::Again), FI_EAGAIN);
        assert_eq!(fi_errno(&uet::Error::InvalidArgument("x")), FI_EINVAL);
        assert_eq!(
            fi_errno(&uet::Error::MessageTooLong { len: 2, max: 1 }),
            FI_EMSGSIZE
        );
        let inuse = std::io::Error::from_raw_os_error(libc::EADDRINUSE);
        assert_eq!(fi_errno(&uet::Error::Io(inuse)), FI_EADDRINUSE);
    }

    #[test]
    fn guard_turns_panics_into_eother() {
        let r: c_int = guard(|| panic!("boom"));
        assert_eq!(r, -(FI_EOTHER as c_int));
        assert_eq!(ret_ssize(Ok(3)), 3);
        assert_eq!(ret_int(Err(FI_EINVAL)), -22);
    }
}
