//! FI_PROGRESS_AUTO: one thread per domain progresses every endpoint of the
//! domain, sleeping in poll(2) on their sockets between rounds (see
//! `wait.rs`), so operations advance while the application computes. The
//! thread stops and is joined when the domain closes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;

use parking_lot::Mutex;

use crate::bindings::FI_ENOMEM;
use crate::endpoint::EpInner;
use crate::errors::FiResult;
use crate::wait::{self, Waker};

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
    pub(crate) fn start() -> FiResult<AutoProgress> {
        let shared = Arc::new(Shared {
            eps: Mutex::default(),
            waker: Waker::new()?,
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("uet-progress".into())
            .spawn(move || run(&s))
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

fn run(s: &Shared) {
    while !s.stop.load(Ordering::Acquire) {
        let eps = wait::live(&s.eps);
        for ep in &eps {
            ep.progress();
        }
        wait::sleep(&eps, &s.waker, None);
    }
}
