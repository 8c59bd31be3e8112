//! Large payloads sent without the sender kernel's copy (`FI_UET_SPLICE_BYTES`).
//!
//! A plain `sendmsg` copies every payload byte into socket memory, and over
//! loopback the receiver's `recvmsg` copies it again: two copies per byte,
//! as tcp makes. Here the headers start a corked datagram (`MSG_MORE`), the
//! payload goes into a pipe by `vmsplice(2)`, which takes references to the
//! message's pages instead of copying them, an ACK trailer (if any) is
//! written behind it, and `splice(2)` moves the lot into the socket, which
//! completes the datagram. The skb then points at the application's pages
//! until the receiver copies them out, or a NIC sends them: one copy per
//! byte on loopback. A payload on more pages than the skb holds beside the
//! headers has its partial end pages copied instead ([`Splicer::plan`]).
//!
//! This is safe for the transport because a payload's memory stays
//! untouched until its message completes, and a message completes only on
//! the receiver's ACK, which the receiver sends after its `recvmsg` copied
//! the datagram. What can still sit in a queue after that is a duplicate
//! (a resend whose original arrived), which the receiver drops whatever it
//! holds. Memory comes back without that ACK only when a sender gives up
//! or closes: resends and a closing endpoint's sends are copied, and a
//! receiver throws away the large datagrams that waited as long as that
//! takes (`Endpoint::discard_stale`, provider/README.md section 2.7).
//!
//! Failures keep datagrams whole: a send that fails while a datagram is
//! corked makes the kernel discard that datagram, so the caller resends it
//! as usual; whatever is left in the pipe is read out and whatever may
//! still be corked is dropped ([`abandon_cork`]); a pipe that cannot be
//! emptied turns splicing off for good.

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::sys;

/// Pipe capacity asked for: a 64 KiB payload spans up to 17 pages, the
/// trailer one more; the default 16 slots would not hold it.
const PIPE_BYTES: usize = 256 << 10;
/// Largest payload spliced; longer ones (none in a UDP datagram) are copied.
const MAX_SPLICED: usize = 65536;
const PAGE: usize = 4096;
/// Datagrams refused in a row (taken only in part, or refused whole twice)
/// before splicing turns off.
const REFUSALS_MAX: u32 = 4;
/// Pieces (frags) a 64 KiB datagram's skb needs at most: 64 KiB / page
/// size + 1 (17 with 4 KiB pages), the least `MAX_SKB_FRAGS` can be.
/// Since Linux 6.5 a splice stops at `net.core.max_skb_frags` (17 by
/// default), which may be set lower; the plan keeps to the smaller of the
/// two ([`Splicer::new`]). Headers corked with a segment size take one of
/// them.
fn max_frags(page: usize) -> usize {
    MAX_SPLICED / page + 1
}

/// `net.core.max_skb_frags`, if it reads as a number.
fn frag_limit() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/sys/net/core/max_skb_frags").ok()?;
    text.trim().parse().ok()
}

/// How one datagram's payload is split ([`Splicer::plan`]): its first
/// `prefix` bytes are copied behind the headers, its last `suffix` bytes
/// into the pipe with the tail, the rest spliced. The default copies
/// nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Plan {
    prefix: usize,
    suffix: usize,
}

/// One endpoint's pipe and threshold.
pub struct Splicer {
    read: OwnedFd,
    write: OwnedFd,
    /// Payloads of at least this many bytes are spliced.
    min_bytes: usize,
    /// Where a pipe's leftovers are read out to after a failure.
    scratch: Vec<u8>,
    /// The system's page size: pieces are counted in pages.
    page: usize,
    /// Pieces one datagram's skb may take (see [`max_frags`]).
    frags: usize,
    /// Each splice reaches the socket as one send, taken or refused whole
    /// (Linux 6.5 and later, for the pieces a plan allows); older kernels
    /// may take part of one.
    whole: bool,
    /// Set when the kernel refused a splice for good, or leftovers could
    /// not be read out of the pipe (they would lead the next datagram):
    /// nothing is spliced any more.
    off: bool,
    /// Datagrams the socket refused in a row: taken only in part, or
    /// refused whole twice.
    refusals: u32,
    /// Datagrams whose payload was spliced.
    pub spliced: u64,
    /// Datagrams sent by a copying `sendmsg` instead, or refused as that
    /// copy (then the error [`send`](Splicer::send) returns): no plan fits
    /// them, the kernel refused a segment size or the splice, or the pipe
    /// refused the pages or the trailer.
    pub fallbacks: u64,
    /// Of the spliced ones, datagrams corked again after the socket refused
    /// their staged payload whole (their headers took two skb pieces).
    pub recorked: u64,
    /// Of the fallbacks, datagrams the socket refused whole twice: headers
    /// split again, or a datagram over the largest one.
    pub refused_whole: u64,
}

