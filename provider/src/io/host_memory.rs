//! Same-host rendezvous copies: `process_vm_readv` out of a sender process
//! on this host, `process_vm_writev` into a receiver's buffer (see
//! `engine/rendezvous.rs`, `FI_UET_HOST_READ`).
//!
//! A process is named by (host, pid). The host value folds the boot ID
//! together with the PID namespace, so two processes agree on it exactly
//! when the pid one names means the same process to the other. The kernel
//! checks access itself (ptrace rules: same user, Yama's scope); a refused
//! copy makes the receiver pull over the network instead.
//!
//! A peer may only name its own memory, so a peer cannot have a receiver
//! with more privileges copy a third process's memory into a buffer it may
//! echo back, or have a sender write into one. Two things prove a
//! descriptor's claim ([`HostClaim`]: this peer address, this process):
//!
//! - The process holds the UDP socket bound to the peer's address (its
//!   inode in `/proc/net/udp*` among the process's descriptors), alone
//!   there (no other socket bound to that address, and a copy of its
//!   descriptor without SO_REUSEADDR or SO_REUSEPORT: nobody else receives
//!   what is sent to it), and the process's effective user made it (a
//!   socket kept open across the exec of a set-user-ID program is still
//!   its creator's): [`Proof::Created`], [`Holding::new`].
//! - The descriptor returns the token we offer that holding
//!   ([`HostMemory::offer`]): 64 random bits made when the holding is
//!   found, which only our datagrams to the peer's address carry, so only a
//!   process that receives there can know them. A process that merely
//!   sends from the address (another socket on the port, `IP_PKTINFO`)
//!   does not.
//!
//! A process found in another network namespace is not named: the socket
//! tables read are this namespace's, and so is what the peer's address
//! means to our datagrams. The check is made when a holding is looked for
//! (one that left after binding a socket here is refused then, and its
//! messages are pulled); a holder found here that moves later keeps the
//! socket it was found with, which is what the confirmations check.
//!
//! The full check runs once per (address, process); what it found (the
//! holder's descriptor and the socket's inode) is confirmed again before a
//! copy whenever a datagram has reached the engine since the last
//! confirmation, since a socket that closes frees its address for anyone
//! to bind ([`Holding`]). Found afresh, a holding gets a new token: one
//! handed to an earlier holder of the address proves nothing.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use crate::engine::{HostAccess, HostClaim, HostMemory};

/// The driver's [`HostMemory`].
pub struct ProcessMemory {
    host: u64,
    pid: u32,
    /// Our network namespace ([`network_namespace`]), when it can be read.
    network: Option<(u64, u64)>,
    /// (peer address, pid) pairs found to belong together, and how.
    owners: RefCell<HashMap<(SocketAddr, u32), Holding>>,
    /// Datagrams that reached the engine ([`HostMemory::datagram_arrived`]).
    arrivals: std::cell::Cell<u64>,
}

/// Owners remembered at most (each entry may keep a descriptor open); past
/// this, those no longer holding their socket are forgotten, and while all
/// do, new ones are refused.
const OWNERS_MAX: usize = 1024;

/// How a process holds the socket bound to a peer's address: which of its
/// descriptors, and the socket's inode. While that descriptor still names
/// that inode the socket has stayed open, so its address was never free
/// for another to bind (nor could it be shared: its options were checked
/// when it was found, and only its holder, or one who may read its memory
/// anyway, can change them). Confirming it costs one descriptor taken and
/// dropped (`pidfd_getfd(2)`, Linux 5.6) or, where that is refused, a
/// `readlink` of `/proc/<pid>/fd/<fd>` (several microseconds) and a read
/// of the socket tables (its options unseen, it may have been joined;
/// about 0.3 ms, which the kernel spends walking its UDP table).
struct Holding {
    fd: u32,
    inode: u64,
    /// `arrivals` when last found so.
    seen_at: u64,
    /// A pidfd of the holder, when the kernel hands us its descriptors; it
    /// also tells a pid reused by another process from the holder.
    process: Option<OwnedFd>,
    /// What the peer's descriptors must return (never 0).
    token: u64,
}

impl Holding {
    /// How process `pid` holds the socket, descriptor `fd` with `inode`,
    /// bound to `peer` (as read from `/proc`), with a fresh token; `None`
    /// when a copy of that descriptor says otherwise (it names another
    /// socket, one no longer bound there, or one that lets others bind its
    /// port too, so that another process may receive what is sent there),
    /// and when that copy cannot be had for now (out of descriptors or
    /// memory: asked again next time).
    fn new(pid: u32, fd: u32, inode: u64, peer: SocketAddr, seen_at: u64) -> Option<Holding> {
        let copy = pidfd(pid).and_then(|p| Ok((DescriptorCopy::take(&p, fd)?, p)));
        let process = match copy {
            Ok((copy, process)) => {
                let same = copy.inode() == Some(inode) && copy.bound_to(peer);
                if !same || copy.shares_port() {
                    return None;
                }
                Some(process)
            }
            // Descriptors cannot be had here (a kernel before 5.6, a
            // seccomp filter, ptrace rules): /proc confirms, and the
            // options go unasked.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOSYS | libc::EPERM | libc::EACCES)
                ) =>
            {
                None
            }
            // Short of resources, or the process or its descriptor gone.
            Err(_) => return None,
        };
        Some(Holding {
            fd,
            inode,
            seen_at,
            process,
            // The thread's generator: a cryptographic one, seeded by the
            // kernel.
            token: std::iter::repeat_with(rand::random::<u64>).find(|&t| t != 0)?,
        })
    }

    /// Whether process `pid` still holds the socket bound to `peer` by the
    /// same descriptor. Where it is bound is not asked again: that measured
    /// about 1 us more per 64 KiB message, and only a socket the kernel
    /// gave a port that then disconnects gives its port up while it stays
    /// open (uet's never do). Without a descriptor copy its options were
    /// never seen, so a socket that allows sharing its port may have been
    /// joined since by another (which would receive our tokens): the
    /// socket tables are read again to show it still alone there.
    fn confirmed(&self, pid: u32, peer: SocketAddr) -> bool {
        let Some(process) = &self.process else {
            return socket_inode_at(pid, self.fd) == Some(self.inode)
                && sole_socket_at(peer).flatten().map(|(inode, _)| inode) == Some(self.inode);
        };
        match DescriptorCopy::take(process, self.fd) {
            Ok(copy) => copy.inode() == Some(self.inode),
            // Out of descriptors, the copy cannot be had: /proc needs none.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                socket_inode_at(pid, self.fd) == Some(self.inode)
            }
            Err(_) => false,
        }
    }
}

