//! Errors returned to the caller of an engine or endpoint operation.
//!
//! The shim maps each variant to one `-FI_E*` code; nothing else in the crate
//! knows about libfabric's numbering.

use std::net::SocketAddr;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The arguments of the call are inconsistent (maps to FI_EINVAL).
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// A queue is full; progress the endpoint and retry (FI_EAGAIN).
    #[error("resource temporarily unavailable, retry after progress")]
    Again,
    /// The message is larger than the provider supports (FI_EMSGSIZE).
    #[error("message of {len} bytes exceeds the maximum of {max}")]
    MessageTooLong { len: usize, max: usize },
    /// An address family this endpoint cannot reach (FI_EINVAL).
    #[error("address {0} cannot be reached from this endpoint")]
    Unreachable(SocketAddr),
    /// Socket setup or I/O failed (FI_EIO, or the OS errno where meaningful).
    #[error("socket error: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
