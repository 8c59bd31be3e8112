//! `fi_getinfo`: match the application's hints against what the provider
//! offers, and describe the result in `fi_info` structs the core can free.
//!
//! The matching is a pure function ([`negotiate`]) over plain Rust values so
//! it can be unit-tested; the FFI part only reads hints and writes the offer.

use std::ffi::CString;
use std::net::SocketAddr;
use std::os::raw::{c_char, c_int};
use std::ptr;

use uet::Config;

use crate::addr::{self, Family};
use crate::bindings::*;
use crate::errors::{guard, ret_int, FiResult};
use crate::{log, params, DOMAIN_NAME, FABRIC_NAME};

/// Capabilities the provider implements.
pub(crate) const CAPS: u64 = FI_MSG as u64
    | FI_TAGGED as u64
    | FI_SEND as u64
    | FI_RECV as u64
    | FI_DIRECTED_RECV
    | FI_SOURCE
    | FI_MULTI_RECV as u64
    | FI_RMA as u64
    | FI_ATOMIC as u64
    | FI_READ as u64
    | FI_WRITE as u64
    | FI_REMOTE_READ as u64
    | FI_REMOTE_WRITE as u64
    | FI_RMA_EVENT
    | FI_LOCAL_COMM
    | FI_REMOTE_COMM;
/// Capabilities granted only when asked for: FI_SOURCE_ERR changes what a
/// receive from an unknown sender reports.
const ON_REQUEST: u64 = FI_SOURCE_ERR;
/// Secondary capabilities reported even when not asked for.
const SECONDARY: u64 = FI_SOURCE | FI_RMA_EVENT | FI_LOCAL_COMM | FI_REMOTE_COMM;
/// Tag bits the provider matches on: all 64; this is libfabric's generic
/// format (bit 63 set), which Open MPI and the util providers expect.
const TAG_GENERIC: u64 = 0xAAAA_AAAA_AAAA_AAAA;
/// Send ordering: messages between one pair of endpoints match in order.
pub(crate) const MSG_ORDER: u64 = FI_ORDER_SAS as u64;
/// Data ordering that reliable ordered delivery (ROD) adds: one path and
/// in-order acceptance place every operation's data in posting order at
/// the target. Offered only when asked for, and an endpoint whose transmit
/// attributes ask for it uses ROD (FI_UET_DELIVERY).
pub(crate) const ROD_ORDER: u64 =
    (FI_ORDER_RAR | FI_ORDER_RAW | FI_ORDER_WAW | FI_ORDER_SAW) as u64;
/// Completion-level op flags the provider honours on transmit.
const TX_OP_FLAGS: u64 = FI_COMPLETION as u64
    | FI_INJECT_COMPLETE as u64
    | FI_TRANSMIT_COMPLETE as u64
    | FI_DELIVERY_COMPLETE as u64;
const RX_OP_FLAGS: u64 = FI_COMPLETION as u64 | FI_MULTI_RECV as u64;
/// Operations a transmit or receive context queues before FI_EAGAIN.
pub(crate) const QUEUE_SIZE: usize = uet::Config::QUEUE_DEPTH;
/// Most iovec entries per operation.
pub(crate) const IOV_LIMIT: usize = 8;
/// Target iovecs per RMA or atomic: exactly one (`rma_atomic.rs`).
pub(crate) const RMA_IOV_LIMIT: usize = 1;
pub(crate) const CQ_DATA_SIZE: usize = 8;

/// The application's hints, flattened (absent attribute structs read as 0).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Hints {
    pub caps: u64,
    pub mode: u64,
    pub addr_format: u32,
    pub src: Option<SocketAddr>,
    pub dest: Option<SocketAddr>,
    /// A src/dest address was given but is not a sockaddr the provider reads.
    pub bad_addr: bool,
    pub ep_type: fi_ep_type,
    pub protocol: u32,
    pub max_msg_size: usize,
    pub mem_tag_format: u64,
    pub fabric_name: Option<String>,
    pub domain_name: Option<String>,
    pub threading: fi_threading,
    pub control_progress: fi_progress,
    pub data_progress: fi_progress,
    pub resource_mgmt: fi_resource_mgmt,
    pub av_type: fi_av_type,
    pub mr_mode: c_int,
    pub cq_data_size: usize,
    pub tx: Dir,
    pub rx: Dir,
}

