//! Stream messages between two endpoints in one process and print the rate.
//! Usage: cargo run --release --example stream -- [message bytes] [count]

use std::time::Instant;

use uet::{CompletionKind, CompletionLevel, Config, Endpoint, Payload, ProbeFlags, RecvOp, SendOp};

fn main() {
    let mut args = std::env::args().skip(1);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(4 << 20);
    let count: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(256);
    let cfg = Config::default();
    let any = "127.0.0.1:0".parse().expect("address");
    let (Ok(mut a), Ok(mut b)) = (Endpoint::bind(&cfg, any), Endpoint::bind(&cfg, any)) else {
        eprintln!("cannot bind UDP sockets on 127.0.0.1");
        std::process::exit(1);
    };
    let data = vec![7u8; size];
    let start = Instant::now();
    let (mut sent, mut received, mut posted) = (0, 0, 0);
    while received < count || sent < count {
        while posted < count && posted < received + 8 {
            let op = RecvOp {
                src: None,
                tagged: false,
                tag: 0,
                ignore: 0,
                buffer: Box::new(vec![0u8; size]),
                context: posted as u64,
                signal: true,
                probe: ProbeFlags::default(),
            };
            b.recv(op).expect("post receive");
            let op = SendOp {
                dest: b.local_addr(),
                payload: Payload::Owned(data.clone()),
                tag: None,
                cq_data: None,
                context: posted as u64,
                level: CompletionLevel::Transmit,
                signal: true,
            };
            a.send(op).expect("post send");
            posted += 1;
        }
        a.progress();
        b.progress();
        while let Some(c) = a.poll_completion() {
            sent += (c.kind == CompletionKind::Send) as usize;
        }
        while let Some(c) = b.poll_completion() {
            received += (c.kind == CompletionKind::Recv) as usize;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{count} x {size} B in {secs:.3} s: {:.2} GB/s",
        (count * size) as f64 / secs / 1e9
    );
}
