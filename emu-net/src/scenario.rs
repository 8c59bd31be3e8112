//! Scenario files: a fabric, provider settings, connections and variants.
//!
//! ```toml
//! name = "incast8"
//! [fabric.topology]            # see config::TopologyConfig
//! kind = "single"
//! hosts = 9
//! [env]                        # provider parameters for every host
//! FI_UET_MTU = "4096"
//! [[flows]]                    # explicit connections ...
//! src = 0
//! dst = 8
//! bytes = 1048576
//! start_us = 0.0
//! after = []                   # flows that must complete first (indices:
//!                              # patterns' flows first, then these)
//! [[patterns]]                 # ... or generated ones
//! kind = "incast"              # incast | permutation | all-to-all
//! dst = 8
//! senders = 8
//! bytes = 1048576
//! start_spread_us = 0.0        # incast, permutation: each flow starts
//!                              # up to this much after start_us
//! [[variants]]                 # one run each; overrides env and trimming
//! name = "nscc-trim"
//! env = { FI_UET_CC = "nscc" }
//! trimming = true
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::config::FabricConfig;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub fabric: FabricConfig,
    /// Environment of every host process (provider parameters).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub flows: Vec<FlowSpec>,
    #[serde(default)]
    pub patterns: Vec<Pattern>,
    #[serde(default)]
    pub variants: Vec<Variant>,
    /// Give up on a run after this many seconds.
    #[serde(default = "default_timeout")]
    pub timeout_s: f64,
}

fn default_timeout() -> f64 {
    60.0
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowSpec {
    pub src: usize,
    pub dst: usize,
    pub bytes: u64,
    #[serde(default)]
    pub start_us: f64,
    /// Flows (indices in the expanded list: the patterns' flows first, then
    /// the `[[flows]]` entries) that must complete first. Each must start or
    /// end at this flow's source host, which observes it.
    #[serde(default)]
    pub after: Vec<usize>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Pattern {
    /// Hosts 0..senders (skipping `dst`) each send `bytes` to `dst`.
    Incast {
        dst: usize,
        senders: usize,
        bytes: u64,
        #[serde(default)]
        start_us: f64,
        /// Each flow starts at `start_us` plus a draw in [0, this) from
        /// the fabric's seed: real senders never start at one instant.
        #[serde(default)]
        start_spread_us: f64,
    },
    /// Host i sends to (i + shift) mod hosts.
    Permutation {
        shift: usize,
        bytes: u64,
        #[serde(default)]
        start_us: f64,
        /// As for `Incast`.
        #[serde(default)]
        start_spread_us: f64,
    },
    /// Sequential all-to-all in ring order: in round r (1..hosts) host i
    /// sends to (i + r) mod hosts once its round r-1 send completed.
    AllToAll {
        bytes: u64,
        #[serde(default)]
        start_us: f64,
    },
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    pub name: String,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Overrides the fabric's trimming switch.
    #[serde(default)]
    pub trimming: Option<bool>,
}

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{0}")]
    Parse(#[from] toml::de::Error),
    #[error("flow {flow}: {why}")]
    Flow { flow: usize, why: String },
    #[error("no flows")]
    Empty,
    #[error("timeout_s = {0}: need a number of seconds above 0 and at most {MAX_TIMEOUT_S:e}")]
    Timeout(f64),
    #[error(
        "pattern {pattern}: start_spread_us = {spread}: need a finite number of us, 0 or more"
    )]
    Spread { pattern: usize, spread: f64 },
}

/// Longest `timeout_s`, seconds (some 31 years): host processes turn it
/// into a 64-bit nanosecond deadline on the realtime clock.
pub const MAX_TIMEOUT_S: f64 = 1e9;

impl Scenario {
    pub fn from_toml(text: &str) -> Result<Scenario, ScenarioError> {
        Ok(toml::from_str(text)?)
    }

    /// `timeout_s` as a duration; an error for NaN, infinity, zero or
    /// less, and past [`MAX_TIMEOUT_S`].
    pub fn timeout(&self) -> Result<Duration, ScenarioError> {
        let s = self.timeout_s;
        if !(s > 0.0 && s <= MAX_TIMEOUT_S) {
            return Err(ScenarioError::Timeout(s));
        }
        Duration::try_from_secs_f64(s).map_err(|_| ScenarioError::Timeout(s))
    }

