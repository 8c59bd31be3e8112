//! RMA operations (`fi_ops_rma`); atomics are in `atomic.rs`.

use std::os::raw::c_void;

use crate::bindings::*;
use crate::buffers::IovBuffer;
use crate::endpoint::Rma;
use crate::errors::FiResult;
use crate::msg::{iov_buffer, run};

type Ep = *mut fid_ep;
type Buf = *const c_void;
type Desc = *mut c_void;
type Descs = *mut *mut c_void;
type Ctx = *mut c_void;

#[allow(clippy::too_many_arguments)]
fn post(
    ep: Ep,
    write: bool,
    buf: FiResult<IovBuffer>,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    data: Option<u64>,
    context: Ctx,
    flags: Option<u64>,
    inject: bool,
) -> isize {
    run(ep, |e| {
        e.rma(Rma {
            write,
            buf: buf?,
            dest,
            addr,
            key,
            data,
            context,
            flags,
            inject,
        })
    })
}

/// The one target iovec a message describes (the provider takes exactly one).
fn rma_msg(msg: *const fi_msg_rma) -> FiResult<(fi_msg_rma, fi_rma_iov)> {
    // SAFETY: msg is NULL or a valid fi_msg_rma for the duration of the call.
    let m = unsafe { msg.as_ref() }.ok_or(FI_EINVAL)?;
    if m.rma_iov_count != 1 || m.rma_iov.is_null() {
        return Err(FI_EINVAL);
    }
    // SAFETY: rma_iov holds rma_iov_count (1) entries.
    let r = unsafe { *m.rma_iov };
    Ok((*m, r))
}

/// The local buffer of an fi_msg_rma, which must be as long as the remote
/// range it reads or writes.
fn msg_buffer(m: &fi_msg_rma, r: &fi_rma_iov) -> FiResult<IovBuffer> {
    let b = iov_buffer(m.msg_iov, m.iov_count)?;
    if b.len_bytes() == r.len {
        Ok(b)
    } else {
        Err(FI_EINVAL)
    }
}

#[allow(clippy::too_many_arguments)]
extern "C" fn rma_read(
    ep: Ep,
    buf: *mut c_void,
    len: usize,
    _desc: Desc,
    src: fi_addr_t,
    addr: u64,
    key: u64,
    context: Ctx,
) -> isize {
    post(
        ep,
        false,
        IovBuffer::single(buf, len),
        src,
        addr,
        key,
        None,
        context,
        None,
        false,
    )
}

#[allow(clippy::too_many_arguments)]
extern "C" fn rma_readv(
    ep: Ep,
    iov: *const iovec,
    _desc: Descs,
    count: usize,
    src: fi_addr_t,
    addr: u64,
    key: u64,
    context: Ctx,
) -> isize {
    post(
        ep,
        false,
        iov_buffer(iov, count),
        src,
        addr,
        key,
        None,
        context,
        None,
        false,
    )
}

extern "C" fn rma_readmsg(ep: Ep, msg: *const fi_msg_rma, flags: u64) -> isize {
    let (m, r) = match rma_msg(msg) {
        Ok(x) => x,
        Err(e) => return -(e as isize),
    };
    let buf = msg_buffer(&m, &r);
    post(
        ep,
        false,
        buf,
        m.addr,
        r.addr,
        r.key,
        None,
        m.context,
        Some(flags),
        false,
    )
}

#[allow(clippy::too_many_arguments)]
extern "C" fn rma_write(
    ep: Ep,
    buf: Buf,
    len: usize,
    _desc: Desc,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    context: Ctx,
) -> isize {
    post(
        ep,
        true,
        IovBuffer::single(buf, len),
        dest,
        addr,
        key,
        None,
        context,
        None,
        false,
    )
}

#[allow(clippy::too_many_arguments)]
extern "C" fn rma_writev(
    ep: Ep,
    iov: *const iovec,
    _desc: Descs,
    count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    context: Ctx,
) -> isize {
    post(
        ep,
        true,
        iov_buffer(iov, count),
        dest,
        addr,
        key,
        None,
        context,
        None,
        false,
    )
}

extern "C" fn rma_writemsg(ep: Ep, msg: *const fi_msg_rma, flags: u64) -> isize {
    let (m, r) = match rma_msg(msg) {
        Ok(x) => x,
        Err(e) => return -(e as isize),
    };
    let buf = msg_buffer(&m, &r);
    let data = (flags & FI_REMOTE_CQ_DATA as u64 != 0).then_some(m.data);
    // FI_INJECT (in `flags`) frees the source buffer at once; unlike
    // fi_inject_write, the write still completes.
    post(
        ep,
        true,
        buf,
        m.addr,
        r.addr,
        r.key,
        data,
        m.context,
        Some(flags),
        false,
    )
}

extern "C" fn rma_inject(
    ep: Ep,
    buf: Buf,
    len: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    post(
        ep,
        true,
        IovBuffer::single(buf, len),
        dest,
        addr,
        key,
        None,
        std::ptr::null_mut(),
        None,
        true,
    )
}

#[allow(clippy::too_many_arguments)]
extern "C" fn rma_writedata(
    ep: Ep,
    buf: Buf,
    len: usize,
    _desc: Desc,
    data: u64,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    context: Ctx,
) -> isize {
    post(
        ep,
        true,
        IovBuffer::single(buf, len),
        dest,
        addr,
        key,
        Some(data),
        context,
        None,
        false,
    )
}

#[allow(clippy::too_many_arguments)]
extern "C" fn rma_injectdata(
    ep: Ep,
    buf: Buf,
    len: usize,
    data: u64,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    post(
        ep,
        true,
        IovBuffer::single(buf, len),
        dest,
        addr,
        key,
        Some(data),
        std::ptr::null_mut(),
        None,
        true,
    )
}

pub(crate) static RMA_OPS: fi_ops_rma = fi_ops_rma {
    size: std::mem::size_of::<fi_ops_rma>(),
    read: Some(rma_read),
    readv: Some(rma_readv),
    readmsg: Some(rma_readmsg),
    write: Some(rma_write),
    writev: Some(rma_writev),
    writemsg: Some(rma_writemsg),
    inject: Some(rma_inject),
    writedata: Some(rma_writedata),
    injectdata: Some(rma_injectdata),
};
