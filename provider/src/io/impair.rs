//! Transmit-side fault injection (`FI_UET_FAULT_*`), for tests and demos.
//!
//! Sans-IO and seeded: [`Impairer::decide`] looks at a packet's class and
//! `now` and says what the driver does with it. Probabilities are in
//! per-mille (0..=1000), each drawn independently per packet:
//!
//! * `drop`: data and ACK packets are not sent.
//! * `trim` (data only, when not dropped): cut after the PDS request + SES
//!   headers (keeping an ACK riding at the end, `wire::ack_trailer`) and
//!   sent with DSCP `FI_UET_DSCP_TRIMMED`, as a switch does instead of
//!   dropping.
//! * `ecn` (data only): sent with ECN CE instead of the engine's codepoint.
//! * `dup`: data and ACK packets are sent twice.
//! * `reorder`: data and ACK packets are held for `delay_ns` and sent by a
//!   later progress call, so packets sent after them overtake them.
//!
//! Everything else (SES responses, NACKs, control) is never impaired.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::wire::{NextHeader, PacketType, Prologue, RequestRepr, SesRequestRepr};

/// What kind of packet a datagram is, as far as impairment cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketClass {
    /// A request carrying an SES standard request header (message payload).
    Data,
    Ack,
    Other,
}

impl PacketClass {
    pub fn of(datagram: &[u8]) -> PacketClass {
        let Ok(p) = Prologue::parse(datagram) else {
            return PacketClass::Other;
        };
        match p.ptype {
            PacketType::RudRequest
            | PacketType::RodRequest
            | PacketType::RudCcRequest
            | PacketType::RodCcRequest
                if p.next == NextHeader::SesRequest =>
            {
                PacketClass::Data
            }
            PacketType::Ack | PacketType::AckCc | PacketType::AckCcx => PacketClass::Ack,
            _ => PacketClass::Other,
        }
    }
}

/// Bytes a trimmed data packet keeps: its PDS request and SES headers.
pub const TRIMMED_LEN: usize = RequestRepr::LEN + SesRequestRepr::LEN;

/// Fault probabilities in per-mille, the reordering delay and the seed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultConfig {
    pub drop: u32,
    pub dup: u32,
    pub reorder: u32,
    pub trim: u32,
    pub ecn: u32,
    pub delay_ns: u64,
    pub seed: u64,
}

impl FaultConfig {
    pub fn any(&self) -> bool {
        self.drop + self.dup + self.reorder + self.trim + self.ecn > 0
    }
}

/// The fate of one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Drop,
    Send(Treatment),
}

/// How a packet that is sent is altered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Treatment {
    /// 1, or 2 when duplicated.
    pub copies: u8,
    /// Send no earlier than this time (ns) instead of now.
    pub hold_until: Option<u64>,
    /// Cut to [`TRIMMED_LEN`] bytes, DSCP TRIMMED.
    pub trim: bool,
    /// ECN CE instead of the engine's codepoint.
    pub mark_ce: bool,
}

impl Treatment {
    pub const UNTOUCHED: Treatment = Treatment {
        copies: 1,
        hold_until: None,
        trim: false,
        mark_ce: false,
    };
}

pub struct Impairer {
    config: FaultConfig,
    rng: SmallRng,
}

impl Impairer {
    pub fn new(config: FaultConfig) -> Impairer {
        Impairer {
            config,
            rng: SmallRng::seed_from_u64(config.seed),
        }
    }

    fn chance(&mut self, per_mille: u32) -> bool {
        per_mille > 0 && self.rng.gen_range(0..1000) < per_mille
    }

