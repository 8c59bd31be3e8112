//! `uet`: an Ultra-Ethernet-Transport-like reliable datagram engine.
//!
//! The crate is split the way quinn-proto/quinn are:
//!
//! * [`cms`]   congestion management: NSCC, the no-CC baseline, load balancers.
//! * [`wire`]  packet layouts (UET 1.0 PDS and SES headers), bounds-checked views
//!   and parsed representations.
//! * [`pds`]   packet delivery: per-peer delivery contexts, PSNs, SACK, RTO.
//! * [`ses`]   semantics: messages, segmentation, tag matching, completions.
//! * [`engine`] the sans-IO engine tying PDS and SES together for one endpoint.
//!   Time, datagrams and randomness come in as inputs; datagrams to send,
//!   completions and the next deadline come out.
//! * [`io`]    the UDP driver that runs an engine over real sockets.
//!
//! The libfabric ABI lives in the separate `shim-c` crate; it only calls the
//! types re-exported here.

pub mod cms;
pub mod config;
pub mod copy;
pub mod engine;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod io;
pub mod ops;
pub mod pds;
pub mod ses;
pub mod wire;

pub use config::Config;
pub use engine::Engine;
pub use error::{Error, Result};
pub use io::Endpoint;
pub use ops::{
    Completion, CompletionError, CompletionKind, CompletionLevel, Context, MemoryRegions,
    MsgBuffer, Payload, ProbeFlags, RecvOp, RmaKind, RmaOp, SendOp,
};
