//! Atomic operations (`fi_ops_atomic`) and fi_query_atomic. Each atomic
//! travels in one packet and is applied at the target in one go
//! (`uet::ses::atomic`); at most [`MAX_ATOMIC_BYTES`] of operand per call.

use std::os::raw::{c_int, c_void};
use std::ptr;

use uet::ses::atomic::{AtomicOp, Datatype};

use crate::bindings::*;
use crate::buffers::IovBuffer;
use crate::endpoint::Atomic;
use crate::errors::{guard, ret_int, FiResult};
use crate::msg::run;

type Ep = *mut fid_ep;
type Buf = *const c_void;
type Desc = *mut c_void;
type Descs = *mut *mut c_void;
type Ctx = *mut c_void;

/// Operand bytes per atomic: with a compare operand it still fits the
/// smallest packet payload the provider uses by default.
pub(crate) const MAX_ATOMIC_BYTES: usize = 512;

/// Which call an operation came through.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Write,
    Fetch,
    Compare,
}

/// The operation and datatype, when `class` allows the combination.
fn check(dt: fi_datatype, op: fi_op, class: Class) -> FiResult<(AtomicOp, Datatype)> {
    let d = Datatype::from_code(dt).ok_or(FI_EOPNOTSUPP)?;
    let o = AtomicOp::from_code(op).ok_or(FI_EOPNOTSUPP)?;
    let ok = o.supports(d)
        && match class {
            Class::Write => !o.is_compare() && o != AtomicOp::Read,
            Class::Fetch => !o.is_compare(),
            Class::Compare => o.is_compare(),
        };
    if ok {
        Ok((o, d))
    } else {
        Err(FI_EOPNOTSUPP)
    }
}

/// Elements one call may carry.
fn max_count(d: Datatype) -> usize {
    MAX_ATOMIC_BYTES / d.size()
}

fn valid(dt: fi_datatype, op: fi_op, count: *mut usize, class: Class) -> c_int {
    guard(|| {
        ret_int((|| {
            let (_, d) = check(dt, op, class)?;
            // SAFETY: count is NULL or a writable size_t.
            if let Some(c) = unsafe { count.as_mut() } {
                *c = max_count(d);
            }
            Ok(())
        })())
    })
}

extern "C" fn at_writevalid(_ep: Ep, dt: fi_datatype, op: fi_op, count: *mut usize) -> c_int {
    valid(dt, op, count, Class::Write)
}
extern "C" fn at_readwritevalid(_ep: Ep, dt: fi_datatype, op: fi_op, count: *mut usize) -> c_int {
    valid(dt, op, count, Class::Fetch)
}
extern "C" fn at_compwritevalid(_ep: Ep, dt: fi_datatype, op: fi_op, count: *mut usize) -> c_int {
    valid(dt, op, count, Class::Compare)
}

/// fi_query_atomic.
pub(crate) unsafe extern "C" fn query_atomic(
    _domain: *mut fid_domain,
    dt: fi_datatype,
    op: fi_op,
    attr: *mut fi_atomic_attr,
    flags: u64,
) -> c_int {
    guard(|| {
        ret_int((|| {
            let class = if flags & FI_COMPARE_ATOMIC != 0 {
                Class::Compare
            } else if flags & FI_FETCH_ATOMIC != 0 {
                Class::Fetch
            } else {
                Class::Write
            };
            let (_, d) = check(dt, op, class)?;
            // SAFETY: attr is NULL or a writable fi_atomic_attr.
            let a = unsafe { attr.as_mut() }.ok_or(FI_EINVAL)?;
            a.size = d.size();
            a.count = max_count(d);
            Ok(())
        })())
    })
}

/// `count` elements at `p` (NULL allowed for ATOMIC_READ's operand).
fn bytes(p: *const c_void, count: usize, d: Datatype) -> FiResult<Vec<u8>> {
    let n = count.checked_mul(d.size()).ok_or(FI_EINVAL)?;
    if n > MAX_ATOMIC_BYTES || count == 0 {
        return Err(FI_EINVAL);
    }
    if p.is_null() {
        return Ok(vec![0; n]);
    }
    // SAFETY: the application passes `count` elements of the datatype.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) }.to_vec())
}

/// The single ioc of a vector call.
fn one_ioc(ioc: *const fi_ioc, count: usize) -> FiResult<fi_ioc> {
    if count != 1 || ioc.is_null() {
        return Err(FI_EINVAL);
    }
    // SAFETY: ioc holds count (1) entries.
    Ok(unsafe { *ioc })
}