/// A pidfd of process `pid`: ESRCH when there is no such process, ENOSYS
/// before Linux 5.3.
fn pidfd(pid: u32) -> std::io::Result<OwnedFd> {
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| std::io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor
    // or -1; nothing of ours is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = i32::try_from(fd)
        .ok()
        .filter(|&fd| fd >= 0)
        .ok_or_else(std::io::Error::last_os_error)?;
    // SAFETY: the kernel just gave us this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A copy of another process's descriptor, taken to ask what it names;
/// dropping it closes it.
struct DescriptorCopy(std::fs::File);

impl DescriptorCopy {
    /// Descriptor `fd` of the process behind `process`: fails when it
    /// cannot be had (EBADF: closed; ESRCH: the process gone; EPERM: no
    /// ptrace rights over it or a seccomp filter; ENOSYS: a kernel before
    /// 5.6; EMFILE: out of descriptors).
    fn take(process: &OwnedFd, fd: u32) -> std::io::Result<DescriptorCopy> {
        use std::os::fd::AsRawFd;
        let fd = libc::c_int::try_from(fd)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EBADF))?;
        // SAFETY: pidfd_getfd takes our pidfd, a descriptor number of that
        // process and flags, and returns a new descriptor of ours or -1.
        let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, process.as_raw_fd(), fd, 0) };
        let copy = i32::try_from(copy)
            .ok()
            .filter(|&fd| fd >= 0)
            .ok_or_else(std::io::Error::last_os_error)?;
        // SAFETY: the kernel just gave us this descriptor; nothing else
        // owns it.
        let copy = unsafe { OwnedFd::from_raw_fd(copy) };
        Ok(DescriptorCopy(copy.into()))
    }

    fn inode(&self) -> Option<u64> {
        self.0.metadata().ok().map(|m| m.ino())
    }

    /// Whether it is a socket bound to `addr` (or to the unspecified
    /// address of its family and its port).
    fn bound_to(&self, addr: SocketAddr) -> bool {
        let local = socket2::SockRef::from(&self.0).local_addr();
        local
            .ok()
            .and_then(|a| a.as_socket())
            .is_some_and(|local| binds(local, addr))
    }

    /// SO_REUSEADDR or SO_REUSEPORT: another socket may bind its port.
    fn shares_port(&self) -> bool {
        let socket = socket2::SockRef::from(&self.0);
        socket.reuse_address().unwrap_or(true) || socket.reuse_port().unwrap_or(true)
    }
}

/// The inode of the socket descriptor `fd` of process `pid` names, read
/// from `/proc`; `None` when it names no socket or cannot be read.
fn socket_inode_at(pid: u32, fd: u32) -> Option<u64> {
    let target = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
    socket_inode(&target.to_string_lossy())
}

/// `socket:[INODE]`, a socket descriptor's link in `/proc/<pid>/fd`.
fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

impl ProcessMemory {
    /// `None` when this process cannot name its host (no boot ID or PID
    /// namespace to read): it then neither offers nor takes copies.
    pub fn new() -> Option<ProcessMemory> {
        Some(ProcessMemory {
            host: this_host("pid")?,
            pid: std::process::id(),
            network: network_namespace("self"),
            owners: RefCell::new(HashMap::new()),
            arrivals: std::cell::Cell::new(0),
        })
    }

