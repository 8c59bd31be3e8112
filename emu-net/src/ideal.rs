//! Ideal flow completion times of a connection matrix, computed from the
//! topology: a fluid model with max-min fair rates.
//!
//! Each flow uses its source NIC, its destination's downlink and, between
//! leaves, the aggregate uplink capacity of its source leaf and the aggregate
//! downlink capacity into its destination leaf (perfect spraying). Link
//! events change those capacities at their times. A flow starts at its start
//! time once the flows it waits for finished (plus their base RTT, the time
//! their sender learns it); its ideal FCT is its fluid duration plus the
//! base RTT of its path. Rates are payload rates: each link carries
//! `payload / (payload + headers)` of its line rate.

use std::collections::BTreeMap;

use crate::config::{LinkAction, FRAME_OVERHEAD, TRIM_KEEP};
use crate::model::{Fabric, NodeKind};
use crate::scenario::FlowSpec;

#[derive(Clone, Debug, PartialEq)]
pub struct IdealFlow {
    /// Fluid start and finish, ns after the common start.
    pub start_ns: f64,
    pub finish_ns: f64,
    /// Fluid duration plus the base RTT.
    pub fct_ns: f64,
}

/// Fraction of a link's rate that carries message bytes at this MTU.
pub fn payload_efficiency(mtu: usize) -> f64 {
    let mtu = mtu.max(TRIM_KEEP + 1);
    (mtu - TRIM_KEEP) as f64 / (mtu + FRAME_OVERHEAD) as f64
}

/// Port rates at time `t_ns` (Gb/s, 0 when down), after the link events.
fn rates_at(f: &Fabric, t_ns: f64) -> Vec<f64> {
    let mut r: Vec<f64> = f.ports.iter().map(|p| p.base_gbps).collect();
    let mut events = f.config.events.clone();
    events.sort_by(|a, b| a.at_us.total_cmp(&b.at_us));
    for e in events.iter().filter(|e| e.at_us * 1000.0 <= t_ns) {
        for p in f.link_ports(&e.link[0], &e.link[1]) {
            let base = f.ports[p].base_gbps;
            r[p] = match e.action {
                LinkAction::Down => 0.0,
                LinkAction::Up => base,
                LinkAction::Rate { factor } => base * factor,
                LinkAction::Loss { loss } => base * (1.0 - loss.clamp(0.0, 1.0)),
            };
        }
    }
    r
}

/// The resources (sets of ports) a flow from host `src` to `dst` uses.
fn resources(f: &Fabric, src: usize, dst: usize) -> Vec<Vec<usize>> {
    let path = f.path(src, dst);
    let mut out = Vec::new();
    if let (Some(&first), Some(&last)) = (path.first(), path.last()) {
        out.push(vec![first]);
        out.push(vec![last]);
        if path.len() > 2 {
            // Leaf to leaf through spines: every uplink of the source leaf,
            // every downlink into the destination leaf.
            let src_leaf = f.ports[first].to;
            let dst_leaf = f.ports[last].from;
            let ups = f.nodes[src_leaf]
                .ports
                .iter()
                .copied()
                .filter(|&p| f.nodes[f.ports[p].to].kind == NodeKind::Switch)
                .collect();
            let downs = (0..f.ports.len())
                .filter(|&p| {
                    f.ports[p].to == dst_leaf && f.nodes[f.ports[p].from].kind == NodeKind::Switch
                })
                .collect();
            out.push(ups);
            out.push(downs);
        }
    }
    out
}

/// Max-min fair rates (bytes/ns) of the `active` flows.
fn max_min(
    active: &[usize],
    uses: &[Vec<usize>],
    capacity: &BTreeMap<usize, f64>,
) -> BTreeMap<usize, f64> {
    let mut left = capacity.clone();
    let mut rate = BTreeMap::new();
    let mut open: Vec<usize> = active.to_vec();
    while !open.is_empty() {
        // The tightest resource among those open flows use.
        let mut best: Option<(usize, f64)> = None;
        for (&r, &c) in &left {
            let n = open.iter().filter(|&&i| uses[i].contains(&r)).count();
            if n > 0 {
                let share = c.max(0.0) / n as f64;
                if !matches!(best, Some((_, s)) if s <= share) {
                    best = Some((r, share));
                }
            }
        }
        let Some((r, share)) = best else { break };
        let fixed: Vec<usize> = open
            .iter()
            .copied()
            .filter(|&i| uses[i].contains(&r))
            .collect();
        for &i in &fixed {
            rate.insert(i, share);
            for u in &uses[i] {
                if let Some(c) = left.get_mut(u) {
                    *c -= share;
                }
            }
        }
        left.remove(&r);
        open.retain(|i| !fixed.contains(i));
    }
    rate
}