/// The target of a message call.
fn msg_target(msg: *const fi_msg_atomic) -> FiResult<(fi_msg_atomic, fi_ioc, fi_rma_ioc)> {
    // SAFETY: msg is NULL or a valid fi_msg_atomic.
    let m = unsafe { msg.as_ref() }.ok_or(FI_EINVAL)?;
    let ioc = one_ioc(m.msg_iov, m.iov_count)?;
    if m.rma_iov_count != 1 || m.rma_iov.is_null() {
        return Err(FI_EINVAL);
    }
    // SAFETY: rma_iov holds one entry.
    let r = unsafe { *m.rma_iov };
    if r.count != ioc.count {
        return Err(FI_EINVAL);
    }
    Ok((*m, ioc, r))
}

#[allow(clippy::too_many_arguments)]
fn post(
    ep: Ep,
    class: Class,
    operand: (*const c_void, usize),
    compare: *const c_void,
    result: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi_datatype,
    op: fi_op,
    context: Ctx,
    flags: Option<u64>,
    inject: bool,
) -> isize {
    run(ep, |e| {
        let (o, d) = check(dt, op, class)?;
        let count = operand.1;
        let operand = bytes(operand.0, count, d)?;
        let compare = if class == Class::Compare {
            if compare.is_null() {
                return Err(FI_EINVAL);
            }
            bytes(compare, count, d)?
        } else {
            Vec::new()
        };
        let result = if class == Class::Write {
            None
        } else {
            Some(IovBuffer::single(result, operand.len())?)
        };
        e.atomic(Atomic {
            op: o as u8,
            datatype: d as u8,
            operand,
            compare,
            result,
            dest,
            addr,
            key,
            context,
            flags,
            inject,
        })
    })
}

#[allow(clippy::too_many_arguments)]
extern "C" fn at_write(
    ep: Ep,
    buf: Buf,
    count: usize,
    _d: Desc,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi_datatype,
    op: fi_op,
    ctx: Ctx,
) -> isize {
    post(
        ep,
        Class::Write,
        (buf, count),
        ptr::null(),
        ptr::null_mut(),
        dest,
        addr,
        key,
        dt,
        op,
        ctx,
        None,
        false,
    )
}

#[allow(clippy::too_many_arguments)]
extern "C" fn at_writev(
    ep: Ep,
    iov: *const fi_ioc,
    _d: Descs,
    count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi_datatype,
    op: fi_op,
    ctx: Ctx,
) -> isize {
    match one_ioc(iov, count) {
        Ok(i) => at_write(
            ep,
            i.addr,
            i.count,
            ptr::null_mut(),
            dest,
            addr,
            key,
            dt,
            op,
            ctx,
        ),
        Err(e) => -(e as isize),
    }
}

extern "C" fn at_writemsg(ep: Ep, msg: *const fi_msg_atomic, flags: u64) -> isize {
    match msg_target(msg) {
        Ok((m, i, r)) => post(
            ep,
            Class::Write,
            (i.addr, i.count),
            ptr::null(),
            ptr::null_mut(),
            m.addr,
            r.addr,
            r.key,
            m.datatype,
            m.op,
            m.context,
            // FI_INJECT (in `flags`): the operand is copied anyway; the
            // atomic still completes, unlike fi_inject_atomic.
            Some(flags),
            false,
        ),
        Err(e) => -(e as isize),
    }
}

#[allow(clippy::too_many_arguments)]
extern "C" fn at_inject(
    ep: Ep,
    buf: Buf,
    count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi_datatype,
    op: fi_op,
) -> isize {
    post(
        ep,
        Class::Write,
        (buf, count),
        ptr::null(),
        ptr::null_mut(),
        dest,
        addr,
        key,
        dt,
        op,
        ptr::null_mut(),
        None,
        true,
    )
}

#[allow(clippy::too_many_arguments)]
extern "C" fn at_readwrite(
    ep: Ep,
    buf: Buf,
    count: usize,
    _d: Desc,
    result: *mut c_void,
    _rd: Desc,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi_datatype,
    op: fi_op,
    ctx: Ctx,
) -> isize {
    post(
        ep,
        Class::Fetch,
        (buf, count),
        ptr::null(),
        result,
        dest,
        addr,
        key,
        dt,
        op,
        ctx,
        None,
        false,
    )
}