    /// The patterns' flows, in pattern order, followed by the explicit
    /// flows (so explicit flows can wait for generated ones); checked.
    pub fn expand(&self) -> Result<Vec<FlowSpec>, ScenarioError> {
        let n = self.fabric.topology.host_count();
        let mut flows = Vec::new();
        for (index, p) in self.patterns.iter().enumerate() {
            // Start offsets drawn from the fabric's seed and the pattern's
            // place: the same file gives the same starts on every run.
            let mut rng = SmallRng::seed_from_u64(self.fabric.seed ^ ((index as u64 + 1) << 32));
            let mut start = |start_us: f64, spread: f64| -> Result<f64, ScenarioError> {
                if !(spread.is_finite() && spread >= 0.0) {
                    return Err(ScenarioError::Spread {
                        pattern: index,
                        spread,
                    });
                }
                Ok(match spread > 0.0 {
                    true => start_us + rng.gen_range(0.0..spread),
                    false => start_us,
                })
            };
            match *p {
                Pattern::Incast {
                    dst,
                    senders,
                    bytes,
                    start_us,
                    start_spread_us,
                } => {
                    for src in (0..n).filter(|&h| h != dst).take(senders) {
                        flows.push(FlowSpec {
                            src,
                            dst,
                            bytes,
                            start_us: start(start_us, start_spread_us)?,
                            after: Vec::new(),
                        });
                    }
                }
                Pattern::Permutation {
                    shift,
                    bytes,
                    start_us,
                    start_spread_us,
                } => {
                    for src in 0..n {
                        flows.push(FlowSpec {
                            src,
                            dst: (src + shift) % n,
                            bytes,
                            start_us: start(start_us, start_spread_us)?,
                            after: Vec::new(),
                        });
                    }
                }
                Pattern::AllToAll { bytes, start_us } => {
                    let base = flows.len();
                    for r in 1..n {
                        for src in 0..n {
                            let after = if r == 1 {
                                Vec::new()
                            } else {
                                vec![base + (r - 2) * n + src]
                            };
                            flows.push(FlowSpec {
                                src,
                                dst: (src + r) % n,
                                bytes,
                                start_us,
                                after,
                            });
                        }
                    }
                }
            }
        }
        flows.extend(self.flows.iter().cloned());
        if flows.is_empty() {
            return Err(ScenarioError::Empty);
        }
        for (i, f) in flows.iter().enumerate() {
            let bad = |why: String| ScenarioError::Flow { flow: i, why };
            if f.src >= n || f.dst >= n || f.src == f.dst {
                return Err(bad(format!("hosts {} -> {} (of {n})", f.src, f.dst)));
            }
            if f.bytes == 0 {
                return Err(bad("zero bytes".into()));
            }
            for &a in &f.after {
                let Some(d) = flows.get(a) else {
                    return Err(bad(format!("waits for unknown flow {a}")));
                };
                if a >= i {
                    return Err(bad(format!("waits for a later flow {a}")));
                }
                if d.src != f.src && d.dst != f.src {
                    return Err(bad(format!(
                        "waits for flow {a}, which host {} cannot observe",
                        f.src
                    )));
                }
            }
        }
        Ok(flows)
    }

    /// The variants to run; one plain run when none is listed.
    pub fn runs(&self) -> Vec<Variant> {
        if self.variants.is_empty() {
            vec![Variant {
                name: "default".into(),
                ..Default::default()
            }]
        } else {
            self.variants.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_spread_staggers_a_patterns_flows_the_same_way_every_time() {
        let text = |spread: &str| {
            format!(
                "[fabric.topology]\nkind = \"single\"\nhosts = 9\n\
                 [[patterns]]\nkind = \"incast\"\ndst = 8\nsenders = 8\n\
                 bytes = 1000\nstart_us = 10.0\nstart_spread_us = {spread}\n"
            )
        };
        let s = Scenario::from_toml(&text("350.0")).unwrap();
        let starts: Vec<f64> = s.expand().unwrap().iter().map(|f| f.start_us).collect();
        assert_eq!(starts.len(), 8);
        assert!(
            starts.iter().all(|&t| (10.0..360.0).contains(&t)),
            "{starts:?}"
        );
        let distinct = starts.iter().filter(|&&t| t != starts[0]).count();
        assert!(distinct > 0, "{starts:?}");
        let again: Vec<f64> = s.expand().unwrap().iter().map(|f| f.start_us).collect();
        assert_eq!(starts, again);
        // No spread: one instant, as before the knob.
        let s = Scenario::from_toml(&text("0.0")).unwrap();
        assert!(s.expand().unwrap().iter().all(|f| f.start_us == 10.0));
        for bad in ["-1.0", "inf", "nan"] {
            let s = Scenario::from_toml(&text(bad)).unwrap();
            assert!(
                matches!(s.expand(), Err(ScenarioError::Spread { pattern: 0, .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn timeout_is_a_positive_bounded_number_of_seconds() {
        let with = |t: &str| Scenario::from_toml(&format!("timeout_s = {t}")).unwrap();
        assert_eq!(with("2.5").timeout().unwrap(), Duration::from_millis(2500));
        assert_eq!(
            with("1e9").timeout().unwrap(),
            Duration::from_secs(1_000_000_000)
        );
        for bad in ["1e20", "inf", "nan", "0", "-1"] {
            assert!(with(bad).timeout().is_err(), "{bad}");
        }
    }

    #[test]
    fn patterns_expand_with_dependencies() {
        let s = Scenario::from_toml(
            r#"
            [fabric.topology]
            kind = "single"
            hosts = 4
            [[patterns]]
            kind = "incast"
            dst = 0
            senders = 3
            bytes = 10
            [[patterns]]
            kind = "all-to-all"
            bytes = 5
            "#,
        )
        .unwrap();
        let f = s.expand().unwrap();
        assert_eq!(f.len(), 3 + 12);
        assert_eq!((f[0].src, f[0].dst), (1, 0));
        // Round 2 of host 1 waits for its round 1 send.
        let r2 = &f[3 + 4 + 1];
        assert_eq!((r2.src, r2.dst), (1, 3));
        assert_eq!(r2.after, vec![3 + 1]);
        assert_eq!(s.runs().len(), 1);
    }

    #[test]
    fn unobservable_dependency_is_rejected() {
        let s = Scenario::from_toml(
            r#"
            [fabric.topology]
            hosts = 4
            [[flows]]
            src = 0
            dst = 1
            bytes = 1
            [[flows]]
            src = 2
            dst = 3
            bytes = 1
            after = [0]
            "#,
        )
        .unwrap();
        assert!(matches!(
            s.expand(),
            Err(ScenarioError::Flow { flow: 1, .. })
        ));
    }

    #[test]
    fn shipped_scenarios_parse_and_build() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fabtests/scenarios");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().and_then(|e| e.to_str()) != Some("toml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let s = Scenario::from_toml(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            s.expand().unwrap_or_else(|e| panic!("{path:?}: {e}"));
            crate::Fabric::new(s.fabric.clone()).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            seen += 1;
        }
        assert!(seen >= 7, "found {seen} scenarios in {dir:?}");
    }
}
