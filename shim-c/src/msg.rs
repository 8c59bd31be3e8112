//! Untagged data operations (`fi_ops_msg`).

use std::os::raw::c_void;

use crate::bindings::*;
use crate::buffers::IovBuffer;
use crate::endpoint::{self, iov_limit, Rx, Tx};
use crate::errors::{guard, FiResult};

pub(crate) static OPS: fi_ops_msg = fi_ops_msg {
    size: std::mem::size_of::<fi_ops_msg>(),
    recv: Some(recv),
    recvv: Some(recvv),
    recvmsg: Some(recvmsg),
    send: Some(send),
    sendv: Some(sendv),
    sendmsg: Some(sendmsg),
    inject: Some(inject),
    senddata: Some(senddata),
    injectdata: Some(injectdata),
};

/// Run a data operation on our endpoint: 0 or -FI_E*.
pub(crate) fn run(ep: *mut fid_ep, op: impl FnOnce(&endpoint::EpInner) -> FiResult<()>) -> isize {
    guard(|| match endpoint::inner(ep) {
        Some(e) => match op(e) {
            Ok(()) => 0,
            Err(err) => -(err as isize),
        },
        None => -(FI_EINVAL as isize),
    })
}

/// The iovecs of a vector operation, limit checked.
pub(crate) fn iov_buffer(iov: *const iovec, count: usize) -> FiResult<IovBuffer> {
    if count > iov_limit() {
        return Err(FI_EINVAL);
    }
    // SAFETY: the application passes `count` iovecs (or NULL with count 0,
    // which from_iov accepts and any other NULL it rejects).
    unsafe { IovBuffer::from_iov(iov, count) }
}

fn post_recv(
    e: &endpoint::EpInner,
    buf: IovBuffer,
    src: fi_addr_t,
    context: *mut c_void,
    flags: Option<u64>,
) -> FiResult<()> {
    e.recv(Rx {
        buf,
        src,
        tagged: false,
        tag: 0,
        ignore: 0,
        context,
        flags,
    })
}

fn post_send(
    e: &endpoint::EpInner,
    buf: IovBuffer,
    dest: fi_addr_t,
    data: Option<u64>,
    context: *mut c_void,
    flags: Option<u64>,
    inject: bool,
) -> FiResult<()> {
    e.send(Tx {
        buf,
        dest,
        tag: None,
        data,
        context,
        flags,
        inject,
    })
}

extern "C" fn recv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: fi_addr_t,
    context: *mut c_void,
) -> isize {
    run(ep, |e| {
        post_recv(e, IovBuffer::single(buf, len)?, src, context, None)
    })
}

extern "C" fn recvv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: fi_addr_t,
    context: *mut c_void,
) -> isize {
    run(ep, |e| {
        post_recv(e, iov_buffer(iov, count)?, src, context, None)
    })
}

extern "C" fn recvmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    run(ep, |e| {
        // SAFETY: msg is NULL or a valid fi_msg.
        let m = unsafe { msg.as_ref() }.ok_or(FI_EINVAL)?;
        post_recv(
            e,
            iov_buffer(m.msg_iov, m.iov_count)?,
            m.addr,
            m.context,
            Some(flags),
        )
    })
}

extern "C" fn send(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    context: *mut c_void,
) -> isize {
    run(ep, |e| {
        post_send(
            e,
            IovBuffer::single(buf, len)?,
            dest,
            None,
            context,
            None,
            false,
        )
    })
}

extern "C" fn sendv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    context: *mut c_void,
) -> isize {
    run(ep, |e| {
        post_send(e, iov_buffer(iov, count)?, dest, None, context, None, false)
    })
}

extern "C" fn sendmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    run(ep, |e| {
        // SAFETY: msg is NULL or a valid fi_msg.
        let m = unsafe { msg.as_ref() }.ok_or(FI_EINVAL)?;
        let data = (flags & FI_REMOTE_CQ_DATA as u64 != 0).then_some(m.data);
        post_send(
            e,
            iov_buffer(m.msg_iov, m.iov_count)?,
            m.addr,
            data,
            m.context,
            Some(flags),
            false,
        )
    })
}

extern "C" fn inject(ep: *mut fid_ep, buf: *const c_void, len: usize, dest: fi_addr_t) -> isize {
    run(ep, |e| {
        post_send(
            e,
            IovBuffer::single(buf, len)?,
            dest,
            None,
            std::ptr::null_mut(),
            None,
            true,
        )
    })
}

extern "C" fn senddata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    context: *mut c_void,
) -> isize {
    run(ep, |e| {
        post_send(
            e,
            IovBuffer::single(buf, len)?,
            dest,
            Some(data),
            context,
            None,
            false,
        )
    })
}

extern "C" fn injectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
) -> isize {
    run(ep, |e| {
        post_send(
            e,
            IovBuffer::single(buf, len)?,
            dest,
            Some(data),
            std::ptr::null_mut(),
            None,
            true,
        )
    })
}