    /// Copy `dst.len()` bytes at `address` of process `pid` into `dst`,
    /// without asking who holds which socket (what [`HostMemory::read`]
    /// does first); false unless every byte was copied.
    pub fn copy(&self, pid: u32, address: u64, dst: &mut [u8]) -> bool {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        transfer(address, dst.len(), |done, at| {
            let rest = &mut dst[done..];
            let local = libc::iovec {
                iov_base: rest.as_mut_ptr().cast(),
                iov_len: rest.len(),
            };
            let remote = libc::iovec {
                iov_base: at as usize as *mut libc::c_void,
                iov_len: rest.len(),
            };
            // SAFETY: the local iovec covers `rest`, memory we hold mutably
            // for this call; the remote one names memory of another
            // process, which the kernel checks and reads on our behalf (a
            // bad address fails with EFAULT, never touching ours).
            unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) }
        })
    }

    /// Copy `src` to `address` of process `pid`, without asking who holds
    /// which socket (what [`HostMemory::write`] does first); false unless
    /// every byte was copied.
    pub fn copy_to(&self, pid: u32, address: u64, src: &[u8]) -> bool {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        transfer(address, src.len(), |done, at| {
            let rest = &src[done..];
            let local = libc::iovec {
                iov_base: rest.as_ptr().cast_mut().cast(),
                iov_len: rest.len(),
            };
            let remote = libc::iovec {
                iov_base: at as usize as *mut libc::c_void,
                iov_len: rest.len(),
            };
            // SAFETY: the local iovec covers `rest`, which the kernel only
            // reads; the remote one names memory of another process, which
            // the kernel checks and writes on our behalf (a bad address
            // fails with EFAULT).
            unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) }
        })
    }

    /// `copy`, when the claim is proven (see the module's doc); a failed
    /// copy forgets the holding (the process may be gone, and its pid taken
    /// by another).
    fn checked(&self, claim: &HostClaim, copy: impl FnOnce() -> bool) -> HostAccess {
        match self.holding_token(claim.peer, claim.pid) {
            None => HostAccess::Failed,
            Some(token) if token != claim.echo => HostAccess::Unproven,
            Some(_) if copy() => HostAccess::Done,
            Some(_) => {
                self.owners.borrow_mut().remove(&(claim.peer, claim.pid));
                HostAccess::Failed
            }
        }
    }

    /// The token of process `pid`'s holding of the socket bound to `peer`;
    /// `None` when it holds none (or is refused one, the table being full).
    /// What is found is remembered and confirmed again once a datagram has
    /// come since it was last confirmed.
    fn holding_token(&self, peer: SocketAddr, pid: u32) -> Option<u64> {
        let key = (peer, pid);
        let now = self.arrivals.get();
        let mut owners = self.owners.borrow_mut();
        if let Some(h) = owners.get_mut(&key) {
            let still = h.seen_at == now || h.confirmed(pid, peer);
            h.seen_at = now;
            if still {
                return Some(h.token);
            }
            owners.remove(&key);
        }
        // A process in another network namespace shares our PID namespace
        // (so its descriptors name our host) but not our socket tables:
        // its socket is not in them, and a scan of them for every message
        // it sends would find nothing. One `stat` tells it.
        if self.network.is_some() && network_namespace(&pid.to_string()) != self.network {
            return None;
        }
        let (fd, inode) = udp_socket_holding(pid, peer, Proof::Created).flatten()?;
        if owners.len() >= OWNERS_MAX {
            owners.retain(|&(peer, pid), h| h.confirmed(pid, peer));
            // Still full of live holdings: this one is refused (pulled over
            // the network) rather than any of theirs forgotten, which would
            // change its token under a copy in flight.
            if owners.len() >= OWNERS_MAX {
                return None;
            }
        }
        let holding = Holding::new(pid, fd, inode, peer, now)?;
        let token = holding.token;
        owners.insert(key, holding);
        Some(token)
    }
}

/// Move `len` bytes from or to `address` of another process, `step(done,
/// at)` making one system call for the bytes from `done` on (at `at`
/// there); the kernel may stop short of the whole. False unless every byte
/// moved.
fn transfer(address: u64, len: usize, mut step: impl FnMut(usize, u64) -> isize) -> bool {
    let mut done = 0usize;
    while done < len {
        let Some(at) = address.checked_add(done as u64) else {
            return false;
        };
        match step(done, at) {
            n @ 1.. => done += n as usize,
            _ => return false,
        }
    }
    true
}

/// Whether process `pid` holds the UDP socket bound to `addr` (or to the
/// unspecified address of its family and its port), the only one bound
/// there: what host rings ask of the processes of one user that share
/// their mailboxes, to tell a live endpoint from a stale file or claim (a
/// same-host copy asks more: [`Proof::Created`]).
///
/// A socket that closes while the table is read can hide another's row
/// (see [`read_table`]), so the tables are read twice ([`sole_socket_at`]).
pub(super) fn holds_udp_socket(pid: u32, addr: SocketAddr) -> bool {
    udp_socket_holder(pid, addr).unwrap_or(false)
}

/// [`holds_udp_socket`], or `None` when it could not be found out: the
/// socket table or the process's descriptors could not be read for want of
/// descriptors or memory (worth asking again later), not because the
/// process is gone or not ours.
pub(super) fn udp_socket_holder(pid: u32, addr: SocketAddr) -> Option<bool> {
    udp_socket_holding(pid, addr, Proof::Bound).map(|holding| holding.is_some())
}

/// What [`udp_socket_holding`] asks of a process.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Proof {
    /// It holds the socket bound to the address, and no other socket is
    /// bound there (SO_REUSEADDR, SO_REUSEPORT, or one on the unspecified
    /// address beside one on the address: either may receive, or have
    /// sent, what the other did).
    Bound,
    /// That, and its effective user made the socket: a socket handed to a
    /// more privileged program (kept open across an exec of a set-user-ID
    /// one) is still its creator's, who may read what it receives.
    Created,
}

/// The descriptor of process `pid` that names the UDP socket bound to
/// `addr` (of its own family, or the unspecified address of it: [`binds`])
/// and that socket's inode, if the process gives the `proof`; `None` when
/// that could not be found out (see [`udp_socket_holder`]).
fn udp_socket_holding(pid: u32, addr: SocketAddr, proof: Proof) -> Option<Option<(u32, u64)>> {
    let Some((inode, creator)) = sole_socket_at(addr)? else {
        return Some(None);
    };
    let gone_or_foreign = |e: &std::io::Error| {
        matches!(
            e.raw_os_error(),
            Some(libc::ENOENT | libc::ESRCH | libc::EACCES | libc::EPERM)
        )
    };
    if proof == Proof::Created {
        match effective_uid(pid) {
            Ok(user) if creator == Some(user) => {}
            Ok(_) => return Some(None),
            Err(e) => return gone_or_foreign(&e).then_some(None),
        }
    }
    let fds = match std::fs::read_dir(format!("/proc/{pid}/fd")) {
        Ok(fds) => fds,
        Err(e) => return gone_or_foreign(&e).then_some(None),
    };
    let found = fds.flatten().find_map(|entry| {
        let fd = entry.file_name().to_str()?.parse::<u32>().ok()?;
        (socket_inode_at(pid, fd)? == inode).then_some((fd, inode))
    });
    Some(found)
}