impl Splicer {
    /// A non-blocking pipe with room for a whole datagram, or the error
    /// that prevents one (no pipes, a `pipe-max-size` below 128 KiB).
    pub fn new(min_bytes: usize) -> io::Result<Splicer> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both are open descriptors that nothing
        // else owns.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: F_SETPIPE_SZ / F_GETPIPE_SZ on a pipe we own; they take
        // and return an int.
        let capacity = unsafe {
            libc::fcntl(
                write.as_raw_fd(),
                libc::F_SETPIPE_SZ,
                PIPE_BYTES as libc::c_int,
            );
            libc::fcntl(write.as_raw_fd(), libc::F_GETPIPE_SZ)
        };
        if capacity < 0 {
            return Err(io::Error::last_os_error());
        }
        if (capacity as usize) < MAX_SPLICED + 2 * PAGE {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("pipe of {capacity} bytes cannot hold a datagram"),
            ));
        }
        // SAFETY: sysconf only reads a system value.
        let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            n if n > 0 => n as usize,
            _ => PAGE,
        };
        Ok(Splicer {
            read,
            write,
            page,
            frags: max_frags(page).min(frag_limit().unwrap_or(usize::MAX)),
            whole: splices_whole(),
            // Receivers guard only datagrams this long (see
            // `Endpoint::discard_stale`).
            min_bytes: min_bytes.max(super::STALE_GUARDED_BYTES),
            scratch: vec![0; PAGE * 16],
            off: false,
            refusals: 0,
            spliced: 0,
            fallbacks: 0,
            recorked: 0,
            refused_whole: 0,
        })
    }

    /// Whether a splice reaches the socket whole or not at all (see
    /// `whole`): only then may it go to a socket connected to its peer,
    /// where what is left of a datagram the kernel dropped midway would
    /// leave as a datagram of its own instead of being refused.
    pub fn splices_whole(&self) -> bool {
        self.whole
    }

    /// Whether `payload`, with `tail_len` bytes after it, goes by splice:
    /// long enough to be worth the three system calls, and in few enough
    /// pieces for one skb beside the headers, once its partial end pages
    /// are copied if need be ([`plan`](Self::plan)).
    pub fn takes(&self, payload: &[u8], tail_len: usize) -> bool {
        let len = payload.len();
        !self.off
            && len >= self.min_bytes
            && len <= MAX_SPLICED
            && self.plan(payload, tail_len).is_some()
    }

    /// The skb pieces `payload` and a tail of `tail_len` bytes take.
    #[cfg(test)]
    fn pieces(&self, payload: &[u8], tail_len: usize) -> usize {
        self.pages(payload.as_ptr() as usize, payload.len()) + tail_len.div_ceil(self.page)
    }

    /// Pages that `len` bytes from address `start` touch (none for none).
    fn pages(&self, start: usize, len: usize) -> usize {
        match len {
            0 => 0,
            _ => (start + len - 1) / self.page - start / self.page + 1,
        }
    }

    /// How `payload` and a tail of `tail_len` bytes go, if they can.
    /// The datagram is corked with a segment size, which lets the
    /// device do the checksum (none on loopback, where the receiver
    /// would otherwise check every byte while copying, and the sender
    /// sum them first), but puts the headers in a piece of their own,
    /// leaving the skb's others (16 of 17 with 4 KiB pages) for the
    /// rest. A payload on more pages than that gives up its partial
    /// first page (copied behind the headers, in their piece) and, if
    /// still needed, its partial last page (copied into the pipe with
    /// the tail, one piece): at most two pages copied of seventeen,
    /// instead of every byte summed twice. (Both are copied only for a
    /// payload on 17 pages with a tail; such a datagram is spliced only
    /// so.) When that is still too many (not for a UDP datagram with an
    /// ACK trailer: 16 whole pages are more than one holds), `None`:
    /// the datagram is copied. It is never spliced without a segment
    /// size: the kernel then sums the spliced pieces in software, and
    /// since Linux 6.5 it sums every piece of one splice as if it began
    /// where the first did, so a piece of odd length gives the datagram
    /// a wrong checksum, and the receiver drops it. (A device that
    /// cannot do the checksum is refused a segment size, with EIO by
    /// the kernel's source: splicing then turns off.)
    fn plan(&self, payload: &[u8], tail_len: usize) -> Option<Plan> {
        let budget = self.frags.saturating_sub(1);
        let start = payload.as_ptr() as usize;
        let len = payload.len();
        let mut plan = Plan::default();
        let fits = |p: &Plan| {
            let middle = self.pages(start + p.prefix, len - p.prefix - p.suffix);
            let copied = p.suffix + tail_len;
            // Copied bytes take one piece if they fit in a page.
            middle + copied.div_ceil(self.page) <= budget
        };
        if fits(&plan) {
            return Some(plan);
        }
        plan.prefix = ((self.page - start % self.page) % self.page).min(len);
        if fits(&plan) {
            return Some(plan);
        }
        plan.suffix = ((start + len) % self.page).min(len - plan.prefix);
        fits(&plan).then_some(plan)
    }

    /// Send `head`, `payload` (message memory that stays unchanged until
    /// the peer acknowledges it) and `tail` as one datagram to `dest` from
    /// `socket` (non-blocking), the payload spliced but for the partial
    /// pages its [`plan`](Self::plan) copies. On an error nothing was
    /// sent: the caller goes on as after a failed `sendmsg`. Whatever
    /// happens, no corked datagram and nothing in the pipe is left for the
    /// next one. A payload the socket refuses whole once staged is corked
    /// again (`recorked`), and copied if refused so again
    /// (`refused_whole`). A kernel that refuses the way this sends (an
    /// error it gives for what it does not support, or datagrams taken
    /// only in part or refused whole twice [`REFUSALS_MAX`] times in a
    /// row) turns splicing off, and the datagram leaves copied.
    pub fn send(
        &mut self,
        socket: &UdpSocket,
        dest: impl Into<sys::Dest>,
        tos: u8,
        head: &[u8],
        payload: &[u8],
        tail: &[u8],
    ) -> io::Result<()> {
        let dest = dest.into();
        let connected = matches!(dest, sys::Dest::Connected(_));
        let whole = [head, payload, tail];
        let total = head.len() + payload.len() + tail.len();
        // Callers ask `takes` first; what no plan fits is copied all the same
        // (a datagram of its own, so made once more like any other).
        let (Some(plan), Ok(segment)) = (self.plan(payload, tail.len()), u16::try_from(total))
        else {
            // Nothing is corked yet, so a failure leaves nothing to abandon.
            self.fallbacks += 1;
            return super::once_more_if_connected(dest, || {
                sys::send_parts(socket, dest, tos, &whole)
            });
        };
        let (prefix, rest) = payload.split_at(plan.prefix);
        let (middle, suffix) = rest.split_at(rest.len() - plan.suffix);
        // A connected socket fails the first send after an ICMP error
        // about an earlier datagram: a stale EMSGSIZE must not turn
        // splicing off.
        let started = super::once_more_if_connected(dest, || {
            sys::start_corked(socket, dest, tos, Some(segment), &[head, prefix])
        });
        match started {
            Ok(()) => {}
            // A failed start leaves nothing corked.
            Err(e) if super::cannot_segment(&e) => {
                self.off = true;
                return self.copied(socket, dest, tos, &whole);
            }
            Err(e) => return Err(e),
        }
        let after = [suffix, tail];
        let staged = self.stage(middle) && self.stage_copy(&after);
        if !staged {
            // The corked headers are completed by a copy.
            self.empty_pipe();
            return self.copied(socket, dest, tos, &[rest, tail]);
        }
        let in_pipe = rest.len() + tail.len();
        let (moved_some, e) = match self.move_pipe(socket, in_pipe, connected) {
            Ok(()) => return Ok(()),
            // The headers took two pieces of the skb (the sending thread's
            // page fragment ran out within them), leaving one too few for
            // the payload. Since Linux 6.5 a splice hands a socket up to 16
            // pipe buffers per send, which the plan keeps to, so the whole
            // send failed: nothing moved, the kernel dropped the cork
            // (udp_sendmsg flushes pending frames on a failed append) and
            // the pipe still holds it all. That drop left the fragment's
            // new page unused, so it is taken again from its start: the
            // same headers corked again fit in one piece. (Older kernels
            // splice page by page and take part of it: a midway refusal,
            // below.)
            Err((false, e)) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
                // Defensive: nothing should be corked.
                abandon_cork(socket, &self.scratch);
                let again = sys::start_corked(socket, dest, tos, Some(segment), &[head, prefix]);
                if let Err(e) = again {
                    self.empty_pipe();
                    return Err(e);
                }
                match self.move_pipe(socket, in_pipe, connected) {
                    Ok(()) => {
                        self.recorked += 1;
                        return Ok(());
                    }
                    Err(failed) => failed,
                }
            }
            Err(failed) => failed,
        };
        self.empty_pipe();
        abandon_cork(socket, &self.scratch);
        let whole_twice = !moved_some && e.raw_os_error() == Some(libc::EMSGSIZE);
        if !moved_some && !whole_twice && !super::cannot_segment(&e) {
            return Err(e);
        }
        if whole_twice {
            // Headers over a fragment page too small for them (the
            // kernel's one-page fallback), or a datagram over the largest
            // one, which its copy as a plain send fails the same way.
            self.refused_whole += 1;
        }
        // Refused whole twice or midway: copied, and after a few in a row
        // never again. Nothing moved on a refusal other than EMSGSIZE: an
        // error for what the kernel does not support.
        self.refusals += 1;
        if (!moved_some && !whole_twice) || self.refusals >= REFUSALS_MAX {
            self.off = true;
        }
        self.copied(socket, dest, tos, &whole)
    }

    /// Splice the `left` bytes in the pipe into `socket`, completing the
    /// datagram corked there. `Err((moved_some, e))` when the socket
    /// refused the rest, `moved_some` when it had taken part of it.
    fn move_pipe(
        &mut self,
        socket: &UdpSocket,
        mut left: usize,
        connected: bool,
    ) -> Result<(), (bool, io::Error)> {
        let mut moved_some = false;
        loop {
            // SAFETY: both descriptors are open and ours; no offsets are
            // used (NULL), as splice requires for a pipe and a socket.
            let moved = unsafe {
                libc::splice(
                    self.read.as_raw_fd(),
                    std::ptr::null_mut(),
                    socket.as_raw_fd(),
                    std::ptr::null_mut(),
                    left,
                    libc::SPLICE_F_NONBLOCK,
                )
            };
            if moved > 0 {
                // The rest completes a datagram still corked, or, when the
                // kernel dropped it after a failed append, is refused
                // (EDESTADDRREQ: no cork, and an unconnected socket names
                // no peer; a connected one would send it, see below).
                left = left.saturating_sub(moved as usize);
                moved_some = true;
                if left == 0 {
                    self.spliced += 1;
                    self.refusals = 0;
                    return Ok(());
                }
                if connected {
                    // The driver sends only whole splices here; should
                    // one be taken in part all the same, the rest is not
                    // risked as a datagram of its own: refused midway.
                    return Err((true, io::Error::from_raw_os_error(libc::EMSGSIZE)));
                }
                continue;
            }
            let e = match moved {
                0 => io::Error::from(io::ErrorKind::WouldBlock),
                _ => io::Error::last_os_error(),
            };
            if e.kind() != io::ErrorKind::Interrupted {
                return Err((moved_some, e));
            }
        }
    }

    /// `parts` sent by a copying `sendmsg` (completing a corked datagram
    /// when the headers are corked already): a fallback.
    fn copied(
        &mut self,
        socket: &UdpSocket,
        dest: sys::Dest,
        tos: u8,
        parts: &[&[u8]],
    ) -> io::Result<()> {
        self.fallbacks += 1;
        let sent = sys::send_parts(socket, dest, tos, parts);
        if sent.is_err() {
            abandon_cork(socket, &self.scratch);
        }
        sent
    }

    /// The payload's pages into the pipe, whole.
    fn stage(&mut self, payload: &[u8]) -> bool {
        let iov = libc::iovec {
            iov_base: payload.as_ptr() as *mut libc::c_void,
            iov_len: payload.len(),
        };
        // SAFETY: `iov` describes `payload`, live and readable for the
        // call; without SPLICE_F_GIFT the kernel only takes references to
        // its pages, which the caller keeps unchanged until the datagram is
        // acknowledged (module docs).
        let n = unsafe { libc::vmsplice(self.write.as_raw_fd(), &iov, 1, 0) };
        n >= 0 && n as usize == payload.len()
    }

    /// A few bytes (at most a page: one piece of the pipe) copied into the
    /// pipe behind the payload, whole; nothing to copy is no piece.
    fn stage_copy(&mut self, parts: &[&[u8]; 2]) -> bool {
        let len = parts[0].len() + parts[1].len();
        if len == 0 {
            return true;
        }
        let iov = parts.map(|p| libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        });
        // SAFETY: `iov` describes two live slices, readable for the call;
        // the kernel only reads them.
        let n = unsafe { libc::writev(self.write.as_raw_fd(), iov.as_ptr(), 2) };
        n >= 0 && n as usize == len
    }

    /// Read out whatever a failure left in the pipe.
    fn empty_pipe(&mut self) {
        loop {
            // SAFETY: `scratch` is ours and writable for its length.
            let n = unsafe {
                libc::read(
                    self.read.as_raw_fd(),
                    self.scratch.as_mut_ptr().cast(),
                    self.scratch.len(),
                )
            };
            if n > 0 {
                continue;
            }
            match io::Error::last_os_error().kind() {
                _ if n == 0 => {}
                io::ErrorKind::WouldBlock => return,
                io::ErrorKind::Interrupted => continue,
                _ => {}
            }
            // End of file cannot happen while we hold the write end; any
            // other error leaves the pipe's contents unknown.
            self.off = true;
            return;
        }
    }
}

