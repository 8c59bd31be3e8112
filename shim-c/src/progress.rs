//! Background progress, one thread per domain.
//!
//! * FI_PROGRESS_AUTO ([`Mode::Always`]): the thread progresses every
//!   endpoint of the domain, sleeping in poll(2) on their sockets between
//!   rounds (see `wait.rs`), so operations advance while the application
//!   computes.
//! * FI_PROGRESS_MANUAL ([`Mode::WhenIdle`], `FI_UET_IDLE_PROGRESS_US`): the
//!   application drives progress, but over a lossy datagram fabric packets
//!   still need retransmitting and acknowledging while it blocks elsewhere
//!   (an out-of-band socket, a barrier in another library). An endpoint
//!   whose application made no progress call for a grace period is
//!   progressed by the thread, which then also sleeps on its sockets until
//!   the application returns. Each endpoint has an [`IdleTimer`] that the
//!   application's own calls push out, so while it polls the thread sleeps
//!   instead of waking every period to check (every wake-up on a busy
//!   machine takes a core from a rank for tens of microseconds). Endpoints
//!   the application polls are left alone, so the busy path sees no
//!   contention. The thread runs at SCHED_BATCH, so its looks never preempt
//!   a poller.
//!
//! The thread stops and is joined when the domain closes.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    mode: Mode,
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
            mode,
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The grace period of manual progress in nanoseconds (`None` with
    /// FI_PROGRESS_AUTO).
    pub(crate) fn idle_grace_ns(&self) -> Option<u64> {
        match self.mode {
            Mode::WhenIdle(grace) => Some(nanos(grace)),
            Mode::Always => None,
        }
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
                wait::sleep(&eps, &[], &s.waker, None);
            }
            Mode::WhenIdle(grace) => {
                let grace_ns = nanos(grace);
                let idle: Vec<Arc<EpInner>> = eps
                    .iter()
                    .filter(|ep| ep.progress_if_idle(grace_ns))
                    .cloned()
                    .collect();
                // The idle timers say when a polled endpoint's application
                // goes quiet; an endpoint without one (no descriptor left)
                // is looked at every grace period instead.
                let timers: Vec<RawFd> = eps.iter().filter_map(|ep| ep.idle_timer_fd()).collect();
                let deadline = (timers.len() < eps.len()).then(|| Instant::now() + grace);
                // Sockets and timers of idle endpoints only: packets for an
                // endpoint the application polls must not wake this thread.
                wait::sleep(&idle, &timers, &s.waker, deadline);
            }
        }
    }
}

/// `d` in nanoseconds, the unit of the endpoints' clocks.
fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
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

/// When an endpoint's application counts as gone (manual progress): a
/// one-shot timerfd that the application's progress calls push out to a
/// grace period plus [`TICK_NS`] ahead, at most once per half that span
/// (each push is a system call). With the default grace it fires 2.5-5 ms
/// after the last call; the domain thread, woken by it, checks the time of
/// that call before taking the endpoint over.
pub(crate) struct IdleTimer {
    fd: RawFd,
    grace_ns: u64,
    /// Endpoint time the application last pushed the deadline out from;
    /// `NEVER` until it does.
    pushed_at: AtomicU64,
}

const NEVER: u64 = u64::MAX;

/// Added to every deadline: a timer due before the kernel's next tick must
/// reprogram the CPU's timer device, which in a virtual machine costs an
/// exit to the hypervisor (3-11 us measured, against under 2 us for a
/// timer due after the tick, which the tick's own interrupt then serves).
/// Four milliseconds is one tick at 250 Hz.
const TICK_NS: u64 = 4_000_000;

impl IdleTimer {
    /// `None` when no timerfd can be had (the thread then looks every
    /// period at this endpoint).
    pub(crate) fn new(grace_ns: u64) -> Option<IdleTimer> {
        // SAFETY: plain system call with constant flags; no memory passed.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return None;
        }
        Some(IdleTimer {
            fd,
            grace_ns,
            pushed_at: AtomicU64::new(NEVER),
        })
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.fd
    }

    /// The application progressed at endpoint time `now`.
    pub(crate) fn push_out(&self, now: u64) {
        let at = self.pushed_at.load(Ordering::Relaxed);
        if at == NEVER || now >= at.saturating_add((self.grace_ns + TICK_NS) / 2) {
            self.fire_in(self.grace_ns);
            self.pushed_at.store(now, Ordering::Relaxed);
        }
    }

    /// The endpoint's clock restarted (a new bind): forget the last push.
    pub(crate) fn restart_clock(&self) {
        self.pushed_at.store(NEVER, Ordering::Relaxed);
    }

    /// Fire `ns` from now, give or take a scheduler tick (re-arming also
    /// clears an expiry not yet read).
    pub(crate) fn fire_in(&self, ns: u64) {
        let ns = ns.max(1) + TICK_NS;
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (ns % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: self.fd is our open timerfd; spec is a valid itimerspec
        // the call only reads; a null old value is allowed.
        unsafe { libc::timerfd_settime(self.fd, 0, &spec, std::ptr::null_mut()) };
    }

    /// Read an expiry, so the descriptor stops being readable.
    pub(crate) fn drain(&self) {
        let mut ticks = 0u64;
        // SAFETY: reads at most 8 bytes into a u64 on the stack; the fd is
        // non-blocking, so an unexpired timer answers EAGAIN.
        unsafe { libc::read(self.fd, (&mut ticks as *mut u64).cast(), 8) };
    }
}

impl Drop for IdleTimer {
    fn drop(&mut self) {
        // SAFETY: self.fd is ours and closed only here.
        unsafe { libc::close(self.fd) };
    }
}
