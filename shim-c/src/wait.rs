//! Blocking waits for CQs, counters and EQs.
//!
//! Progress is manual (the caller's thread drives the engine), so a blocking
//! wait alternates: progress the bound endpoints, then sleep in `poll(2)` on
//! their sockets and the object's own eventfd until a datagram arrives, the
//! object is signalled (fi_cq_signal, fi_cntr_add, another thread's
//! progress), the engine's next timer is due, or the caller's deadline
//! passes. Before its first sleep, and after each sleep that input ended,
//! it keeps progressing for `FI_UET_WAIT_SPIN_US` ([`Spin`]): a wake-up
//! costs tens of microseconds, more than a loopback round trip, so a
//! completion due within the spin is seen sooner.
//!
//! FI_GETWAIT hands out an epoll descriptor holding the same sockets and the
//! eventfd: it becomes readable when there is input to progress or the
//! object was signalled. Binding an endpoint and fi_trywait bring its set
//! up to the endpoints bound at that moment. fi_trywait progresses and
//! answers -FI_EAGAIN when entries are already there, so an application
//! never sleeps on them.

use std::os::fd::RawFd;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::bindings::*;
use crate::endpoint::{EpInner, Sleep};
use crate::errors::FiResult;

/// Longest single sleep: bounds the delay of events nothing wakes us for
/// (a peer's ACK-delay timer, an endpoint bound after the wait started).
const MAX_SLEEP: Duration = Duration::from_millis(20);

/// The polling phase of a blocking wait: progress without sleeping until
/// `FI_UET_WAIT_SPIN_US` have passed since the wait began or input last
/// woke it. A CQ or counter opened with `FI_WAIT_YIELD` has no wait object: its
/// waits poll throughout, yielding the core on every pass, and never sleep.
pub(crate) struct Spin {
    length: Duration,
    whole_wait: bool,
    until: Option<Instant>,
}

impl Spin {
    /// The spin of a wait on an object with wait object `wait_obj`.
    pub(crate) fn new(wait_obj: fi_wait_obj, length: Duration) -> Spin {
        Spin {
            length,
            whole_wait: wait_obj == FI_WAIT_YIELD,
            until: None,
        }
    }

    /// No polling: sleep as soon as nothing is ready (an EQ, which only
    /// another thread's fi_eq_write fills).
    pub(crate) fn none() -> Spin {
        Spin::new(FI_WAIT_FD, Duration::ZERO)
    }

    /// True while the caller should progress again instead of sleeping.
    fn keep_polling(&mut self) -> bool {
        if self.whole_wait {
            // Every pass: a wait with nothing to progress (no endpoint
            // bound, or one closed) would otherwise never give the core up,
            // not even to the thread that would end it.
            std::thread::yield_now();
            return true;
        }
        if self.length.is_zero() {
            return false;
        }
        let now = Instant::now();
        let until = *self.until.get_or_insert(now + self.length);
        now < until
    }

    /// The caller slept; `woken` by input, it polls afresh, as what woke
    /// it (the first packet of a reply, say) is often followed by more. A
    /// sleep that ran out (a timer, the 20 ms bound) does not restart the
    /// spin: a waiter on a quiet CQ would spin after every such sleep.
    fn slept(&mut self, woken: bool) {
        if woken {
            self.until = None;
        }
    }
}

/// An eventfd that other threads write to wake a sleeper, plus an epoll set
/// (created on FI_GETWAIT) over it and the bound endpoints' sockets.
pub(crate) struct Waker {
    event_fd: RawFd,
    /// Threads inside `sleep` (wake-ups cost a syscall only when needed).
    sleepers: AtomicUsize,
    /// Set once FI_GETWAIT handed the descriptor out: wake on every event.
    exported: AtomicBool,
    epoll_fd: Mutex<Option<RawFd>>,
    /// Sockets in the epoll set, each with the socket set it belongs to
    /// ([`EpInner::wait_set`]): a closed endpoint's descriptor numbers come
    /// back for other sockets, which the number alone would hide.
    registered: Mutex<Vec<(u64, RawFd)>>,
}