/// Ideal times of `flows` on `fabric` at packet size `mtu`.
pub fn ideal(fabric: &Fabric, flows: &[FlowSpec], mtu: usize) -> Vec<IdealFlow> {
    let eff = payload_efficiency(mtu);
    // Resource ids: index into `sets`.
    let mut sets: Vec<Vec<usize>> = Vec::new();
    let uses: Vec<Vec<usize>> = flows
        .iter()
        .map(|fl| {
            resources(fabric, fl.src, fl.dst)
                .into_iter()
                .map(|s| match sets.iter().position(|x| *x == s) {
                    Some(i) => i,
                    None => {
                        sets.push(s);
                        sets.len() - 1
                    }
                })
                .collect()
        })
        .collect();
    let rtt: Vec<f64> = flows
        .iter()
        .map(|fl| fabric.base_rtt_ns(fl.src, fl.dst, mtu, 64) as f64)
        .collect();
    let mut event_times: Vec<f64> = fabric
        .config
        .events
        .iter()
        .map(|e| e.at_us * 1000.0)
        .collect();
    event_times.sort_by(f64::total_cmp);

    let n = flows.len();
    let mut start = vec![f64::NAN; n];
    let mut finish = vec![f64::NAN; n];
    let mut left: Vec<f64> = flows.iter().map(|f| f.bytes as f64).collect();
    let mut t = 0.0f64;
    for _ in 0..(10 * n + 10 * event_times.len() + 10) {
        // Start every flow whose time has come and whose dependencies ended.
        let ready_at = |i: usize, finish: &[f64]| -> Option<f64> {
            let mut at = flows[i].start_us * 1000.0;
            for &d in &flows[i].after {
                if finish[d].is_nan() {
                    return None;
                }
                at = at.max(finish[d] + rtt[d]);
            }
            Some(at)
        };
        let ready: Vec<usize> = (0..n)
            .filter(|&i| start[i].is_nan())
            .filter(|&i| ready_at(i, &finish).is_some_and(|at| at <= t + 1e-6))
            .collect();
        for i in ready {
            start[i] = t;
        }
        let active: Vec<usize> = (0..n)
            .filter(|&i| !start[i].is_nan() && finish[i].is_nan())
            .collect();
        let pending_start = (0..n)
            .filter(|&i| start[i].is_nan())
            .filter_map(|i| ready_at(i, &finish))
            .fold(f64::INFINITY, f64::min);
        if active.is_empty() && pending_start.is_infinite() {
            break;
        }
        let rates_now = rates_at(fabric, t);
        let capacity: BTreeMap<usize, f64> = sets
            .iter()
            .enumerate()
            .map(|(r, ports)| {
                (
                    r,
                    ports.iter().map(|&p| rates_now[p]).sum::<f64>() * eff / 8.0,
                )
            })
            .collect();
        let rate = max_min(&active, &uses, &capacity);
        let mut next = pending_start;
        if let Some(&e) = event_times.iter().find(|&&e| e > t + 1e-6) {
            next = next.min(e);
        }
        for &i in &active {
            let r = rate.get(&i).copied().unwrap_or(0.0);
            if r > 0.0 {
                next = next.min(t + left[i] / r);
            }
        }
        if !next.is_finite() {
            break; // stuck flows (a path with no capacity): no ideal
        }
        let dt = next - t;
        for &i in &active {
            let r = rate.get(&i).copied().unwrap_or(0.0);
            left[i] -= r * dt;
            if left[i] <= 1e-6 * flows[i].bytes as f64 {
                finish[i] = next;
            }
        }
        t = next;
    }
    (0..n)
        .map(|i| IdealFlow {
            start_ns: start[i],
            finish_ns: finish[i],
            fct_ns: finish[i] - start[i] + rtt[i],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{FabricConfig, TopologyConfig, TopologyKind};

    fn single(hosts: usize) -> Fabric {
        Fabric::new(FabricConfig {
            topology: TopologyConfig {
                kind: TopologyKind::Single,
                hosts,
                link_gbps: 8.0,
                link_delay_ns: 1000,
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap()
    }

    fn flow(src: usize, dst: usize, bytes: u64) -> FlowSpec {
        FlowSpec {
            src,
            dst,
            bytes,
            ..Default::default()
        }
    }

    #[test]
    fn incast_shares_the_downlink() {
        let f = single(5);
        let flows: Vec<_> = (0..4).map(|s| flow(s, 4, 1_000_000)).collect();
        let id = ideal(&f, &flows, 4096);
        let eff = payload_efficiency(4096);
        // 4 MB through one 8 Gb/s (1 byte/ns) link at payload efficiency.
        let want = 4_000_000.0 / eff;
        for x in &id {
            assert!((x.finish_ns - want).abs() < 1.0, "{x:?}");
            assert!(x.fct_ns > x.finish_ns);
        }
    }

    #[test]
    fn dependent_flow_starts_after_its_predecessor() {
        let f = single(3);
        let mut b = flow(0, 2, 1_000_000);
        b.after = vec![0];
        let id = ideal(&f, &[flow(0, 1, 1_000_000), b], 4096);
        assert!(id[1].start_ns > id[0].finish_ns);
        assert!((id[1].fct_ns - id[0].fct_ns).abs() < 1.0);
    }
}
