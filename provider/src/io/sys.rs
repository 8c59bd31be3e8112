//! Datagram system calls that carry the IP TOS byte: `sendmsg` with an
//! `IP_TOS` / `IPV6_TCLASS` control message (none for the socket's own TOS,
//! [`DEFAULT_TOS`]), `recvmsg` reading the one `IP_RECVTOS` /
//! `IPV6_RECVTCLASS` delivers. They go through `syscall(2)` (see
//! [`raw_sendmsg`]).
//!
//! Neither std nor socket2 exposes control messages, and quinn-udp hands out
//! only the two ECN bits while the transport needs the whole byte (the DSCP
//! of a trimmed packet), hence these few lines of libc.

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::copy::copy_bytes;
use socket2::SockAddr;

/// Control-message space for one `int` payload (either family), kept as
/// `u64`s so the buffer is aligned for `cmsghdr`.
const CMSG_WORDS: usize = 8;

/// The TOS byte the driver's sockets send with unless told otherwise (see
/// [`set_default_tos`]): ECT(0) with the default DSCP, what data and ACKs
/// carry, so they leave without a control message for the kernel to parse
/// (about 0.05 us per send on loopback).
pub const DEFAULT_TOS: u8 = 0x02;

/// Where a send goes. `Named` puts the address in every call, and the
/// kernel looks its route up each time; `Connected` sends on a socket
/// connected to that address, reusing the route cached by `connect(2)`
/// (the address then only tells the family).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    Named(SocketAddr),
    Connected(SocketAddr),
}

impl Dest {
    pub fn addr(self) -> SocketAddr {
        match self {
            Dest::Named(a) | Dest::Connected(a) => a,
        }
    }
}

impl From<SocketAddr> for Dest {
    fn from(addr: SocketAddr) -> Dest {
        Dest::Named(addr)
    }
}

