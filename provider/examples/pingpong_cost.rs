//! User-space work of a ping-pong (64-byte messages unless SIZE says)
//! through two endpoints in one thread (engine and driver, system calls
//! excluded), for callgrind:
//!   valgrind --tool=callgrind target/release/examples/pingpong_cost N [SIZE]
//! Loopback delivers a datagram within the sender's system call, so every
//! receive finds its message: the count does not depend on timing. Compare
//! two N to get the cost per round trip. `FI_UET_*` parameters in the
//! environment apply.
//!
//! `pingpong_cost N SIZE wait-send` waits for each send's completion
//! before going on, as `fi_pingpong` does from the inject size on (the
//! client sends, waits for the send, then for the answer; the server
//! waits for the message, answers, waits for its send). The two ends then
//! take turns, one progress call at a time, the way two processes poll
//! side by side; the run ends with the datagram and ACK counts. How long
//! an ACK is held depends on the clock (`FI_UET_ACK_HOLD_US`), so these
//! counts, unlike the plain mode's work, move a little between runs.

use uet::{CompletionKind, CompletionLevel, Config, Endpoint, Payload, ProbeFlags, RecvOp, SendOp};

fn receive_op(context: u64, size: usize) -> RecvOp {
    RecvOp {
        src: None,
        tagged: false,
        tag: 0,
        ignore: 0,
        buffer: Box::new(vec![0u8; size]),
        context,
        signal: true,
        probe: ProbeFlags::default(),
    }
}

fn send_op(dest: std::net::SocketAddr, size: usize) -> SendOp {
    SendOp {
        dest,
        payload: Payload::Owned(vec![7u8; size]),
        tag: None,
        cq_data: None,
        context: 1,
        level: CompletionLevel::Inject,
        signal: false,
    }
}

/// Progress `ep` until a receive completes (bounded: a lost datagram on
/// loopback would otherwise spin forever). A call that finds nothing
/// progresses the sender too, as its own process would: what its window
/// held back (a message of several packets after QuickAdapt shrank the
/// window to one) leaves when the first packets' ACK comes back.
fn await_receive(ep: &mut Endpoint, sender: &mut Endpoint) {
    for _ in 0..1_000_000 {
        if !ep.progress_app() {
            sender.progress();
        }
        while let Some(c) = ep.poll_completion() {
            if c.kind == CompletionKind::Recv {
                return;
            }
        }
    }
    eprintln!("no message arrived");
    std::process::exit(1);
}

/// What one end of a waiting ping-pong does next.
#[derive(Clone, Copy)]
enum Step {
    Send,
    WaitSend,
    WaitRecv,
}

const CLIENT: [Step; 3] = [Step::Send, Step::WaitSend, Step::WaitRecv];
const SERVER: [Step; 3] = [Step::WaitRecv, Step::Send, Step::WaitSend];

/// One end of a ping-pong that waits for its sends' completions.
struct Side {
    ep: Endpoint,
    peer: std::net::SocketAddr,
    steps: [Step; 3],
    at: usize,
    sends_done: u64,
    recvs_done: u64,
    rounds_left: u64,
}

impl Side {
    /// One send or one progress call.
    fn step(&mut self, size: usize) -> uet::Result<()> {
        let ready = match self.steps[self.at] {
            Step::Send => {
                // The receive for the next message, posted ahead of it.
                self.ep.recv(receive_op(0, size))?;
                self.ep.send(SendOp {
                    level: CompletionLevel::Transmit,
                    signal: true,
                    ..send_op(self.peer, size)
                })?;
                true
            }
            Step::WaitSend | Step::WaitRecv => {
                self.ep.progress_app();
                while let Some(c) = self.ep.poll_completion() {
                    match c.kind {
                        CompletionKind::Send => self.sends_done += 1,
                        CompletionKind::Recv => self.recvs_done += 1,
                        _ => {}
                    }
                }
                let count = match self.steps[self.at] {
                    Step::WaitSend => &mut self.sends_done,
                    _ => &mut self.recvs_done,
                };
                let taken = *count > 0;
                *count = count.saturating_sub(1);
                taken
            }
        };
        if ready {
            self.at = (self.at + 1) % self.steps.len();
            if self.at == 0 {
                self.rounds_left -= 1;
            }
        }
        Ok(())
    }
}

/// The waiting ping-pong (see the top of the file).
fn wait_send_pingpong(a: Endpoint, b: Endpoint, rounds: u64, size: usize) {
    let (aa, ba) = (a.local_addr(), b.local_addr());
    let side = |ep, peer, steps| Side {
        ep,
        peer,
        steps,
        at: 0,
        sends_done: 0,
        recvs_done: 0,
        rounds_left: rounds,
    };
    let mut client = side(a, ba, CLIENT);
    let mut server = side(b, aa, SERVER);
    if let Err(e) = server.ep.recv(receive_op(0, size)) {
        eprintln!("{e}");
        std::process::exit(1);
    }
    let mut idle_steps = 0u64;
    while client.rounds_left > 0 || server.rounds_left > 0 {
        let before = client.rounds_left + server.rounds_left;
        for s in [&mut client, &mut server] {
            if s.rounds_left == 0 {
                // Done, but still answering (the last ACK the peer waits for).
                s.ep.progress();
            } else if let Err(e) = s.step(size) {
                eprintln!("{e}");
                std::process::exit(1);
            }
        }
        idle_steps = if client.rounds_left + server.rounds_left < before {
            0
        } else {
            idle_steps + 1
        };
        // A lost datagram on loopback would otherwise spin forever.
        if idle_steps > 10_000_000 {
            eprintln!("stuck with {} rounds left", client.rounds_left);
            std::process::exit(1);
        }
    }
    for (name, s) in [("client", &client), ("server", &server)] {
        let st = s.ep.engine_stats();
        println!(
            "{name}: {} datagrams, {} ACKs ({} riding on requests)",
            s.ep.stats().sent.iter().sum::<u64>(),
            st.acks_sent,
            st.acks_piggybacked
        );
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let wait_send = args.next().is_some_and(|a| a == "wait-send");
    // FI_UET_<NAME>=value settings in the environment apply, as in the
    // provider (to compare two settings' costs).
    let cfg = Config::from_process_env().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1);
    });
    let any = "127.0.0.1:0".parse().expect("address");
    let (Ok(mut a), Ok(mut b)) = (Endpoint::bind(&cfg, any), Endpoint::bind(&cfg, any)) else {
        eprintln!("cannot bind UDP sockets on 127.0.0.1");
        std::process::exit(1);
    };
    if wait_send {
        wait_send_pingpong(a, b, rounds, size);
        println!("{rounds} round trips");
        return;
    }
    let (aa, ba) = (a.local_addr(), b.local_addr());
    for i in 0..rounds {
        let posted = b
            .recv(receive_op(i, size))
            .and_then(|_| a.recv(receive_op(i, size)));
        let sent = posted.and_then(|_| a.send(send_op(ba, size)));
        if let Err(e) = sent {
            eprintln!("round {i}: {e}");
            std::process::exit(1);
        }
        await_receive(&mut b, &mut a);
        if let Err(e) = b.send(send_op(aa, size)) {
            eprintln!("round {i}: {e}");
            std::process::exit(1);
        }
        await_receive(&mut a, &mut b);
    }
    println!("{rounds} round trips");
}
