//! Load balancers: pick an entropy (a path, carried in the UDP source port)
//! per packet and learn from per-entropy feedback (NSCC.md §7).
//!
//! An entropy is an index `0..entropies`; the engine maps it to a source port
//! (port base + index). Feedback arrives for the entropy of the packet that
//! caused it. A trim at the last hop (the receiver's downlink) is not the
//! path's fault and never penalises it; a trim inside the fabric does.
//!
//! A pick may hold for a spray unit ([`LbConfig::spray_bytes`]): the
//! packets after it keep its entropy while they fit in the unit's bytes, so
//! a host that hands the kernel one segmented send per source port sends
//! units, not single packets, per system call. Bad news about the unit's
//! entropy (a mark, a trim in the fabric, a timeout) ends it at once.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Which load balancer (`FI_UET_LB`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LbAlgorithm {
    /// Spray without feedback: (i XOR x) mod n, x redrawn each round.
    Oblivious,
    /// REPS as in the reference simulator: recycle good entropies through a
    /// buffer of 8, freeze on a timeout.
    Reps,
    /// REPS as in the SMaRTT-REPS paper: explore, then one cached entropy.
    RepsPaper,
    /// Per-entropy penalties, skip penalised entropies.
    Bitmap,
    /// One fixed path (entropy 0), like a single ECMP flow.
    Single,
}

impl LbAlgorithm {
    /// What `FI_UET_LB=auto` means where the entropy picks a path.
    pub const FABRIC_DEFAULT: LbAlgorithm = LbAlgorithm::Reps;

    pub fn parse(s: &str) -> Option<LbAlgorithm> {
        Some(match s.trim() {
            "oblivious" => LbAlgorithm::Oblivious,
            "reps" => LbAlgorithm::Reps,
            "reps_paper" => LbAlgorithm::RepsPaper,
            "bitmap" => LbAlgorithm::Bitmap,
            "single" => LbAlgorithm::Single,
            _ => return None,
        })
    }

    pub fn name(&self) -> &'static str {
        match self {
            LbAlgorithm::Oblivious => "oblivious",
            LbAlgorithm::Reps => "reps",
            LbAlgorithm::RepsPaper => "reps_paper",
            LbAlgorithm::Bitmap => "bitmap",
            LbAlgorithm::Single => "single",
        }
    }
}

/// What happened to a packet sent on an entropy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathFeedback {
    /// ACKed without an ECN mark.
    Good,
    /// ACKed with ECN-CE.
    Ecn,
    /// Trimmed: `last_hop` when at the receiver's downlink (NACK code 0x02).
    Nack {
        last_hop: bool,
    },
    Timeout,
}

/// Load-balancer settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LbConfig {
    pub algorithm: LbAlgorithm,
    /// Number of entropies (paths) to spray over, >= 1.
    pub entropies: u16,
    /// REPS (simulator): how long a timeout freezes the buffer, ns.
    pub freeze_ns: u64,
    /// REPS (paper): packets of round-robin exploration (about one BDP).
    pub explore_packets: u64,
    /// Wire bytes of data packets that keep one pick's entropy (the spray
    /// unit): a packet keeps it while it fits in what is left of the unit.
    /// 1 (or any size at most a packet's) picks for every packet, as the
    /// papers spray. What the algorithms count per pick (REPS's
    /// explorations after a freeze, the paper form's `explore_packets`,
    /// the bitmap's penalty decay) then counts units.
    pub spray_bytes: u32,
}

