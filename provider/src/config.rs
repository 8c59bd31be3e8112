//! The provider's one configuration struct.
//!
//! Every knob is listed once in [`PARAMS`]; the libfabric shim defines each as
//! an `FI_UET_<NAME>` parameter (so `fi_info -e` lists it with its help text)
//! and feeds the values it reads back through [`Config::set`]. Defaults work on
//! loopback.

/// The kind of a parameter, mirroring libfabric's `enum fi_param_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    Int,
    Bool,
    Str,
}

/// One configuration knob: its name without the `FI_UET_` prefix.
#[derive(Clone, Copy, Debug)]
pub struct ParamSpec {
    pub name: &'static str,
    pub kind: ParamKind,
    pub help: &'static str,
}

/// Every parameter the provider reads. The help strings state the default.
pub const PARAMS: &[ParamSpec] = &[
    ParamSpec {
        name: "mtu",
        kind: ParamKind::Int,
        help: "Largest UDP payload per packet in bytes, UET headers included (1024..65000; default 0 = auto: 65000 on loopback, 1472 (one standard Ethernet frame) elsewhere). Use 4096 to mimic a UET fabric, 9000 on jumbo-frame networks.",
    },
    ParamSpec {
        name: "window",
        kind: ParamKind::Int,
        help: "Most unacknowledged packets per peer (default 256; 8..1024).",
    },
    ParamSpec {
        name: "rto_min_us",
        kind: ParamKind::Int,
        help: "Smallest retransmission timeout in microseconds (default 1000).",
    },
    ParamSpec {
        name: "rto_max_us",
        kind: ParamKind::Int,
        help: "Largest retransmission timeout after backoff in microseconds (default 200000).",
    },
    ParamSpec {
        name: "max_retries",
        kind: ParamKind::Int,
        help: "Retransmissions of one packet before its peer is declared unreachable and its operations fail with FI_EIO (default 30).",
    },
    ParamSpec {
        name: "sockbuf",
        kind: ParamKind::Int,
        help: "Requested socket send and receive buffer size in bytes (default 8388608). As root the kernel limit is bypassed.",
    },
    ParamSpec {
        name: "inject_size",
        kind: ParamKind::Int,
        help: "Largest message fi_inject accepts, in bytes (default 4096).",
    },
    ParamSpec {
        name: "spin_before_yield",
        kind: ParamKind::Int,
        help: "Empty progress calls before the polling thread yields its core, so oversubscribed ranks make progress (default 64; 0 = always yield).",
    },
    ParamSpec {
        name: "src_addr",
        kind: ParamKind::Str,
        help: "IP address an endpoint binds when the application names no source or destination address (default 127.0.0.1; \"auto\" = the address of the interface holding the default route).",
    },
    ParamSpec {
        name: "pdc_idle_us",
        kind: ParamKind::Int,
        help: "Idle time in microseconds after which a delivery context with nothing in flight is closed with the close handshake, freeing its state; the next message reopens it in 0 RTT (default 1000000; 0 = never close).",
    },
    ParamSpec {
        name: "port",
        kind: ParamKind::Int,
        help: "UDP port an endpoint binds when the application names none (default 0: any free port).",
    },
];

/// Runtime configuration of an endpoint, filled from the `FI_UET_*` parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// 0 = choose from the bound address (see [`Config::effective_mtu`]).
    pub mtu: usize,
    pub window: usize,
    pub rto_min_us: u64,
    pub rto_max_us: u64,
    pub max_retries: u32,
    pub sockbuf: usize,
    pub inject_size: usize,
    pub spin_before_yield: u32,
    pub port: u16,
    pub pdc_idle_us: u64,
    /// Empty = loopback.
    pub src_addr: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mtu: 0,
            window: 256,
            rto_min_us: 1000,
            rto_max_us: 200_000,
            max_retries: 30,
            sockbuf: 8 << 20,
            inject_size: 4096,
            spin_before_yield: 64,
            port: 0,
            pdc_idle_us: 1_000_000,
            src_addr: String::new(),
        }
    }
}

/// A parameter value that is out of range or of the wrong kind.
#[derive(Debug, thiserror::Error)]
#[error("FI_UET_{name}: {reason}")]
pub struct ConfigError {
    pub name: String,
    pub reason: String,
}

/// A value read from the environment through libfabric.
#[derive(Clone, Debug)]
pub enum ParamValue {
    Int(i64),
    Bool(bool),
    Str(String),
}

