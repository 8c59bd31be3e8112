//! `FI_UET_TRACE`: the engine's congestion-control events written as CSV,
//! one line per ACK, NACK and timeout, for plotting cwnd and delay over time.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::SocketAddr;

use crate::engine::{Engine, TraceEvent};

pub(crate) struct TraceFile {
    out: BufWriter<File>,
    events: Vec<TraceEvent>,
    /// Wall-clock offset of the engine's time origin, so traces of several
    /// processes line up (ns since the Unix epoch at engine time 0).
    epoch_unix_ns: u64,
    failed: bool,
}

impl TraceFile {
    /// Open `pattern` (`%p` = process ID, `%e` = the endpoint's port) and
    /// write the header. The engine starts recording.
    pub(crate) fn open(
        pattern: &str,
        local: SocketAddr,
        engine: &mut Engine,
        epoch_unix_ns: u64,
    ) -> std::io::Result<TraceFile> {
        let path = pattern
            .replace("%p", &std::process::id().to_string())
            .replace("%e", &local.port().to_string());
        let mut out = BufWriter::new(File::create(path)?);
        writeln!(out, "{},wall_ns", TraceEvent::CSV_HEADER)?;
        engine.enable_trace();
        Ok(TraceFile {
            out,
            events: Vec::new(),
            epoch_unix_ns,
            failed: false,
        })
    }

    /// Append what the engine recorded since the last call. A write error
    /// stops the trace (once) rather than the transport.
    pub(crate) fn drain(&mut self, engine: &mut Engine) {
        engine.take_trace(&mut self.events);
        if self.failed {
            self.events.clear();
            return;
        }
        for e in self.events.drain(..) {
            let wall = self.epoch_unix_ns + e.now;
            if writeln!(self.out, "{},{wall}", e.csv()).is_err() {
                self.failed = true;
                break;
            }
        }
    }
}

impl Drop for TraceFile {
    fn drop(&mut self) {
        let _ = self.out.flush();
    }
}