impl LbConfig {
    /// From the endpoint configuration; `mtu` is the packet size. The REPS
    /// freeze lasts one minimum RTO; the paper variant explores for one BDP
    /// at the configured link rate and base RTT (the 12 us reference when
    /// the base RTT is measured).
    pub fn from_config(cfg: &crate::Config, mtu: usize) -> LbConfig {
        let rtt_ns = match cfg.base_rtt_us {
            0 => super::REFERENCE_RTT_NS,
            us => us.saturating_mul(1000),
        };
        let bdp = rtt_ns as f64 * cfg.link_rate_gbps() / 8.0;
        LbConfig {
            // Unresolved auto (an engine without an endpoint, as in emu-net's
            // simulation): a fabric with paths to choose from.
            algorithm: cfg.lb.unwrap_or(LbAlgorithm::FABRIC_DEFAULT),
            entropies: cfg.entropies,
            freeze_ns: cfg.rto_min_us.saturating_mul(1000),
            explore_packets: (bdp / mtu.max(1) as f64).ceil() as u64,
            // Unresolved auto (see `Config::effective_spray_bytes`): every
            // packet picks, as in a fabric without host batching.
            spray_bytes: cfg.spray_bytes.max(1),
        }
    }
}

/// Per-entropy counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EntropyStats {
    pub sent: u64,
    pub good: u64,
    pub ecn: u64,
    pub nacks_fabric: u64,
    pub nacks_last_hop: u64,
    pub timeouts: u64,
    /// Current penalty (bitmap only).
    pub penalty: u8,
}

/// REPS buffer size and post-freeze exploration (simulator).
pub const REPS_BUFFER: usize = 8;
pub const REPS_EXPLORE_AFTER_FREEZE: u8 = 16;
/// Bitmap penalties.
pub const PENALTY_ECN: u8 = 1;
pub const PENALTY_NACK: u8 = 4;
pub const PENALTY_TIMEOUT: u8 = 15;
pub const PENALTY_CAP: u8 = 15;

#[derive(Clone, Debug, Default)]
struct RepsSim {
    entries: [u16; REPS_BUFFER],
    /// Bit i: entry i not yet reused.
    fresh: u8,
    /// Next slot to write, and slots in use (both below `REPS_BUFFER`, so
    /// a byte each: per-peer state stays small).
    head: u8,
    len: u8,
    /// While frozen (now < frozen_until) the buffer is replayed round robin.
    frozen_until: u64,
    frozen: bool,
    /// Entries replayed since the freeze (wrapping: only its remainder
    /// modulo `len` counts).
    replay: u32,
    explore_left: u8,
}

impl RepsSim {
    fn push(&mut self, ev: u16) {
        let head = self.head as usize;
        self.entries[head] = ev;
        self.fresh |= 1 << head;
        self.head = ((head + 1) % REPS_BUFFER) as u8;
        self.len = (self.len as usize + 1).min(REPS_BUFFER) as u8;
    }

    fn oldest(&self) -> usize {
        (self.head as usize + REPS_BUFFER - self.len as usize) % REPS_BUFFER
    }

    fn take_fresh(&mut self) -> Option<u16> {
        let first = self.oldest();
        (0..self.len as usize)
            .map(|i| (first + i) % REPS_BUFFER)
            .find(|&i| self.fresh & (1 << i) != 0)
            .map(|i| {
                self.fresh &= !(1 << i);
                self.entries[i]
            })
    }
}

#[derive(Clone, Debug)]
enum Kind {
    Oblivious {
        i: u16,
        x: u16,
    },
    Reps(RepsSim),
    RepsPaper {
        next: u16,
        cached: u16,
        sent: u64,
        tried: u16,
    },
    Bitmap {
        cursor: u16,
    },
    Single,
}

/// The pick that later packets keep ([`LbConfig::spray_bytes`]).
#[derive(Clone, Copy, Debug)]
struct SprayUnit {
    entropy: u16,
    /// Bytes of the unit not yet taken.
    left: u32,
}

/// The load balancer of one peer.
#[derive(Clone, Debug)]
pub struct LoadBalancer {
    cfg: LbConfig,
    kind: Kind,
    rng: SmallRng,
    stats: Vec<EntropyStats>,
    unit: Option<SprayUnit>,
}