impl Waker {
    pub(crate) fn new() -> FiResult<Waker> {
        // SAFETY: eventfd takes no pointers; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(FI_ENOMEM);
        }
        Ok(Waker {
            event_fd: fd,
            sleepers: AtomicUsize::new(0),
            exported: AtomicBool::new(false),
            epoll_fd: Mutex::new(None),
            registered: Mutex::default(),
        })
    }

    /// Wake every sleeper (and make the FI_GETWAIT descriptor readable).
    pub(crate) fn wake(&self) {
        if self.sleepers.load(Ordering::Acquire) == 0 && !self.exported.load(Ordering::Acquire) {
            return;
        }
        wake_event_fd(self.event_fd);
    }

    /// Consume pending wake-ups.
    pub(crate) fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: event_fd is our open non-blocking eventfd; we read 8 bytes
        // into a u64.
        unsafe { libc::read(self.event_fd, (&mut v as *mut u64).cast(), 8) };
    }

    /// The FI_GETWAIT descriptor: an epoll set over the eventfd and `eps'`
    /// sockets (kept up to date by [`sync`](Self::sync)).
    pub(crate) fn epoll_fd(&self, eps: &[Arc<EpInner>]) -> FiResult<RawFd> {
        let mut slot = self.epoll_fd.lock();
        let ep_fd = match *slot {
            Some(fd) => fd,
            None => {
                // SAFETY: epoll_create1 takes no pointers; result checked.
                let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
                if fd < 0 {
                    return Err(FI_ENOMEM);
                }
                add_to_epoll(fd, self.event_fd)?;
                *slot = Some(fd);
                fd
            }
        };
        self.exported.store(true, Ordering::Release);
        self.update(ep_fd, eps)?;
        Ok(ep_fd)
    }

    /// Once FI_GETWAIT handed the descriptor out, make its epoll set watch
    /// the sockets of `eps` (the endpoints bound now) and no others: for
    /// fi_trywait, which the application calls before it sleeps on the
    /// descriptor, and for a binding.
    pub(crate) fn sync(&self, eps: &[Arc<EpInner>]) -> FiResult<()> {
        let slot = self.epoll_fd.lock();
        match *slot {
            Some(fd) => self.update(fd, eps),
            None => Ok(()),
        }
    }

    fn update(&self, epoll: RawFd, eps: &[Arc<EpInner>]) -> FiResult<()> {
        let sets: Vec<_> = eps
            .iter()
            .filter_map(|ep| ep.wait_set().map(|(set, fds)| (ep, set, fds)))
            .collect();
        let mut reg = self.registered.lock();
        // Gone ones first: a number of theirs may be among the new ones.
        reg.retain(|&(set, fd)| {
            let live = sets
                .iter()
                .any(|(_, s, fds)| *s == set && fds.contains(&fd));
            if !live {
                remove_from_epoll(epoll, fd);
            }
            live
        });
        for (ep, set, fds) in sets {
            let mut added = false;
            for fd in fds {
                if !reg.contains(&(set, fd)) {
                    add_to_epoll(epoll, fd)?;
                    reg.push((set, fd));
                    added = true;
                }
            }
            if added {
                ep.wake_on_every_arrival();
            }
        }
        Ok(())
    }
}

impl Drop for Waker {
    fn drop(&mut self) {
        // SAFETY: both descriptors are ours and closed exactly once here.
        unsafe {
            libc::close(self.event_fd);
            if let Some(fd) = *self.epoll_fd.get_mut() {
                libc::close(fd);
            }
        }
    }
}

/// Make the eventfd `fd` of a [`Waker`] readable. The caller knows it open:
/// its waker is asleep in [`sleep`], or is its own.
pub(crate) fn wake_event_fd(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: fd is an open eventfd (see above); we write 8 bytes from a u64.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

fn add_to_epoll(epoll: RawFd, fd: RawFd) -> FiResult<()> {
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: fd as u64,
    };
    // SAFETY: both descriptors are open; ev lives across the call.
    let rc = unsafe { libc::epoll_ctl(epoll, libc::EPOLL_CTL_ADD, fd, &mut ev) };
    if rc < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
        return Err(FI_EINVAL);
    }
    Ok(())
}