impl Config {
    /// Largest message the engine accepts (bounded by the SES request-length
    /// field, 32 bits).
    pub const MAX_MSG_SIZE: usize = (u32::MAX as usize) & !0xfff;

    /// Most operations an endpoint holds per direction: sends not yet
    /// complete, and posted receives. Beyond it posting returns `Again`.
    pub const QUEUE_DEPTH: usize = 8192;

    /// MTU on loopback, where the kernel carries 64 KiB datagrams cheaply.
    pub const LOOPBACK_MTU: usize = 65000;
    /// MTU elsewhere: one standard Ethernet frame (1500 - IP - UDP headers).
    pub const ETHERNET_MTU: usize = 1472;

    /// The packet size an endpoint bound at `local` uses.
    pub fn effective_mtu(&self, local: std::net::IpAddr) -> usize {
        match self.mtu {
            0 if local.is_loopback() => Self::LOOPBACK_MTU,
            0 => Self::ETHERNET_MTU,
            n => n,
        }
    }

    /// The current value of a parameter, by its `PARAMS` name.
    pub fn get(&self, name: &str) -> Option<ParamValue> {
        if name == "src_addr" {
            return Some(ParamValue::Str(self.src_addr.clone()));
        }
        let v = match name {
            "mtu" => self.mtu as i64,
            "window" => self.window as i64,
            "rto_min_us" => self.rto_min_us as i64,
            "rto_max_us" => self.rto_max_us as i64,
            "max_retries" => self.max_retries as i64,
            "sockbuf" => self.sockbuf as i64,
            "inject_size" => self.inject_size as i64,
            "spin_before_yield" => self.spin_before_yield as i64,
            "port" => self.port as i64,
            "pdc_idle_us" => self.pdc_idle_us as i64,
            _ => return None,
        };
        Some(ParamValue::Int(v))
    }

    /// Apply one parameter read by the shim. Unknown names and out-of-range
    /// values are errors so a typo is reported rather than ignored.
    pub fn set(&mut self, name: &str, value: ParamValue) -> Result<(), ConfigError> {
        let err = |reason: String| ConfigError {
            name: name.to_ascii_uppercase(),
            reason,
        };
        let int = |lo: i64, hi: i64| -> Result<i64, ConfigError> {
            match value {
                ParamValue::Int(v) if (lo..=hi).contains(&v) => Ok(v),
                ParamValue::Int(v) => Err(err(format!("{v} is outside {lo}..={hi}"))),
                _ => Err(err("expects an integer".into())),
            }
        };
        match name {
            "mtu" => {
                let v = int(0, 65000)?;
                if v != 0 && v < 1024 {
                    return Err(err(format!("{v} is below 1024 (0 = auto)")));
                }
                self.mtu = v as usize
            }
            "window" => self.window = int(8, 1024)? as usize,
            "rto_min_us" => self.rto_min_us = int(10, 10_000_000)? as u64,
            "rto_max_us" => self.rto_max_us = int(10, 100_000_000)? as u64,
            "max_retries" => self.max_retries = int(1, 1000)? as u32,
            "sockbuf" => self.sockbuf = int(65536, 1 << 30)? as usize,
            "inject_size" => self.inject_size = int(0, 65536)? as usize,
            "spin_before_yield" => self.spin_before_yield = int(0, 1 << 30)? as u32,
            "port" => self.port = int(0, 65535)? as u16,
            "pdc_idle_us" => self.pdc_idle_us = int(0, 1 << 40)? as u64,
            "src_addr" => match value {
                ParamValue::Str(s) => self.src_addr = s,
                _ => return Err(err("expects an IP address or \"auto\"".into())),
            },
            _ => return Err(err("unknown parameter".into())),
        }
        if self.rto_max_us < self.rto_min_us {
            self.rto_max_us = self.rto_min_us;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_param_has_a_setter() {
        let defaults = Config::default();
        for p in PARAMS {
            let v = defaults.get(p.name).expect(p.name);
            let mut c = Config::default();
            c.set(p.name, v).unwrap();
            assert_eq!(c, defaults, "{}", p.name);
        }
    }

    #[test]
    fn out_of_range_is_rejected() {
        let mut c = Config::default();
        assert!(c.set("mtu", ParamValue::Int(10)).is_err());
        assert!(c.set("window", ParamValue::Str("x".into())).is_err());
        assert!(c.set("nonsense", ParamValue::Int(1)).is_err());
        assert_eq!(c, Config::default());
    }
}
