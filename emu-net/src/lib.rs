//! emu-net: the software UET fabric.
//!
//! * [`config`] the fabric description (topology, switch settings, link
//!   events), read from scenario files.
//! * [`model`] the switch model: a deterministic discrete-event fabric in
//!   virtual time with per-port data and control queues, RED ECN marking at
//!   dequeue, trimming, ECMP over the source-port entropy and link events.
//! * [`relay`] the rootless front-end: a UDP relay on loopback that runs the
//!   model in real time between provider endpoints.
//! * [`scenario`] connection-matrix scenario files (fabric, flows, patterns,
//!   variants), [`ideal`] their ideal completion times from the topology,
//!   and [`runner`] the end-to-end run behind `uet-emu run`.
//! * [`sim`] the virtual-time front-end behind `uet-emu sim`: the provider's
//!   engine on every host, the model between them, one simulated clock.

/// `eprintln!` for progress and warnings that may go unread: an error
/// writing them (a closed pipe, `2>&1 | head`) is ignored instead of a
/// panic, so the run still writes its results.
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod config;
pub mod ideal;
pub mod model;
pub mod relay;
pub mod runner;
pub mod scenario;
pub mod sim;

pub use config::{FabricConfig, LinkAction, LinkEvent, SwitchConfig, TopologyConfig, TopologyKind};
pub use model::{Delivery, Fabric, Packet};