/// Take `fd` out of an epoll set; a closed descriptor is out already.
fn remove_from_epoll(epoll: RawFd, fd: RawFd) {
    // SAFETY: epoll is open; the event argument may be NULL for DEL; an
    // error (the descriptor closed or renumbered) leaves nothing to undo.
    unsafe { libc::epoll_ctl(epoll, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
}

/// Live endpoints among `eps` (dropping dead ones).
pub(crate) fn live(eps: &Mutex<Vec<Weak<EpInner>>>) -> Vec<Arc<EpInner>> {
    let mut eps = eps.lock();
    eps.retain(|w| w.strong_count() > 0);
    eps.iter().filter_map(Weak::upgrade).collect()
}

/// Call `f` on every live endpoint of `eps` without building a list (a
/// busy-polling reader comes here millions of times a second), one at a
/// time and never under the list's lock, which attaching takes; one lock
/// per endpoint, so a single bound endpoint costs one. An endpoint
/// attached or closed meanwhile may be missed or visited twice in this
/// round; the next round sees the list as it is.
pub(crate) fn for_each_live(eps: &Mutex<Vec<Weak<EpInner>>>, mut f: impl FnMut(&Arc<EpInner>)) {
    let mut i = 0;
    loop {
        let (ep, more) = {
            let eps = eps.lock();
            let Some(w) = eps.get(i) else { return };
            (w.upgrade(), i + 1 < eps.len())
        };
        if let Some(ep) = ep {
            f(&ep);
        }
        if !more {
            return;
        }
        i += 1;
    }
}

/// Whether an endpoint of `eps` has input its descriptors do not show
/// (same-host lanes): sleeping on them now could miss it.
pub(crate) fn input_waiting(eps: &Mutex<Vec<Weak<EpInner>>>) -> bool {
    live(eps).iter().any(|ep| ep.input_waiting())
}

/// Add `ep` to a list of weak endpoint references once.
pub(crate) fn attach(eps: &Mutex<Vec<Weak<EpInner>>>, ep: &Arc<EpInner>) {
    let mut eps = eps.lock();
    eps.retain(|w| w.strong_count() > 0);
    if !eps
        .iter()
        .any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(ep)))
    {
        eps.push(Arc::downgrade(ep));
    }
}

/// Deadline for a libfabric timeout in milliseconds (negative = forever).
pub(crate) fn deadline(timeout_ms: c_int) -> Option<Instant> {
    u64::try_from(timeout_ms)
        .ok()
        .map(|ms| Instant::now() + Duration::from_millis(ms))
}

/// A blocking wait: call `ready` (which progresses what it reads) until it
/// has an answer, polling again while `spin` lasts and otherwise sleeping
/// on the endpoints of `eps` and on `waker`; `None` once `deadline` passed.
pub(crate) fn block<T>(
    eps: &Mutex<Vec<Weak<EpInner>>>,
    waker: &Waker,
    mut spin: Spin,
    deadline: Option<Instant>,
    mut ready: impl FnMut() -> Option<T>,
) -> Option<T> {
    loop {
        if let Some(answer) = ready() {
            return Some(answer);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return None;
        }
        if spin.keep_polling() {
            continue;
        }
        let woken = sleep(&live(eps), &[], waker, deadline);
        spin.slept(woken);
    }
}

/// Sleep until input arrives on an endpoint of `eps`, a descriptor of
/// `also` becomes readable, `waker` fires, the engines need a timer run, or
/// `deadline` passes. True when it ended for input or the waker (or did
/// not sleep because input was waiting), false when its time ran out.
pub(crate) fn sleep(
    eps: &[Arc<EpInner>],
    also: &[RawFd],
    waker: &Waker,
    deadline: Option<Instant>,
) -> bool {
    let mut budget = MAX_SLEEP;
    if let Some(d) = deadline {
        budget = budget.min(d.saturating_duration_since(Instant::now()));
    }
    let mut fds: Vec<libc::pollfd> = std::iter::once(waker.event_fd)
        .chain(also.iter().copied())
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // Endpoints whose sockets we sleep on (and whose same-host senders
    // ring the doorbell meanwhile).
    let mut sleeping: Vec<&Arc<EpInner>> = Vec::with_capacity(eps.len());
    for ep in eps {
        if let Some(b) = ep.idle_budget() {
            budget = budget.min(b);
        }
    }
    // Round up so a timer due in 0.3 ms does not turn into a busy loop.
    let ms = budget.as_micros().div_ceil(1000).min(c_int::MAX as u128) as c_int;
    if ms == 0 {
        return false;
    }
    for ep in eps {
        match ep.begin_sleep(waker.event_fd) {
            Sleep::On(ep_fds) => {
                fds.extend(ep_fds.into_iter().map(|fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                }));
                sleeping.push(ep);
            }
            Sleep::InputWaiting => {
                for ep in &sleeping {
                    ep.end_sleep(waker.event_fd);
                }
                return true;
            }
            Sleep::Closed => {}
        }
    }
    waker.sleepers.fetch_add(1, Ordering::AcqRel);
    // SAFETY: fds is a live array of fds.len() pollfd structs.
    let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    waker.sleepers.fetch_sub(1, Ordering::AcqRel);
    for ep in sleeping {
        ep.end_sleep(waker.event_fd);
    }
    if fds[0].revents != 0 {
        waker.drain();
    }
    ready > 0
}
