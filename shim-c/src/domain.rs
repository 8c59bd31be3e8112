//! The domain object: opens AVs, CQs, endpoints and memory regions, and holds
//! the configuration they share.

use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use uet::Config;

use crate::addr::{self, Family};
use crate::bindings::*;
use crate::errors::{guard, ret_int, unsupported};
use crate::mr_table::MrTable;
use crate::object::{self, fid_ops, ops_ptr};
use crate::progress::{AutoProgress, Mode};
use crate::{atomic, av, cntr, cq, endpoint, fabric, mr, params, DOMAIN_NAME};

/// State every object opened from one domain shares.
pub(crate) struct DomainInner {
    pub(crate) config: Config,
    /// API version of the fabric (selects the fi_cq_err_entry layout).
    pub(crate) api_version: u32,
    /// Address families endpoints and AVs of this domain accept.
    pub(crate) family: Family,
    pub(crate) mr_mode: c_int,
    next_key: AtomicU64,
    /// Registered memory, shared with every endpoint's engine.
    pub(crate) regions: Arc<MrTable>,
    /// The progress thread of an FI_PROGRESS_AUTO domain.
    pub(crate) auto_progress: Option<AutoProgress>,
    /// Endpoints, AVs, CQs, counters and regions still open.
    pub(crate) children: object::OpenChildren,
    /// The domain's endpoints: a counter bound to a region (FI_RMA_EVENT)
    /// progresses and sleeps on them, as any of them may serve the access.
    pub(crate) eps: parking_lot::Mutex<Vec<std::sync::Weak<endpoint::EpInner>>>,
}

impl DomainInner {
    /// A fresh provider-chosen memory key.
    pub(crate) fn next_mr_key(&self) -> u64 {
        self.next_key.fetch_add(1, Ordering::Relaxed)
    }
}

#[repr(C)]
pub(crate) struct Domain {
    fid: fid_domain,
    pub(crate) inner: Arc<DomainInner>,
    /// Keeps the fabric's close at -FI_EBUSY while this domain is open.
    _open: object::ChildOf,
}

static FI_OPS: fi_ops = fid_ops!(domain_close);
static OPS: fi_ops_domain = fi_ops_domain {
    size: std::mem::size_of::<fi_ops_domain>(),
    av_open: Some(av::open),
    cq_open: Some(cq::open),
    endpoint: Some(endpoint::open),
    scalable_ep: Some(scalable_ep),
    cntr_open: Some(cntr::open),
    poll_open: Some(poll_open),
    stx_ctx: Some(stx_ctx),
    srx_ctx: Some(srx_ctx),
    query_atomic: Some(atomic::query_atomic),
    query_collective: Some(query_collective),
    endpoint2: Some(endpoint::open2),
};

unsupported! {
    scalable_ep(*mut fid_domain, *mut fi_info, *mut *mut fid_ep, *mut c_void) -> c_int = FI_ENOSYS;
    poll_open(*mut fid_domain, *mut fi_poll_attr, *mut *mut fid_poll) -> c_int = FI_ENOSYS;
    stx_ctx(*mut fid_domain, *mut fi_tx_attr, *mut *mut fid_stx, *mut c_void) -> c_int = FI_ENOSYS;
    srx_ctx(*mut fid_domain, *mut fi_rx_attr, *mut *mut fid_ep, *mut c_void) -> c_int = FI_ENOSYS;
    query_collective(*mut fid_domain, fi_collective_op, *mut fi_collective_attr, u64) -> c_int = FI_ENOSYS;
}

/// The domain behind `p`, if it is ours.
pub(crate) fn from_ptr<'a>(p: *mut fid_domain) -> Option<&'a Domain> {
    // SAFETY: a fid_domain starts with its fid; obj checks it is one of ours.
    unsafe { object::obj::<Domain>(p.cast(), &FI_OPS) }
}

pub(crate) unsafe extern "C" fn open(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    domain: *mut *mut fid_domain,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        ret_int((|| {
            let fab = fabric::from_ptr(fabric).ok_or(FI_EINVAL)?;
            // SAFETY: info is NULL or a valid fi_info from fi_getinfo.
            let info = unsafe { info.as_ref() }.ok_or(FI_EINVAL)?;
            if domain.is_null() {
                return Err(FI_EINVAL);
            }
            let mut mr_mode = 0;
            let mut auto = false;
            // SAFETY: domain_attr is NULL or valid; name NULL or a C string.
            if let Some(d) = unsafe { info.domain_attr.as_ref() } {
                if unsafe { addr::c_str(d.name) }.is_some_and(|n| n != DOMAIN_NAME) {
                    return Err(FI_EINVAL);
                }
                mr_mode = d.mr_mode;
                auto =
                    d.data_progress == FI_PROGRESS_AUTO || d.control_progress == FI_PROGRESS_AUTO;
            }
            let family = Family::from_format(info.addr_format).ok_or(FI_EINVAL)?;
            let config = params::config();
            let idle = config.idle_progress_us;
            let inner = DomainInner {
                config,
                api_version: fabric::api_version(fab),
                family,
                mr_mode,
                next_key: AtomicU64::new(1),
                regions: Arc::new(MrTable::new(mr_mode)),
                auto_progress: {
                    if auto {
                        Some(AutoProgress::start(Mode::Always)?)
                    } else if idle > 0 {
                        Some(AutoProgress::start(Mode::WhenIdle(
                            std::time::Duration::from_micros(idle),
                        ))?)
                    } else {
                        None
                    }
                },
                children: object::OpenChildren::default(),
                eps: parking_lot::Mutex::default(),
            };
            let obj = Box::new(Domain {
                fid: fid_domain {
                    fid: fid {
                        fclass: FI_CLASS_DOMAIN as usize,
                        context,
                        ops: ops_ptr(&FI_OPS),
                    },
                    ops: ops_ptr(&OPS),
                    mr: ops_ptr(&mr::DOMAIN_MR_OPS),
                },
                inner: Arc::new(inner),
                _open: fab.children.child(),
            });
            // SAFETY: domain is a valid out-pointer (checked above).
            unsafe { *domain = &mut Box::leak(obj).fid };
            Ok(())
        })())
    })
}

pub(crate) unsafe extern "C" fn open2(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    domain: *mut *mut fid_domain,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    if flags != 0 {
        return -(FI_ENOSYS as c_int);
    }
    // SAFETY: same contract as fi_domain.
    unsafe { open(fabric, info, domain, context) }
}

extern "C" fn domain_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: take_idle verifies the fid is one of our domains; objects
        // opened from it and still open make the close -FI_EBUSY.
        match unsafe { object::take_idle::<Domain>(f, &FI_OPS, |d| d.inner.children.busy()) } {
            Ok(b) => {
                // The thread holds endpoints only weakly; stop it now even if
                // other objects still hold the shared state.
                if let Some(p) = &b.inner.auto_progress {
                    p.stop();
                }
                drop(b);
                0
            }
            Err(rc) => rc,
        }
    })
}