    /// Decide the fate of a packet of class `class` handed over at `now`.
    pub fn decide(&mut self, now: u64, class: PacketClass) -> Verdict {
        if class == PacketClass::Other {
            return Verdict::Send(Treatment::UNTOUCHED);
        }
        let data = class == PacketClass::Data;
        let c = self.config;
        // Draw every knob each time, so one knob's setting does not shift
        // the random sequence another knob sees.
        let drop = self.chance(c.drop);
        let trim = self.chance(c.trim) && data;
        let mark_ce = self.chance(c.ecn) && data;
        let dup = self.chance(c.dup);
        let hold = self.chance(c.reorder);
        if drop {
            return Verdict::Drop;
        }
        Verdict::Send(Treatment {
            copies: if dup { 2 } else { 1 },
            hold_until: hold.then_some(now + c.delay_ns),
            trim,
            mark_ce,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(config: FaultConfig, class: PacketClass, n: u32) -> [u32; 5] {
        let mut imp = Impairer::new(config);
        let mut t = [0u32; 5]; // drop, dup, hold, trim, ce
        for i in 0..n {
            match imp.decide(i as u64 * 10, class) {
                Verdict::Drop => t[0] += 1,
                Verdict::Send(s) => {
                    t[1] += (s.copies == 2) as u32;
                    if let Some(at) = s.hold_until {
                        assert_eq!(at, i as u64 * 10 + config.delay_ns);
                        t[2] += 1;
                    }
                    t[3] += s.trim as u32;
                    t[4] += s.mark_ce as u32;
                }
            }
        }
        t
    }

    #[test]
    fn rates_follow_the_knobs() {
        let c = FaultConfig {
            drop: 100,
            dup: 50,
            reorder: 200,
            trim: 300,
            ecn: 500,
            delay_ns: 7,
            seed: 1,
        };
        let n = 100_000;
        let t = tally(c, PacketClass::Data, n);
        let sent = n - t[0];
        // Expected rates within a few standard deviations.
        let near = |got: u32, of: u32, per_mille: u32| {
            let want = of as f64 * per_mille as f64 / 1000.0;
            (got as f64 - want).abs() < 5.0 * want.sqrt() + 1.0
        };
        assert!(near(t[0], n, 100), "drops {}", t[0]);
        assert!(near(t[1], sent, 50), "dups {}", t[1]);
        assert!(near(t[2], sent, 200), "holds {}", t[2]);
        assert!(near(t[3], sent, 300), "trims {}", t[3]);
        assert!(near(t[4], sent, 500), "marks {}", t[4]);
    }

    #[test]
    fn acks_are_never_trimmed_or_marked_and_others_untouched() {
        let c = FaultConfig {
            drop: 100,
            dup: 100,
            reorder: 100,
            trim: 1000,
            ecn: 1000,
            delay_ns: 1,
            seed: 9,
        };
        let t = tally(c, PacketClass::Ack, 10_000);
        assert!(t[0] > 0 && t[1] > 0 && t[2] > 0);
        assert_eq!((t[3], t[4]), (0, 0));
        let t = tally(c, PacketClass::Other, 10_000);
        assert_eq!(t, [0, 0, 0, 0, 0]);
    }

    #[test]
    fn same_seed_same_decisions() {
        let c = FaultConfig {
            drop: 300,
            dup: 300,
            reorder: 300,
            trim: 300,
            ecn: 300,
            delay_ns: 5,
            seed: 42,
        };
        let mut a = Impairer::new(c);
        let mut b = Impairer::new(c);
        let mut c2 = Impairer::new(FaultConfig { seed: 43, ..c });
        let va: Vec<_> = (0..1000).map(|i| a.decide(i, PacketClass::Data)).collect();
        let vb: Vec<_> = (0..1000).map(|i| b.decide(i, PacketClass::Data)).collect();
        let vc: Vec<_> = (0..1000).map(|i| c2.decide(i, PacketClass::Data)).collect();
        assert_eq!(va, vb);
        assert_ne!(va, vc);
        assert!(!FaultConfig::default().any());
    }

    #[test]
    fn classifies_by_headers() {
        use crate::wire::{AckRepr, RequestRepr};
        let mut b = [0u8; 128];
        let req = RequestRepr {
            ptype: PacketType::RudRequest,
            next: NextHeader::SesRequest,
            flags: 0,
            clear_psn_offset: 0,
            psn: 1,
            spdcid: 1,
            dpdcid: 1,
        };
        req.emit(&mut b);
        assert_eq!(PacketClass::of(&b), PacketClass::Data);
        RequestRepr {
            next: NextHeader::SesResponse,
            ..req
        }
        .emit(&mut b);
        assert_eq!(PacketClass::of(&b), PacketClass::Other);
        AckRepr::default().emit(&mut b);
        assert_eq!(PacketClass::of(&b), PacketClass::Ack);
        assert_eq!(PacketClass::of(&[]), PacketClass::Other);
    }
}
