//! Moves N small tagged messages between two engines in memory (no
//! sockets), for counting the engine's instructions per message under
//! callgrind:
//!
//! ```sh
//! cargo build --release -p uet --example msg_cost
//! valgrind --tool=callgrind target/release/examples/msg_cost 1000
//! valgrind --tool=callgrind target/release/examples/msg_cost 11000
//! ```
//!
//! The difference of the two totals divided by 10000 is the cost of one
//! message, without start-up and exit: a 64-byte send (transmit
//! completion) and its posted receive, the data packet and its ACK, both
//! completions; allocating and freeing the buffers is included.

use std::net::SocketAddr;

use uet::engine::Engine;
use uet::{CompletionLevel, Config, Payload, ProbeFlags, RecvOp, SendOp};

const MSG_LEN: usize = 64;
const TAG: u64 = 5;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let cfg = Config {
        mtu: 65000,
        ..Config::default()
    };
    let a_addr = SocketAddr::from(([127, 0, 0, 1], 1000));
    let b_addr = SocketAddr::from(([127, 0, 0, 1], 2000));
    let mut a = Engine::new(&cfg, a_addr, 1);
    let mut b = Engine::new(&cfg, b_addr, 2);
    let mut buf = vec![0u8; 65536];
    let mut now = 1_000u64;
    for i in 0..n {
        now += 1_000;
        b.post_recv(
            now,
            RecvOp {
                src: None,
                tagged: true,
                tag: TAG,
                ignore: 0,
                buffer: Box::new(vec![0u8; MSG_LEN]),
                context: i,
                signal: true,
                probe: ProbeFlags::default(),
            },
        )
        .expect("post_recv");
        a.post_send(
            now,
            SendOp {
                dest: b_addr,
                payload: Payload::Owned(vec![7u8; MSG_LEN]),
                tag: Some(TAG),
                cq_data: None,
                context: 1,
                level: CompletionLevel::Transmit,
                signal: true,
            },
        )
        .expect("post_send");
        // Until both sides are quiet: the data packet, then its ACK.
        loop {
            let mut moved = false;
            while let Some(t) = a.poll_transmit(now, &mut buf) {
                b.handle_datagram(now, a_addr, 2, &buf[..t.len]);
                moved = true;
            }
            while let Some(t) = b.poll_transmit(now, &mut buf) {
                a.handle_datagram(now, b_addr, 0, &buf[..t.len]);
                moved = true;
            }
            if !moved {
                break;
            }
        }
        assert!(
            a.poll_completion().is_some() && b.poll_completion().is_some(),
            "message {i} did not complete at both ends"
        );
    }
}
