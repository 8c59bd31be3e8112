//! Tagged data operations (`fi_ops_tagged`), including FI_PEEK / FI_CLAIM /
//! FI_DISCARD probes through fi_trecvmsg.

use std::os::raw::c_void;

use crate::bindings::*;
use crate::buffers::IovBuffer;
use crate::endpoint::{EpInner, Rx, Tx};
use crate::errors::FiResult;
use crate::msg::{iov_buffer, run};

pub(crate) static OPS: fi_ops_tagged = fi_ops_tagged {
    size: std::mem::size_of::<fi_ops_tagged>(),
    recv: Some(trecv),
    recvv: Some(trecvv),
    recvmsg: Some(trecvmsg),
    send: Some(tsend),
    sendv: Some(tsendv),
    sendmsg: Some(tsendmsg),
    inject: Some(tinject),
    senddata: Some(tsenddata),
    injectdata: Some(tinjectdata),
};

#[allow(clippy::too_many_arguments)]
fn post_recv(
    e: &EpInner,
    buf: IovBuffer,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
    flags: Option<u64>,
) -> FiResult<()> {
    e.recv(Rx {
        buf,
        src,
        tagged: true,
        tag,
        ignore,
        context,
        flags,
    })
}

#[allow(clippy::too_many_arguments)]
fn post_send(
    e: &EpInner,
    buf: IovBuffer,
    dest: fi_addr_t,
    tag: u64,
    data: Option<u64>,
    context: *mut c_void,
    flags: Option<u64>,
    inject: bool,
) -> FiResult<()> {
    e.send(Tx {
        buf,
        dest,
        tag: Some(tag),
        data,
        context,
        flags,
        inject,
    })
}

#[allow(clippy::too_many_arguments)]
extern "C" fn trecv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    run(ep, |e| {
        post_recv(
            e,
            IovBuffer::single(buf, len)?,
            src,
            tag,
            ignore,
            context,
            None,
        )
    })
}

#[allow(clippy::too_many_arguments)]
extern "C" fn trecvv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    run(ep, |e| {
        post_recv(e, iov_buffer(iov, count)?, src, tag, ignore, context, None)
    })
}

extern "C" fn trecvmsg(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize {
    run(ep, |e| {
        // SAFETY: msg is NULL or a valid fi_msg_tagged.
        let m = unsafe { msg.as_ref() }.ok_or(FI_EINVAL)?;
        // A plain FI_PEEK reports the message without a buffer.
        let buf = if flags & FI_PEEK as u64 != 0 && flags & FI_CLAIM == 0 && m.msg_iov.is_null() {
            IovBuffer::default()
        } else {
            iov_buffer(m.msg_iov, m.iov_count)?
        };
        post_recv(e, buf, m.addr, m.tag, m.ignore, m.context, Some(flags))
    })
}

#[allow(clippy::too_many_arguments)]
extern "C" fn tsend(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    run(ep, |e| {
        post_send(
            e,
            IovBuffer::single(buf, len)?,
            dest,
            tag,
            None,
            context,
            None,
            false,
        )
    })
}

#[allow(clippy::too_many_arguments)]
extern "C" fn tsendv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    run(ep, |e| {
        post_send(
            e,
            iov_buffer(iov, count)?,
            dest,
            tag,
            None,
            context,
            None,
            false,
        )
    })
}

extern "C" fn tsendmsg(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize {
    run(ep, |e| {
        // SAFETY: msg is NULL or a valid fi_msg_tagged.
        let m = unsafe { msg.as_ref() }.ok_or(FI_EINVAL)?;
        let data = (flags & FI_REMOTE_CQ_DATA as u64 != 0).then_some(m.data);
        post_send(
            e,
            iov_buffer(m.msg_iov, m.iov_count)?,
            m.addr,
            m.tag,
            data,
            m.context,
            Some(flags),
            false,
        )
    })
}

extern "C" fn tinject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    tag: u64,
) -> isize {
    run(ep, |e| {
        post_send(
            e,
            IovBuffer::single(buf, len)?,
            dest,
            tag,
            None,
            std::ptr::null_mut(),
            None,
            true,
        )
    })
}

#[allow(clippy::too_many_arguments)]
extern "C" fn tsenddata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    run(ep, |e| {
        post_send(
            e,
            IovBuffer::single(buf, len)?,
            dest,
            tag,
            Some(data),
            context,
            None,
            false,
        )
    })
}

extern "C" fn tinjectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
    tag: u64,
) -> isize {
    run(ep, |e| {
        post_send(
            e,
            IovBuffer::single(buf, len)?,
            dest,
            tag,
            Some(data),
            std::ptr::null_mut(),
            None,
            true,
        )
    })
}
