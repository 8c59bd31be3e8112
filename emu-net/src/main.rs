//! `uet-emu`: front-end of the software UET fabric.
//!
//! ```text
//! uet-emu relay --config FILE [--listen ADDR] [--first-host N] [--duration S] [--report FILE]
//! uet-emu run SCENARIO --out DIR [--variant NAME] [--matrix PATH]
//!             [--provider-path DIR] [--plot SCRIPT] [--max-lag-us N]
//!             [--first-host N] [--slowdown K] [--check]
//! uet-emu sim SCENARIO --out DIR [--variant NAME] [--plot SCRIPT]
//!             [--first-host N] [--quiet] [--slowdown K]
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use emu_net::note;
use emu_net::relay::{Relay, RelaySettings};
use emu_net::runner::{self, RunOptions};
use emu_net::scenario::Scenario;
use emu_net::sim::{self, SimOptions};
use emu_net::{Fabric, FabricConfig};

const USAGE: &str = "usage:
  uet-emu relay --config FILE [--listen 127.0.0.1:4790] [--first-host 2] [--duration S] [--report FILE]
      Run the switch model as a UDP relay; host i is 127.0.0.(first-host + i),
      carrying on into 127.0.1.0 and up past 127.0.0.255.
      FILE is a scenario (its [fabric] table) or a bare fabric description.
  uet-emu run SCENARIO --out DIR [--variant NAME] [--matrix PATH] [--provider-path DIR]
              [--plot SCRIPT] [--max-lag-us N] [--first-host N]
              [--slowdown K] [--check]
      Run a connection-matrix scenario end to end and write results to DIR.
      --check fails unless the traffic crossed the relay.
      --slowdown K stretches time K times (rates / K, delays and times x K;
      bytes unchanged) for a machine too busy for the written rates.
      --max-lag-us N: the relay kept up when 99% of its deliveries left
      within N us of their model time and 99% of the datagrams it received
      were read within N us of arriving (default 100 x the slowdown).
  uet-emu sim SCENARIO --out DIR [--variant NAME] [--plot SCRIPT] [--first-host N] [--quiet]
              [--slowdown K]
      The same scenario in virtual time: every host is the provider's engine
      (no processes or sockets), the model between them, one simulated clock.
      Deterministic for the scenario's seed and valid on any machine; the
      same results, tables and plots as run. --slowdown K stretches the
      scenario as run does, to compare the two at one time scale.
  uet-emu --version";

/// Options that take no value.
const FLAGS: &[&str] = &["--check", "--quiet"];

struct Args(Vec<String>);

impl Args {
    fn opt(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .position(|a| a == name)
            .and_then(|i| self.0.get(i + 1))
            .map(String::as_str)
    }
    /// Option `name` parsed as a `T`; None when absent, an error naming
    /// the option when its value does not parse.
    fn parsed<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, String>
    where
        T::Err: std::fmt::Display,
    {
        self.opt(name)
            .map(|v| v.parse::<T>().map_err(|e| format!("{name} {v:?}: {e}")))
            .transpose()
    }
    /// Host i's address starts from 127.0.0.<--first-host> (default 2).
    fn first_host(&self) -> Result<u8, String> {
        Ok(self.parsed("--first-host")?.unwrap_or(2))
    }
    fn positional(&self) -> Option<&str> {
        let mut skip = false;
        for a in &self.0 {
            if skip {
                skip = false;
                continue;
            }
            if a.starts_with("--") {
                // Options take a value, flags do not.
                skip = !FLAGS.contains(&a.as_str());
                continue;
            }
            return Some(a);
        }
        None
    }
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    note!("uet-emu: {msg}");
    ExitCode::from(1)
}

fn load_fabric(path: &str) -> Result<FabricConfig, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    if let Ok(s) = Scenario::from_toml(&text) {
        if text.contains("[fabric") {
            let mut fabric = s.fabric;
            // Size BDP and buffers for the packets the hosts will send.
            fabric.switch.mtu =
                runner::host_mtu(&s.env, fabric.switch.mtu).map_err(|e| format!("{path}: {e}"))?;
            return Ok(fabric);
        }
    }
    toml::from_str(&text).map_err(|e| format!("{path}: {e}"))
}

/// `--duration S` of the relay: None (run until killed) when absent.
fn relay_duration(args: &Args) -> Result<Option<Duration>, String> {
    let Some(s) = args.parsed::<f64>("--duration")? else {
        return Ok(None);
    };
    if s.is_nan() || s < 0.0 {
        return Err(format!(
            "--duration {s}: need a number of seconds, 0 or more"
        ));
    }
    Duration::try_from_secs_f64(s)
        .map(Some)
        .map_err(|_| format!("--duration {s}: too long (leave it out to run until killed)"))
}

