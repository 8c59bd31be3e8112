//! A halo exchange between two endpoints, each driven by its own thread
//! over loopback: every iteration each side posts a receive, sends SIZE
//! bytes to the other and waits for both to complete, as MPI ranks do in
//! `MPI_Waitall`. Prints the mean time per exchange and, per side and
//! iteration, the datagrams sent and the ACKs among them (alone or riding
//! on another packet):
//!   halo_datagrams [ITERATIONS [SIZE [transmit|delivery]]]
//! `delivery` asks for delivery completion, as MPICH's ch4:ofi does for
//! every send: each message then also draws an SES response. `FI_UET_*`
//! parameters in the environment apply.

use std::net::SocketAddr;
use std::time::Instant;

use uet::{CompletionKind, CompletionLevel, Config, Endpoint, Payload, ProbeFlags, RecvOp, SendOp};

/// Iterations before the clock starts.
const WARMUP: u64 = 100;

/// What one side measured: microseconds per exchange, then datagrams,
/// ACKs and ACKs riding on requests, per iteration.
type Side = (f64, f64, f64, f64);

fn exchange(
    mut ep: Endpoint,
    peer: SocketAddr,
    iterations: u64,
    size: usize,
    level: CompletionLevel,
) -> uet::Result<Side> {
    let mut start = Instant::now();
    for i in 0..WARMUP + iterations {
        if i == WARMUP {
            start = Instant::now();
        }
        ep.recv(RecvOp {
            src: None,
            tagged: false,
            tag: 0,
            ignore: 0,
            buffer: Box::new(vec![0u8; size]),
            context: 0,
            signal: true,
            probe: ProbeFlags::default(),
        })?;
        ep.send(SendOp {
            dest: peer,
            payload: Payload::Owned(vec![7u8; size]),
            tag: None,
            cq_data: None,
            context: 1,
            level,
            signal: true,
        })?;
        let (mut sent, mut received) = (false, false);
        while !(sent && received) {
            ep.progress_app();
            while let Some(c) = ep.poll_completion() {
                if let Some(e) = c.error {
                    eprintln!("operation failed: {e:?}");
                    std::process::exit(1);
                }
                match c.kind {
                    CompletionKind::Send => sent = true,
                    CompletionKind::Recv => received = true,
                    _ => {}
                }
            }
        }
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / iterations as f64;
    let all = (WARMUP + iterations) as f64;
    let datagrams: u64 = ep.stats().sent.iter().sum();
    let st = ep.engine_stats();
    Ok((
        us,
        datagrams as f64 / all,
        st.acks_sent as f64 / all,
        st.acks_piggybacked as f64 / all,
    ))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let iterations: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(5000)
        .max(1);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(8192);
    let level = match args.next().as_deref() {
        Some("transmit") => CompletionLevel::Transmit,
        _ => CompletionLevel::Delivery,
    };
    let cfg = Config::from_process_env().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1);
    });
    let any = "127.0.0.1:0".parse().expect("address");
    let (Ok(a), Ok(b)) = (Endpoint::bind(&cfg, any), Endpoint::bind(&cfg, any)) else {
        eprintln!("cannot bind UDP sockets on 127.0.0.1");
        std::process::exit(1);
    };
    let (a_addr, b_addr) = (a.local_addr(), b.local_addr());
    let other = std::thread::spawn(move || exchange(b, a_addr, iterations, size, level));
    let sides = [
        exchange(a, b_addr, iterations, size, level),
        other.join().unwrap_or_else(|_| {
            eprintln!("the other side panicked");
            std::process::exit(1);
        }),
    ];
    let mut slowest = 0.0f64;
    for (name, side) in ["a", "b"].iter().zip(sides) {
        let (us, datagrams, acks, riding) = side.unwrap_or_else(|e| {
            eprintln!("{name}: {e}");
            std::process::exit(1);
        });
        slowest = slowest.max(us);
        println!(
            "{name}: {datagrams:.2} datagrams, {acks:.2} ACKs ({riding:.2} riding) per iteration"
        );
    }
    println!("{slowest:.1} us per exchange ({size} B, {level:?} completion)");
}