/// Transmit or receive attributes (hinted or offered).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Dir {
    pub caps: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub inject_size: usize,
    pub size: usize,
    pub iov_limit: usize,
    /// Transmit only (0 on the receive side).
    pub rma_iov_limit: usize,
}

/// What getinfo reports.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Offer {
    pub caps: u64,
    pub addr_format: u32,
    pub src: Option<SocketAddr>,
    pub dest: Option<SocketAddr>,
    pub api_version: u32,
    pub threading: fi_threading,
    pub progress: fi_progress,
    pub resource_mgmt: fi_resource_mgmt,
    pub av_type: fi_av_type,
    pub mr_mode: c_int,
    pub mem_tag_format: u64,
    pub max_msg_size: usize,
    pub tx: Dir,
    pub rx: Dir,
}

/// Where getinfo's node/service arguments point.
#[derive(Clone, Debug, Default)]
pub(crate) struct Target<'a> {
    pub node: Option<&'a str>,
    pub service: Option<&'a str>,
    pub source: bool,
}

fn fail(why: &str) -> u32 {
    log::info(FI_LOG_CORE, &format!("getinfo: {why}"));
    FI_ENODATA
}

/// Match hints and addressing arguments against the provider's abilities.
pub(crate) fn negotiate(
    version: u32,
    target: &Target,
    h: &Hints,
    config: &Config,
) -> FiResult<Offer> {
    if h.ep_type != FI_EP_UNSPEC && h.ep_type != FI_EP_RDM {
        return Err(FI_ENODATA); // ofi_rxm/ofi_rxd ask for MSG/DGRAM: not us
    }
    let wanted = h.caps | h.tx.caps | h.rx.caps;
    if wanted & !(CAPS | ON_REQUEST) != 0 {
        return Err(fail(&format!(
            "capabilities {:#x} not supported",
            wanted & !(CAPS | ON_REQUEST)
        )));
    }
    let family = Family::from_format(h.addr_format).ok_or_else(|| fail("address format"))?;
    if h.bad_addr {
        return Err(fail("hinted address is not a sockaddr_in/in6"));
    }
    if h.protocol != FI_PROTO_UNSPEC {
        return Err(fail("protocol"));
    }
    if h.fabric_name.as_deref().is_some_and(|n| n != FABRIC_NAME) {
        return Err(FI_ENODATA);
    }
    if h.domain_name.as_deref().is_some_and(|n| n != DOMAIN_NAME) {
        return Err(FI_ENODATA);
    }
    if h.max_msg_size > Config::MAX_MSG_SIZE {
        return Err(fail("max_msg_size"));
    }
    if h.cq_data_size > CQ_DATA_SIZE {
        return Err(fail("cq_data_size"));
    }
    let threading = match h.threading {
        FI_THREAD_UNSPEC => FI_THREAD_SAFE,
        t if t <= FI_THREAD_ENDPOINT => t, // every object is locked
        _ => return Err(fail("threading")),
    };
    // Manual by default; a domain asked for FI_PROGRESS_AUTO runs a
    // progress thread (both models then apply to control and data alike).
    let mut progress = FI_PROGRESS_MANUAL;
    for p in [h.control_progress, h.data_progress] {
        match p {
            FI_PROGRESS_UNSPEC | FI_PROGRESS_MANUAL => {}
            FI_PROGRESS_AUTO => progress = FI_PROGRESS_AUTO,
            _ => return Err(fail("progress model")),
        }
    }
    let resource_mgmt = match h.resource_mgmt {
        FI_RM_UNSPEC => FI_RM_ENABLED,
        r if r == FI_RM_ENABLED || r == FI_RM_DISABLED => r,
        _ => return Err(fail("resource_mgmt")),
    };
    let av_type = match h.av_type {
        t if t == FI_AV_UNSPEC || t == FI_AV_MAP || t == FI_AV_TABLE => t,
        _ => return Err(fail("av_type")),
    };
    // No memory registration is needed for messaging: require nothing. Old
    // (pre-1.5) applications speak the BASIC/SCALABLE enum instead of bits.
    let mr_mode = if version < crate::fi_version(1, 5) {
        if h.mr_mode == FI_MR_BASIC as c_int {
            FI_MR_BASIC as c_int
        } else {
            FI_MR_SCALABLE as c_int
        }
    } else {
        // RMA targets are addressed by virtual address when the
        // application supports it, else by offset into the region.
        // FI_MR_ENDPOINT is enforced when the application asks for it.
        h.mr_mode & (FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_ENDPOINT) as c_int
    };
    for d in [&h.tx, &h.rx] {
        if d.msg_order & !(MSG_ORDER | ROD_ORDER) != 0 {
            return Err(fail(
                "message ordering beyond send-after-send, RAR, RAW, WAW and SAW",
            ));
        }
        if d.comp_order != FI_ORDER_NONE as u64 {
            return Err(fail("completion ordering"));
        }
        if d.size > QUEUE_SIZE || d.iov_limit > IOV_LIMIT {
            return Err(fail("queue size or iov_limit"));
        }
    }
    if h.tx.rma_iov_limit > RMA_IOV_LIMIT {
        return Err(fail("rma_iov_limit"));
    }
    if h.tx.inject_size > config.inject_size {
        return Err(fail("inject_size"));
    }

    let (src, dest) = addresses(target, h, family, config)?;
    let addr_format = src.or(dest).map_or(FI_SOCKADDR_IN, |a| addr::format_of(&a));

    let mut caps = if h.caps == 0 {
        CAPS
    } else {
        h.caps | SECONDARY
    };
    // FI_RMA alone means every direction of it (fi_getinfo(3)).
    let rma_dirs = (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE) as u64;
    if caps & (FI_RMA | FI_ATOMIC) as u64 != 0 && caps & rma_dirs == 0 {
        caps |= rma_dirs;
    }
    let dir_caps = |d: &Dir, own: u64| {
        let base = if d.caps != 0 { d.caps } else { caps };
        base & own
    };
    let tx_own = CAPS
        & !(FI_RECV as u64
            | FI_DIRECTED_RECV
            | FI_MULTI_RECV as u64
            | FI_REMOTE_READ as u64
            | FI_REMOTE_WRITE as u64
            | FI_RMA_EVENT);
    let rx_own = (CAPS | ON_REQUEST) & !(FI_SEND as u64 | FI_READ as u64 | FI_WRITE as u64);
    // Data ordering, when asked for, comes with ordered delivery.
    let asked = (h.tx.msg_order | h.rx.msg_order) & ROD_ORDER != 0;
    let ordered = MSG_ORDER
        | if asked || config.ordered {
            ROD_ORDER
        } else {
            0
        };
    let tx = Dir {
        caps: dir_caps(&h.tx, tx_own),
        op_flags: h.tx.op_flags & TX_OP_FLAGS,
        msg_order: ordered,
        comp_order: FI_ORDER_NONE as u64,
        inject_size: config.inject_size,
        size: QUEUE_SIZE,
        iov_limit: IOV_LIMIT,
        rma_iov_limit: RMA_IOV_LIMIT,
    };
    let rx = Dir {
        caps: dir_caps(&h.rx, rx_own),
        op_flags: h.rx.op_flags & RX_OP_FLAGS,
        msg_order: ordered,
        comp_order: FI_ORDER_NONE as u64,
        inject_size: 0,
        size: QUEUE_SIZE,
        iov_limit: IOV_LIMIT,
        rma_iov_limit: 0,
    };
    Ok(Offer {
        caps,
        addr_format,
        src,
        dest,
        api_version: version,
        threading,
        progress,
        resource_mgmt,
        av_type,
        mr_mode,
        mem_tag_format: if h.mem_tag_format != 0 {
            h.mem_tag_format
        } else {
            TAG_GENERIC
        },
        max_msg_size: Config::MAX_MSG_SIZE,
        tx,
        rx,
    })
}

