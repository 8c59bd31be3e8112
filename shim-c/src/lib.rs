//! `libuet-fi.so`: the libfabric ABI of the uet provider.
//!
//! libfabric dlopens this library from `FI_PROVIDER_PATH` and calls
//! [`fi_prov_ini`]. Everything here is mechanical translation: fid objects
//! and their ops tables, argument checks, error numbers, and the bookkeeping
//! of address vectors, completion queues, event queues and memory regions.
//! The transport itself is the `uet` crate.
//!
//! Each fid object is a `#[repr(C)]` struct whose first field is the public
//! libfabric struct, so the `fid` pointer libfabric hands back is also a
//! pointer to ours. Shared state lives behind `Arc`s, so objects may be closed
//! in any order without dangling references.
//!
//! Addressing: an endpoint binds `info->src_addr` when given (FI_SOURCE with
//! node/service, or the hints' src_addr); with only a destination it binds
//! the local address the kernel routes to that destination; with neither it
//! binds `FI_UET_SRC_ADDR` (default 127.0.0.1, `auto` = default-route
//! interface) on port `FI_UET_PORT` (default any). Multi-host runs without
//! explicit addresses therefore need `FI_UET_SRC_ADDR=auto` or an IP.
//!
//! Progress is manual: every CQ read progresses each endpoint bound to it,
//! and each endpoint routes its completions to the CQ bound for that
//! direction.

pub mod bindings;

mod addr;
mod atomic;
mod av;
mod buffers;
mod cntr;
mod cq;
mod domain;
mod endpoint;
mod eq;
mod errors;
mod fabric;
mod getinfo;
mod log;
mod mr;
mod mr_table;
mod msg;
mod object;
mod params;
mod progress;
mod rma_atomic;
mod stats_ext;
mod tagged;
mod wait;

use std::ptr;
use std::sync::OnceLock;

use bindings::*;

/// Provider name as libfabric reports it (`fi_info -p uet`).
pub(crate) const PROV_NAME: &std::ffi::CStr = c"uet";
/// Fabric name reported in `fabric_attr->name`.
pub(crate) const FABRIC_NAME: &str = "uet";
/// Domain name reported in `domain_attr->name`.
pub(crate) const DOMAIN_NAME: &str = "udp";

/// `FI_VERSION(major, minor)`.
pub(crate) const fn fi_version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

/// The provider's own version.
pub(crate) const PROV_VERSION: u32 = fi_version(0, 1);
/// The libfabric API version of the headers this library was built against.
pub(crate) const API_VERSION: u32 = fi_version(FI_MAJOR_VERSION, FI_MINOR_VERSION);

/// The newest libfabric API series this provider implements: 1.x and 2.x
/// differ only in what 2.0 removed (asynchronous AV insertion, the old MR
/// mode enum, wait and poll sets), none of which the provider offers.
const NEWEST_MAJOR: u32 = 2;

/// The API version to report to the core that loaded us: its own, so that
/// applications built against it (MPICH asks for its headers' version)
/// find the provider whatever headers it was built with, but never a
/// major series newer than [`NEWEST_MAJOR`].
pub(crate) fn reported_api_version(core: u32) -> u32 {
    core.min(fi_version(NEWEST_MAJOR, 0xffff))
}

/// The writable provider struct handed to libfabric (the core stores its own
/// context in it), shared by every later call.
struct ProviderPtr(*mut fi_provider);
// SAFETY: the pointer is written once (inside OnceLock) and afterwards only
// passed to libfabric, which synchronises its own use of the struct.
unsafe impl Send for ProviderPtr {}
// SAFETY: as above; Rust code never dereferences it after initialisation.
unsafe impl Sync for ProviderPtr {}

static PROVIDER: OnceLock<ProviderPtr> = OnceLock::new();

/// The provider struct, for fi_param_* and fi_log calls.
pub(crate) fn provider() -> *mut fi_provider {
    PROVIDER.get().map_or(ptr::null_mut(), |p| p.0)
}

extern "C" fn cleanup() {}

/// The provider struct lives in the library's writable data (not the heap),
/// so nothing is left allocated when libfabric unloads the library.
struct ProviderCell(std::cell::UnsafeCell<fi_provider>);
// SAFETY: written by the libfabric core (its `context`) under its own
// locking; Rust code only takes the address.
unsafe impl Sync for ProviderCell {}

static PROVIDER_STORAGE: ProviderCell = ProviderCell(std::cell::UnsafeCell::new(fi_provider {
    version: PROV_VERSION,
    fi_version: API_VERSION,
    context: fi_context {
        internal: [ptr::null_mut(); 4],
    },
    name: PROV_NAME.as_ptr(),
    getinfo: Some(getinfo::uet_getinfo),
    fabric: Some(fabric::uet_fabric),
    cleanup: Some(cleanup),
}));

/// Entry point libfabric looks up after dlopen.
#[no_mangle]
pub extern "C" fn fi_prov_ini() -> *mut fi_provider {
    let r = std::panic::catch_unwind(|| {
        PROVIDER
            .get_or_init(|| {
                let p = PROVIDER_STORAGE.0.get();
                // SAFETY: fi_version only returns the loaded core's
                // constant; p points to our static provider struct, which
                // the core has not seen yet.
                unsafe { (*p).fi_version = reported_api_version(bindings::fi_version()) };
                params::define(p);
                ProviderPtr(p)
            })
            .0
    });
    r.unwrap_or(ptr::null_mut())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_the_loading_cores_api_version_within_the_2_series() {
        for core in [fi_version(1, 17), fi_version(1, 22), fi_version(2, 5)] {
            assert_eq!(reported_api_version(core), core);
        }
        assert_eq!(
            reported_api_version(fi_version(3, 0)),
            fi_version(2, 0xffff)
        );
    }
}