#[allow(clippy::too_many_arguments)]
extern "C" fn at_readwritev(
    ep: Ep,
    iov: *const fi_ioc,
    _d: Descs,
    count: usize,
    res: *mut fi_ioc,
    _rd: Descs,
    res_count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi_datatype,
    op: fi_op,
    ctx: Ctx,
) -> isize {
    match (one_ioc(iov, count), one_ioc(res, res_count)) {
        (Ok(i), Ok(r)) if i.count == r.count => post(
            ep,
            Class::Fetch,
            (i.addr, i.count),
            ptr::null(),
            r.addr,
            dest,
            addr,
            key,
            dt,
            op,
            ctx,
            None,
            false,
        ),
        _ => -(FI_EINVAL as isize),
    }
}

extern "C" fn at_readwritemsg(
    ep: Ep,
    msg: *const fi_msg_atomic,
    res: *mut fi_ioc,
    _rd: Descs,
    res_count: usize,
    flags: u64,
) -> isize {
    match (msg_target(msg), one_ioc(res, res_count)) {
        (Ok((m, i, r)), Ok(o)) if o.count == i.count => post(
            ep,
            Class::Fetch,
            (i.addr, i.count),
            ptr::null(),
            o.addr,
            m.addr,
            r.addr,
            r.key,
            m.datatype,
            m.op,
            m.context,
            Some(flags),
            false,
        ),
        _ => -(FI_EINVAL as isize),
    }
}

#[allow(clippy::too_many_arguments)]
extern "C" fn at_compwrite(
    ep: Ep,
    buf: Buf,
    count: usize,
    _d: Desc,
    compare: Buf,
    _cd: Desc,
    result: *mut c_void,
    _rd: Desc,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi_datatype,
    op: fi_op,
    ctx: Ctx,
) -> isize {
    post(
        ep,
        Class::Compare,
        (buf, count),
        compare,
        result,
        dest,
        addr,
        key,
        dt,
        op,
        ctx,
        None,
        false,
    )
}

#[allow(clippy::too_many_arguments)]
extern "C" fn at_compwritev(
    ep: Ep,
    iov: *const fi_ioc,
    _d: Descs,
    count: usize,
    comp: *const fi_ioc,
    _cd: Descs,
    comp_count: usize,
    res: *mut fi_ioc,
    _rd: Descs,
    res_count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi_datatype,
    op: fi_op,
    ctx: Ctx,
) -> isize {
    match (
        one_ioc(iov, count),
        one_ioc(comp, comp_count),
        one_ioc(res, res_count),
    ) {
        (Ok(i), Ok(c), Ok(r)) if i.count == c.count && i.count == r.count => post(
            ep,
            Class::Compare,
            (i.addr, i.count),
            c.addr,
            r.addr,
            dest,
            addr,
            key,
            dt,
            op,
            ctx,
            None,
            false,
        ),
        _ => -(FI_EINVAL as isize),
    }
}

#[allow(clippy::too_many_arguments)]
extern "C" fn at_compwritemsg(
    ep: Ep,
    msg: *const fi_msg_atomic,
    comp: *const fi_ioc,
    _cd: Descs,
    comp_count: usize,
    res: *mut fi_ioc,
    _rd: Descs,
    res_count: usize,
    flags: u64,
) -> isize {
    match (
        msg_target(msg),
        one_ioc(comp, comp_count),
        one_ioc(res, res_count),
    ) {
        (Ok((m, i, r)), Ok(c), Ok(o)) if c.count == i.count && o.count == i.count => post(
            ep,
            Class::Compare,
            (i.addr, i.count),
            c.addr,
            o.addr,
            m.addr,
            r.addr,
            r.key,
            m.datatype,
            m.op,
            m.context,
            Some(flags),
            false,
        ),
        _ => -(FI_EINVAL as isize),
    }
}

pub(crate) static ATOMIC_OPS: fi_ops_atomic = fi_ops_atomic {
    size: std::mem::size_of::<fi_ops_atomic>(),
    write: Some(at_write),
    writev: Some(at_writev),
    writemsg: Some(at_writemsg),
    inject: Some(at_inject),
    readwrite: Some(at_readwrite),
    readwritev: Some(at_readwritev),
    readwritemsg: Some(at_readwritemsg),
    compwrite: Some(at_compwrite),
    compwritev: Some(at_compwritev),
    compwritemsg: Some(at_compwritemsg),
    writevalid: Some(at_writevalid),
    readwritevalid: Some(at_readwritevalid),
    compwritevalid: Some(at_compwritevalid),
};
