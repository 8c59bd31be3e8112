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
//! A peer may only name its own memory: the process must hold the UDP
//! socket the description came from (its inode in `/proc/net/udp*` among
//! the process's descriptors), so a peer cannot have a receiver with more
//! privileges copy a third process's memory into a buffer it may echo back.
//! The check runs once per (socket, process) and is remembered.

use std::cell::RefCell;
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::fs::MetadataExt;

use crate::engine::HostMemory;

/// The driver's [`HostMemory`].
pub struct ProcessMemory {
    host: u64,
    pid: u32,
    /// (socket address, pid) pairs found to belong together.
    owners: RefCell<HashSet<(SocketAddr, u32)>>,
}

impl ProcessMemory {
    /// `None` when this process cannot name its host (no boot ID or PID
    /// namespace to read): it then neither offers nor takes copies.
    pub fn new() -> Option<ProcessMemory> {
        Some(ProcessMemory {
            host: this_host("pid")?,
            pid: std::process::id(),
            owners: RefCell::new(HashSet::new()),
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

    /// `copy`, when process `pid` may be named by a peer whose datagram
    /// came from `origin` (it holds that socket). Ownership found is
    /// remembered; a failed copy forgets it (the process may be gone, and
    /// its pid taken by another).
    fn checked(&self, origin: SocketAddr, pid: u32, copy: impl FnOnce() -> bool) -> bool {
        let key = (origin, pid);
        let known = self.owners.borrow().contains(&key);
        if !known && !holds_udp_socket(pid, origin) {
            return false;
        }
        let copied = copy();
        if copied {
            self.owners.borrow_mut().insert(key);
        } else {
            self.owners.borrow_mut().remove(&key);
        }
        copied
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

/// Whether process `pid` holds a UDP socket bound to `addr` (or to the
/// unspecified address and its port).
///
/// A socket that closes while the table is read can hide another's row
/// (see [`read_table`]), so an address not found is looked for once more.
pub(super) fn holds_udp_socket(pid: u32, addr: SocketAddr) -> bool {
    udp_socket_holder(pid, addr).unwrap_or(false)
}

/// [`holds_udp_socket`], or `None` when it could not be found out: the
/// socket table or the process's descriptors could not be read for want of
/// descriptors or memory (worth asking again later), not because the
/// process is gone or not ours.
pub(super) fn udp_socket_holder(pid: u32, addr: SocketAddr) -> Option<bool> {
    let bound_to = || -> Option<HashSet<u64>> {
        let sockets = udp_sockets()?.into_iter();
        Some(
            sockets
                .filter(|&(local, _)| binds(local, addr))
                .map(|(_, inode)| inode)
                .collect(),
        )
    };
    let mut inodes = bound_to()?;
    if inodes.is_empty() {
        inodes = bound_to()?;
    }
    if inodes.is_empty() {
        return Some(false);
    }
    let fds = match std::fs::read_dir(format!("/proc/{pid}/fd")) {
        Ok(fds) => fds,
        Err(e) => {
            let gone_or_foreign = matches!(
                e.raw_os_error(),
                Some(libc::ENOENT | libc::ESRCH | libc::EACCES | libc::EPERM)
            );
            return gone_or_foreign.then_some(false);
        }
    };
    let found = fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).ok().is_some_and(|target| {
            let target = target.to_string_lossy();
            target
                .strip_prefix("socket:[")
                .and_then(|t| t.strip_suffix(']'))
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| inodes.contains(&n))
        })
    });
    Some(found)
}

/// (local address, inode) of every UDP socket of this network namespace;
/// `None` when the IPv4 table cannot be read (the IPv6 one is missing on a
/// kernel without IPv6).
fn udp_sockets() -> Option<Vec<(SocketAddr, u64)>> {
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
    let bound: Vec<SocketAddr> = udp_sockets()?.into_iter().map(|(a, _)| a).collect();
    // An empty table means it could not be read: ours is in it.
    (!bound.is_empty()).then_some(move |addr| bound.iter().any(|&local| binds(local, addr)))
}

/// Whether a socket bound to `local` sends from `addr`.
fn binds(local: SocketAddr, addr: SocketAddr) -> bool {
    let same_ip = match (local.ip(), addr.ip()) {
        (a, b) if a == b || a.is_unspecified() => true,
        (IpAddr::V6(a), IpAddr::V4(b)) => a.to_ipv4_mapped() == Some(b),
        _ => false,
    };
    local.port() == addr.port() && same_ip
}

/// (local address, inode) of one row of `/proc/net/udp` or `udp6`.
fn udp_table_row(row: &str) -> Option<(SocketAddr, u64)> {
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
    Some((SocketAddr::new(ip, port), inode))
}

/// This boot folded with this process's namespace of `kind` (`pid`: what a
/// pid means; `net`: what an address means), or `None` when either cannot
/// be read.
pub(super) fn this_host(kind: &str) -> Option<u64> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let namespace = std::fs::metadata(format!("/proc/self/ns/{kind}")).ok()?;
    host_value(&boot, namespace.dev(), namespace.ino())
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

