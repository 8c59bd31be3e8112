//! The UDP driver: runs one sans-IO [`Engine`] over a non-blocking UDP socket.
//!
//! Progress is driven by the caller (the libfabric shim calls [`Endpoint::progress`]
//! from its CQ reads): drain the socket into the engine, fire timers, flush
//! the engine's transmit queue. A caller that polls without anything to do
//! yields its core every `spin_before_yield` empty calls, so oversubscribed
//! ranks on few cores still progress.

use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::time::Instant;

use socket2::{Domain, Protocol, Socket, Type};

use crate::engine::{Engine, Transmit};
use crate::ops::{Completion, Context, RecvOp, SendOp};
use crate::{Config, Error, Result};

/// Datagrams received per progress call before timers and transmits get a turn.
const RX_BURST: usize = 64;
/// Largest UDP payload the kernel hands us (and more than any `mtu`).
const MAX_DATAGRAM: usize = 65536;

pub struct Endpoint {
    engine: Engine,
    socket: UdpSocket,
    local: SocketAddr,
    epoch: Instant,
    rx_buf: Vec<u8>,
    tx_buf: Vec<u8>,
    /// A datagram the kernel refused with EAGAIN, sent first next time.
    stalled: Option<Transmit>,
    idle_polls: u32,
    spin_before_yield: u32,
}

