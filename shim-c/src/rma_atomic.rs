//! RMA and atomic operations: every slot answers -FI_ENOSYS until the engine
//! implements them (getinfo never offers FI_RMA or FI_ATOMIC).

use std::os::raw::{c_int, c_void};

use crate::bindings::*;
use crate::errors::unsupported;

type Ep = *mut fid_ep;
type Buf = *const c_void;
type Desc = *mut c_void;
type Descs = *mut *mut c_void;
type Ctx = *mut c_void;

unsupported! {
    rma_read(Ep, *mut c_void, usize, Desc, fi_addr_t, u64, u64, Ctx) -> isize = FI_ENOSYS;
    rma_readv(Ep, *const iovec, Descs, usize, fi_addr_t, u64, u64, Ctx) -> isize = FI_ENOSYS;
    rma_readmsg(Ep, *const fi_msg_rma, u64) -> isize = FI_ENOSYS;
    rma_write(Ep, Buf, usize, Desc, fi_addr_t, u64, u64, Ctx) -> isize = FI_ENOSYS;
    rma_writev(Ep, *const iovec, Descs, usize, fi_addr_t, u64, u64, Ctx) -> isize = FI_ENOSYS;
    rma_writemsg(Ep, *const fi_msg_rma, u64) -> isize = FI_ENOSYS;
    rma_inject(Ep, Buf, usize, fi_addr_t, u64, u64) -> isize = FI_ENOSYS;
    rma_writedata(Ep, Buf, usize, Desc, u64, fi_addr_t, u64, u64, Ctx) -> isize = FI_ENOSYS;
    rma_injectdata(Ep, Buf, usize, u64, fi_addr_t, u64, u64) -> isize = FI_ENOSYS;

    at_write(Ep, Buf, usize, Desc, fi_addr_t, u64, u64, fi_datatype, fi_op, Ctx) -> isize = FI_ENOSYS;
    at_writev(Ep, *const fi_ioc, Descs, usize, fi_addr_t, u64, u64, fi_datatype, fi_op, Ctx) -> isize = FI_ENOSYS;
    at_writemsg(Ep, *const fi_msg_atomic, u64) -> isize = FI_ENOSYS;
    at_inject(Ep, Buf, usize, fi_addr_t, u64, u64, fi_datatype, fi_op) -> isize = FI_ENOSYS;
    at_readwrite(Ep, Buf, usize, Desc, *mut c_void, Desc, fi_addr_t, u64, u64, fi_datatype, fi_op, Ctx) -> isize = FI_ENOSYS;
    at_readwritev(Ep, *const fi_ioc, Descs, usize, *mut fi_ioc, Descs, usize, fi_addr_t, u64, u64, fi_datatype, fi_op, Ctx) -> isize = FI_ENOSYS;
    at_readwritemsg(Ep, *const fi_msg_atomic, *mut fi_ioc, Descs, usize, u64) -> isize = FI_ENOSYS;
    at_compwrite(Ep, Buf, usize, Desc, Buf, Desc, *mut c_void, Desc, fi_addr_t, u64, u64, fi_datatype, fi_op, Ctx) -> isize = FI_ENOSYS;
    at_compwritev(Ep, *const fi_ioc, Descs, usize, *const fi_ioc, Descs, usize, *mut fi_ioc, Descs, usize, fi_addr_t, u64, u64, fi_datatype, fi_op, Ctx) -> isize = FI_ENOSYS;
    at_compwritemsg(Ep, *const fi_msg_atomic, *const fi_ioc, Descs, usize, *mut fi_ioc, Descs, usize, u64) -> isize = FI_ENOSYS;
    at_writevalid(Ep, fi_datatype, fi_op, *mut usize) -> c_int = FI_ENOSYS;
    at_readwritevalid(Ep, fi_datatype, fi_op, *mut usize) -> c_int = FI_ENOSYS;
    at_compwritevalid(Ep, fi_datatype, fi_op, *mut usize) -> c_int = FI_ENOSYS;
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