/// Source and destination from node/service/FI_SOURCE and the hints.
fn addresses(
    t: &Target,
    h: &Hints,
    family: Family,
    config: &Config,
) -> FiResult<(Option<SocketAddr>, Option<SocketAddr>)> {
    let named = t.node.is_some() || t.service.is_some();
    let (mut src, mut dest) = (h.src, h.dest);
    if named && t.source {
        let mut a = addr::resolve(t.node, t.service, family)?;
        if t.node.is_none() {
            a = addr::default_source(if a.is_ipv6() { Family::V6 } else { family }, a.port());
        }
        src = Some(a);
    } else if named {
        let mut d = addr::resolve(t.node, t.service, family)?;
        if t.service.is_none() {
            // A peer named without a port listens on the UET port.
            d.set_port(uet::wire::UET_UDP_PORT);
        }
        dest = Some(d);
    }
    for a in [src, dest].into_iter().flatten() {
        if !family.admits(&a) {
            return Err(fail("address family does not match addr_format"));
        }
    }
    if let (Some(s), Some(d)) = (src, dest) {
        if s.is_ipv4() != d.is_ipv4() {
            return Err(fail("source and destination families differ"));
        }
    }
    let src = match (src, dest) {
        (Some(s), _) => s,
        (None, Some(d)) => addr::source_for(&d, config.port),
        (None, None) => addr::default_source(family, config.port),
    };
    Ok((Some(src), dest))
}

