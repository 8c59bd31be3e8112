//! User-space work of a 64-byte ping-pong through two endpoints in one
//! thread (engine and driver, system calls excluded), for callgrind:
//!   valgrind --tool=callgrind target/release/examples/pingpong_cost N
//! Loopback delivers a datagram within the sender's system call, so every
//! receive finds its message: the count does not depend on timing. Compare
//! two N to get the cost per round trip. `FI_UET_*` parameters in the
//! environment apply.

use uet::{CompletionKind, CompletionLevel, Config, Endpoint, Payload, ProbeFlags, RecvOp, SendOp};

fn receive_op(context: u64) -> RecvOp {
    RecvOp {
        src: None,
        tagged: false,
        tag: 0,
        ignore: 0,
        buffer: Box::new(vec![0u8; 64]),
        context,
        signal: true,
        probe: ProbeFlags::default(),
    }
}

fn send_op(dest: std::net::SocketAddr) -> SendOp {
    SendOp {
        dest,
        payload: Payload::Owned(vec![7u8; 64]),
        tag: None,
        cq_data: None,
        context: 1,
        level: CompletionLevel::Inject,
        signal: false,
    }
}

/// Progress `ep` until a receive completes (bounded: a lost datagram on
/// loopback would otherwise spin forever).
fn await_receive(ep: &mut Endpoint) {
    for _ in 0..1_000_000 {
        ep.progress_app();
        while let Some(c) = ep.poll_completion() {
            if c.kind == CompletionKind::Recv {
                return;
            }
        }
    }
    eprintln!("no message arrived");
    std::process::exit(1);
}

fn main() {
    let rounds: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    // FI_UET_<NAME>=value settings in the environment apply, as in the
    // provider (to compare two settings' costs).
    let mut cfg = Config::default();
    for (key, value) in std::env::vars() {
        if let Some(name) = key.strip_prefix("FI_UET_") {
            if let Err(e) = cfg.set_text(&name.to_ascii_lowercase(), &value) {
                eprintln!("{key}: {e}");
                std::process::exit(1);
            }
        }
    }
    let any = "127.0.0.1:0".parse().expect("address");
    let (Ok(mut a), Ok(mut b)) = (Endpoint::bind(&cfg, any), Endpoint::bind(&cfg, any)) else {
        eprintln!("cannot bind UDP sockets on 127.0.0.1");
        std::process::exit(1);
    };
    let (aa, ba) = (a.local_addr(), b.local_addr());
    for i in 0..rounds {
        let posted = b.recv(receive_op(i)).and_then(|_| a.recv(receive_op(i)));
        let sent = posted.and_then(|_| a.send(send_op(ba)));
        if let Err(e) = sent {
            eprintln!("round {i}: {e}");
            std::process::exit(1);
        }
        await_receive(&mut b);
        if let Err(e) = b.send(send_op(aa)) {
            eprintln!("round {i}: {e}");
            std::process::exit(1);
        }
        await_receive(&mut a);
    }
    println!("{rounds} round trips");
}