fn relay(args: &Args) -> ExitCode {
    let Some(config) = args.opt("--config") else {
        return fail(USAGE);
    };
    let cfg = match load_fabric(config) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let fabric = match Fabric::new(cfg) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    let listen = match args.opt("--listen").unwrap_or("127.0.0.1:4790").parse() {
        Ok(a) => a,
        Err(e) => return fail(format!("--listen: {e}")),
    };
    let first = match args.first_host() {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    let duration = match relay_duration(args) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let hosts = match RelaySettings::loopback_hosts(fabric.hosts.len(), first) {
        Ok(h) => h,
        Err(e) => return fail(e),
    };
    let mut relay = match Relay::bind(
        fabric,
        RelaySettings {
            listen,
            hosts: hosts.clone(),
            max_lag_ns: 100_000,
            sockbuf: 16 << 20,
            realtime: true,
        },
    ) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    note!(
        "uet-emu relay on {} for hosts {}..{}",
        listen,
        hosts[0],
        hosts[hosts.len() - 1]
    );
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        if let Some(d) = duration {
            let stop = &stop;
            s.spawn(move || {
                std::thread::sleep(d);
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            });
        }
        relay.run(&stop);
    });
    let report = relay.report();
    if !report.kept_up {
        note!(
            "uet-emu relay: DID NOT KEEP UP: {}",
            report.problems.join("; ")
        );
    }
    if let Some(path) = args.opt("--report") {
        match serde_json::to_string_pretty(&report) {
            Ok(j) => {
                if let Err(e) = std::fs::write(path, j) {
                    return fail(format!("{path}: {e}"));
                }
            }
            Err(e) => return fail(e),
        }
    }
    ExitCode::SUCCESS
}

/// A file next to the executable's install dir or in the source tree.
fn find(candidates: &[PathBuf]) -> Option<PathBuf> {
    candidates.iter().find(|p| p.exists()).cloned()
}

/// The scenario file named on the command line (its name defaults to the
/// file's stem) and the output directory, created.
fn scenario_and_out(args: &Args) -> Result<(Scenario, PathBuf), String> {
    let (Some(path), Some(out)) = (args.positional(), args.opt("--out")) else {
        return Err(USAGE.into());
    };
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let mut scenario = Scenario::from_toml(&text).map_err(|e| format!("{path}: {e}"))?;
    if scenario.name.is_empty() {
        scenario.name = Path::new(path)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
    }
    let out = PathBuf::from(out);
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok((scenario, out))
}

fn exe_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_default()
}

/// Print and save the table (with the failed variants), then draw the plots.
fn publish(
    scenario: &Scenario,
    results: &[runner::VariantResult],
    failed: &[(String, String)],
    out: &Path,
    args: &Args,
) {
    let mut table = runner::table(results);
    for (name, why) in failed {
        let line = why.lines().next().unwrap_or("");
        table.push_str(&format!("  [{name}] FAILED (no measurement): {line}\n"));
    }
    let _ = std::fs::write(out.join("table.txt"), &table);
    say(&format!(
        "== {}: {}\n{table}",
        scenario.name, scenario.description
    ));
    let exe_dir = exe_dir();
    let plot = args.opt("--plot").map(PathBuf::from).or_else(|| {
        find(&[
            exe_dir.join("plot_matrix.py"),
            PathBuf::from("fabtests/scripts/plot_matrix.py"),
        ])
    });
    match plot {
        Some(script) => {
            let python = if Path::new("/usr/bin/python3").exists() {
                "/usr/bin/python3"
            } else {
                "python3"
            };
            match std::process::Command::new(python)
                .arg(&script)
                .arg(out)
                .status()
            {
                Ok(s) if s.success() => say(&format!("plots in {}\n", out.display())),
                Ok(s) => note!(
                    "uet-emu: plotting failed ({s}); results are in {}",
                    out.display()
                ),
                Err(e) => note!("uet-emu: cannot run {python}: {e}"),
            }
        }
        None => note!("uet-emu: plot_matrix.py not found; no plots"),
    }
}