    fn read(&self, origin: SocketAddr, pid: u32, address: u64, dst: &mut [u8]) -> bool {
        self.checked(origin, pid, || self.copy(pid, address, dst))
    }

    fn write(&self, origin: SocketAddr, pid: u32, address: u64, src: &[u8]) -> bool {
        self.checked(origin, pid, || self.copy_to(pid, address, src))
    }

    fn clock_ms(&self) -> u32 {
        (super::sys::monotonic_ns() / 1_000_000) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let m = ProcessMemory::new().expect("a boot ID and a PID namespace");
        let (_, pid) = m.this_process();
        let src = vec![7u8; 4096];
        let mut dst = vec![0u8; 4096];
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let ours = socket.local_addr().unwrap();
        let at = src.as_ptr() as u64;
        assert!(m.read(ours, pid, at, &mut dst));
        assert_eq!(dst, src);
        let mut back = vec![0u8; 4096];
        assert!(m.write(ours, pid, back.as_mut_ptr() as u64, &src));
        assert_eq!(back, src);
        // Another process does not hold our socket; nobody holds the port
        // of a socket that was closed.
        let parent = std::os::unix::process::parent_id();
        assert!(!m.read(ours, parent, at, &mut dst));
        assert!(!m.write(ours, parent, at, &src));
        let closed = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let gone = closed.local_addr().unwrap();
        drop(closed);
        assert!(!m.read(gone, pid, at, &mut dst));
        // A socket bound to the unspecified address sends from loopback.
        let any = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        let port = any.local_addr().unwrap().port();
        let from = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port);
        assert!(m.read(from, pid, at, &mut dst));
    }

    #[test]
    fn udp_table_rows_parse() {
        let v4 = "  123: 0100007F:12B9 00000000:0000 07 00000000:00000000 00:00000000 \
                  00000000     0        0 4242 2 0000000000000000 0";
        let (addr, inode) = udp_table_row(v4).unwrap();
        assert_eq!((addr.port(), inode), (4793, 4242));
        if cfg!(target_endian = "little") {
            assert_eq!(addr.ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
        }
        let v6 = "  5: 00000000000000000000000001000000:12B9 \
                  00000000000000000000000000000000:0000 07 00000000:00000000 \
                  00:00000000 00000000     0        0 99 2 0000000000000000 0";
        let (addr, inode) = udp_table_row(v6).unwrap();
        assert_eq!((addr.port(), inode), (4793, 99));
        if cfg!(target_endian = "little") {
            assert_eq!(addr.ip(), IpAddr::V6(Ipv6Addr::LOCALHOST));
        }
        assert_eq!(udp_table_row("  sl  local_address rem_address"), None);
        assert_eq!(udp_table_row(""), None);
    }
}
