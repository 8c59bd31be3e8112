//! emu-net: the software UET fabric.
//!
//! This crate will hold the switch model (per-port egress queues, ECN marking
//! at dequeue, trimming, ECMP over source-port entropy) and its front-ends
//! (a rootless UDP relay, network namespaces, a virtual-time simulator), all
//! driving the same sans-IO core as the provider. Today it holds only the
//! `uet-emu` binary's command line; the model is not written yet.