// ---- FFI: reading hints, writing fi_info ----

/// # Safety
/// `hints` must be NULL or a valid `fi_info` whose non-NULL pointers are valid.
unsafe fn read_hints(hints: *const fi_info) -> Hints {
    let mut h = Hints::default();
    // SAFETY: the caller guarantees validity; every pointer is checked for NULL.
    unsafe {
        let Some(i) = hints.as_ref() else {
            return h;
        };
        h.caps = i.caps;
        h.mode = i.mode;
        h.addr_format = i.addr_format;
        if !i.src_addr.is_null() {
            h.src = addr::from_raw(i.src_addr, i.src_addrlen);
            h.bad_addr |= h.src.is_none();
        }
        if !i.dest_addr.is_null() {
            h.dest = addr::from_raw(i.dest_addr, i.dest_addrlen);
            h.bad_addr |= h.dest.is_none();
        }
        if let Some(ep) = i.ep_attr.as_ref() {
            h.ep_type = ep.type_;
            h.protocol = ep.protocol;
            h.max_msg_size = ep.max_msg_size;
            h.mem_tag_format = ep.mem_tag_format;
        }
        if let Some(f) = i.fabric_attr.as_ref() {
            h.fabric_name = addr::c_str(f.name);
        }
        if let Some(d) = i.domain_attr.as_ref() {
            h.domain_name = addr::c_str(d.name);
            h.threading = d.threading;
            h.control_progress = d.control_progress;
            h.data_progress = d.data_progress;
            h.resource_mgmt = d.resource_mgmt;
            h.av_type = d.av_type;
            h.mr_mode = d.mr_mode;
            h.cq_data_size = d.cq_data_size;
        }
        if let Some(t) = i.tx_attr.as_ref() {
            h.tx = Dir {
                caps: t.caps,
                op_flags: t.op_flags,
                msg_order: t.msg_order,
                comp_order: t.comp_order,
                inject_size: t.inject_size,
                size: t.size,
                iov_limit: t.iov_limit,
                rma_iov_limit: t.rma_iov_limit,
            };
        }
        if let Some(r) = i.rx_attr.as_ref() {
            h.rx = Dir {
                caps: r.caps,
                op_flags: r.op_flags,
                msg_order: r.msg_order,
                comp_order: r.comp_order,
                inject_size: 0,
                size: r.size,
                iov_limit: r.iov_limit,
                rma_iov_limit: 0,
            };
        }
    }
    h
}

/// `strdup` of a Rust string (libfabric frees it with `free`).
pub(crate) fn strdup(s: &str) -> *mut c_char {
    match CString::new(s) {
        // SAFETY: c is a valid NUL-terminated string.
        Ok(c) => unsafe { libc::strdup(c.as_ptr()) },
        Err(_) => ptr::null_mut(),
    }
}

/// `malloc`ed copy of an address (libfabric frees it with `free`).
fn dup_addr(a: &SocketAddr) -> (*mut std::os::raw::c_void, usize) {
    let b = addr::to_bytes(a);
    // SAFETY: malloc of a non-zero size; checked for NULL before use.
    let p = unsafe { libc::malloc(b.len()) };
    if p.is_null() {
        return (ptr::null_mut(), 0);
    }
    // SAFETY: p holds b.len() bytes and does not overlap b.
    unsafe { ptr::copy_nonoverlapping(b.as_ptr(), p.cast::<u8>(), b.len()) };
    (p, b.len())
}