fn sim(args: &Args) -> ExitCode {
    // Checked before the output directory is made.
    let (slowdown, first_host) = match (slowdown_of(args), args.first_host()) {
        (Ok(k), Ok(f)) => (k, f),
        (Err(e), _) | (_, Err(e)) => return fail(e),
    };
    let (scenario, out) = match scenario_and_out(args) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let scenario = stretched(scenario, slowdown);
    let opts = SimOptions {
        out: out.clone(),
        variant: args.opt("--variant").map(str::to_string),
        first_host,
        progress: (!args.0.iter().any(|a| a == "--quiet")).then(|| Duration::from_secs(2)),
    };
    let (results, failed) = match sim::sim_all(&scenario, &opts) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    publish(&scenario, &results, &failed, &out, args);
    if !failed.is_empty() {
        return fail(format!("{} variant(s) failed", failed.len()));
    }
    ExitCode::SUCCESS
}

/// Print `text` to standard output. A reader that went away (`| head`)
/// loses the rest of it, and nothing else: results and plots are still
/// written.
fn say(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// `--slowdown K` (default 1): a finite factor of 1 or more.
fn slowdown_of(args: &Args) -> Result<f64, String> {
    let k = args.parsed::<f64>("--slowdown")?.unwrap_or(1.0);
    if !(k.is_finite() && k >= 1.0) {
        return Err(format!("--slowdown {k}: need a finite factor of 1 or more"));
    }
    Ok(k)
}

/// `scenario` stretched `k` times (`runner::slowed`), its description
/// saying so.
fn stretched(scenario: Scenario, k: f64) -> Scenario {
    if k == 1.0 {
        return scenario;
    }
    let mut s = runner::slowed(&scenario, k);
    s.description = format!(
        "{} [slowed down {}x: links at {} Gb/s, {} us]",
        s.description,
        k,
        s.fabric.topology.link_gbps,
        s.fabric.topology.link_delay_ns as f64 / 1e3
    );
    s
}

fn run(args: &Args) -> ExitCode {
    // Checked before the output directory is made.
    let slowdown = match slowdown_of(args) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    let (first_host, max_lag_us) = match (args.first_host(), args.parsed("--max-lag-us")) {
        (Ok(f), Ok(m)) => (f, m),
        (Err(e), _) | (_, Err(e)) => return fail(e),
    };
    let (mut scenario, out) = match scenario_and_out(args) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let exe_dir = exe_dir();
    let matrix = match args.opt("--matrix") {
        Some(m) => PathBuf::from(m),
        None => match find(&[
            exe_dir.join("uet_matrix"),
            PathBuf::from("build/bin/uet_matrix"),
        ]) {
            Some(p) => p,
            None => return fail("uet_matrix not found (make build, or --matrix PATH)"),
        },
    };
    let provider_path = args.opt("--provider-path").map(PathBuf::from).or_else(|| {
        std::env::var_os("FI_PROVIDER_PATH")
            .map(PathBuf::from)
            .or_else(|| {
                find(&[
                    exe_dir.join("../lib/libfabric"),
                    PathBuf::from("install/lib/libfabric"),
                ])
            })
    });
    let opts = RunOptions {
        out: out.clone(),
        variant: args.opt("--variant").map(str::to_string),
        matrix,
        provider_path,
        first_host,
        // Lag is judged against the scenario's own time scale: stretched K
        // times, a delivery K times later is the same error.
        max_lag_us: max_lag_us.unwrap_or((100.0 * slowdown).round() as u64),
        realtime: true,
        slowdown,
    };
    scenario = stretched(scenario, opts.slowdown);
    let opts = RunOptions {
        slowdown: 1.0,
        ..opts
    };
    let (results, failed) = match runner::run_all(&scenario, &opts) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    publish(&scenario, &results, &failed, &out, args);
    if results
        .iter()
        .any(|r| !r.summary.kept_up || !r.summary.hosts_kept_up || !r.summary.crossed_relay)
    {
        note!("uet-emu: WARNING: some runs are not valid measurements (see the notes above)");
    }
    if !failed.is_empty() {
        return fail(format!("{} variant(s) failed", failed.len()));
    }
    // --check: the traffic must have crossed the relay (a flow that did not
    // complete already failed the run). Keeping up is not checked: it
    // depends on the machine's load.
    if args.0.iter().any(|a| a == "--check") && results.iter().any(|r| !r.summary.crossed_relay) {
        return fail("--check: no datagram crossed the relay (the provider lacks FI_UET_FABRIC)");
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match argv.first().map(String::as_str) {
        Some("--version") | Some("-V") => {
            say(&format!("uet-emu {}\n", env!("CARGO_PKG_VERSION")));
            ExitCode::SUCCESS
        }
        Some("relay") => relay(&Args(argv[1..].to_vec())),
        Some("run") => run(&Args(argv[1..].to_vec())),
        Some("sim") => sim(&Args(argv[1..].to_vec())),
        _ => {
            note!("{USAGE}");
            ExitCode::from(2)
        }
    }
}