impl Endpoint {
    /// Bind a UDP socket at `addr` (port 0 = any) and build an engine on it.
    pub fn bind(config: &Config, addr: SocketAddr) -> Result<Endpoint> {
        let socket = open_socket(config, addr)?;
        let local = socket.local_addr()?;
        let seed = seed_from(local);
        let mut config = config.clone();
        config.mtu = config.effective_mtu(local.ip());
        let mut engine = Engine::new(&config, local, seed);
        // The peer runs the same configuration, so our own receive buffer is
        // the best guess of how many packets it can absorb before the kernel
        // drops them; a larger window only turns into retransmissions.
        let rcvbuf = socket2::SockRef::from(&socket).recv_buffer_size()?;
        engine.set_window(config.window.min(rcvbuf / kernel_cost(config.mtu)).max(4));
        Ok(Endpoint {
            engine,
            socket,
            local,
            epoch: Instant::now(),
            rx_buf: vec![0; MAX_DATAGRAM],
            tx_buf: vec![0; MAX_DATAGRAM],
            stalled: None,
            idle_polls: 0,
            spin_before_yield: config.spin_before_yield,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Post a send and push its first packets out at once.
    pub fn send(&mut self, op: SendOp) -> Result<()> {
        if op.dest.is_ipv4() != self.local.is_ipv4() {
            return Err(Error::Unreachable(op.dest));
        }
        let now = self.now();
        self.engine.post_send(now, op)?;
        self.flush(now);
        Ok(())
    }

    /// Post an RMA write or read and push its first packets out at once.
    pub fn rma(&mut self, op: crate::ops::RmaOp) -> Result<()> {
        if op.dest.is_ipv4() != self.local.is_ipv4() {
            return Err(Error::Unreachable(op.dest));
        }
        let now = self.now();
        self.engine.post_rma(now, op)?;
        self.flush(now);
        Ok(())
    }

    /// Memory peers may access with RMA.
    pub fn set_memory_regions(&mut self, regions: std::sync::Arc<dyn crate::ops::MemoryRegions>) {
        self.engine.set_memory_regions(regions);
    }

    /// Post a receive buffer (or a peek/claim/discard request).
    pub fn recv(&mut self, op: RecvOp) -> Result<()> {
        let now = self.now();
        self.engine.post_recv(now, op)?;
        self.flush(now);
        Ok(())
    }

    /// Cancel a posted receive; true when one was found (an FI_ECANCELED
    /// completion is then queued).
    pub fn cancel(&mut self, context: Context) -> bool {
        self.engine.cancel(context)
    }

    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.engine.poll_completion()
    }

    /// True when completions are waiting to be read.
    pub fn has_completions(&self) -> bool {
        self.engine.has_completions()
    }

    /// Descriptors that become readable when a datagram arrives, for callers
    /// that sleep in poll/epoll between progress calls.
    pub fn wait_fds(&self) -> Vec<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        vec![self.socket.as_raw_fd()]
    }

    /// How long a caller may sleep before the engine needs a progress call
    /// even without input: zero when a transmit is pending, the time to the
    /// next timer otherwise, `None` when nothing is armed.
    pub fn idle_budget(&self) -> Option<std::time::Duration> {
        if self.stalled.is_some() || self.engine.has_completions() {
            return Some(std::time::Duration::ZERO);
        }
        let now = self.now();
        self.engine
            .next_timeout()
            .map(|t| std::time::Duration::from_nanos(t.saturating_sub(now)))
    }

    /// Move packets and fire timers. Returns true when anything happened.
    pub fn progress(&mut self) -> bool {
        let mut busy = false;
        let now = self.now();
        for _ in 0..RX_BURST {
            match self.socket.recv_from(&mut self.rx_buf) {
                Ok((n, from)) => {
                    busy = true;
                    self.engine.handle_datagram(now, from, 0, &self.rx_buf[..n]);
                }
                // ICMP port unreachable from an earlier send surfaces here as
                // ECONNREFUSED on Linux; the engine's timers handle dead peers.
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => continue,
                Err(_) => break,
            }
        }
        if self.engine.next_timeout().is_some_and(|t| t <= now) {
            self.engine.handle_timeout(now);
        }
        busy |= self.flush(now);
        busy |= self.engine.has_completions();
        if busy {
            self.idle_polls = 0;
        } else {
            self.idle_polls += 1;
            if self.idle_polls >= self.spin_before_yield {
                self.idle_polls = 0;
                std::thread::yield_now();
            }
        }
        busy
    }

    /// Send everything the engine has ready; stop at the first EAGAIN.
    fn flush(&mut self, now: u64) -> bool {
        let mut sent = false;
        if let Some(t) = self.stalled.take() {
            if !self.send_datagram(&t) {
                self.stalled = Some(t);
                return false;
            }
            sent = true;
        }
        while let Some(t) = self.engine.poll_transmit(now, &mut self.tx_buf) {
            sent = true;
            if !self.send_datagram(&t) {
                self.stalled = Some(t);
                break;
            }
        }
        sent
    }

    /// False when the socket is full and the datagram must be retried.
    fn send_datagram(&mut self, t: &Transmit) -> bool {
        match self.socket.send_to(&self.tx_buf[..t.len], t.dest) {
            Ok(_) => true,
            // The bytes stay in `tx_buf`: `flush` stops pulling from the
            // engine until this datagram is out.
            Err(e) if e.kind() == ErrorKind::WouldBlock => false,
            // Any other error (peer gone, unreachable) is a lost datagram;
            // retransmission or the peer timeout deals with it.
            Err(_) => true,
        }
    }
}

/// Receive-buffer bytes the kernel charges for one datagram of `mtu` bytes
/// (payload plus skb overhead, rounded the way loopback allocates).
fn kernel_cost(mtu: usize) -> usize {
    mtu + mtu / 4 + 1024
}

fn open_socket(config: &Config, addr: SocketAddr) -> Result<UdpSocket> {
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let socket = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    // Root may exceed net.core.{r,w}mem_max; everyone else gets the cap.
    if force_buffer_size(&socket, libc::SO_RCVBUFFORCE, config.sockbuf).is_err() {
        let _ = socket.set_recv_buffer_size(config.sockbuf);
    }
    if force_buffer_size(&socket, libc::SO_SNDBUFFORCE, config.sockbuf).is_err() {
        let _ = socket.set_send_buffer_size(config.sockbuf);
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// SO_RCVBUFFORCE / SO_SNDBUFFORCE: like SO_RCVBUF / SO_SNDBUF but past the
/// sysctl cap; needs CAP_NET_ADMIN (socket2 has no wrapper).
fn force_buffer_size(socket: &Socket, option: libc::c_int, bytes: usize) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: the fd is a live socket owned by `socket`; the option value is a
    // c_int on the stack whose size is passed alongside.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Start PSNs and message IDs must differ across restarts of the same
/// address, so the seed mixes the address with the clock.
fn seed_from(local: SocketAddr) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    local.hash(&mut h);
    Instant::now().hash(&mut h);
    std::process::id().hash(&mut h);
    h.finish()
}