impl LoadBalancer {
    pub fn new(cfg: LbConfig, seed: u64) -> LoadBalancer {
        let cfg = LbConfig {
            entropies: cfg.entropies.max(1),
            ..cfg
        };
        let kind = match cfg.algorithm {
            LbAlgorithm::Oblivious => Kind::Oblivious { i: 0, x: 0 },
            LbAlgorithm::Reps => Kind::Reps(RepsSim::default()),
            LbAlgorithm::RepsPaper => Kind::RepsPaper {
                next: 0,
                cached: 0,
                sent: 0,
                tried: 0,
            },
            LbAlgorithm::Bitmap => Kind::Bitmap { cursor: 0 },
            LbAlgorithm::Single => Kind::Single,
        };
        LoadBalancer {
            kind,
            rng: SmallRng::seed_from_u64(seed),
            stats: vec![EntropyStats::default(); cfg.entropies as usize],
            unit: None,
            cfg,
        }
    }

    pub fn entropies(&self) -> u16 {
        self.cfg.entropies
    }

    /// The entropy of a data packet that keeps to one path (ordered
    /// delivery): the endpoint's own, counted as any choice is, so the
    /// per-entropy counters still add up to the data packets sent.
    pub fn fixed_entropy(&mut self) -> u16 {
        self.count_sent(0)
    }

    /// Entropy `ev` carries a packet: counted, and returned.
    fn count_sent(&mut self, ev: u16) -> u16 {
        if let Some(s) = self.stats.get_mut(ev as usize) {
            s.sent += 1;
        }
        ev
    }

    /// The entropy for the next data packet, `bytes` long on the wire:
    /// that of the current spray unit if the packet fits in what is left of
    /// it, else a new pick, which starts a unit.
    pub fn next_entropy(&mut self, now: u64, bytes: u64) -> u16 {
        let bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
        if let Some(unit) = self.unit.as_mut().filter(|u| u.left >= bytes) {
            unit.left -= bytes;
            let ev = unit.entropy;
            return self.count_sent(ev);
        }
        let ev = self.pick(now);
        self.unit = (self.cfg.spray_bytes > bytes).then(|| SprayUnit {
            entropy: ev,
            left: self.cfg.spray_bytes - bytes,
        });
        self.count_sent(ev)
    }

    /// Ends the current spray unit: the next data packet is picked for.
    pub fn end_unit(&mut self) {
        self.unit = None;
    }

    /// The entropy for a resend: a pick of its own, which neither takes
    /// from the current spray unit nor starts one.
    pub fn resend_entropy(&mut self, now: u64) -> u16 {
        let ev = self.pick(now);
        self.count_sent(ev)
    }

    /// A new choice of entropy, by the algorithm.
    fn pick(&mut self, now: u64) -> u16 {
        let n = self.cfg.entropies;
        match &mut self.kind {
            Kind::Oblivious { i, x } => {
                if *i == 0 {
                    *x = self.rng.gen_range(0..n);
                }
                let ev = (*i ^ *x) % n;
                *i = (*i + 1) % n;
                ev
            }
            Kind::Reps(r) => {
                if r.frozen && now >= r.frozen_until {
                    // After the freeze, forget the buffer and look around.
                    *r = RepsSim {
                        explore_left: REPS_EXPLORE_AFTER_FREEZE,
                        ..RepsSim::default()
                    };
                }
                if r.frozen && r.len > 0 {
                    let idx = (r.oldest() + r.replay as usize % r.len as usize) % REPS_BUFFER;
                    r.replay = r.replay.wrapping_add(1);
                    r.entries[idx]
                } else if r.explore_left > 0 {
                    r.explore_left -= 1;
                    self.rng.gen_range(0..n)
                } else {
                    match r.take_fresh() {
                        Some(ev) => ev,
                        None => self.rng.gen_range(0..n),
                    }
                }
            }
            Kind::RepsPaper {
                next,
                cached,
                sent,
                tried,
            } => {
                *sent += 1;
                if *sent <= self.cfg.explore_packets && *tried < n {
                    let ev = *next;
                    *next = (*next + 1) % n;
                    *tried += 1;
                    ev
                } else {
                    *cached
                }
            }
            Kind::Bitmap { cursor } => {
                let mut chosen = None;
                let mut decremented = false;
                let mut least = (u8::MAX, *cursor);
                for k in 0..n {
                    let e = (*cursor + k) % n;
                    let p = &mut self.stats[e as usize].penalty;
                    if *p == 0 {
                        chosen = Some(e);
                        break;
                    }
                    if !decremented {
                        *p -= 1;
                        decremented = true;
                    }
                    if *p < least.0 {
                        least = (*p, e);
                    }
                }
                let e = chosen.unwrap_or(least.1);
                *cursor = (e + 1) % n;
                e
            }
            Kind::Single => 0,
        }
    }

