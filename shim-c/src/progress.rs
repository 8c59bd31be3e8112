//! Background progress, one thread per domain.
//!
//! * FI_PROGRESS_AUTO ([`Mode::Always`]): the thread progresses every
//!   endpoint of the domain, sleeping in poll(2) on their sockets between
//!   rounds (see `wait.rs`), so operations advance while the application
//!   computes.
//! * FI_PROGRESS_MANUAL ([`Mode::WhenIdle`], `FI_UET_IDLE_PROGRESS_US`): the
//!   application drives progress, but over a lossy datagram fabric packets
//!   still need retransmitting and acknowledging while it blocks elsewhere
//!   (an out-of-band socket, a barrier in another library). The thread looks
//!   every grace period; an endpoint whose application made no progress call
//!   since the last look is progressed by the thread, which then also sleeps
//!   on its sockets until the application returns. Endpoints the
//!   application polls are left alone, so the busy path sees no contention.
//!   The thread runs at SCHED_BATCH, so its looks never preempt a poller.
//!
//! The thread stops and is joined when the domain closes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::bindings::FI_ENOMEM;
use crate::endpoint::EpInner;
use crate::errors::FiResult;
use crate::wait::{self, Waker};

/// When the domain thread progresses an endpoint.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Mode {
    /// Always (FI_PROGRESS_AUTO).
    Always,
    /// Only once the application has left it alone for this long.
    WhenIdle(Duration),
}

struct Shared {
    eps: Mutex<Vec<Weak<EpInner>>>,
    waker: Waker,
    stop: AtomicBool,
}

pub(crate) struct AutoProgress {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl AutoProgress {
    pub(crate) fn start(mode: Mode) -> FiResult<AutoProgress> {
        let shared = Arc::new(Shared {
            eps: Mutex::default(),
            waker: Waker::new()?,
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("uet-progress".into())
            .spawn(move || run(&s, mode))
            .map_err(|_| FI_ENOMEM)?;
        Ok(AutoProgress {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Progress `ep` from now on (until it is closed).
    pub(crate) fn add(&self, ep: &Arc<EpInner>) {
        wait::attach(&self.shared.eps, ep);
        self.shared.waker.wake();
    }

    /// Stop the thread and wait for it.
    pub(crate) fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.waker.wake();
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }
}

impl Drop for AutoProgress {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(s: &Shared, mode: Mode) {
    if matches!(mode, Mode::WhenIdle(_)) {
        never_preempt_on_wake_up();
    }
    while !s.stop.load(Ordering::Acquire) {
        let eps = wait::live(&s.eps);
        match mode {
            Mode::Always => {
                for ep in &eps {
                    ep.progress_background();
                }
                wait::sleep(&eps, &s.waker, None);
            }
            Mode::WhenIdle(grace) => {
                let idle: Vec<Arc<EpInner>> =
                    eps.into_iter().filter(|ep| ep.progress_if_idle()).collect();
                // Sockets and timers of idle endpoints only: packets for an
                // endpoint the application polls must not wake this thread.
                wait::sleep(&idle, &s.waker, Some(Instant::now() + grace));
            }
        }
    }
}

/// Run this thread under SCHED_BATCH: woken by its timer, it then waits for
/// the running thread's time slice to end instead of preempting it (an
/// application polling its CQ, or the peer process on a small machine).
/// One look per millisecond that preempted a busy-polling 64 B ping-pong
/// cost it about 5% of its latency. Unlike SCHED_IDLE, which starved the
/// thread when every core was busy (a peer then gave up on an application
/// checking data), SCHED_BATCH keeps its fair share: under load a look is a
/// time slice late, never starved. Lowering the own policy needs no
/// privilege; if it fails the thread keeps the default policy.
fn never_preempt_on_wake_up() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pthread_self() is the calling thread's own handle and `param`
    // a valid sched_param on the stack; the call only reads it.
    let _ = unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_BATCH, &param) };
}
