//! The statistics extension (`FI_UET_STATS_OPS` in fi_ext_uet.h): opened
//! with `fi_open_ops` on an endpoint, it copies the engine's counters, a
//! peer's congestion state and its per-entropy path use into the public
//! structs.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};

use crate::bindings::*;
use crate::endpoint;
use crate::errors::{guard, ret_int, FiResult};

static STATS_OPS: fi_uet_stats_ops = fi_uet_stats_ops {
    size: std::mem::size_of::<fi_uet_stats_ops>(),
    ep_stats: Some(ep_stats),
    peer_stats: Some(peer_stats),
    entropy_stats: Some(entropy_stats),
};

/// `fi_open_ops` on an endpoint: the statistics ops, or -FI_ENOSYS.
pub(crate) extern "C" fn ep_ops_open(
    _fid: *mut fid,
    name: *const c_char,
    _flags: u64,
    ops: *mut *mut c_void,
    _context: *mut c_void,
) -> c_int {
    guard(|| {
        if name.is_null() || ops.is_null() {
            return -(FI_EINVAL as c_int);
        }
        // SAFETY: name is a NUL-terminated string from the caller.
        let name = unsafe { CStr::from_ptr(name) };
        if name.to_bytes() != &FI_UET_STATS_OPS[..FI_UET_STATS_OPS.len() - 1] {
            return -(FI_ENOSYS as c_int);
        }
        // SAFETY: ops is a valid out-pointer (checked non-null); the table is
        // a static the caller only reads.
        unsafe { *ops = (&STATS_OPS as *const fi_uet_stats_ops).cast_mut().cast() };
        0
    })
}

extern "C" fn ep_stats(ep: *mut fid_ep, out: *mut fi_uet_ep_stats) -> c_int {
    guard(|| {
        ret_int((|| -> FiResult<()> {
            let inner = endpoint::inner(ep).ok_or(FI_EINVAL)?;
            if out.is_null() {
                return Err(FI_EINVAL);
            }
            let s = inner
                .with_endpoint(|e| e.engine_stats())
                .ok_or(FI_EOPBADSTATE)?;
            let v = fi_uet_ep_stats {
                packets_sent: s.packets_sent,
                packets_received: s.packets_received,
                retransmits: s.retransmits,
                duplicates: s.duplicates,
                acks_sent: s.acks_sent,
                acks_received: s.acks_received,
                malformed: s.malformed,
                unknown_pdc: s.unknown_pdc,
                out_of_window: s.out_of_window,
                peers_failed: s.peers_failed,
                trimmed_received: s.trimmed_received,
                ecn_ce_received: s.ecn_ce_received,
                ecn_echoes_received: s.ecn_echoes_received,
                nacks_sent: s.nacks_sent,
                nacks_received: s.nacks_received,
                nack_retransmits: s.nack_retransmits,
                pdcs_closed: s.pdcs_closed,
                backpressure: s.backpressure,
            };
            // SAFETY: out is non-null and points to the caller's struct.
            unsafe { out.write(v) };
            Ok(())
        })())
    })
}

extern "C" fn peer_stats(ep: *mut fid_ep, peer: fi_addr_t, out: *mut fi_uet_peer_stats) -> c_int {
    guard(|| {
        ret_int((|| -> FiResult<()> {
            let inner = endpoint::inner(ep).ok_or(FI_EINVAL)?;
            if out.is_null() {
                return Err(FI_EINVAL);
            }
            let addr = inner.peer_addr(peer)?;
            let ps = inner
                .with_endpoint(|e| e.peer_stats(addr))
                .ok_or(FI_EOPBADSTATE)?
                .ok_or(FI_ENODATA)?;
            let c = ps.cc;
            let v = fi_uet_peer_stats {
                cwnd: c.cwnd,
                maxwnd: c.maxwnd,
                in_flight: c.in_flight,
                base_rtt_ns: c.base_rtt_ns,
                target_qdelay_ns: c.target_qdelay_ns,
                avg_delay_ns: c.avg_delay_ns,
                acks: c.acks,
                ecn_echoes: c.ecn_echoes,
                invalid_rtt_samples: c.invalid_rtt_samples,
                fair_increase: c.fair_increase,
                proportional_increase: c.proportional_increase,
                multiplicative_decrease: c.multiplicative_decrease,
                steer_only: c.steer_only,
                decreases_applied: c.decreases_applied,
                fair_decreases: c.fair_decreases,
                fast_increase_acks: c.fast_increase_acks,
                fast_increase_events: c.fast_increase_events,
                quick_adapt_events: c.quick_adapt_events,
                quick_adapt_ignored: c.quick_adapt_ignored,
                fulfills: c.fulfills,
                nacks_fabric: c.nacks_fabric,
                nacks_last_hop: c.nacks_last_hop,
                timeouts: c.timeouts,
                retransmits: ps.retransmits,
                entropies: ps.entropies.len() as u64,
            };
            // SAFETY: out is non-null and points to the caller's struct.
            unsafe { out.write(v) };
            Ok(())
        })())
    })
}

extern "C" fn entropy_stats(
    ep: *mut fid_ep,
    peer: fi_addr_t,
    out: *mut fi_uet_entropy_stats,
    count: *mut usize,
) -> c_int {
    guard(|| {
        ret_int((|| -> FiResult<()> {
            let inner = endpoint::inner(ep).ok_or(FI_EINVAL)?;
            if count.is_null() {
                return Err(FI_EINVAL);
            }
            let addr = inner.peer_addr(peer)?;
            let paths = inner
                .with_endpoint(|e| e.peer_stats(addr))
                .ok_or(FI_EOPBADSTATE)?
                .ok_or(FI_ENODATA)?
                .entropies;
            // SAFETY: count is non-null and points to the caller's size_t.
            let room = unsafe { *count };
            if room > 0 && out.is_null() {
                return Err(FI_EINVAL);
            }
            for (i, p) in paths.iter().take(room).enumerate() {
                let v = fi_uet_entropy_stats {
                    sent: p.sent,
                    good: p.good,
                    ecn: p.ecn,
                    nacks_fabric: p.nacks_fabric,
                    nacks_last_hop: p.nacks_last_hop,
                    timeouts: p.timeouts,
                    penalty: p.penalty as u64,
                };
                // SAFETY: the caller provided `room` entries at out.
                unsafe { out.add(i).write(v) };
            }
            // SAFETY: as above.
            unsafe { *count = paths.len() };
            Ok(())
        })())
    })
}
