//! Runs N NSCC per-ACK updates, for counting instructions under callgrind:
//!
//! ```sh
//! cargo build --release -p uet --example nscc_per_ack
//! valgrind --tool=callgrind target/release/examples/nscc_per_ack 100000
//! valgrind --tool=callgrind target/release/examples/nscc_per_ack 200000
//! ```
//!
//! The difference of the two totals divided by the difference of N is the
//! cost of one update, without start-up and exit (`make bench` does this).
//! The feedback mix is the criterion bench's: alternating marked and
//! unmarked ACKs with queueing delays around the target, so every quadrant
//! and the fulfill step are exercised. It also prints the per-flow state
//! sizes.

use std::hint::black_box;
use std::sync::Arc;

use uet::cms::{nscc, CcConfig, CongestionControl};

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let cfg = Arc::new(CcConfig::nscc(100.0, 4152, 4096));
    let mut cc = CongestionControl::new(&cfg);
    let mut now = 0u64;
    for i in 0..n {
        now += 300;
        let fb = nscc::cost_workload_ack(i);
        cc.on_ack(now, black_box(&fb));
        black_box(cc.cwnd());
    }
    println!(
        "updates {n} cwnd {} state_bytes {} derived_bytes {} counters_bytes {} controller_bytes {}",
        cc.cwnd(),
        std::mem::size_of::<nscc::NsccState>(),
        std::mem::size_of::<nscc::NsccDerived>(),
        std::mem::size_of::<nscc::NsccCounters>(),
        std::mem::size_of::<nscc::Nscc>(),
    );
}