/// Drop whatever datagram `socket` may still hold corked: a send of more
/// than any datagram holds, with `MSG_MORE`, fails whatever it meets. A
/// corked datagram it would join is dropped with it (EMSGSIZE); with none,
/// it is refused at once, for want of a peer (EDESTADDRREQ) on an
/// unconnected socket, as too long (EMSGSIZE) on a connected one.
fn abandon_cork(socket: &UdpSocket, scratch: &[u8]) {
    // On a socket connected to its peer the send fails all the same: no
    // datagram holds MAX_DATAGRAM_BYTES of payload.
    let len = scratch.len().min(MAX_DATAGRAM_BYTES);
    // SAFETY: `scratch` is live and readable for `len` bytes; the kernel
    // only reads it, and fails the send either way.
    let _ = unsafe {
        libc::send(
            socket.as_raw_fd(),
            scratch.as_ptr().cast(),
            len,
            libc::MSG_MORE | libc::MSG_DONTWAIT,
        )
    };
}

/// Whether splices hand a socket many pipe buffers per send (Linux 6.5
/// and later): a datagram's skb that runs out of pieces then refuses the
/// payload whole, where older kernels take part of it first.
fn splices_whole() -> bool {
    kernel_release() >= Some((6, 5))
}

/// The kernel's release as (major, minor), if it reads as one.
fn kernel_release() -> Option<(u32, u32)> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Longest UDP datagram an IPv4 or IPv6 socket takes in one send.
const MAX_DATAGRAM_BYTES: usize = 65535;

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (UdpSocket, UdpSocket) {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.set_nonblocking(true).unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        (tx, rx)
    }

    /// Index of the first page boundary within `memory` (never 0, which
    /// the tests' offsets before a boundary rely on).
    fn first_page(memory: &[u8], page: usize) -> usize {
        page - memory.as_ptr() as usize % page
    }

    /// A socket pair, a splicer taking any length, written memory for
    /// three datagrams and the index of its first page boundary.
    fn rig(seed: u8) -> (UdpSocket, UdpSocket, Splicer, Vec<u8>, usize) {
        let (tx, rx) = pair();
        let s = Splicer::new(1).unwrap();
        let memory = pattern(seed, 3 * MAX_SPLICED);
        let at = first_page(&memory, s.page);
        (tx, rx, s, memory, at)
    }

    /// Whether `s` plans for 4 KiB pages and 17 skb pieces, as the tests'
    /// page arithmetic assumes; says so when it does not.
    fn usual(s: &Splicer) -> bool {
        let usual = s.page == PAGE && s.frags == max_frags(PAGE);
        if !usual {
            eprintln!(
                "skipped: {}-byte pages, {} skb pieces (net.core.max_skb_frags)",
                s.page, s.frags
            );
        }
        usual
    }

    fn pattern(seed: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| seed.wrapping_add((i % 251) as u8))
            .collect()
    }

    /// Datagrams arrive as sent: a payload in 16 pages (corked with a
    /// segment size, the headers in a piece of their own), one in 17 (its
    /// partial first page copied behind the headers), one with a tail.
    #[test]
    fn a_spliced_datagram_arrives_as_its_three_pieces() {
        let (tx, rx, mut s, memory, at) = rig(7);
        if !usual(&s) {
            return;
        }
        let head = pattern(1, 64);
        let tail = pattern(9, 20);
        // 16 and 17 pages with 4 KiB pages.
        let full = s.frags - 1;
        let len = full * s.page - 600;
        let sixteen = &memory[at..at + len];
        let seventeen = &memory[at + s.page - 100..][..len];
        let short = &memory[at + 123..][..40000];
        assert_eq!(s.pieces(sixteen, 0), full);
        assert_eq!(s.pieces(seventeen, 0), full + 1);
        let to = rx.local_addr().unwrap();
        let sent: [(&[u8], &[u8]); 3] = [(sixteen, &[]), (seventeen, &[]), (short, &tail)];
        for (payload, tail) in sent {
            assert!(s.takes(payload, tail.len()));
            s.send(&tx, to, sys::DEFAULT_TOS, &head, payload, tail)
                .unwrap();
        }
        let mut buf = vec![0u8; 65536];
        for (payload, tail) in sent {
            let n = rx.recv(&mut buf).unwrap();
            assert!(arrived_as(&buf[..n], &[&head, payload, tail]));
        }
        assert_eq!((s.spliced, s.fallbacks), (3, 0));
    }

    /// Whether the received datagram in `buf[..n]` is `parts` in order,
    /// without printing 64 KiB of bytes when it is not.
    fn arrived_as(buf: &[u8], parts: &[&[u8]]) -> bool {
        buf == parts.concat()
    }

    /// How many bytes `s`'s pipe still holds.
    fn queued(s: &Splicer) -> libc::c_int {
        let mut queued: libc::c_int = 0;
        // SAFETY: FIONREAD on our pipe writes one int.
        assert_eq!(
            unsafe { libc::ioctl(s.read.as_raw_fd(), libc::FIONREAD, &mut queued) },
            0
        );
        queued
    }

    /// A datagram the socket refuses once its payload is in the pipe (here
    /// one over the largest UDP datagram) is refused as its copy is
    /// (EMSGSIZE): nothing of it arrives, the pipe is empty, and the next
    /// datagram is whole, with nothing of the cork before it. Since Linux
    /// 6.5 it is refused whole, corked again, refused whole again and not
    /// counted as corked again, and splicing stays on; older kernels take
    /// part of it first, and turn splicing off after four such in a row.
    #[test]
    fn a_refused_splice_leaves_nothing_behind() {
        let (tx, rx) = pair();
        let mut s = Splicer::new(1).unwrap();
        if !usual(&s) {
            return;
        }
        let to = rx.local_addr().unwrap();
        let big = pattern(3, 20000);
        assert!(s.takes(&big, 8));
        let e = s
            .send(&tx, to, sys::DEFAULT_TOS, &[1; 45520], &big, &[2; 8])
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EMSGSIZE), "{e}");
        assert_eq!(queued(&s), 0, "the pipe still holds bytes");
        assert_eq!((s.spliced, s.fallbacks, s.recorked), (0, 1, 0));
        if splices_whole() {
            assert_eq!(s.refused_whole, 1);
        }
        let payload = pattern(5, 40000);
        assert!(s.takes(&payload, 0));
        s.send(&tx, to, sys::DEFAULT_TOS, &[4; 48], &payload, &[])
            .unwrap();
        let mut buf = vec![0u8; 65536];
        let n = rx.recv(&mut buf).unwrap();
        assert!(arrived_as(&buf[..n], &[&[4; 48], &payload]));
        assert_eq!((s.spliced, s.fallbacks), (1, 1));
    }

    /// What a failure may leave corked is dropped: the next datagram
    /// arrives alone, and with nothing corked the drop sends nothing.
    #[test]
    fn an_abandoned_cork_sends_nothing() {
        let (tx, rx) = pair();
        let to = rx.local_addr().unwrap();
        let scratch = vec![0u8; 65536];
        sys::start_corked(&tx, to, sys::DEFAULT_TOS, None, &[&[1; 100]]).unwrap();
        abandon_cork(&tx, &scratch);
        abandon_cork(&tx, &scratch);
        sys::send_parts(&tx, to, sys::DEFAULT_TOS, &[&[2; 10]]).unwrap();
        let mut buf = [0u8; 256];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &[2; 10]);
        rx.set_nonblocking(true).unwrap();
        assert!(rx.recv(&mut buf).is_err(), "a second datagram arrived");
    }

    /// A pipe that cannot take the payload: the datagram leaves copied,
    /// whole.
    #[test]
    fn a_payload_the_pipe_refuses_is_copied_instead() {
        let (tx, rx) = pair();
        let mut s = Splicer::new(1).unwrap();
        // SAFETY: shrinking our own, empty pipe to one page.
        let rc =
            unsafe { libc::fcntl(s.write.as_raw_fd(), libc::F_SETPIPE_SZ, PAGE as libc::c_int) };
        assert!(rc >= 0);
        let to = rx.local_addr().unwrap();
        let payload = pattern(8, 30000);
        for _ in 0..2 {
            s.send(&tx, to, sys::DEFAULT_TOS, &[6; 48], &payload, &[7; 8])
                .unwrap();
        }
        let mut buf = vec![0u8; 65536];
        for _ in 0..2 {
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(
                &buf[..n],
                &[&[6; 48][..], &payload[..], &[7; 8][..]].concat()[..]
            );
        }
        assert_eq!((s.spliced, s.fallbacks), (0, 2));
    }

    /// Pages the bytes `start..end` touch, counted one address at a time:
    /// an oracle for the page arithmetic under test.
    fn pages_touched(start: usize, end: usize, page: usize) -> usize {
        (start..end)
            .filter(|&a| a == start || a % page == 0)
            .count()
    }

    /// Every payload of a datagram with an ACK trailer or none, from any
    /// page offset, is taken, keeps its segment size (copying one partial
    /// page at most, both only for 17 pages with a tail) within the skb's
    /// pieces, and arrives whole and spliced.
    #[test]
    fn payloads_from_any_offset_arrive_whole_within_the_pieces() {
        let (tx, rx, mut s, memory, at) = rig(11);
        if !usual(&s) {
            return;
        }
        let head = pattern(1, 56);
        let mut buf = vec![0u8; 65536];
        let mut sent = 0;
        for len in [40000, 60544, 64512, 65000, 65507 - 56 - 24] {
            for offset in (0..s.page).step_by(256).chain([1, s.page - 1]) {
                for tail in [&[][..], &[9; 24][..]] {
                    let payload = &memory[at + offset..][..len];
                    assert!(s.takes(payload, tail.len()));
                    let plan = s.plan(payload, tail.len()).unwrap();
                    let start = payload.as_ptr() as usize;
                    let all = pages_touched(start, start + len, s.page);
                    let both = all == max_frags(s.page) && !tail.is_empty();
                    assert!(plan.prefix == 0 || plan.suffix == 0 || both, "{plan:?}");
                    let middle =
                        pages_touched(start + plan.prefix, start + len - plan.suffix, s.page);
                    let copied = usize::from(plan.suffix + tail.len() > 0);
                    assert!(1 + middle + copied <= max_frags(s.page), "{plan:?}");
                    s.send(
                        &tx,
                        rx.local_addr().unwrap(),
                        sys::DEFAULT_TOS,
                        &head,
                        payload,
                        tail,
                    )
                    .unwrap();
                    sent += 1;
                    let n = rx.recv(&mut buf).unwrap();
                    assert!(arrived_as(&buf[..n], &[&head, payload, tail]));
                }
            }
        }
        assert_eq!((s.spliced, s.fallbacks), (sent, 0));
    }

    /// A payload on 17 pages gives up its partial first page, and with a
    /// tail its partial last page too, to keep its segment size; 16 whole
    /// pages with a tail over a page (no ACK trailer is) are copied.
    #[test]
    fn seventeen_pages_give_up_their_partial_ends() {
        let s = Splicer::new(1).unwrap();
        if !usual(&s) {
            return;
        }
        let memory = vec![0u8; 3 * MAX_SPLICED];
        let at = first_page(&memory, s.page);
        let late = &memory[at + 3072..][..64512];
        assert_eq!(s.pieces(late, 0), 17);
        assert_eq!(s.pieces(late, 24), 18);
        assert!(s.takes(late, 24));
        let plain = Plan::default();
        assert_eq!(s.plan(&memory[at..][..60544], 24), Some(plain));
        assert_eq!(
            s.plan(late, 0),
            Some(Plan {
                prefix: 1024,
                ..plain
            })
        );
        assert_eq!(
            s.plan(late, 24),
            Some(Plan {
                prefix: 1024,
                suffix: 2048,
            })
        );
        let whole_pages = &memory[at..][..16 * PAGE];
        assert_eq!(s.plan(whole_pages, 0), Some(plain));
        assert_eq!(s.plan(whole_pages, PAGE + 1), None);
        assert!(!s.takes(whole_pages, PAGE + 1));
    }

    /// Headers that take two skb pieces leave one too few for a payload
    /// planned to the last piece: the splice is refused whole (EMSGSIZE)
    /// and the datagram is corked again with its segment size, its headers
    /// now at the start of a fresh fragment page. Headers are copied into
    /// the sending thread's page fragment (32 KiB, or one page when the
    /// kernel cannot spare more), which every unread datagram built from
    /// it keeps from being reused at its start; a fresh thread starts one
    /// at offset 0. So 3000-byte headers on datagrams left unread meet the
    /// end of a 32 KiB page on the 11th send (of a one-page fragment, on
    /// the 2nd), and take two pieces there. The payload starts at a page's
    /// last byte: its first piece is one byte long, which a datagram
    /// corked without a segment size would carry with a wrong checksum
    /// (see `Splicer::plan`), and the receiver would drop. Every datagram
    /// arrives whole; the re-cork is asserted where splices are refused
    /// whole (Linux 6.5 and later).
    #[test]
    fn headers_split_over_two_pieces_are_corked_again() {
        std::thread::spawn(|| {
            let (tx, rx) = pair();
            let rx_ref = socket2::SockRef::from(&rx);
            // What 12 unread datagrams of 56 KiB take, with room to spare.
            let _ = rx_ref.set_recv_buffer_size(4 << 20);
            match rx_ref.recv_buffer_size() {
                Ok(n) if n >= 2 << 20 => {}
                n => {
                    eprintln!("skipped: receive buffer {n:?} (net.core.rmem_max)");
                    return;
                }
            }
            let mut s = Splicer::new(1).unwrap();
            if !usual(&s) {
                return;
            }
            let memory = pattern(13, 3 * MAX_SPLICED);
            let at = first_page(&memory, s.page);
            // From a page's last byte, 15 pages: with the tail's piece,
            // the 16 that a segment size leaves beside the headers.
            let payload = &memory[at + s.page - 1..][..13 * s.page + 2];
            let tail = pattern(21, 24);
            assert_eq!(s.pieces(payload, tail.len()), s.frags - 1);
            assert_eq!(s.plan(payload, tail.len()), Some(Plan::default()));
            let to = rx.local_addr().unwrap();
            let heads: Vec<Vec<u8>> = (0..12).map(|k| pattern(k, 3000)).collect();
            for head in &heads {
                s.send(&tx, to, sys::DEFAULT_TOS, head, payload, &tail)
                    .unwrap();
            }
            rx.set_read_timeout(Some(std::time::Duration::from_millis(500)))
                .unwrap();
            let mut buf = vec![0u8; 65536];
            let sent = heads.len();
            for (k, head) in heads.iter().enumerate() {
                let n = rx
                    .recv(&mut buf)
                    .unwrap_or_else(|e| panic!("datagram {k} of {sent} did not arrive: {e}"));
                assert!(
                    arrived_as(&buf[..n], &[head, payload, &tail]),
                    "datagram {k} of {sent} arrived other than sent"
                );
            }
            assert_eq!(s.spliced + s.fallbacks, sent as u64);
            if splices_whole() {
                assert!(s.recorked >= 1, "no re-cork in {sent} sends");
                assert_eq!(s.fallbacks, 0);
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn small_payloads_and_ones_over_too_many_pages_are_left_to_the_copy() {
        let s = Splicer::new(32768).unwrap();
        if !usual(&s) {
            return;
        }
        let memory = vec![0u8; 3 * MAX_SPLICED];
        // Page-aligned start within `memory`.
        let at = first_page(&memory, s.page);
        let aligned = &memory[at..];
        assert!(!s.takes(&aligned[..32767], 0));
        assert!(s.takes(&aligned[..32768], 0));
        assert!(s.takes(&aligned[..65000], 0) && s.takes(&aligned[..65000], 8));
        assert!(!s.takes(&aligned[..MAX_SPLICED + 1], 0));
        // 65000 bytes from 100 bytes before a page's end span 17 pages:
        // with a tail too, taken only because the plan copies both partial
        // ends.
        let late = &memory[at + s.page - 100..];
        assert!(s.takes(&late[..65000], 0));
        assert_eq!(s.pieces(&late[..65000], 8), 18);
        assert!(s.takes(&late[..65000], 8));
    }
}