    /// Feedback for a packet that was sent on `entropy`.
    pub fn on_feedback(&mut self, now: u64, entropy: u16, fb: PathFeedback) {
        let n = self.cfg.entropies;
        let Some(st) = self.stats.get_mut(entropy as usize) else {
            return; // not one of ours (corrupt echo): ignore
        };
        match fb {
            PathFeedback::Good => st.good += 1,
            PathFeedback::Ecn => st.ecn += 1,
            PathFeedback::Nack { last_hop: true } => st.nacks_last_hop += 1,
            PathFeedback::Nack { last_hop: false } => st.nacks_fabric += 1,
            PathFeedback::Timeout => st.timeouts += 1,
        }
        // A last-hop trim says nothing against the path: treat it as good.
        let path_ok = matches!(
            fb,
            PathFeedback::Good | PathFeedback::Nack { last_hop: true }
        );
        if !path_ok && self.unit.is_some_and(|u| u.entropy == entropy) {
            // The next packet is the algorithm's to place.
            self.unit = None;
        }
        match &mut self.kind {
            Kind::Oblivious { .. } | Kind::Single => {}
            Kind::Reps(r) => {
                if r.frozen {
                    return;
                }
                if fb == PathFeedback::Timeout {
                    r.frozen = true;
                    r.frozen_until = now + self.cfg.freeze_ns;
                    r.replay = 0;
                    // Frozen, only known-good entropies carry data: the
                    // unit's may be a random or exploring pick.
                    self.unit = None;
                } else if path_ok {
                    r.push(entropy);
                }
            }
            Kind::RepsPaper { next, cached, .. } => {
                if path_ok {
                    *cached = entropy;
                } else {
                    *cached = *next;
                    *next = (*next + 1) % n;
                }
            }
            Kind::Bitmap { .. } => {
                let add = match fb {
                    PathFeedback::Ecn => PENALTY_ECN,
                    PathFeedback::Nack { last_hop: false } => PENALTY_NACK,
                    PathFeedback::Timeout => PENALTY_TIMEOUT,
                    _ => 0,
                };
                st.penalty = st.penalty.saturating_add(add).min(PENALTY_CAP);
            }
        }
    }

    /// Counters of one entropy.
    pub fn entropy_stats(&self) -> &[EntropyStats] {
        &self.stats
    }