/// Build one `fi_info` describing `o`; NULL when out of memory.
fn build_info(o: &Offer) -> *mut fi_info {
    // SAFETY: fi_dupinfo(NULL) allocates an fi_info with every attribute
    // struct, sized by the running libfabric; we only write fields our headers
    // declare, which every later libfabric also has at the same offsets.
    unsafe {
        let info = fi_dupinfo(ptr::null());
        if info.is_null() {
            return ptr::null_mut();
        }
        let i = &mut *info;
        let (Some(tx), Some(rx), Some(ep), Some(dom), Some(fab)) = (
            i.tx_attr.as_mut(),
            i.rx_attr.as_mut(),
            i.ep_attr.as_mut(),
            i.domain_attr.as_mut(),
            i.fabric_attr.as_mut(),
        ) else {
            fi_freeinfo(info);
            return ptr::null_mut();
        };
        i.caps = o.caps;
        i.mode = 0;
        i.addr_format = o.addr_format;
        if let Some(s) = &o.src {
            (i.src_addr, i.src_addrlen) = dup_addr(s);
        }
        if let Some(d) = &o.dest {
            (i.dest_addr, i.dest_addrlen) = dup_addr(d);
        }

        tx.caps = o.tx.caps;
        tx.mode = 0;
        tx.op_flags = o.tx.op_flags;
        tx.msg_order = o.tx.msg_order;
        tx.comp_order = o.tx.comp_order;
        tx.inject_size = o.tx.inject_size;
        tx.size = o.tx.size;
        tx.iov_limit = o.tx.iov_limit;
        tx.rma_iov_limit = o.tx.rma_iov_limit;

        rx.caps = o.rx.caps;
        rx.mode = 0;
        rx.op_flags = o.rx.op_flags;
        rx.msg_order = o.rx.msg_order;
        rx.comp_order = o.rx.comp_order;
        rx.total_buffered_recv = 0;
        rx.size = o.rx.size;
        rx.iov_limit = o.rx.iov_limit;

        ep.type_ = FI_EP_RDM;
        ep.protocol = FI_PROTO_UNSPEC;
        ep.protocol_version = 1;
        ep.max_msg_size = o.max_msg_size;
        ep.msg_prefix_size = 0;
        ep.max_order_raw_size = 0;
        ep.max_order_war_size = 0;
        ep.max_order_waw_size = 0;
        ep.mem_tag_format = o.mem_tag_format;
        ep.tx_ctx_cnt = 1;
        ep.rx_ctx_cnt = 1;

        dom.name = strdup(DOMAIN_NAME);
        dom.threading = o.threading;
        dom.control_progress = o.progress;
        dom.data_progress = o.progress;
        dom.resource_mgmt = o.resource_mgmt;
        dom.av_type = o.av_type;
        dom.mr_mode = o.mr_mode;
        dom.mr_key_size = 8;
        dom.cq_data_size = CQ_DATA_SIZE;
        dom.cq_cnt = 1024;
        dom.ep_cnt = 1024;
        dom.tx_ctx_cnt = 1024;
        dom.rx_ctx_cnt = 1024;
        dom.max_ep_tx_ctx = 1;
        dom.max_ep_rx_ctx = 1;
        dom.max_ep_stx_ctx = 0;
        dom.max_ep_srx_ctx = 0;
        dom.cntr_cnt = 1024;
        dom.mr_iov_limit = IOV_LIMIT;
        dom.caps = o.caps & (FI_LOCAL_COMM | FI_REMOTE_COMM);
        dom.mode = 0;
        dom.max_err_data = 0;
        dom.mr_cnt = 1 << 16;

        fab.name = strdup(FABRIC_NAME);
        fab.prov_name = ptr::null_mut(); // the core fills it in
        fab.prov_version = crate::PROV_VERSION;
        fab.api_version = o.api_version;

        if dom.name.is_null() || fab.name.is_null() {
            fi_freeinfo(info);
            return ptr::null_mut();
        }
        info
    }
}