/// The inode and creator of the one UDP socket bound to `addr` ([`binds`]);
/// `Some(None)` when none is, or several are; `None` when the tables
/// cannot be read. They are read twice and what either shows counts: a
/// socket closing during one read can hide another's row there, such as
/// a second socket on the address.
fn sole_socket_at(addr: SocketAddr) -> Option<Option<(u64, Option<u32>)>> {
    let read_rows = || -> Option<Vec<UdpRow>> {
        Some(
            udp_sockets()?
                .into_iter()
                .filter(|row| binds(row.local, addr))
                .collect(),
        )
    };
    let mut rows = read_rows()?;
    rows.extend(read_rows()?);
    let Some(first) = rows.first() else {
        return Some(None);
    };
    let sole = rows.iter().all(|row| row.inode == first.inode);
    Some(sole.then_some((first.inode, first.uid)))
}

/// The effective user ID of process `pid` (`Uid:` in its status, as this
/// process's user namespace sees it, like the socket tables' `uid`). The
/// status is read as bytes: the process's name in it need not be UTF-8.
fn effective_uid(pid: u32) -> std::io::Result<u32> {
    let status = std::fs::read(format!("/proc/{pid}/status"))?;
    let uid = status
        .split(|&b| b == b'\n')
        .find_map(|line| line.strip_prefix(b"Uid:"))
        .and_then(|ids| std::str::from_utf8(ids).ok())
        .and_then(|ids| ids.split_whitespace().nth(1)?.parse().ok());
    // A status without it is not one to trust.
    uid.ok_or_else(|| std::io::Error::from_raw_os_error(libc::EACCES))
}

/// One row of `/proc/net/udp` or `udp6`.
#[derive(Debug, PartialEq)]
struct UdpRow {
    local: SocketAddr,
    inode: u64,
    /// Whose socket it is (its creator's user ID).
    uid: Option<u32>,
}

/// Every UDP socket of this network namespace; `None` when the IPv4 table
/// cannot be read (the IPv6 one is missing on a kernel without IPv6).
fn udp_sockets() -> Option<Vec<UdpRow>> {
    let v4 = read_table("/proc/net/udp")?;
    let v6 = read_table("/proc/net/udp6").unwrap_or_default();
    Some(
        [v4, v6]
            .iter()
            .flat_map(|table| table.lines().skip(1).filter_map(udp_table_row))
            .collect(),
    )
}

/// A socket table of `/proc/net`, taken in as few reads as it allows: the
/// kernel resumes each read by counting rows from the start, so a socket
/// that closes between two reads makes the next one skip a row (a live
/// socket then seems unbound). `read_to_string` starts with a small read;
/// reading into a large buffer does not (the kernel still hands out at
/// most a page or so per read).
fn read_table(path: &str) -> Option<String> {
    use std::io::Read;
    let mut table = String::with_capacity(1 << 18);
    std::fs::File::open(path)
        .ok()?
        .read_to_string(&mut table)
        .ok()?;
    Some(table)
}

/// A test for "some UDP socket of this network namespace sends from
/// `addr`", reading the socket tables once for many addresses; `None` when
/// they cannot be read.
pub(super) fn udp_bound_test() -> Option<impl Fn(SocketAddr) -> bool> {
    let bound: Vec<SocketAddr> = udp_sockets()?.into_iter().map(|row| row.local).collect();
    // An empty table means it could not be read: ours is in it.
    (!bound.is_empty()).then_some(move |addr| bound.iter().any(|&local| binds(local, addr)))
}

/// Whether a socket bound to `local` sends from `addr`. An unspecified
/// address stands for every address of its own family only: an IPv6
/// socket sends from IPv4 addresses only when dual-stack, which the socket
/// tables do not tell (ours never are).
fn binds(local: SocketAddr, addr: SocketAddr) -> bool {
    let (ours, theirs) = (local.ip().to_canonical(), addr.ip().to_canonical());
    let same_ip = ours == theirs || (ours.is_unspecified() && ours.is_ipv4() == theirs.is_ipv4());
    local.port() == addr.port() && same_ip
}