    /// REPS (simulator): whether a timeout froze the buffer at `now`.
    pub fn is_frozen(&self, now: u64) -> bool {
        matches!(&self.kind, Kind::Reps(r) if r.frozen && now < r.frozen_until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lb(algorithm: LbAlgorithm, entropies: u16) -> LoadBalancer {
        LoadBalancer::new(
            LbConfig {
                algorithm,
                entropies,
                freeze_ns: 1_000,
                explore_packets: 4,
                spray_bytes: 1,
            },
            7,
        )
    }

    /// Packets of this many wire bytes, in the tests.
    const PACKET: u32 = 1000;

    fn send(l: &mut LoadBalancer, now: u64, n: usize) -> Vec<u16> {
        (0..n).map(|_| l.next_entropy(now, PACKET.into())).collect()
    }

    #[test]
    fn oblivious_uses_every_entropy_once_per_round() {
        let mut l = lb(LbAlgorithm::Oblivious, 16);
        let mut rounds = Vec::new();
        for _ in 0..4 {
            let mut r = send(&mut l, 0, 16);
            rounds.push(r.clone());
            r.sort_unstable();
            assert_eq!(r, (0..16).collect::<Vec<u16>>());
        }
        assert!(rounds.windows(2).any(|w| w[0] != w[1]), "x is redrawn");
        // Feedback changes nothing.
        for e in 0..16 {
            l.on_feedback(0, e, PathFeedback::Timeout);
        }
        let mut r = send(&mut l, 0, 16);
        r.sort_unstable();
        assert_eq!(r, (0..16).collect::<Vec<u16>>());
    }

    #[test]
    fn reps_recycles_good_entropies_oldest_first() {
        let mut l = lb(LbAlgorithm::Reps, 256);
        l.on_feedback(0, 3, PathFeedback::Good);
        l.on_feedback(0, 7, PathFeedback::Ecn);
        l.on_feedback(0, 5, PathFeedback::Good);
        l.on_feedback(0, 9, PathFeedback::Nack { last_hop: false });
        l.on_feedback(0, 11, PathFeedback::Nack { last_hop: true });
        // Marked and fabric-trimmed entropies are never recycled; a last-hop
        // trim is not the path's fault.
        assert_eq!(send(&mut l, 0, 3), vec![3, 5, 11]);
        // Each recycled entropy is used once; then random ones.
        l.on_feedback(0, 3, PathFeedback::Good);
        assert_eq!(l.next_entropy(0, PACKET.into()), 3);
        let r = send(&mut l, 0, 64);
        assert!(r.iter().collect::<std::collections::HashSet<_>>().len() > 32);
    }

    #[test]
    fn reps_buffer_keeps_the_newest_eight() {
        let mut l = lb(LbAlgorithm::Reps, 256);
        for e in 100..110 {
            l.on_feedback(0, e, PathFeedback::Good);
        }
        assert_eq!(send(&mut l, 0, 8), (102..110).collect::<Vec<u16>>());
    }

    #[test]
    fn reps_freezes_on_a_timeout_then_explores() {
        let mut l = lb(LbAlgorithm::Reps, 256);
        for e in [1, 2, 3] {
            l.on_feedback(0, e, PathFeedback::Good);
        }
        l.on_feedback(10, 2, PathFeedback::Timeout);
        assert!(l.is_frozen(10));
        // Frozen: the buffer is replayed round robin and feedback ignored.
        l.on_feedback(20, 50, PathFeedback::Good);
        assert_eq!(send(&mut l, 20, 7), vec![1, 2, 3, 1, 2, 3, 1]);
        // After the freeze (1000 ns): buffer reset, 16 random explorations
        // before recycled entropies are used again.
        assert!(!l.is_frozen(1_010));
        l.next_entropy(1_010, PACKET.into());
        l.on_feedback(1_010, 42, PathFeedback::Good);
        send(&mut l, 1_010, 15);
        assert_eq!(l.next_entropy(1_010, PACKET.into()), 42);
    }

    #[test]
    fn reps_paper_explores_then_follows_the_cache() {
        let mut l = lb(LbAlgorithm::RepsPaper, 8);
        // Round robin over the first BDP (4 packets here).
        assert_eq!(send(&mut l, 0, 4), vec![0, 1, 2, 3]);
        assert_eq!(send(&mut l, 0, 2), vec![0, 0]);
        l.on_feedback(0, 2, PathFeedback::Good);
        assert_eq!(l.next_entropy(0, PACKET.into()), 2);
        // A mark moves on to the next unexplored entropy.
        l.on_feedback(0, 2, PathFeedback::Ecn);
        assert_eq!(send(&mut l, 0, 2), vec![4, 4]);
        l.on_feedback(0, 4, PathFeedback::Nack { last_hop: false });
        assert_eq!(l.next_entropy(0, PACKET.into()), 5);
        l.on_feedback(0, 5, PathFeedback::Timeout);
        assert_eq!(l.next_entropy(0, PACKET.into()), 6);
        // A last-hop trim keeps (caches) the path.
        l.on_feedback(0, 1, PathFeedback::Nack { last_hop: true });
        assert_eq!(l.next_entropy(0, PACKET.into()), 1);
        // Exploration stops once every entropy was tried.
        let mut l = LoadBalancer::new(
            LbConfig {
                algorithm: LbAlgorithm::RepsPaper,
                entropies: 3,
                freeze_ns: 0,
                explore_packets: 100,
                spray_bytes: 1,
            },
            1,
        );
        assert_eq!(send(&mut l, 0, 5), vec![0, 1, 2, 0, 0]);
    }

    #[test]
    fn bitmap_penalises_and_skips() {
        let mut l = lb(LbAlgorithm::Bitmap, 4);
        l.on_feedback(0, 1, PathFeedback::Ecn);
        assert_eq!(l.entropy_stats()[1].penalty, PENALTY_ECN);
        // 0, then 1 is skipped (and decremented), 2, 3, and 1 is clean again.
        assert_eq!(send(&mut l, 0, 5), vec![0, 2, 3, 0, 1]);
        l.on_feedback(0, 2, PathFeedback::Nack { last_hop: false });
        l.on_feedback(0, 3, PathFeedback::Nack { last_hop: false });
        l.on_feedback(0, 0, PathFeedback::Nack { last_hop: true });
        let p: Vec<u8> = l.entropy_stats().iter().map(|s| s.penalty).collect();
        assert_eq!(
            p,
            vec![0, 0, PENALTY_NACK, PENALTY_NACK],
            "last-hop trims do not penalise"
        );
        // From cursor 2: only the first skipped entropy (2) is decremented.
        assert_eq!(l.next_entropy(0, PACKET.into()), 0);
        let p: Vec<u8> = l.entropy_stats().iter().map(|s| s.penalty).collect();
        assert_eq!(p, vec![0, 0, PENALTY_NACK - 1, PENALTY_NACK]);
        l.on_feedback(0, 1, PathFeedback::Timeout);
        l.on_feedback(0, 1, PathFeedback::Ecn);
        assert_eq!(l.entropy_stats()[1].penalty, PENALTY_CAP);
        // Good feedback does not clear a penalty; sends decay it.
        l.on_feedback(0, 1, PathFeedback::Good);
        assert_eq!(l.entropy_stats()[1].penalty, PENALTY_CAP);
        // Everything penalised: the least penalised entropy is used.
        let mut l = lb(LbAlgorithm::Bitmap, 2);
        l.on_feedback(0, 0, PathFeedback::Timeout);
        l.on_feedback(0, 1, PathFeedback::Nack { last_hop: false });
        assert_eq!(l.next_entropy(0, PACKET.into()), 1);
    }

    #[test]
    fn single_path_and_counters() {
        let mut l = lb(LbAlgorithm::Single, 16);
        assert_eq!(send(&mut l, 0, 5), vec![0; 5]);
        l.on_feedback(0, 0, PathFeedback::Ecn);
        l.on_feedback(0, 0, PathFeedback::Nack { last_hop: true });
        l.on_feedback(0, 99, PathFeedback::Ecn); // out of range: ignored
        let s = l.entropy_stats()[0];
        assert_eq!((s.sent, s.ecn, s.nacks_last_hop), (5, 1, 1));
        assert!(l.entropy_stats()[1..]
            .iter()
            .all(|s| *s == EntropyStats::default()));
        assert_eq!(lb(LbAlgorithm::Oblivious, 0).entropies(), 1);
    }

    /// `algorithm` over 16 entropies with a spray unit of `spray_bytes`.
    fn spraying(algorithm: LbAlgorithm, spray_bytes: u32) -> LoadBalancer {
        LoadBalancer::new(
            LbConfig {
                spray_bytes,
                ..lb(algorithm, 16).cfg
            },
            7,
        )
    }

    #[test]
    fn a_spray_unit_keeps_its_pick_for_the_packets_that_fit() {
        // Three packets fit in 3.5 of them: each pick is kept for two more.
        let per_packet = send(&mut lb(LbAlgorithm::Oblivious, 16), 0, 10);
        let mut l = spraying(LbAlgorithm::Oblivious, 3 * PACKET + PACKET / 2);
        let units = send(&mut l, 0, 30);
        let expected: Vec<u16> = per_packet.iter().flat_map(|&e| [e; 3]).collect();
        assert_eq!(units, expected, "the algorithm's picks, three packets each");
        let sent: u64 = l.entropy_stats().iter().map(|s| s.sent).sum();
        assert_eq!(sent, 30, "every packet counted on its entropy");
        // A unit no larger than a packet: every packet picks.
        for bytes in [1, PACKET] {
            let mut l = spraying(LbAlgorithm::Oblivious, bytes);
            assert_eq!(send(&mut l, 0, 10), per_packet);
        }
        // A packet too long for what is left starts the next unit.
        let mut l = spraying(LbAlgorithm::Oblivious, 2 * PACKET);
        let first = l.next_entropy(0, PACKET.into());
        assert_ne!(l.next_entropy(0, (PACKET + 1).into()), first);
    }

    #[test]
    fn bad_news_about_a_spray_unit_ends_it() {
        for algorithm in [LbAlgorithm::Reps, LbAlgorithm::Bitmap] {
            let mut l = spraying(algorithm, 8 * PACKET);
            let e = l.next_entropy(0, PACKET.into());
            assert_eq!(send(&mut l, 0, 2), vec![e, e]);
            // Good news and last-hop trims say nothing against the path.
            l.on_feedback(0, e, PathFeedback::Good);
            l.on_feedback(0, e, PathFeedback::Nack { last_hop: true });
            // Bad news about another entropy is not about this unit.
            l.on_feedback(0, (e + 1) % 16, PathFeedback::Ecn);
            assert_eq!(l.next_entropy(0, PACKET.into()), e, "{algorithm:?}");
            l.on_feedback(0, e, PathFeedback::Ecn);
            assert!(l.unit.is_none(), "{algorithm:?}: a mark ends the unit");
        }
        // A REPS freeze ends the unit, whichever entropy timed out; so does
        // a sender's idle restart.
        let mut l = spraying(LbAlgorithm::Reps, 8 * PACKET);
        let e = l.next_entropy(0, PACKET.into());
        l.on_feedback(0, (e + 1) % 16, PathFeedback::Timeout);
        assert!(l.unit.is_none());
        let mut l = spraying(LbAlgorithm::Oblivious, 8 * PACKET);
        let e = l.next_entropy(0, PACKET.into());
        l.end_unit();
        assert_ne!(l.next_entropy(0, PACKET.into()), e);
        // With REPS, the next pick after a mark is a recycled good entropy.
        let mut l = spraying(LbAlgorithm::Reps, 8 * PACKET);
        l.on_feedback(0, 9, PathFeedback::Good);
        let e = l.next_entropy(0, PACKET.into());
        assert_eq!(e, 9);
        l.on_feedback(0, 4, PathFeedback::Good);
        l.on_feedback(0, e, PathFeedback::Nack { last_hop: false });
        assert_eq!(l.next_entropy(0, PACKET.into()), 4);
        assert_eq!(send(&mut l, 0, 7), vec![4; 7], "a unit of eight");
        // A resend picks for itself, and the unit goes on after it.
        let mut l = spraying(LbAlgorithm::Oblivious, 4 * PACKET);
        let e = l.next_entropy(0, PACKET.into());
        assert_ne!(l.resend_entropy(0), e);
        assert_eq!(send(&mut l, 0, 3), vec![e; 3]);
    }

    #[test]
    fn names_round_trip() {
        for a in [
            LbAlgorithm::Oblivious,
            LbAlgorithm::Reps,
            LbAlgorithm::RepsPaper,
            LbAlgorithm::Bitmap,
            LbAlgorithm::Single,
        ] {
            assert_eq!(LbAlgorithm::parse(a.name()), Some(a));
        }
        assert_eq!(LbAlgorithm::parse("ecmp"), None);
    }
}