/// Make [`DEFAULT_TOS`] the socket's own TOS / traffic class. The send
/// functions here count on it: a datagram with that TOS goes without a
/// control message.
pub fn set_default_tos(socket: &UdpSocket, ipv6: bool) -> io::Result<()> {
    let (level, option) = if ipv6 {
        (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
    } else {
        (libc::IPPROTO_IP, libc::IP_TOS)
    };
    set_int_option(socket, level, option, libc::c_int::from(DEFAULT_TOS))
}

/// Ask the kernel to report the TOS / traffic-class byte of every arrival.
pub fn enable_recv_tos(socket: &UdpSocket, ipv6: bool) -> io::Result<()> {
    let (level, option) = if ipv6 {
        (libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS)
    } else {
        (libc::IPPROTO_IP, libc::IP_RECVTOS)
    };
    set_int_option(socket, level, option, 1)
}

/// `sendmsg`, `sendto`, `recvmsg` and `recvmmsg` go straight through `syscall(2)`:
/// glibc's wrappers are cancellation points, and their bookkeeping (the
/// thread's cancel state switched on and back around every call) took 7%
/// of an empty busy poll. The driver's threads are never cancelled, and
/// `syscall` sets `errno` like the wrappers do.
///
/// # Safety
/// As for `sendmsg(2)`: `msg` and everything it points at are valid.
unsafe fn raw_sendmsg(
    fd: libc::c_int,
    msg: *const libc::msghdr,
    flags: libc::c_int,
) -> io::Result<usize> {
    // SAFETY: passed on from the caller.
    syscall_result(unsafe { libc::syscall(libc::SYS_sendmsg, fd, msg, flags) })
}

/// See [`raw_sendmsg`].
///
/// # Safety
/// As for `sendto(2)`: `data` and `addr` are valid for their lengths
/// (no address: a connected socket's peer).
unsafe fn raw_sendto(fd: libc::c_int, data: &[u8], addr: Option<&SockAddr>) -> io::Result<usize> {
    let (name, len) = addr.map_or((std::ptr::null(), 0), |a| (a.as_ptr(), a.len()));
    // SAFETY: passed on from the caller.
    syscall_result(unsafe {
        libc::syscall(
            libc::SYS_sendto,
            fd,
            data.as_ptr(),
            data.len(),
            libc::MSG_NOSIGNAL,
            name,
            len,
        )
    })
}

/// See [`raw_sendmsg`].
///
/// # Safety
/// As for `recvmsg(2)`: `msg` and the buffers it names are valid and
/// writable for their stated lengths.
unsafe fn raw_recvmsg(
    fd: libc::c_int,
    msg: *mut libc::msghdr,
    flags: libc::c_int,
) -> io::Result<usize> {
    // SAFETY: passed on from the caller.
    syscall_result(unsafe { libc::syscall(libc::SYS_recvmsg, fd, msg, flags) })
}

/// See [`raw_sendmsg`]; no timeout.
///
/// # Safety
/// As for `recvmmsg(2)`: `vlen` headers at `msgs`, each valid as for
/// [`raw_recvmsg`].
unsafe fn raw_recvmmsg(
    fd: libc::c_int,
    msgs: *mut libc::mmsghdr,
    vlen: libc::c_uint,
    flags: libc::c_int,
) -> io::Result<usize> {
    // SAFETY: passed on from the caller.
    syscall_result(unsafe {
        libc::syscall(
            libc::SYS_recvmmsg,
            fd,
            msgs,
            vlen,
            flags,
            std::ptr::null_mut::<libc::timespec>(),
        )
    })
}

/// What a `syscall(2)` returned: a count, or -1 with the error in `errno`.
fn syscall_result(rc: libc::c_long) -> io::Result<usize> {
    usize::try_from(rc).map_err(|_| io::Error::last_os_error())
}

/// Nanoseconds of the monotonic clock: what `Instant` reads, without its
/// conversions (a progress call asks once or twice).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `ts`, a live local;
    // CLOCK_MONOTONIC exists on every Linux, so it cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Send `data` to `dest` with `tos` in the IP header (IPv4 TOS or IPv6
/// traffic class, chosen by the destination's family), from a socket set
/// up with [`set_default_tos`].
pub fn send_with_tos(
    socket: &UdpSocket,
    dest: impl Into<Dest>,
    tos: u8,
    data: &[u8],
) -> io::Result<()> {
    send_parts(socket, dest, tos, &[data])
}

/// Most pieces [`send_parts`] gathers into one datagram.
pub const MAX_PARTS: usize = 3;

/// [`send_with_tos`] for a datagram in pieces (headers, payload left in the
/// application's memory, an ACK trailer): one `sendmsg` with a gather list, so the
/// payload is copied once, by the kernel. At most [`MAX_PARTS`] pieces
/// (further ones are an error).
pub fn send_parts(
    socket: &UdpSocket,
    dest: impl Into<Dest>,
    tos: u8,
    parts: &[&[u8]],
) -> io::Result<()> {
    let dest = dest.into();
    if parts.len() > MAX_PARTS {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    if tos == DEFAULT_TOS && parts.len() == 1 {
        return send_one_piece(socket, dest, parts[0]);
    }
    send_msg(socket, dest, tos, None, parts, 0)
}

/// [`send_parts`] with `MSG_MORE`: the pieces start a datagram that the
/// socket keeps corked until a later send on it without the flag (a splice
/// included) completes it. A failed send that would have added to it
/// discards the whole datagram. `segment` (UDP_SEGMENT) at least the whole
/// datagram's length cuts nothing but lets the kernel leave the checksum to
/// the device (none on loopback), which it does not for a corked datagram
/// otherwise.
pub fn start_corked(
    socket: &UdpSocket,
    dest: impl Into<Dest>,
    tos: u8,
    segment: Option<u16>,
    parts: &[&[u8]],
) -> io::Result<()> {
    if parts.len() > MAX_PARTS {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    send_msg(socket, dest.into(), tos, segment, parts, libc::MSG_MORE)
}

/// `sendto` of one datagram in one piece with the socket's own TOS.
fn send_one_piece(socket: &UdpSocket, dest: Dest, data: &[u8]) -> io::Result<()> {
    let addr = match dest {
        Dest::Named(a) => Some(SockAddr::from(a)),
        Dest::Connected(_) => None,
    };
    // SAFETY: `data` and `addr` are live for the call with their true
    // lengths; the kernel only reads them.
    unsafe { raw_sendto(socket.as_raw_fd(), data, addr.as_ref()) }.map(|_| ())
}

/// Most datagrams one [`send_segments`] call carries: the kernel's
/// `UDP_MAX_SEGMENTS` (64 before Linux 6.9, 128 since).
pub const MAX_SEGMENTS: usize = 64;
/// Most pieces one [`send_segments`] call gathers (headers and payload of
/// each datagram, and the odd ACK trailer within that count).
pub const MAX_SEGMENT_PARTS: usize = 2 * MAX_SEGMENTS;
/// Most bytes one [`send_segments`] call carries: the largest UDP payload
/// of one (IPv4) datagram, which a segmented send must also fit in.
pub const MAX_SEGMENTED_BYTES: usize = 65507;

/// Ask the kernel to leave datagrams that arrive segmented (a peer's
/// `UDP_SEGMENT` send over loopback, or GRO on a NIC) coalesced: one receive
/// then takes them all, and [`RecvBatch`] reports the segment size to cut
/// them at.
pub fn enable_gro(socket: &UdpSocket) -> io::Result<()> {
    set_int_option(socket, libc::SOL_UDP, libc::UDP_GRO, 1)
}

/// `setsockopt` of an integer option (ones socket2 does not cover).
pub fn set_int_option(
    socket: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the fd is a live socket owned by `socket`; the option value is
    // a c_int on the stack whose size is passed alongside.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Send several datagrams to `dest` with one `sendmsg` (UDP GSO): the
/// concatenation of `parts` is cut into datagrams of `segment` bytes, the
/// last one possibly shorter, each with `tos` in its IP header. The kernel
/// refuses (EINVAL, EIO, EOPNOTSUPP, ...) when it cannot segment; then
/// nothing was sent. At most [`MAX_SEGMENT_PARTS`] pieces, [`MAX_SEGMENTS`]
/// datagrams and [`MAX_SEGMENTED_BYTES`] bytes.
pub fn send_segments(
    socket: &UdpSocket,
    dest: impl Into<Dest>,
    tos: u8,
    segment: u16,
    parts: &[&[u8]],
) -> io::Result<()> {
    if parts.len() > MAX_SEGMENT_PARTS {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    send_msg(socket, dest.into(), tos, Some(segment), parts, 0)
}

/// One `sendmsg` of the gathered `parts` (at most [`MAX_SEGMENT_PARTS`])
/// with an IP_TOS / IPV6_TCLASS control message unless `tos` is the
/// socket's own ([`DEFAULT_TOS`]), and a
/// UDP_SEGMENT one when `segment` is given; `flags` as for `sendmsg(2)`.
fn send_msg(
    socket: &UdpSocket,
    dest: Dest,
    tos: u8,
    segment: Option<u16>,
    parts: &[&[u8]],
    flags: libc::c_int,
) -> io::Result<()> {
    // Only the first `count` entries are written and only they are read
    // (msg_iovlen): zeroing all 2 KiB per send showed up in profiles.
    let mut iovs = [MaybeUninit::<libc::iovec>::uninit(); MAX_SEGMENT_PARTS];
    let count = parts.len().min(MAX_SEGMENT_PARTS);
    for (iov, part) in iovs.iter_mut().zip(parts) {
        iov.write(libc::iovec {
            iov_base: part.as_ptr() as *mut libc::c_void,
            iov_len: part.len(),
        });
    }
    let named = match dest {
        Dest::Named(a) => Some(SockAddr::from(a)),
        Dest::Connected(_) => None,
    };
    let (level, kind) = if dest.addr().is_ipv6() {
        (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
    } else {
        (libc::IPPROTO_IP, libc::IP_TOS)
    };
    let mut control = [0u64; CMSG_WORDS];
    // SAFETY: an all-zero msghdr is valid (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
    if let Some(addr) = &named {
        msg.msg_name = addr.as_ptr() as *mut libc::c_void;
        msg.msg_namelen = addr.len();
    }
    msg.msg_iov = iovs.as_mut_ptr().cast::<libc::iovec>();
    msg.msg_iovlen = count as _;
    // SAFETY: CMSG_SPACE only computes sizes.
    let (tos_space, segment_space) = unsafe {
        (
            libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) as usize,
            libc::CMSG_SPACE(size_of::<u16>() as u32) as usize,
        )
    };
    let own_tos = tos == DEFAULT_TOS;
    let controllen =
        if own_tos { 0 } else { tos_space } + if segment.is_some() { segment_space } else { 0 };
    if controllen > 0 {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = controllen as _;
        // SAFETY: msg_control points at `control`, aligned for cmsghdr and
        // larger than both control messages together (CMSG_WORDS words), and
        // msg_controllen says exactly how much of it they take, so
        // CMSG_FIRSTHDR / CMSG_NXTHDR return headers inside it with room for
        // their payloads, written unaligned.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            if !own_tos {
                (*cmsg).cmsg_level = level;
                (*cmsg).cmsg_type = kind;
                (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as _;
                let value = libc::c_int::from(tos);
                std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), value);
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
            if let Some(size) = segment {
                (*cmsg).cmsg_level = libc::SOL_UDP;
                (*cmsg).cmsg_type = libc::UDP_SEGMENT;
                (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>(), size);
            }
        }
    }
    // SAFETY: every pointer in `msg` refers to a live local (address, iovecs
    // over `parts`, control buffer) for the duration of the call; the
    // kernel reads the `count` iovecs written above and no further.
    unsafe { raw_sendmsg(socket.as_raw_fd(), &msg, flags) }.map(|_| ())
}

/// One received datagram: its length, source and TOS byte (0 when the
/// kernel attached none).
#[cfg(test)]
pub struct Received {
    pub len: usize,
    pub from: SocketAddr,
    pub tos: u8,
}

/// Receive one datagram into `buf` (non-blocking if the socket is); the
/// driver takes batches with [`RecvBatch`].
#[cfg(test)]
pub fn recv_with_tos(socket: &UdpSocket, buf: &mut [u8]) -> io::Result<Received> {
    // SAFETY: an all-zero sockaddr_storage is a valid (unspecified) address.
    let mut storage: libc::sockaddr_storage = unsafe { MaybeUninit::zeroed().assume_init() };
    let mut control = [0u64; CMSG_WORDS];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is valid (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
    msg.msg_name = (&mut storage as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; CMSG_WORDS]>() as _;
    // SAFETY: every pointer in `msg` refers to a live local or to `buf`,
    // with its true size; the kernel writes at most that much.
    let n = unsafe { raw_recvmsg(socket.as_raw_fd(), &mut msg, 0) }?;
    let tos = control_of(&msg).0;
    let from = source_of(storage, msg.msg_namelen)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "non-IP source address"))?;
    Ok(Received { len: n, from, tos })
}

/// The TOS / traffic-class byte (0 when there is none) and the GRO segment
/// size (0 when the datagram arrived alone) in the control messages of a
/// `msg` the kernel filled.
fn control_of(msg: &libc::msghdr) -> (u8, usize) {
    let mut tos = 0u8;
    let mut segment = 0usize;
    // SAFETY: the kernel set msg_controllen to the bytes it wrote into the
    // control buffer `msg` points at; CMSG_FIRSTHDR/NXTHDR stay within that,
    // and each payload is read unaligned and only as far as its cmsg_len says.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            let c = &*cmsg;
            let payload = (c.cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
            let data = libc::CMSG_DATA(cmsg);
            let is_tos = (c.cmsg_level == libc::IPPROTO_IP && c.cmsg_type == libc::IP_TOS)
                || (c.cmsg_level == libc::IPPROTO_IPV6 && c.cmsg_type == libc::IPV6_TCLASS);
            if is_tos {
                // IPv4 delivers one byte, IPv6 an int.
                tos = if payload >= size_of::<libc::c_int>() {
                    std::ptr::read_unaligned(data.cast::<libc::c_int>()) as u8
                } else if payload >= 1 {
                    *data
                } else {
                    0
                };
            } else if c.cmsg_level == libc::SOL_UDP
                && c.cmsg_type == libc::UDP_GRO
                && payload >= size_of::<libc::c_int>()
            {
                let size = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                segment = usize::try_from(size).unwrap_or(0);
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    (tos, segment)
}

/// The IP source address the kernel wrote into `storage` (`len` bytes).
fn source_of(storage: libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    // SAFETY: the kernel filled `storage` and reported its length in `len`.
    let addr = unsafe { SockAddr::new(storage, len) };
    addr.as_socket()
}

/// Alignment of receive slots.
const PAGE: usize = 4096;

/// Most datagrams one [`RecvBatch::recv`] takes (one `recvmmsg`).
pub const RECV_BATCH_MAX: usize = 16;

/// One arrival of a [`RecvBatch`]: where it came from, its TOS byte, and
/// its bytes at `slot * slot_len .. + len` of the batch buffer. With GRO
/// (see [`enable_gro`]) these may be several datagrams of `segment` bytes
/// each, the last possibly shorter, all with the same TOS.
#[derive(Clone, Copy, Debug)]
pub struct Slot {
    pub len: usize,
    pub from: Option<SocketAddr>,
    pub tos: u8,
    /// GRO segment size; 0 when the slot holds one datagram.
    pub segment: usize,
    /// The datagram was longer than the slot (MSG_TRUNC): not usable.
    pub truncated: bool,
}

/// Receive buffers for up to [`RECV_BATCH_MAX`] datagrams taken with one
/// `recvmmsg`: a loopback arrival costs about as much kernel work as the
/// system call around it, so an ACK and the data behind it, or a burst of
/// 4 KiB packets, come in with one call, and a short batch says the socket
/// is drained (no extra call to see EAGAIN).
pub struct RecvBatch {
    buf: Vec<u8>,
    /// Where slot 0 starts in `buf`: its first page boundary (see `new`).
    first: usize,
    slot_len: usize,
    count: usize,
    slots: Vec<Slot>,
    /// `recvmmsg`'s headers and what they point at, built once: a busy
    /// poller's call that finds nothing then costs no setup. The pointers
    /// refer to these vectors' heap buffers, which never move or grow.
    names: Vec<libc::sockaddr_storage>,
    /// Read only through `hdrs`.
    _controls: Vec<[u64; CMSG_WORDS]>,
    _iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers in `iovs` and `hdrs` refer only to this batch's
// own heap buffers (`buf`, `names`, `_controls`, `_iovs`), which move with it;
// nothing reachable through them is shared with another owner.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    /// `count` slots (at most [`RECV_BATCH_MAX`]) of `slot_len` bytes each.
    /// Pages are touched only as datagrams fill them.
    ///
    /// Slot 0 starts on a page boundary. The kernel copies a datagram with
    /// `rep movsb`, which on AMD Zen runs about 15x slower when the
    /// destination lies 1-31 bytes past the source modulo 4 KiB (see
    /// `crate::copy`). A large heap block starts 16 bytes into a page and a
    /// loopback sender's data often at a page's start: every arrival took
    /// the slow path. Streaming with 4 KiB packets gained about 20%.
    pub fn new(count: usize, slot_len: usize) -> RecvBatch {
        let count = count.clamp(1, RECV_BATCH_MAX);
        let mut buf = vec![0u8; count * slot_len + PAGE];
        let first = buf.as_ptr().align_offset(PAGE).min(PAGE);
        // SAFETY: all-zero sockaddr_storage, iovec and mmsghdr are valid
        // (unspecified address, null pointers, zero lengths).
        let zeroed = || unsafe { MaybeUninit::<libc::sockaddr_storage>::zeroed().assume_init() };
        let mut names: Vec<libc::sockaddr_storage> = (0..count).map(|_| zeroed()).collect();
        let mut controls = vec![[0u64; CMSG_WORDS]; count];
        let base = buf[first..].as_mut_ptr();
        let mut iovs: Vec<libc::iovec> = (0..count)
            .map(|k| libc::iovec {
                // SAFETY: slot k lies within `buf[first..]`, which holds
                // count * slot_len bytes (`first` is at most PAGE).
                iov_base: unsafe { base.add(k * slot_len) }.cast(),
                iov_len: slot_len,
            })
            .collect();
        let hdrs = (0..count)
            .map(|k| {
                // SAFETY: as above.
                let mut h: libc::mmsghdr = unsafe { MaybeUninit::zeroed().assume_init() };
                let m = &mut h.msg_hdr;
                m.msg_name = (&mut names[k] as *mut libc::sockaddr_storage).cast();
                m.msg_iov = &mut iovs[k];
                m.msg_iovlen = 1;
                m.msg_control = controls[k].as_mut_ptr().cast();
                h
            })
            .collect();
        RecvBatch {
            buf,
            first,
            slot_len,
            count,
            slots: Vec::with_capacity(count),
            names,
            _controls: controls,
            _iovs: iovs,
            hdrs,
        }
    }

    /// How many datagrams one call can take.
    pub fn capacity(&self) -> usize {
        self.count
    }

    /// Receive what `socket` holds, up to the batch size, without blocking
    /// (the socket is non-blocking). Returns how many datagrams arrived;
    /// fewer than [`capacity`](Self::capacity) means the socket was drained.
    pub fn recv(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        self.reset_headers(self.count);
        // SAFETY: the `count` headers point at this batch's own name,
        // control and iovec entries and at disjoint slots of `buf`, each with
        // its true size (set in `new`, never moved); the kernel writes at
        // most that much and fills msg_len/namelen/controllen/flags.
        let n = unsafe {
            raw_recvmmsg(
                socket.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                self.count as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        self.slots.clear();
        let n = n?.min(self.count);
        for (h, name) in self.hdrs.iter().zip(&self.names).take(n) {
            let m = &h.msg_hdr;
            let (tos, segment) = control_of(m);
            self.slots.push(Slot {
                len: (h.msg_len as usize).min(self.slot_len),
                from: source_of(*name, m.msg_namelen),
                tos,
                segment,
                truncated: m.msg_flags & libc::MSG_TRUNC != 0,
            });
        }
        Ok(n)
    }

    /// Receive one datagram (or one coalesced GRO arrival) into slot 0 with
    /// `recvmsg`. For a poller that found nothing last time: an empty
    /// check costs less than `recvmmsg`'s, and a lone arrival (a ping-pong's
    /// message) comes back without the batch's further attempt at an empty
    /// queue. Returns 0 or 1 like [`recv`](Self::recv), which should follow
    /// when 1 came: more may be waiting.
    pub fn recv_one(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        self.reset_headers(1);
        let h = &mut self.hdrs[0];
        // SAFETY: header 0 points at this batch's own name, control and
        // iovec entries and at slot 0 of `buf`, each with its true size; the
        // kernel writes at most that much and sets namelen/controllen/flags.
        let n = unsafe { raw_recvmsg(socket.as_raw_fd(), &mut h.msg_hdr, libc::MSG_DONTWAIT) };
        let m = h.msg_hdr;
        self.record_single(n, &m)
    }

    /// After a `recvmsg` into slot 0 described by `m`: that slot, or the
    /// call's error.
    fn record_single(&mut self, n: io::Result<usize>, m: &libc::msghdr) -> io::Result<usize> {
        self.slots.clear();
        let n = n?;
        self.hdrs[0].msg_len = n as libc::c_uint;
        let (tos, segment) = control_of(m);
        self.slots.push(Slot {
            len: n.min(self.slot_len),
            from: source_of(self.names[0], m.msg_namelen),
            tos,
            segment,
            truncated: m.msg_flags & libc::MSG_TRUNC != 0,
        });
        Ok(1)
    }

    /// Receive one datagram with `recvmsg`, its first `header_len` bytes
    /// into slot 0 and the next `region.len()` bytes straight into `region`
    /// (application memory the engine expects the payload in; see
    /// `Engine::landing`), anything further into slot 0 behind where the
    /// region's bytes belong. Returns 0 or 1 like
    /// [`recv_one`](Self::recv_one). [`get`](Self::get) then shows slot 0
    /// with a hole where the region's bytes belong until
    /// [`restore_landing`](Self::restore_landing) fills it.
    pub fn recv_landing(
        &mut self,
        socket: &UdpSocket,
        header_len: usize,
        region: &mut [u8],
    ) -> io::Result<usize> {
        let base = self.buf[self.first..].as_mut_ptr();
        let header_len = header_len.min(self.slot_len);
        // The slot keeps room for the whole datagram, the region's part
        // included (see `restore_landing`).
        let region_len = region.len().min(self.slot_len - header_len);
        let rest = self.slot_len - header_len - region_len;
        let mut iovs = [
            libc::iovec {
                iov_base: base.cast(),
                iov_len: header_len,
            },
            libc::iovec {
                iov_base: region.as_mut_ptr().cast(),
                iov_len: region_len,
            },
            libc::iovec {
                // SAFETY: `header_len + region_len + rest` is the slot's
                // length, which lies within `buf[first..]`.
                iov_base: unsafe { base.add(header_len + region_len) }.cast(),
                iov_len: rest,
            },
        ];
        self.reset_headers(1);
        // Header 0's name and control buffers, with these iovecs instead of
        // its own for this one call.
        let mut msg = self.hdrs[0].msg_hdr;
        msg.msg_iov = iovs.as_mut_ptr();
        msg.msg_iovlen = iovs.len() as _;
        // SAFETY: `msg` points at this batch's own name and control
        // entries with their true sizes, at slot 0 of `buf` (the first and
        // third iovec, disjoint, within the slot) and at `region`, memory
        // the caller lends writable for this call; the kernel writes at
        // most the iovecs' lengths and sets namelen/controllen/flags.
        let n = unsafe { raw_recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
        self.record_single(n, &msg)
    }

    /// After [`recv_landing`](Self::recv_landing) of a datagram that is not
    /// the packet expected: copy the bytes that went to `region` back into
    /// slot 0 behind its first `header_len` bytes, so
    /// [`get`](Self::get) shows the datagram as sent.
    pub fn restore_landing(&mut self, header_len: usize, region: &[u8]) {
        let Some(s) = self.slots.first() else {
            return;
        };
        let header_len = header_len.min(self.slot_len);
        let region_len = region.len().min(self.slot_len - header_len);
        let landed = s.len.saturating_sub(header_len).min(region_len);
        let at = self.first + header_len;
        copy_bytes(&mut self.buf[at..at + landed], &region[..landed]);
    }

    /// The kernel shrinks these to what it wrote: give back the room of the
    /// first `n` headers.
    fn reset_headers(&mut self, n: usize) {
        for h in self.hdrs.iter_mut().take(n) {
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_hdr.msg_controllen = size_of::<[u64; CMSG_WORDS]>() as _;
        }
    }

    /// The `k`-th datagram of the last [`recv`](Self::recv) and its bytes.
    pub fn get(&self, k: usize) -> (Slot, &[u8]) {
        let s = self.slots[k];
        let start = self.first + k * self.slot_len;
        (s, &self.buf[start..start + s.len])
    }
}

/// Readiness of a set of sockets in one call: a level-triggered epoll set
/// asked with a zero timeout. Cheaper than a receive call per socket that
/// would come back empty (about 300 ns against 400-500 ns per idle check on
/// loopback), and one call covers the whole entropy pool.
pub struct Poller {
    epoll: OwnedFd,
    events: Vec<libc::epoll_event>,
}

impl Poller {
    /// Watch `sockets` for arrivals; readiness reports the index in the slice.
    pub fn new(sockets: &[UdpSocket]) -> io::Result<Poller> {
        // SAFETY: plain system call; a negative result is checked below.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        let epoll = unsafe { OwnedFd::from_raw_fd(fd) };
        for (i, s) in sockets.iter().enumerate() {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: i as u64,
            };
            // SAFETY: both descriptors are live; `ev` is a valid event on the
            // stack that the kernel copies.
            let rc = unsafe {
                libc::epoll_ctl(
                    epoll.as_raw_fd(),
                    libc::EPOLL_CTL_ADD,
                    s.as_raw_fd(),
                    &mut ev,
                )
            };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(Poller {
            epoll,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; sockets.len().max(1)],
        })
    }

    /// How many sockets have datagrams waiting; their indices are then
    /// `ready(0..n)`. Never blocks.
    pub fn poll(&mut self) -> usize {
        // SAFETY: `events` holds `len` writable entries; timeout 0 returns
        // at once.
        let n = unsafe {
            libc::epoll_wait(
                self.epoll.as_raw_fd(),
                self.events.as_mut_ptr(),
                self.events.len() as libc::c_int,
                0,
            )
        };
        n.max(0) as usize
    }

    /// The socket index of the `k`-th ready entry of the last `poll`.
    pub fn ready(&self, k: usize) -> usize {
        self.events[k].u64 as usize
    }
}

/// Turn off UDP checksums on `socket` (SO_NO_CHECK), which makes the
/// kernel refuse segmented sends with EINVAL: how tests reach the GSO
/// fallback.
#[cfg(test)]
pub fn disable_checksums(socket: &UdpSocket) -> io::Result<()> {
    set_int_option(socket, libc::SOL_SOCKET, libc::SO_NO_CHECK, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(local: &str) -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind(local).unwrap();
        let b = UdpSocket::bind(local).unwrap();
        set_default_tos(&a, a.local_addr().unwrap().is_ipv6()).unwrap();
        b.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        enable_recv_tos(&b, b.local_addr().unwrap().is_ipv6()).unwrap();
        (a, b)
    }

    fn round_trip(local: &str) {
        let (a, b) = pair(local);
        let dest = b.local_addr().unwrap();
        let mut buf = [0u8; 64];
        for tos in [0x2Eu8, 0x00, 0x02, 0x03, 0x2C, 0xB8] {
            send_with_tos(&a, dest, tos, &[tos, 1, 2, 3]).unwrap();
            let r = recv_with_tos(&b, &mut buf).unwrap();
            assert_eq!(r.len, 4);
            assert_eq!(buf[0], tos);
            assert_eq!(r.from, a.local_addr().unwrap());
            assert_eq!(r.tos, tos, "sent TOS {tos:#04x}");
        }
    }

    #[test]
    fn poller_reports_the_ready_socket() {
        let socks: Vec<UdpSocket> = (0..3)
            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        let mut p = Poller::new(&socks).unwrap();
        assert_eq!(p.poll(), 0);
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"x", socks[2].local_addr().unwrap()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while p.poll() == 0 {
            assert!(std::time::Instant::now() < deadline);
        }
        assert_eq!(p.poll(), 1);
        assert_eq!(p.ready(0), 2);
        // Level-triggered: reported until read.
        assert_eq!(p.poll(), 1);
        socks[2].recv_from(&mut [0u8; 8]).unwrap();
        assert_eq!(p.poll(), 0);
    }

    #[test]
    fn landing_scatters_past_the_headers_and_restore_puts_it_back() {
        let (a, b) = pair("127.0.0.1:0");
        let dest = b.local_addr().unwrap();
        let mut batch = RecvBatch::new(2, 64);
        let datagram: Vec<u8> = (0..40u8).collect();
        // Header 8 bytes, region 20: a 28-byte datagram fills both, a
        // longer one spills behind, a shorter one never reaches the region.
        for len in [28, 40, 5] {
            a.send_to(&datagram[..len], dest).unwrap();
            let mut region = [0xeeu8; 20];
            assert_eq!(batch.recv_landing(&b, 8, &mut region).unwrap(), 1);
            let (slot, bytes) = batch.get(0);
            assert_eq!(slot.len, len);
            assert_eq!(bytes[..len.min(8)], datagram[..len.min(8)]);
            let in_region = len.saturating_sub(8).min(20);
            assert_eq!(region[..in_region], datagram[8..8 + in_region]);
            assert!(region[in_region..].iter().all(|&b| b == 0xee));
            if len > 28 {
                assert_eq!(bytes[28..], datagram[28..len]);
            }
            batch.restore_landing(8, &region);
            assert_eq!(batch.get(0).1, &datagram[..len]);
        }
    }

    #[test]
    fn batch_takes_several_datagrams_with_their_tos_and_flags_truncation() {
        let (a, b) = pair("127.0.0.1:0");
        b.set_nonblocking(true).unwrap();
        let dest = b.local_addr().unwrap();
        let mut batch = RecvBatch::new(4, 16);
        assert_eq!(
            batch.recv(&b).map_err(|e| e.kind()),
            Err(io::ErrorKind::WouldBlock)
        );
        assert_eq!(
            batch.recv_one(&b).map_err(|e| e.kind()),
            Err(io::ErrorKind::WouldBlock)
        );
        let sent: [(u8, &[u8]); 6] = [
            (0x02, b"one"),
            (0x00, b"two"),
            (0x2C, b"three"),
            (0x03, b"four"),
            (0x00, b"a datagram longer than the slot"),
            (0x01, b"six"),
        ];
        for (tos, data) in sent {
            send_with_tos(&a, dest, tos, data).unwrap();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut got = Vec::new();
        // Single and batched receives in turn, as the driver's poll does.
        let mut calls = 0;
        while got.len() < sent.len() {
            assert!(std::time::Instant::now() < deadline, "got {}", got.len());
            calls += 1;
            let n = match calls % 2 {
                0 => batch.recv(&b).unwrap_or(0),
                _ => batch.recv_one(&b).unwrap_or(0),
            };
            assert!(n <= 4);
            for k in 0..n {
                let (slot, bytes) = batch.get(k);
                assert_eq!(slot.from, Some(a.local_addr().unwrap()));
                if k == 0 {
                    assert_eq!(bytes.as_ptr() as usize % PAGE, 0, "slot 0 starts a page");
                }
                got.push((slot.tos, bytes.to_vec(), slot.truncated));
            }
        }
        for ((tos, data), (gtos, gdata, truncated)) in sent.iter().zip(&got) {
            assert_eq!(tos, gtos);
            assert_eq!(*truncated, data.len() > 16);
            assert_eq!(&data[..data.len().min(16)], &gdata[..]);
        }
    }

    #[test]
    fn tos_survives_loopback_ipv4() {
        round_trip("127.0.0.1:0");
    }

    #[test]
    fn tos_survives_loopback_ipv6() {
        // Hosts without IPv6 on loopback skip this half.
        if UdpSocket::bind("[::1]:0").is_err() {
            return;
        }
        round_trip("[::1]:0");
    }

    /// Everything `socket` (non-blocking) receives within a few seconds
    /// until `want` datagrams arrived, cut at GRO segment boundaries:
    /// (TOS, bytes) per datagram, and how many receives held several.
    fn receive_cut(socket: &UdpSocket, want: usize) -> (Vec<(u8, Vec<u8>)>, usize) {
        let mut batch = RecvBatch::new(4, 65536);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut got = Vec::new();
        let mut coalesced = 0;
        while got.len() < want {
            assert!(std::time::Instant::now() < deadline, "got {}", got.len());
            // Single and batched receives in turn, as the driver's poll does.
            let n = match got.len() % 2 {
                0 => batch.recv_one(socket).unwrap_or(0),
                _ => batch.recv(socket).unwrap_or(0),
            };
            for k in 0..n {
                let (slot, bytes) = batch.get(k);
                assert!(!slot.truncated);
                let segment = if slot.segment > 0 {
                    slot.segment
                } else {
                    bytes.len()
                };
                if bytes.len() > segment {
                    coalesced += 1;
                }
                for d in bytes.chunks(segment) {
                    got.push((slot.tos, d.to_vec()));
                }
            }
        }
        (got, coalesced)
    }

    fn datagram(seed: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| seed.wrapping_mul(31).wrapping_add(i as u8))
            .collect()
    }

    fn segmented_round_trip(local: &str, gro: bool) {
        let (a, b) = pair(local);
        b.set_nonblocking(true).unwrap();
        if gro {
            enable_gro(&b).unwrap();
        }
        let dest = b.local_addr().unwrap();
        // Runs of 4096-byte datagrams, one with a short last segment, with
        // different TOS bytes; then a lone datagram.
        let runs: [(u8, Vec<usize>); 4] = [
            (0x02, vec![4096; 5]),
            (0x00, vec![4096, 4096, 4096, 1000]),
            (0x03, vec![512, 512, 7]),
            (0x2E, vec![300]),
        ];
        let mut sent = Vec::new();
        for (r, (tos, sizes)) in runs.iter().enumerate() {
            let bodies: Vec<Vec<u8>> = sizes
                .iter()
                .enumerate()
                .map(|(i, &len)| datagram((r * 16 + i) as u8, len))
                .collect();
            // Each datagram in two pieces (headers, payload), as the driver
            // gathers them.
            let parts: Vec<&[u8]> = bodies
                .iter()
                .flat_map(|b| {
                    let (head, payload) = b.split_at(b.len().min(10));
                    [head, payload]
                })
                .collect();
            send_segments(&a, dest, *tos, sizes[0] as u16, &parts).unwrap();
            sent.extend(bodies.into_iter().map(|b| (*tos, b)));
        }
        let (got, coalesced) = receive_cut(&b, sent.len());
        assert_eq!(got.len(), sent.len());
        for (k, ((stos, sbytes), (gtos, gbytes))) in sent.iter().zip(&got).enumerate() {
            assert_eq!(gbytes.len(), sbytes.len(), "datagram {k}");
            assert_eq!(gbytes, sbytes, "datagram {k}");
            assert_eq!(gtos, stos, "datagram {k}");
        }
        if gro {
            assert!(coalesced >= 1, "no coalesced arrival");
        } else {
            assert_eq!(coalesced, 0);
        }
    }

    #[test]
    fn segmented_sends_arrive_as_the_datagrams_sent_with_gro() {
        segmented_round_trip("127.0.0.1:0", true);
        if UdpSocket::bind("[::1]:0").is_ok() {
            segmented_round_trip("[::1]:0", true);
        }
    }

    #[test]
    fn segmented_sends_arrive_as_the_datagrams_sent_without_gro() {
        segmented_round_trip("127.0.0.1:0", false);
    }

    #[test]
    fn segmented_send_is_refused_without_checksums() {
        let (a, b) = pair("127.0.0.1:0");
        disable_checksums(&a).unwrap();
        let one = [7u8; 100];
        let err = send_segments(&a, b.local_addr().unwrap(), 0, 100, &[&one, &one]).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
        // A plain send still works.
        send_with_tos(&a, b.local_addr().unwrap(), 0, &one).unwrap();
        let mut buf = [0u8; 200];
        assert_eq!(recv_with_tos(&b, &mut buf).unwrap().len, 100);
    }
}