pub(crate) unsafe extern "C" fn uet_getinfo(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const fi_info,
    info: *mut *mut fi_info,
) -> c_int {
    guard(|| {
        ret_int((|| {
            if info.is_null() {
                return Err(FI_EINVAL);
            }
            // SAFETY: the core passes valid (or NULL) strings and hints.
            let (node, service, h) =
                unsafe { (addr::c_str(node), addr::c_str(service), read_hints(hints)) };
            let target = Target {
                node: node.as_deref(),
                service: service.as_deref(),
                source: flags & FI_SOURCE != 0,
            };
            let offer = negotiate(version, &target, &h, &params::config())?;
            let out = build_info(&offer);
            if out.is_null() {
                return Err(FI_ENOMEM);
            }
            // SAFETY: info is a valid out-pointer (checked above).
            unsafe { *info = out };
            Ok(())
        })())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: u32 = crate::fi_version(1, 17);

    fn offer(t: &Target, h: &Hints) -> FiResult<Offer> {
        negotiate(V, t, h, &Config::default())
    }

    #[test]
    fn no_hints_gives_rdm_on_loopback() {
        let o = offer(&Target::default(), &Hints::default()).unwrap();
        assert_eq!(o.caps, CAPS);
        assert_eq!(o.src, Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(o.dest, None);
        assert_eq!(o.threading, FI_THREAD_SAFE);
        assert_eq!(o.progress, FI_PROGRESS_MANUAL);
        assert_eq!(o.mem_tag_format >> 63, 1);
        assert_eq!(o.tx.inject_size, Config::default().inject_size);
        assert_eq!(o.mr_mode, 0);
    }

    #[test]
    fn other_endpoint_types_and_caps_are_refused() {
        for t in [FI_EP_MSG, FI_EP_DGRAM] {
            let h = Hints {
                ep_type: t,
                ..Hints::default()
            };
            assert_eq!(offer(&Target::default(), &h), Err(FI_ENODATA));
        }
        for caps in [FI_HMEM, FI_TRIGGER as u64] {
            let h = Hints {
                caps: caps | FI_MSG as u64,
                ..Hints::default()
            };
            assert_eq!(offer(&Target::default(), &h), Err(FI_ENODATA));
        }
        let h = Hints {
            data_progress: FI_PROGRESS_AUTO,
            ..Hints::default()
        };
        assert_eq!(
            offer(&Target::default(), &h).map(|o| o.progress),
            Ok(FI_PROGRESS_AUTO)
        );
        let h = Hints {
            fabric_name: Some("tcp".into()),
            ..Hints::default()
        };
        assert_eq!(offer(&Target::default(), &h), Err(FI_ENODATA));
        let h = Hints {
            addr_format: FI_ADDR_STR,
            ..Hints::default()
        };
        assert_eq!(offer(&Target::default(), &h), Err(FI_ENODATA));
    }

    #[test]
    fn open_mpi_hints_are_accepted() {
        let h = Hints {
            caps: FI_TAGGED as u64 | FI_DIRECTED_RECV | FI_LOCAL_COMM | FI_REMOTE_COMM,
            mode: FI_CONTEXT | FI_CONTEXT2,
            ep_type: FI_EP_RDM,
            av_type: FI_AV_MAP,
            threading: FI_THREAD_DOMAIN,
            control_progress: FI_PROGRESS_MANUAL,
            data_progress: FI_PROGRESS_MANUAL,
            ..Hints::default()
        };
        let o = offer(&Target::default(), &h).unwrap();
        assert_eq!(o.caps & FI_TAGGED as u64, FI_TAGGED as u64);
        assert_eq!(o.caps & FI_MSG as u64, 0);
        assert_eq!(o.av_type, FI_AV_MAP);
        assert_eq!(o.threading, FI_THREAD_DOMAIN);
        assert_eq!(o.tx.caps & FI_DIRECTED_RECV, 0);
        assert_ne!(o.rx.caps & FI_DIRECTED_RECV, 0);
    }

    #[test]
    fn node_and_service() {
        let t = Target {
            node: Some("127.0.0.1"),
            service: Some("4793"),
            source: false,
        };
        let o = offer(&t, &Hints::default()).unwrap();
        assert_eq!(o.dest, Some("127.0.0.1:4793".parse().unwrap()));
        assert_eq!(o.src, Some("127.0.0.1:0".parse().unwrap()));
        let t = Target { source: true, ..t };
        let o = offer(&t, &Hints::default()).unwrap();
        assert_eq!(o.src, Some("127.0.0.1:4793".parse().unwrap()));
        assert_eq!(o.dest, None);
        let t = Target {
            node: Some("no-such-host.invalid"),
            service: None,
            source: false,
        };
        assert_eq!(offer(&t, &Hints::default()), Err(FI_ENODATA));
        // A peer named without a port is on the UET port.
        let t = Target {
            node: Some("127.0.0.2"),
            service: None,
            source: false,
        };
        let o = offer(&t, &Hints::default()).unwrap();
        assert_eq!(o.dest, Some("127.0.0.2:4793".parse().unwrap()));
        let t = Target {
            node: Some("::1"),
            service: Some("9"),
            source: false,
        };
        let o = offer(&t, &Hints::default()).unwrap();
        assert_eq!(o.addr_format, FI_SOCKADDR_IN6);
        let h = Hints {
            addr_format: FI_SOCKADDR_IN,
            ..Hints::default()
        };
        assert_eq!(offer(&t, &h), Err(FI_ENODATA));
    }

    #[test]
    fn hinted_addresses_are_used() {
        let h = Hints {
            dest: Some("127.0.0.1:99".parse().unwrap()),
            ..Hints::default()
        };
        let o = offer(&Target::default(), &h).unwrap();
        assert_eq!(o.dest, h.dest);
        let h = Hints {
            src: Some("127.0.0.1:98".parse().unwrap()),
            ..Hints::default()
        };
        let o = offer(&Target::default(), &h).unwrap();
        assert_eq!(o.src, h.src);
        let h = Hints {
            bad_addr: true,
            ..Hints::default()
        };
        assert_eq!(offer(&Target::default(), &h), Err(FI_ENODATA));
    }

    #[test]
    fn limits_are_checked() {
        let h = Hints {
            tx: Dir {
                inject_size: 1 << 20,
                ..Dir::default()
            },
            ..Hints::default()
        };
        assert_eq!(offer(&Target::default(), &h), Err(FI_ENODATA));
        // One target iovec per RMA: reported, and more refused.
        let o = offer(&Target::default(), &Hints::default()).unwrap();
        assert_eq!(o.tx.rma_iov_limit, 1);
        let h = Hints {
            tx: Dir {
                rma_iov_limit: 2,
                ..Dir::default()
            },
            ..Hints::default()
        };
        assert_eq!(offer(&Target::default(), &h), Err(FI_ENODATA));
        let h = Hints {
            tx: Dir {
                msg_order: FI_ORDER_SAS as u64,
                ..Dir::default()
            },
            ..Hints::default()
        };
        assert!(offer(&Target::default(), &h).is_ok());
        // Data ordering comes with ordered delivery, and only when asked.
        let h = Hints {
            tx: Dir {
                msg_order: (FI_ORDER_SAS | FI_ORDER_RAW | FI_ORDER_WAW) as u64,
                ..Dir::default()
            },
            ..Hints::default()
        };
        let o = offer(&Target::default(), &h).unwrap();
        assert_eq!(o.tx.msg_order & ROD_ORDER, ROD_ORDER);
        let o = offer(&Target::default(), &Hints::default()).unwrap();
        assert_eq!(o.tx.msg_order, MSG_ORDER);
        let h = Hints {
            tx: Dir {
                msg_order: FI_ORDER_WAR as u64,
                ..Dir::default()
            },
            ..Hints::default()
        };
        assert_eq!(offer(&Target::default(), &h), Err(FI_ENODATA));
        let h = Hints {
            rx: Dir {
                comp_order: FI_ORDER_STRICT as u64,
                ..Dir::default()
            },
            ..Hints::default()
        };
        assert_eq!(offer(&Target::default(), &h), Err(FI_ENODATA));
        let h = Hints {
            mr_mode: (FI_MR_LOCAL | FI_MR_PROV_KEY) as c_int,
            ..Hints::default()
        };
        assert_eq!(
            offer(&Target::default(), &h).unwrap().mr_mode,
            FI_MR_PROV_KEY as c_int
        );
    }
}