/// One row of `/proc/net/udp` or `udp6`; `None` for the heading.
fn udp_table_row(row: &str) -> Option<UdpRow> {
    let cols: Vec<&str> = row.split_whitespace().collect();
    let (ip, port) = cols.get(1)?.split_once(':')?;
    let inode = cols.get(9)?.parse().ok()?;
    // The kernel prints each 32-bit word of the address as a number in
    // its own byte order.
    let word = |i: usize| -> Option<[u8; 4]> {
        let hex = ip.get(8 * i..8 * i + 8)?;
        Some(u32::from_str_radix(hex, 16).ok()?.to_ne_bytes())
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[4 * i..4 * i + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    let port = u16::from_str_radix(port, 16).ok()?;
    Some(UdpRow {
        local: SocketAddr::new(ip, port),
        inode,
        uid: cols.get(7).and_then(|uid| uid.parse().ok()),
    })
}

/// This boot folded with this process's namespace of `kind` (`pid`: what a
/// pid means; `net`: what an address means), or `None` when either cannot
/// be read.
pub(super) fn this_host(kind: &str) -> Option<u64> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let (dev, ino) = namespace("self", kind)?;
    host_value(&boot, dev, ino)
}

/// The namespace of `kind` of process `pid` (`self` for this one) as the
/// device and inode of its `/proc/<pid>/ns/<kind>`; `None` when it cannot
/// be read (the process is gone, or not one we may inspect, whose memory
/// the kernel would not let us copy either).
fn namespace(pid: &str, kind: &str) -> Option<(u64, u64)> {
    let namespace = std::fs::metadata(format!("/proc/{pid}/ns/{kind}")).ok()?;
    Some((namespace.dev(), namespace.ino()))
}

/// The network namespace of process `pid` ([`namespace`]).
fn network_namespace(pid: &str) -> Option<(u64, u64)> {
    namespace(pid, "net")
}

/// The boot ID (a UUID in text) folded with the PID namespace's device and
/// inode into 64 bits; `None` when the boot ID is not a UUID.
fn host_value(boot_id: &str, ns_dev: u64, ns_ino: u64) -> Option<u64> {
    let hex: String = boot_id.trim().chars().filter(|c| *c != '-').collect();
    let boot = u128::from_str_radix(&hex, 16)
        .ok()
        .filter(|_| hex.len() == 32)?;
    // Multiplying by odd constants spreads the namespace over all bits.
    let ns =
        ns_ino.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ns_dev.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    Some((boot as u64) ^ ((boot >> 64) as u64) ^ ns)
}

impl HostMemory for ProcessMemory {
    fn this_process(&self) -> (u64, u32) {
        (self.host, self.pid)
    }

    fn offer(&self, peer: SocketAddr, pid: u32) -> u64 {
        self.owners
            .borrow()
            .get(&(peer, pid))
            .map_or(0, |h| h.token)
    }

    fn meet(&self, peer: SocketAddr, pid: u32) {
        if !self.owners.borrow().contains_key(&(peer, pid)) {
            self.holding_token(peer, pid);
        }
    }

    fn read(&self, claim: &HostClaim, address: u64, dst: &mut [u8]) -> HostAccess {
        self.checked(claim, || self.copy(claim.pid, address, dst))
    }

    fn write(&self, claim: &HostClaim, address: u64, src: &[u8]) -> HostAccess {
        self.checked(claim, || self.copy_to(claim.pid, address, src))
    }

    fn clock_ms(&self) -> u32 {
        (super::sys::monotonic_ns() / 1_000_000) as u32
    }

    fn datagram_arrived(&self) {
        self.arrivals.set(self.arrivals.get().wrapping_add(1));
    }
}

/// Held (shared) by tests while they start a process, and (alone) by tests
/// that close one of two sockets on an address and then look for the other
/// alone there: a child holds a copy of every descriptor of the test
/// process from its fork until its exec, the closed socket's too.
#[cfg(test)]
pub(super) static SPAWNING: std::sync::RwLock<()> = std::sync::RwLock::new(());

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `access` copied, asked once more when it was unproven (as a
    /// peer's second message would return what the first was offered).
    fn proven(mut access: impl FnMut() -> HostAccess) -> bool {
        let mut got = access();
        if got == HostAccess::Unproven {
            got = access();
        }
        got == HostAccess::Done
    }

    /// This process's memory, a buffer to copy out of it and one to copy
    /// into, as copies named by a peer would.
    struct Copies {
        m: ProcessMemory,
        pid: u32,
        src: Vec<u8>,
        dst: Vec<u8>,
    }

    impl Copies {
        fn new(fill: u8) -> Copies {
            assert_ne!(fill, 0, "a copy must be told from none");
            let m = ProcessMemory::new().expect("a boot ID and a PID namespace");
            let (_, pid) = m.this_process();
            Copies {
                m,
                pid,
                src: vec![fill; 4096],
                dst: vec![0; 4096],
            }
        }

        /// `src` into `dst`, as process `pid` named by a peer at `peer`
        /// that returned `echo`.
        fn read_echoing(&mut self, peer: SocketAddr, pid: u32, echo: u64) -> HostAccess {
            self.dst.fill(0);
            let at = self.src.as_ptr() as u64;
            let claim = HostClaim { peer, pid, echo };
            let read = self.m.read(&claim, at, &mut self.dst);
            assert_eq!(
                read == HostAccess::Done,
                self.dst == self.src,
                "all or nothing"
            );
            read
        }

        /// [`Self::read_echoing`] by a peer that returns what it was
        /// offered, once more if it was offered nothing yet (as a peer's
        /// second message would).
        fn read_as(&mut self, peer: SocketAddr, pid: u32) -> bool {
            proven(|| self.read_echoing(peer, pid, self.m.offer(peer, pid)))
        }

        fn read(&mut self, peer: SocketAddr) -> bool {
            self.read_as(peer, self.pid)
        }

        /// `src` into `dst` the other way, by `HostMemory::write`, by a
        /// peer that returns what it was offered (once more if nothing).
        fn write_as(&mut self, peer: SocketAddr, pid: u32) -> bool {
            proven(|| {
                self.dst.fill(0);
                let at = self.dst.as_mut_ptr() as u64;
                let echo = self.m.offer(peer, pid);
                let written = self.m.write(&HostClaim { peer, pid, echo }, at, &self.src);
                assert_eq!(written == HostAccess::Done, self.dst == self.src);
                written
            })
        }
    }

    // Tests that free a port, or hold one in a child, do it on a loopback
    // address of their own (127.0.0.78 and up): no other test of this
    // process (which holds its sockets with this pid) takes the port
    // meanwhile, unless on the wildcard.

    #[test]
    fn host_value_needs_a_uuid_and_tells_namespaces_apart() {
        let boot = "6b1f2a7e-3c4d-4e5f-8a9b-0c1d2e3f4a5b\n";
        let a = host_value(boot, 4, 0xeffffffc).unwrap();
        assert_eq!(host_value(boot, 4, 0xeffffffc), Some(a));
        assert_ne!(host_value(boot, 4, 0xeffffffd), Some(a));
        assert_ne!(
            host_value("6b1f2a7e-3c4d-4e5f-8a9b-0c1d2e3f4a5c", 4, 0xeffffffc),
            Some(a)
        );
        assert_eq!(host_value("not-a-uuid", 4, 1), None);
        assert_eq!(host_value("6b1f2a7e", 4, 1), None);
    }

    #[test]
    fn copies_from_this_process_and_refuses_bad_addresses() {
        let m = ProcessMemory::new().expect("a boot ID and a PID namespace");
        let (_, pid) = m.this_process();
        let src: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + 1) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        assert!(m.copy(pid, src.as_ptr() as u64, &mut dst));
        assert_eq!(dst, src);
        let mut back = vec![0u8; src.len()];
        assert!(m.copy_to(pid, back.as_mut_ptr() as u64, &src));
        assert_eq!(back, src);
        assert!(!m.copy_to(pid, 8, &src[..16]), "page zero is never mapped");
        assert!(!m.copy(pid, 8, &mut dst[..16]), "page zero is never mapped");
        assert!(
            !m.copy(pid, u64::MAX - 4, &mut dst[..16]),
            "a wrapping range"
        );
        assert!(!m.copy(u32::MAX, src.as_ptr() as u64, &mut dst[..16]));
    }

    #[test]
    fn reads_only_from_the_process_holding_the_socket() {
        let mut c = Copies::new(7);
        let pid = c.pid;
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let ours = socket.local_addr().unwrap();
        assert!(c.read(ours));
        assert!(c.write_as(ours, pid));
        // Another process does not hold our socket; nobody holds the port
        // of a socket that was closed.
        let parent = std::os::unix::process::parent_id();
        assert!(!c.read_as(ours, parent));
        assert!(!c.write_as(ours, parent));
        let closed = std::net::UdpSocket::bind("127.0.0.78:0").unwrap();
        let gone = closed.local_addr().unwrap();
        drop(closed);
        assert!(!c.read(gone));
        // A socket bound to the unspecified address sends from loopback.
        let any = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        let port = any.local_addr().unwrap().port();
        assert!(c.read(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port)));
    }

    #[test]
    fn a_copy_needs_the_token_offered_for_the_holding() {
        let mut c = Copies::new(8);
        let pid = c.pid;
        let socket = std::net::UdpSocket::bind("127.0.0.83:0").unwrap();
        let peer = socket.local_addr().unwrap();
        // Nothing is offered before the holder is found, so nothing that
        // came before can return it.
        assert_eq!(c.m.offer(peer, pid), 0);
        assert_eq!(c.read_echoing(peer, pid, 0), HostAccess::Unproven);
        let token = c.m.offer(peer, pid);
        assert_ne!(token, 0);
        assert_eq!(c.read_echoing(peer, pid, token ^ 1), HostAccess::Unproven);
        assert_eq!(c.read_echoing(peer, pid, token), HostAccess::Done);
        assert_eq!(c.m.offer(peer, pid), token, "kept while held");
        // Another process named from the same address is another holding:
        // it is not ours to claim, token or not.
        let parent = std::os::unix::process::parent_id();
        assert_eq!(c.read_echoing(peer, parent, token), HostAccess::Failed);
        // The address changes hands: a new socket there, a new token. One
        // handed to the earlier holder proves nothing.
        drop(socket);
        let Ok(again) = std::net::UdpSocket::bind(peer) else {
            return; // the port was taken meanwhile
        };
        c.m.datagram_arrived();
        assert_eq!(c.read_echoing(peer, pid, token), HostAccess::Unproven);
        let fresh = c.m.offer(peer, pid);
        assert_ne!(fresh, token);
        assert_eq!(c.read_echoing(peer, pid, fresh), HostAccess::Done);
        drop(again);
    }

    #[test]
    fn meeting_a_peer_makes_the_offer_only_for_its_holder() {
        let c = Copies::new(10);
        let pid = c.pid;
        let socket = std::net::UdpSocket::bind("127.0.0.84:0").unwrap();
        let peer = socket.local_addr().unwrap();
        let parent = std::os::unix::process::parent_id();
        c.m.meet(peer, parent);
        assert_eq!(c.m.offer(peer, parent), 0, "not the holder");
        c.m.meet(peer, pid);
        let token = c.m.offer(peer, pid);
        assert_ne!(token, 0);
        c.m.meet(peer, pid);
        assert_eq!(c.m.offer(peer, pid), token, "met once");
        drop(socket);
    }

    #[test]
    fn a_closed_socket_is_not_trusted_from_memory() {
        let mut c = Copies::new(9);
        let pid = c.pid;
        let socket = std::net::UdpSocket::bind("127.0.0.82:0").unwrap();
        let origin = socket.local_addr().unwrap();
        assert!(c.read(origin));
        assert!(c.m.owners.borrow().contains_key(&(origin, pid)));
        assert!(c.read(origin), "remembered");
        // Once the socket is closed its port is anyone's: the remembered
        // owner no longer counts, once a datagram has come since it was
        // last found (until then, every datagram naming memory came before
        // the close).
        drop(socket);
        assert!(c.read(origin), "no datagram since");
        c.m.datagram_arrived();
        assert!(!c.read(origin));
        c.m.datagram_arrived();
        assert!(!c.write_as(origin, pid));
        assert!(!c.m.owners.borrow().contains_key(&(origin, pid)));
        // A new socket on the same port is checked afresh.
        let Ok(again) = std::net::UdpSocket::bind(origin) else {
            return; // the port was taken meanwhile
        };
        assert!(c.read(origin));
        drop(again);
        c.m.datagram_arrived();
        assert!(!c.read(origin));
    }

    /// Descriptor number and inode of `socket`.
    fn descriptor_of(socket: &impl std::os::fd::AsRawFd) -> (u32, u64) {
        let fd = socket.as_raw_fd() as u32;
        let inode = std::fs::metadata(format!("/proc/self/fd/{fd}"))
            .unwrap()
            .ino();
        (fd, inode)
    }

    /// Whether this kernel hands us descriptors of a process (Linux 5.6).
    fn descriptors_from_a_pidfd() -> bool {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let (fd, _) = descriptor_of(&socket);
        let found = pidfd(std::process::id()).and_then(|p| DescriptorCopy::take(&p, fd));
        if found.is_err() {
            eprintln!("no descriptors from a pidfd here: only the /proc path is tested");
        }
        found.is_ok()
    }

    #[test]
    fn a_holding_is_confirmed_with_or_without_a_pidfd() {
        let pid = std::process::id();
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let origin = socket.local_addr().unwrap();
        let (fd, inode) = descriptor_of(&socket);
        assert_eq!(socket_inode_at(pid, fd), Some(inode));
        let with = Holding::new(pid, fd, inode, origin, 0).unwrap();
        assert_ne!(with.token, 0);
        let twin = Holding::new(pid, fd, inode, origin, 0).unwrap();
        assert_ne!(twin.token, with.token, "each holding found has its own");
        let without = Holding {
            process: None,
            ..Holding::new(pid, fd, inode, origin, 0).unwrap()
        };
        assert_eq!(with.process.is_some(), descriptors_from_a_pidfd());
        assert!(with.confirmed(pid, origin) && without.confirmed(pid, origin));
        if with.process.is_some() {
            assert!(Holding::new(pid, fd, inode + 1, origin, 0).is_none());
            let elsewhere = SocketAddr::new(origin.ip(), origin.port() ^ 1);
            assert!(Holding::new(pid, fd, inode, elsewhere, 0).is_none());
        }
        let other = Holding {
            inode: inode + 1,
            ..Holding::new(pid, fd, inode, origin, 0).unwrap()
        };
        assert!(!other.confirmed(pid, origin), "another inode");
        // The descriptor closed, then given to another socket.
        drop(socket);
        let next = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(!with.confirmed(pid, origin) && !without.confirmed(pid, origin));
        drop(next);
        assert!(!with.confirmed(pid, origin) && !without.confirmed(pid, origin));
    }

    /// A UDP socket on `addr` with SO_REUSEADDR set before binding.
    fn sharing_socket(addr: SocketAddr) -> socket2::Socket {
        use socket2::{Domain, Protocol, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
        socket.set_reuse_address(true).unwrap();
        socket.bind(&addr.into()).unwrap();
        socket
    }

    #[test]
    fn a_holding_whose_options_went_unseen_is_not_confirmed_once_shared() {
        let pid = std::process::id();
        let first = sharing_socket("127.0.0.85:0".parse().unwrap());
        let origin = first.local_addr().unwrap().as_socket().unwrap();
        let (fd, inode) = descriptor_of(&first);
        // As found where descriptors cannot be taken: SO_REUSEADDR unseen.
        let unseen = Holding {
            fd,
            inode,
            seen_at: 0,
            process: None,
            token: 1,
        };
        assert!(unseen.confirmed(pid, origin), "alone on its address");
        let _alone = SPAWNING.write().unwrap_or_else(|e| e.into_inner());
        let joined = sharing_socket(origin);
        assert!(
            !unseen.confirmed(pid, origin),
            "another socket receives there now"
        );
        drop(joined);
        assert!(unseen.confirmed(pid, origin));
    }

    /// A `sleep` that holds `socket` (ours closed), as user `uid` if given;
    /// `None` when it cannot be started so.
    fn handed_to_a_child(socket: std::net::UdpSocket, uid: Option<u32>) -> Option<Child> {
        handed_to(socket, &["sleep", "60"], uid)
    }

    /// `program` (with its arguments), holding `socket` as
    /// [`handed_to_a_child`] does.
    fn handed_to(socket: std::net::UdpSocket, program: &[&str], uid: Option<u32>) -> Option<Child> {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let fd = socket.as_raw_fd();
        let mut command = std::process::Command::new(program[0]);
        command.args(&program[1..]);
        if let Some(uid) = uid {
            command.uid(uid);
        }
        // SAFETY: the closure runs in the child between fork and exec,
        // where only async-signal-safe calls may be made; fcntl is one. It
        // keeps the child's copy of `fd` across the exec, and only that
        // copy: a process another test starts meanwhile does not get it.
        unsafe {
            command.pre_exec(move || match libc::fcntl(fd, libc::F_SETFD, 0) {
                -1 => Err(std::io::Error::last_os_error()),
                _ => Ok(()),
            });
        }
        let child = {
            let _spawning = SPAWNING.read().unwrap_or_else(|e| e.into_inner());
            command.spawn().ok().map(Child)
        };
        drop(socket);
        child
    }

    /// Whether process `pid` may be named from `addr` by a copy.
    fn created(pid: u32, addr: SocketAddr) -> Option<bool> {
        udp_socket_holding(pid, addr, Proof::Created).map(|h| h.is_some())
    }

    /// Killed when dropped.
    struct Child(std::process::Child);

    impl Drop for Child {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn a_port_others_may_bind_too_is_not_trusted() {
        let mut c = Copies::new(5);
        // Two sockets of ours on one address: either may receive what is
        // sent there.
        let first = sharing_socket("127.0.0.86:0".parse().unwrap());
        let origin = first.local_addr().unwrap().as_socket().unwrap();
        let _alone = SPAWNING.write().unwrap_or_else(|e| e.into_inner());
        let second = sharing_socket(origin);
        assert_eq!(created(c.pid, origin), Some(false), "two");
        assert_eq!(udp_socket_holder(c.pid, origin), Some(false), "rings: two");
        assert!(!c.read(origin));
        // One alone, that lets others bind its address too: only a copy of
        // its descriptor shows it.
        drop(second);
        assert_eq!(created(c.pid, origin), Some(true));
        assert_eq!(c.read(origin), !descriptors_from_a_pidfd());
        drop(first);
        let alone = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(c.read(alone.local_addr().unwrap()));
    }

    #[test]
    fn a_port_another_process_holds_at_another_address_does_not_matter() {
        let mut c = Copies::new(6);
        let pid = c.pid;
        // The other socket may send from ours with IP_PKTINFO, but it does
        // not receive what is sent to ours, so it cannot return our token.
        let theirs = std::net::UdpSocket::bind("127.0.0.79:0").unwrap();
        let port = theirs.local_addr().unwrap().port();
        let Ok(ours) = std::net::UdpSocket::bind(("127.0.0.80", port)) else {
            return; // the port was taken there meanwhile
        };
        let peer = ours.local_addr().unwrap();
        let Some(child) = handed_to_a_child(theirs, None) else {
            panic!("cannot start sleep(1)");
        };
        assert_eq!(created(pid, peer), Some(true));
        assert!(c.read(peer));
        assert_eq!(created(child.0.id(), peer), Some(false), "not its own");
    }

    #[test]
    fn a_socket_handed_to_another_user_is_still_its_creators() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return; // only root starts a process as another user
        }
        let socket = std::net::UdpSocket::bind("127.0.0.81:0").unwrap();
        let origin = socket.local_addr().unwrap();
        let Some(child) = handed_to_a_child(socket, Some(65534)) else {
            return; // no such user here
        };
        let holder = child.0.id();
        assert_eq!(created(holder, origin), Some(false));
        assert_eq!(udp_socket_holder(holder, origin), Some(true), "held");
        // Theirs, as they made it.
        let socket = std::net::UdpSocket::bind("127.0.0.81:0").unwrap();
        let origin = socket.local_addr().unwrap();
        let child = handed_to_a_child(socket, None).unwrap();
        assert_eq!(created(child.0.id(), origin), Some(true));
    }

    #[test]
    fn a_process_in_another_network_namespace_is_not_named() {
        let mut c = Copies::new(11);
        assert_eq!(c.m.network, network_namespace(&c.pid.to_string()));
        assert!(c.m.network.is_some());
        // A socket of our namespace, held by a process that then left it
        // (as root: unshare(1) needs CAP_SYS_ADMIN; skipped without).
        let socket = std::net::UdpSocket::bind("127.0.0.87:0").unwrap();
        let origin = socket.local_addr().unwrap();
        let Some(mut child) = handed_to(socket, &["unshare", "-n", "sleep", "60"], None) else {
            return; // no unshare(1) here
        };
        let holder = child.0.id();
        let moved = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            let here = network_namespace(&holder.to_string());
            // An unshare(1) refused (not root) exits at once.
            let exited = !matches!(child.0.try_wait(), Ok(None));
            exited || here.is_some() && here != c.m.network
        }) && matches!(child.0.try_wait(), Ok(None));
        if !moved {
            eprintln!("unshare -n refused here: the other namespace is not tested");
            return;
        }
        // The socket tables alone would name it; the namespace does not.
        assert_eq!(created(holder, origin), Some(true));
        assert!(!c.read_as(origin, holder));
        assert!(!c.write_as(origin, holder));
        c.m.meet(origin, holder);
        assert_eq!(c.m.offer(origin, holder), 0);
        assert!(c.m.owners.borrow().is_empty());
    }

    #[test]
    fn the_effective_user_is_read_from_the_status() {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        assert_eq!(effective_uid(std::process::id()).unwrap(), me);
        assert!(effective_uid(u32::MAX).is_err());
    }

    #[test]
    fn a_wildcard_sends_only_from_its_own_family() {
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(binds(at("0.0.0.0:7"), at("127.0.0.1:7")));
        assert!(binds(at("[::]:7"), at("[::1]:7")));
        assert!(binds(at("127.0.0.1:7"), at("127.0.0.1:7")));
        assert!(!binds(at("127.0.0.1:7"), at("127.0.0.1:8")));
        assert!(!binds(at("127.0.0.2:7"), at("127.0.0.1:7")));
        assert!(!binds(at("0.0.0.0:7"), at("[::1]:7")), "another family");
        assert!(!binds(at("[::]:7"), at("127.0.0.1:7")), "may be V6ONLY");
        // A v4-mapped address is the IPv4 one.
        assert!(binds(at("[::ffff:127.0.0.1]:7"), at("127.0.0.1:7")));
        assert!(binds(at("127.0.0.1:7"), at("[::ffff:127.0.0.1]:7")));
        assert!(binds(at("0.0.0.0:7"), at("[::ffff:127.0.0.1]:7")));
    }

    #[test]
    fn udp_table_rows_parse() {
        let v4 = "  123: 0100007F:12B9 00000000:0000 07 00000000:00000000 00:00000000 \
                  00000000  1000        0 4242 2 0000000000000000 0";
        let row = udp_table_row(v4).unwrap();
        assert_eq!(
            (row.local.port(), row.inode, row.uid),
            (4793, 4242, Some(1000))
        );
        if cfg!(target_endian = "little") {
            assert_eq!(row.local.ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
        }
        let v6 = "  5: 00000000000000000000000001000000:12B9 \
                  00000000000000000000000000000000:0000 07 00000000:00000000 \
                  00:00000000 00000000     0        0 99 2 0000000000000000 0";
        let row = udp_table_row(v6).unwrap();
        assert_eq!((row.local.port(), row.inode, row.uid), (4793, 99, Some(0)));
        if cfg!(target_endian = "little") {
            assert_eq!(row.local.ip(), IpAddr::V6(Ipv6Addr::LOCALHOST));
        }
        assert_eq!(udp_table_row("  sl  local_address rem_address"), None);
        assert_eq!(udp_table_row(""), None);
    }
}
