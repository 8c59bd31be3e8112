//! Same-host datagram rings (`FI_UET_HOST_RING`): between endpoints of one
//! host, datagrams travel through shared memory instead of the kernel's UDP
//! path, which costs a system call at each end and, on a busy-polling
//! receiver, a `recvmsg` per empty look.
//!
//! Only the carrier changes. The engine sees the same datagrams, from the
//! same source address, and runs the same protocol over them: packets,
//! ACKs, windows, congestion control and loss recovery (a ring loses
//! nothing, so the latter stays idle).
//!
//! * Every endpoint with the rings on owns a **mailbox**: a file in
//!   `/dev/shm` (mode 0600, so only its user's processes map it) named by
//!   the host (boot ID and network namespace: what an IP address and port
//!   mean) and the endpoint's UDP address. It holds [`LANES`] lanes, each a
//!   single-producer single-consumer ring of [`DEPTH`] slots of up to
//!   [`SLOT_DATA`] bytes.
//! * A sender looks for the mailbox of a destination the first time it
//!   sends there. When the file exists, its layout is ours and its owner
//!   process holds the UDP socket at that address, the sender claims a free
//!   lane and writes every later datagram for that destination there. A
//!   full lane holds up that destination alone: its datagrams wait, in
//!   order, in a backlog (`host_ring_backlog`) while the engine holds its
//!   data, and the sender's other peers are served meanwhile. Otherwise
//!   the destination is remembered as remote and reached over UDP.
//! * The receiver looks at its claimed lanes in every progress call. A
//!   lane's claim names its sender (process and address); the receiver
//!   believes the address only once that process is found holding the UDP
//!   socket bound to it, checked at the first look that sees the claim
//!   (while its sender surely lives, so what one writes just before it
//!   closes still counts). A check that cannot tell (out of descriptors)
//!   is made again later; meanwhile the lane's datagrams wait in it.
//! * Sleeping: a receiver about to sleep counts itself in the mailbox's
//!   `sleepers`, then looks at its lanes once more. A sender that fills a
//!   lane that was empty while someone sleeps rings the **doorbell**: an
//!   empty UDP datagram to the receiver's socket, which wakes it and which
//!   the driver then drops. An application that sleeps on the endpoint's
//!   descriptors by itself (`FI_GETWAIT`) asks for the doorbell always.
//! * A closing sender marks its lane closed; the receiver frees it once it
//!   has taken what is left. A sender that dies keeps its lane until the
//!   mailbox's owner closes; past [`LANES`] senders, the rest use UDP. A
//!   closing receiver marks its mailbox closed, and so does the next
//!   endpoint to bind the address when a killed one left it behind; a
//!   sender that finds it so (or its owner process gone, looked at when the
//!   lane stays full) drops the lane and sends over UDP again, to whatever
//!   took the address.
//! * Memory: a claimed lane's slots are allocated in `/dev/shm` when it is
//!   claimed (about 4 MiB), so a full tmpfs refuses the claim (UDP then)
//!   instead of failing a write later with SIGBUS.
//!
//! Not through the emu-net relay, with fault injection, or for ordered
//! delivery (the driver decides): those need every datagram on the network.

use std::fs::OpenOptions;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use std::collections::HashMap;

/// Our lane, if any, per destination.
type PeerLanes = HashMap<SocketAddr, Option<OutLane>, foldhash::fast::RandomState>;

use super::host_memory;
use super::host_ring_backlog::Backlog;

/// Lanes per mailbox: how many same-host senders an endpoint takes by
/// shared memory (later ones use UDP).
pub const LANES: usize = 32;
/// Slots per lane: datagrams a sender may have written and the receiver not
/// yet taken.
pub const DEPTH: usize = 64;
/// Largest datagram a slot carries: any UDP payload (IPv4's largest).
pub const SLOT_DATA: usize = 65507;

const MAGIC: u64 = u64::from_le_bytes(*b"UETRING1");
const VERSION: u32 = 1;
const PAGE: usize = 4096;
/// Per lane: control fields, tail and head each on their own cache line.
const LANE_HEADER: usize = 192;
/// Per slot: length and TOS, then the datagram.
const SLOT_HEADER: usize = 64;
const SLOT_STRIDE: usize = (SLOT_HEADER + SLOT_DATA).div_ceil(64) * 64;
const LANE_DATA: usize = DEPTH * SLOT_STRIDE;
const LANES_AT: usize = PAGE;
const SLOTS_AT: usize = (LANES_AT + LANES * LANE_HEADER).div_ceil(PAGE) * PAGE;
/// Bytes of a mailbox file (sparse: only the pages written are memory).
pub const MAILBOX_BYTES: usize = SLOTS_AT + LANES * LANE_DATA;

// Mailbox header fields (byte offsets).
const H_MAGIC: usize = 0;
const H_VERSION: usize = 8;
const H_LANES: usize = 12;
const H_DEPTH: usize = 16;
const H_SLOT: usize = 20;
const H_OWNER: usize = 24;
const H_SLEEPERS: usize = 64;
const H_ALWAYS_RING: usize = 68;
/// Set when the owner closes: its senders go back to UDP (a new endpoint
/// at the address has a new mailbox).
const H_CLOSED: usize = 72;
/// Lanes ever claimed (a high-water mark): the receiver looks at no more.
const H_CLAIMED: usize = 128;

// Lane header fields (offsets within the lane's header).
const L_STATE: usize = 0;
const L_PID: usize = 4;
const L_GENERATION: usize = 8;
/// Source address: family (4 or 6) in the low 16 bits and port in the high
/// ones of one word, then 16 address bytes.
const L_FAMILY: usize = 12;
const L_IP: usize = 16;
const L_TAIL: usize = 64;
const L_HEAD: usize = 128;

const FREE: u32 = 0;
const CLAIMING: u32 = 1;
const READY: u32 = 2;
const CLOSED: u32 = 3;

/// A shared mapping of a mailbox file.
struct Mapping {
    base: *mut u8,
}

// SAFETY: the mapping is plain shared memory; every field other processes
// write is read through atomics, and slot bytes are read only after the
// tail that publishes them (acquire) and copied out before the head that
// frees them (release).
unsafe impl Send for Mapping {}

impl Mapping {
    /// Map `file` whole (it is [`MAILBOX_BYTES`] long).
    fn new(file: &std::fs::File) -> Option<Mapping> {
        // SAFETY: a fresh shared mapping of an open file of at least
        // MAILBOX_BYTES bytes (checked by the callers); the result is
        // checked for MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                MAILBOX_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        (base != libc::MAP_FAILED).then_some(Mapping { base: base.cast() })
    }

    fn u32_at(&self, offset: usize) -> &AtomicU32 {
        assert!(offset.is_multiple_of(4) && offset + 4 <= MAILBOX_BYTES);
        // SAFETY: the offset is aligned and inside the mapping (checked
        // above), which lives as long as `self`; other processes touch it
        // only atomically.
        unsafe { &*self.base.add(offset).cast::<AtomicU32>() }
    }

    fn u64_at(&self, offset: usize) -> &AtomicU64 {
        assert!(offset.is_multiple_of(8) && offset + 8 <= MAILBOX_BYTES);
        // SAFETY: as in u32_at.
        unsafe { &*self.base.add(offset).cast::<AtomicU64>() }
    }

    /// Whether this mailbox's owner wants a doorbell: it sleeps, or it
    /// sleeps out of our sight (`FI_GETWAIT`) and asked for every one.
    fn wants_doorbell(&self) -> bool {
        self.u32_at(H_SLEEPERS).load(Ordering::SeqCst) > 0
            || self.u32_at(H_ALWAYS_RING).load(Ordering::Relaxed) != 0
    }

    /// Copy `bytes` to `offset`.
    fn write(&self, offset: usize, bytes: &[u8]) {
        assert!(offset + bytes.len() <= MAILBOX_BYTES);
        // SAFETY: the range is inside the mapping (checked above) and is a
        // slot this process owns until it publishes it.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.add(offset), bytes.len()) }
    }

    /// Copy `out.len()` bytes at `offset` into `out`.
    fn read(&self, offset: usize, out: &mut [u8]) {
        assert!(offset + out.len() <= MAILBOX_BYTES);
        // SAFETY: the range is inside the mapping (checked above) and is a
        // published slot its producer no longer writes.
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(offset), out.as_mut_ptr(), out.len()) }
    }

    fn lane(&self, lane: usize, field: usize) -> usize {
        LANES_AT + lane * LANE_HEADER + field
    }

    fn slot(&self, lane: usize, index: u64) -> usize {
        SLOTS_AT + lane * LANE_DATA + (index % DEPTH as u64) as usize * SLOT_STRIDE
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base` came from mmap with this length and is unmapped
        // once, here.
        unsafe { libc::munmap(self.base.cast(), MAILBOX_BYTES) };
    }
}

/// Where the mailbox of `addr` lives on this host.
fn mailbox_path(host: u64, addr: SocketAddr) -> PathBuf {
    PathBuf::from(format!(
        "/dev/shm/uet-ring-{host:016x}-{}-{}",
        addr.ip(),
        addr.port()
    ))
}

/// Remove the mailboxes (and half-made ones) of this host that endpoints
/// left behind when their process died. A mailbox's pages stay in
/// `/dev/shm` until its file is removed, so without this a crashed job
/// would keep its rings' memory until the next boot. A file goes when both
/// its owner's process is gone (the pid in the header, or in the name of
/// one being made) and no UDP socket of this network namespace is bound to
/// its address: a live endpoint binds its socket before it makes its
/// mailbox and removes the mailbox before it closes the socket, and its
/// process lives, so neither test alone has to be exact (a table read that
/// misses a row, an owner in another pid namespace). Only our own regular
/// files are looked at, and one replaced under its name meanwhile stays.
fn remove_abandoned_mailboxes(host: u64, local: SocketAddr) {
    let prefix = format!("uet-ring-{host:016x}-");
    let Ok(entries) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    // Listed before the sockets are read: a file made after the listing is
    // not looked at.
    let candidates: Vec<(PathBuf, SocketAddr, Option<u32>)> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let (addr, maker) = mailbox_name(name.to_str()?.strip_prefix(&prefix)?)?;
            Some((entry.path(), addr, maker))
        })
        .collect();
    if candidates.is_empty() {
        return;
    }
    // Our own socket must be in the tables, or they were not read whole.
    let Some(bound) = host_memory::udp_bound_test().filter(|bound| bound(local)) else {
        return;
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    for (path, addr, maker) in candidates {
        if bound(addr) {
            continue;
        }
        let Ok(file) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
        else {
            continue;
        };
        let Ok(meta) = file.metadata() else {
            continue;
        };
        if !meta.is_file() || meta.uid() != me {
            continue;
        }
        let owner = match maker {
            Some(pid) => Some(pid),
            None => mailbox_owner(&file),
        };
        if owner.is_some_and(process_lives) {
            continue;
        }
        // Still the file judged (not one renamed into its place since).
        let same = std::fs::symlink_metadata(&path)
            .is_ok_and(|now| now.ino() == meta.ino() && now.dev() == meta.dev());
        if same {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// The owner pid in a mailbox header (`None` when it cannot be read).
fn mailbox_owner(file: &std::fs::File) -> Option<u32> {
    use std::os::unix::fs::FileExt;
    let mut pid = [0u8; 4];
    file.read_exact_at(&mut pid, H_OWNER as u64).ok()?;
    Some(u32::from_ne_bytes(pid))
}

/// The address in a mailbox name after its host part, `<ip>-<port>`, and
/// for one being made (`.<pid>.tmp` follows) the pid making it.
fn mailbox_name(rest: &str) -> Option<(SocketAddr, Option<u32>)> {
    let (rest, maker) = match rest.strip_suffix(".tmp") {
        Some(made) => {
            let (rest, pid) = made.rsplit_once('.')?;
            (rest, Some(pid.parse().ok()?))
        }
        None => (rest, None),
    };
    let (ip, port) = rest.rsplit_once('-')?;
    Some((SocketAddr::new(ip.parse().ok()?, port.parse().ok()?), maker))
}

/// What sending to a destination by ring came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushed {
    /// The destination has no lane of ours: send over UDP.
    NoLane,
    /// In the lane; nobody sleeps on it.
    Written,
    /// In the lane, which was empty while the receiver sleeps: ring the
    /// doorbell (an empty datagram to the destination).
    Doorbell,
    /// The lane is full, or datagrams wait for it already: copied into the
    /// backlog, to leave in order when it has room (see
    /// [`retry_backlog`](HostRings::retry_backlog)).
    Queued,
}

/// What [`HostRings::retry_backlog`] asks of the driver.
pub enum Retried<'a> {
    /// A waiting datagram went into a lane whose receiver sleeps, or a
    /// doorbell could not be sent before: ring.
    Doorbell(SocketAddr),
    /// The destination's lane is gone (its receiver closed or died): send
    /// the datagram over UDP, as later ones will go.
    ByUdp(SocketAddr, u8, &'a [u8]),
}

/// One of our lanes in a peer's mailbox.
struct OutLane {
    map: Mapping,
    lane: usize,
    /// Next slot to write (only we write the tail).
    tail: u64,
    /// The mailbox owner's pid, and pushes in a row that found the lane
    /// full (every [`FULL_CHECK_EVERY`] the owner is looked for).
    owner: u32,
    full_in_a_row: u32,
}

/// Destinations remembered as reached over UDP (no mailbox there) before
/// those memories are dropped: the engine answers any source, spoofed
/// ones too, without keeping it, and looking one up again costs a failed
/// `open`.
const UDP_PEERS_REMEMBERED: usize = 4096;

/// Full pushes in a row after which a sender checks the receiver lives.
const FULL_CHECK_EVERY: u32 = 256;

/// What the receiver knows of one of its lanes.
#[derive(Clone, Copy, Default)]
struct InLane {
    /// Next slot to take (only we write the head).
    head: u64,
    /// The claim (0: none seen yet) the source below belongs to; `None`
    /// when that claim's address did not check out.
    generation: u32,
    source: Option<SocketAddr>,
    /// Looks to skip before checking a claim again whose check could not
    /// tell (see [`SocketCheck`]); its datagrams wait in the lane.
    recheck_in: u32,
}

/// Whether process `pid` holds a UDP socket bound to an address: `None`
/// when that could not be found out (out of descriptors), so the claim is
/// checked again later instead of refused for good.
type SocketCheck = fn(u32, SocketAddr) -> Option<bool>;

/// Looks at a lane between two checks of a claim that could not tell.
const RECHECK_EVERY: u32 = 1024;

/// Counters of the rings (also in `DriverStats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingStats {
    pub sent: u64,
    pub received: u64,
    pub full: u64,
    pub doorbells_sent: u64,
    /// Datagrams taken from lanes whose sender did not check out.
    pub refused: u64,
    /// Datagrams dropped because too many waited for one full lane.
    pub backlog_dropped: u64,
}

/// An endpoint's mailbox and its lanes in its peers' mailboxes.
pub struct HostRings {
    host: u64,
    local: SocketAddr,
    path: PathBuf,
    inbox: Mapping,
    lanes: Vec<InLane>,
    /// Lane the next look starts at (each look starts one further, so a
    /// busy sender cannot starve the others of the burst).
    next_lane: usize,
    /// Sleeps of ours counted in the mailbox (so an unbalanced end never
    /// takes another sleeper's count).
    sleeping: AtomicU32,
    /// Destinations looked up: `None` for those reached over UDP. Looked
    /// up for every datagram sent, so hashed with foldhash (SipHash was
    /// about a tenth of a same-host round trip's instructions).
    peers: PeerLanes,
    scratch: Vec<u8>,
    /// How a lane's claim is checked (a test may stand in for `/proc`).
    check_socket: SocketCheck,
    /// Datagrams for lanes that were full.
    backlog: Backlog,
    /// Destinations whose doorbell could not be sent: a lane that is not
    /// empty rings no more, so without another its receiver sleeps on.
    doorbells_owed: Vec<SocketAddr>,
    pub stats: RingStats,
}

impl HostRings {
    /// Create the mailbox of the endpoint bound at `local`. `None` when this
    /// host has no `/dev/shm` or cannot name itself: the endpoint then uses
    /// UDP for everything, as without the rings.
    pub fn new(local: SocketAddr) -> Option<HostRings> {
        // What an address means: this boot and network namespace.
        let host = host_memory::this_host("net")?;
        remove_abandoned_mailboxes(host, local);
        let path = mailbox_path(host, local);
        // Built under a private name and renamed into place, so a sender
        // never sees a half-made header. A file left at the final name by a
        // process that died is replaced; whoever still maps it keeps the
        // old one.
        let temp = PathBuf::from(format!("{}.{}.tmp", path.display(), std::process::id()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temp)
            .ok()?;
        let made = file
            .set_len(MAILBOX_BYTES as u64)
            .ok()
            .and_then(|()| Mapping::new(&file));
        // The header and lane headers are allocated now; slots when a
        // sender claims its lane.
        let made = made.filter(|_| allocate(&file, 0, SLOTS_AT));
        let Some(inbox) = made else {
            let _ = std::fs::remove_file(&temp);
            return None;
        };
        inbox.u64_at(H_MAGIC).store(MAGIC, Ordering::Relaxed);
        inbox.u32_at(H_VERSION).store(VERSION, Ordering::Relaxed);
        inbox.u32_at(H_LANES).store(LANES as u32, Ordering::Relaxed);
        inbox.u32_at(H_DEPTH).store(DEPTH as u32, Ordering::Relaxed);
        inbox
            .u32_at(H_SLOT)
            .store(SLOT_DATA as u32, Ordering::Relaxed);
        inbox
            .u32_at(H_OWNER)
            .store(std::process::id(), Ordering::Release);
        // A mailbox still at our address was left by an endpoint that
        // ended without closing it (we hold the socket now): its senders,
        // which still have it mapped, must stop writing there and go back
        // to UDP. Its owner's PID may be alive again in another process,
        // so they would not find out by themselves.
        if let Some((_, stale)) = open_mailbox(&path) {
            stale.u32_at(H_CLOSED).store(1, Ordering::Release);
        }
        if std::fs::rename(&temp, &path).is_err() {
            let _ = std::fs::remove_file(&temp);
            return None;
        }
        Some(HostRings {
            host,
            local,
            path,
            inbox,
            lanes: vec![InLane::default(); LANES],
            next_lane: 0,
            sleeping: AtomicU32::new(0),
            peers: PeerLanes::default(),
            scratch: vec![0; SLOT_DATA],
            check_socket: host_memory::udp_socket_holder,
            backlog: Backlog::default(),
            doorbells_owed: Vec::new(),
            stats: RingStats::default(),
        })
    }

    /// Whether datagrams for `to` go by ring (looking its mailbox up the
    /// first time).
    pub fn has_lane(&mut self, to: SocketAddr) -> bool {
        lane_for(&mut self.peers, self.host, self.local, to).is_some()
    }

    /// Write the datagram made of `parts` for `to` into our lane of its
    /// mailbox, if we have one. When that lane is full, or datagrams for
    /// `to` wait already, it waits in the backlog: a receiver that does not
    /// take holds up only what goes to it.
    pub fn push(&mut self, to: SocketAddr, tos: u8, parts: &[&[u8]]) -> Pushed {
        if self.backlog.holds(to) {
            self.backlog.add(to, tos, parts);
            return Pushed::Queued;
        }
        self.write(to, tos, parts).unwrap_or_else(|| {
            self.backlog.add(to, tos, parts);
            Pushed::Queued
        })
    }

    /// Whether datagrams wait in the backlog, or doorbells to ring again.
    pub fn has_backlog(&self) -> bool {
        !self.backlog.is_empty() || !self.doorbells_owed.is_empty()
    }

    /// The doorbell for `to` could not be sent: the next
    /// [`retry_backlog`](Self::retry_backlog) asks for it again.
    pub fn owe_doorbell(&mut self, to: SocketAddr) {
        if !self.doorbells_owed.contains(&to) {
            self.doorbells_owed.push(to);
        }
    }

    /// The next destination whose datagrams began to wait in the backlog
    /// (`true`: the engine should hold its data) or no longer wait
    /// (`false`), in the order it happened.
    pub fn take_backlog_change(&mut self) -> Option<(SocketAddr, bool)> {
        self.backlog.take_change()
    }

    /// Move waiting datagrams into the lanes that have room now, each
    /// destination's in order; what needs the network goes to `carry`.
    pub fn retry_backlog(&mut self, mut carry: impl FnMut(Retried<'_>)) {
        for to in std::mem::take(&mut self.doorbells_owed) {
            // Owed only while its receiver still sleeps (and has the lane).
            let sleeps = self
                .peers
                .get(&to)
                .and_then(Option::as_ref)
                .is_some_and(|out| out.map.wants_doorbell());
            if sleeps {
                carry(Retried::Doorbell(to));
            }
        }
        let mut backlog = std::mem::take(&mut self.backlog);
        backlog.drain(|to, w| match self.write(to, w.tos, &[&w.bytes]) {
            None => false,
            Some(Pushed::Doorbell) => {
                carry(Retried::Doorbell(to));
                true
            }
            Some(Pushed::NoLane) => {
                carry(Retried::ByUdp(to, w.tos, &w.bytes));
                true
            }
            Some(_) => true,
        });
        self.stats.backlog_dropped = backlog.dropped;
        self.backlog = backlog;
    }

    /// Write into `to`'s lane at once: `None` when it is full.
    fn write(&mut self, to: SocketAddr, tos: u8, parts: &[&[u8]]) -> Option<Pushed> {
        let Some(out) = lane_for(&mut self.peers, self.host, self.local, to) else {
            return Some(Pushed::NoLane);
        };
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > SLOT_DATA {
            // Not reached with UDP-sized datagrams; were it, UDP takes it.
            return Some(Pushed::NoLane);
        }
        let map = &out.map;
        if map.u32_at(H_CLOSED).load(Ordering::Acquire) != 0 {
            self.peers.insert(to, None);
            return Some(Pushed::NoLane);
        }
        let head = map
            .u64_at(map.lane(out.lane, L_HEAD))
            .load(Ordering::SeqCst);
        if out.tail.wrapping_sub(head) >= DEPTH as u64 {
            // Wrapping: a receiver that lives and never takes (stopped)
            // keeps a sender trying without end.
            out.full_in_a_row = out.full_in_a_row.wrapping_add(1);
            if out.full_in_a_row % FULL_CHECK_EVERY == 0 && !process_lives(out.owner) {
                // The receiver died without closing: nothing will drain
                // the lane.
                self.peers.insert(to, None);
                return Some(Pushed::NoLane);
            }
            self.stats.full += 1;
            return None;
        }
        out.full_in_a_row = 0;
        let slot = map.slot(out.lane, out.tail);
        let mut at = slot + SLOT_HEADER;
        for part in parts {
            map.write(at, part);
            at += part.len();
        }
        map.u32_at(slot).store(len as u32, Ordering::Relaxed);
        map.u32_at(slot + 4)
            .store(u32::from(tos), Ordering::Relaxed);
        // Wrapping, as every comparison of tail and head: the tail we
        // started from is the mailbox's, which any process may have set.
        out.tail = out.tail.wrapping_add(1);
        // SeqCst pairs with the receiver's head store, sleepers increment
        // and look at the tails, in that order: either it sees this slot,
        // or we see it sleeping and, reading its head again, whether it
        // took everything before this slot (then it may sleep without
        // this one; otherwise it sees this tail when it looks).
        map.u64_at(map.lane(out.lane, L_TAIL))
            .store(out.tail, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let sleeping = map.wants_doorbell();
        self.stats.sent += 1;
        let head = map.u64_at(map.lane(out.lane, L_HEAD));
        if sleeping && out.tail.wrapping_sub(head.load(Ordering::SeqCst)) == 1 {
            self.stats.doorbells_sent += 1;
            Some(Pushed::Doorbell)
        } else {
            Some(Pushed::Written)
        }
    }

    /// Whether any lane holds a datagram not taken yet.
    pub fn pending(&self) -> bool {
        let claimed = self.claimed();
        (0..claimed).any(|i| {
            let tail = self
                .inbox
                .u64_at(self.inbox.lane(i, L_TAIL))
                .load(Ordering::SeqCst);
            tail != self.lanes[i].head
        })
    }

    fn claimed(&self) -> usize {
        (self.inbox.u32_at(H_CLAIMED).load(Ordering::SeqCst) as usize).min(LANES)
    }

    /// Hand every datagram waiting in the lanes, up to `budget`, to
    /// `deliver(source, tos, bytes)`; how many there were.
    pub fn receive(
        &mut self,
        budget: usize,
        mut deliver: impl FnMut(SocketAddr, u8, &[u8]),
    ) -> usize {
        let mut got = 0;
        let claimed = self.claimed();
        if claimed == 0 {
            return 0;
        }
        let first = self.next_lane % claimed;
        self.next_lane = first + 1;
        for i in (first..claimed).chain(0..first) {
            let inbox = &self.inbox;
            let state = inbox.u32_at(inbox.lane(i, L_STATE)).load(Ordering::Acquire);
            if state != READY && state != CLOSED {
                continue;
            }
            let tail = inbox.u64_at(inbox.lane(i, L_TAIL)).load(Ordering::Acquire);
            let lane = &mut self.lanes[i];
            // A new claim is checked at first sight, empty or not: its
            // sender is surely alive then, while one that writes and
            // closes before our next look could no longer be checked.
            let generation = inbox
                .u32_at(inbox.lane(i, L_GENERATION))
                .load(Ordering::Acquire);
            if lane.generation != generation {
                if lane.recheck_in > 0 {
                    lane.recheck_in -= 1;
                    continue;
                }
                match checked_source(inbox, i, self.check_socket) {
                    Some(source) => {
                        lane.generation = generation;
                        lane.source = source;
                    }
                    // Could not tell: its datagrams wait in the lane.
                    None => {
                        lane.recheck_in = RECHECK_EVERY;
                        continue;
                    }
                }
            }
            if tail == lane.head {
                if state == CLOSED {
                    free_lane(inbox, i, lane);
                }
                continue;
            }
            // A sender that wrote more than a lane holds is broken: take
            // what a lane holds and go on from its tail.
            if tail.wrapping_sub(lane.head) > DEPTH as u64 {
                lane.head = tail.wrapping_sub(DEPTH as u64);
            }
            while lane.head != tail && got < budget {
                let slot = inbox.slot(i, lane.head);
                let len = (inbox.u32_at(slot).load(Ordering::Relaxed) as usize).min(SLOT_DATA);
                let tos = inbox.u32_at(slot + 4).load(Ordering::Relaxed) as u8;
                // Copied out before the slot is handed back, so a sender
                // that writes too early spoils nothing but its own data.
                inbox.read(slot + SLOT_HEADER, &mut self.scratch[..len]);
                // Wrapping: the tail it follows is the sender's to set.
                lane.head = lane.head.wrapping_add(1);
                inbox
                    .u64_at(inbox.lane(i, L_HEAD))
                    .store(lane.head, Ordering::SeqCst);
                got += 1;
                match lane.source {
                    Some(from) => {
                        self.stats.received += 1;
                        deliver(from, tos, &self.scratch[..len]);
                    }
                    None => self.stats.refused += 1,
                }
            }
        }
        got
    }

    /// Before sleeping on the sockets: count ourselves as a sleeper, so
    /// senders ring the doorbell. False (and not counted) when a lane holds
    /// something already: take it instead of sleeping.
    pub fn begin_sleep(&self) -> bool {
        self.sleeping.fetch_add(1, Ordering::SeqCst);
        self.inbox.u32_at(H_SLEEPERS).fetch_add(1, Ordering::SeqCst);
        if self.pending() {
            self.end_sleep();
            return false;
        }
        true
    }

    /// After a sleep that [`begin_sleep`](Self::begin_sleep) allowed (one
    /// without is ignored).
    pub fn end_sleep(&self) {
        let ours = self
            .sleeping
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if ours.is_ok() {
            self.inbox.u32_at(H_SLEEPERS).fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The application sleeps on our descriptors itself (`FI_GETWAIT`):
    /// senders ring the doorbell for every datagram into an empty lane.
    pub fn always_ring(&self) {
        self.inbox.u32_at(H_ALWAYS_RING).store(1, Ordering::SeqCst);
    }
}

impl Drop for HostRings {
    fn drop(&mut self) {
        for out in self.peers.values().flatten() {
            out.map
                .u32_at(out.map.lane(out.lane, L_STATE))
                .store(CLOSED, Ordering::Release);
        }
        self.inbox.u32_at(H_CLOSED).store(1, Ordering::Release);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Give `file` real pages for `[offset, offset + len)`: false when tmpfs
/// has no room (a later write there would be SIGBUS).
fn allocate(file: &std::fs::File, offset: usize, len: usize) -> bool {
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return false;
    };
    // SAFETY: plain system call on an open descriptor; no pointers.
    unsafe { libc::posix_fallocate(file.as_raw_fd(), offset, len) == 0 }
}

/// Whether process `pid` exists (signal 0 checks without sending).
fn process_lives(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 sends nothing; no pointers.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Our lane in the mailbox of `to`, looked up the first time.
fn lane_for(
    peers: &mut PeerLanes,
    host: u64,
    local: SocketAddr,
    to: SocketAddr,
) -> Option<&mut OutLane> {
    if peers.len() >= UDP_PEERS_REMEMBERED && !peers.contains_key(&to) {
        // The UDP ones are only a cache of failed lookups.
        peers.retain(|_, lane| lane.is_some());
    }
    peers
        .entry(to)
        .or_insert_with(|| (to != local).then(|| claim_lane(host, to, local)).flatten())
        .as_mut()
}

/// Hand a closed, drained lane back for another sender.
fn free_lane(inbox: &Mapping, i: usize, lane: &mut InLane) {
    inbox
        .u64_at(inbox.lane(i, L_TAIL))
        .store(0, Ordering::Relaxed);
    inbox
        .u64_at(inbox.lane(i, L_HEAD))
        .store(0, Ordering::Relaxed);
    *lane = InLane::default();
    inbox
        .u32_at(inbox.lane(i, L_STATE))
        .store(FREE, Ordering::Release);
}

/// The source address lane `i` claims, if its process holds that UDP
/// socket (a same-user process could claim any); `None` when `check`
/// could not tell.
fn checked_source(inbox: &Mapping, i: usize, check: SocketCheck) -> Option<Option<SocketAddr>> {
    let pid = inbox.u32_at(inbox.lane(i, L_PID)).load(Ordering::Acquire);
    let family = inbox
        .u32_at(inbox.lane(i, L_FAMILY))
        .load(Ordering::Acquire);
    let (family, port) = ((family & 0xffff) as u16, (family >> 16) as u16);
    let mut ip = [0u8; 16];
    inbox.read(inbox.lane(i, L_IP), &mut ip);
    let ip = match family {
        4 => IpAddr::V4(Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3])),
        6 => IpAddr::V6(Ipv6Addr::from(ip)),
        _ => return Some(None),
    };
    let source = SocketAddr::new(ip, port);
    check(pid, source).map(|holds| holds.then_some(source))
}

/// The mailbox file at `path`, mapped, when it is our user's and has our
/// layout.
fn open_mailbox(path: &std::path::Path) -> Option<(std::fs::File, Mapping)> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    // Only a mailbox of our own user (what 0600 means to root too).
    // SAFETY: geteuid has no preconditions.
    if meta.uid() != unsafe { libc::geteuid() } || meta.len() != MAILBOX_BYTES as u64 {
        return None;
    }
    let map = Mapping::new(&file)?;
    let layout_ok = map.u64_at(H_MAGIC).load(Ordering::Acquire) == MAGIC
        && map.u32_at(H_VERSION).load(Ordering::Acquire) == VERSION
        && map.u32_at(H_LANES).load(Ordering::Acquire) == LANES as u32
        && map.u32_at(H_DEPTH).load(Ordering::Acquire) == DEPTH as u32
        && map.u32_at(H_SLOT).load(Ordering::Acquire) == SLOT_DATA as u32;
    layout_ok.then_some((file, map))
}

/// Open the mailbox of `to` and claim a lane in it for `local`; `None` when
/// there is none we may use.
fn claim_lane(host: u64, to: SocketAddr, local: SocketAddr) -> Option<OutLane> {
    let (file, map) = open_mailbox(&mailbox_path(host, to))?;
    let owner = map.u32_at(H_OWNER).load(Ordering::Acquire);
    // A file left by an endpoint that is gone names a process that no
    // longer holds the socket.
    if !host_memory::holds_udp_socket(owner, to) {
        return None;
    }
    let lane = (0..LANES).find(|&i| {
        map.u32_at(map.lane(i, L_STATE))
            .compare_exchange(FREE, CLAIMING, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    })?;
    if !allocate(&file, SLOTS_AT + lane * LANE_DATA, LANE_DATA) {
        map.u32_at(map.lane(lane, L_STATE))
            .store(FREE, Ordering::Release);
        return None;
    }
    let tail = map.u64_at(map.lane(lane, L_TAIL)).load(Ordering::Acquire);
    let (family, ip) = match local.ip() {
        IpAddr::V4(v4) => {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&v4.octets());
            (4u32, b)
        }
        IpAddr::V6(v6) => (6u32, v6.octets()),
    };
    map.write(map.lane(lane, L_IP), &ip);
    map.u32_at(map.lane(lane, L_FAMILY))
        .store(family | u32::from(local.port()) << 16, Ordering::Relaxed);
    map.u32_at(map.lane(lane, L_PID))
        .store(std::process::id(), Ordering::Relaxed);
    // Never 0, which a receiver's fresh lane record holds.
    let generation = map.u32_at(map.lane(lane, L_GENERATION));
    generation.store(
        generation.load(Ordering::Relaxed).wrapping_add(1).max(1),
        Ordering::Relaxed,
    );
    map.u32_at(map.lane(lane, L_STATE))
        .store(READY, Ordering::Release);
    // SeqCst, as the receiver's load: the sleep handshake (sleepers, then
    // the lanes claimed and their tails) orders by SeqCst alone.
    map.u32_at(H_CLAIMED)
        .fetch_max(lane as u32 + 1, Ordering::SeqCst);
    Some(OutLane {
        map,
        lane,
        tail,
        owner,
        full_in_a_row: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    fn endpoint() -> (UdpSocket, HostRings) {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let rings = HostRings::new(socket.local_addr().unwrap()).unwrap();
        (socket, rings)
    }

    fn take_all(rings: &mut HostRings) -> Vec<(SocketAddr, u8, Vec<u8>)> {
        let mut got = Vec::new();
        rings.receive(usize::MAX, |from, tos, bytes| {
            got.push((from, tos, bytes.to_vec()))
        });
        got
    }

    #[test]
    fn a_claim_seen_while_its_sender_lives_keeps_what_it_wrote_before_leaving() {
        let (sb, mut b) = endpoint();
        let to = sb.local_addr().unwrap();
        let (sa, mut a) = endpoint();
        assert!(a.has_lane(to));
        // b looks once while a lives (nothing written yet)...
        assert!(take_all(&mut b).is_empty());
        // ...then a writes and is gone before b's next look.
        assert_eq!(a.push(to, 0, &[b"last words"]), Pushed::Written);
        let from = sa.local_addr().unwrap();
        drop(a);
        drop(sa);
        let got = take_all(&mut b);
        assert_eq!(got, vec![(from, 0, b"last words".to_vec())]);
        assert_eq!(b.stats.refused, 0);
    }

    /// Could not tell at the first check (as when out of descriptors),
    /// then the real check.
    fn flaky_check(pid: u32, addr: SocketAddr) -> Option<bool> {
        static CALLS: AtomicU32 = AtomicU32::new(0);
        match CALLS.fetch_add(1, Ordering::Relaxed) {
            0 => None,
            _ => host_memory::udp_socket_holder(pid, addr),
        }
    }

    #[test]
    fn a_claim_that_could_not_be_checked_is_checked_again() {
        let (sa, mut a) = endpoint();
        let (sb, mut b) = endpoint();
        b.check_socket = flaky_check;
        let to = sb.local_addr().unwrap();
        assert_eq!(a.push(to, 0, &[b"0"]), Pushed::Written);
        // Not refused: it waits in the lane until the claim checks out.
        for _ in 0..=RECHECK_EVERY {
            assert!(take_all(&mut b).is_empty());
        }
        assert_eq!(b.stats.refused, 0);
        assert_eq!(a.push(to, 0, &[b"1"]), Pushed::Written);
        let got: Vec<Vec<u8>> = take_all(&mut b).into_iter().map(|d| d.2).collect();
        assert_eq!(got, vec![b"0".to_vec(), b"1".to_vec()]);
        assert_eq!(b.stats.received, 2);
        drop(sa);
    }

    #[test]
    fn senders_leave_a_mailbox_its_endpoint_left_behind() {
        let (_sa, mut a) = endpoint();
        let (sb, b) = endpoint();
        let to = sb.local_addr().unwrap();
        assert_eq!(a.push(to, 0, &[b"x"]), Pushed::Written);
        // b ends without closing its mailbox (as if killed); its owner
        // PID, ours, stays alive, as a reused PID would. A new endpoint
        // takes the address.
        std::mem::forget(b);
        drop(sb);
        let _sb2 = UdpSocket::bind(to).unwrap();
        let _b2 = HostRings::new(to).unwrap();
        assert_eq!(a.push(to, 0, &[b"y"]), Pushed::NoLane);
    }

    #[test]
    fn datagrams_cross_in_order_from_the_sender_address() {
        let (sa, mut a) = endpoint();
        let (sb, mut b) = endpoint();
        let to = sb.local_addr().unwrap();
        assert_eq!(
            a.push(to, 2, &[b"head", b"-payload", b"-tail"]),
            Pushed::Written
        );
        assert_eq!(a.push(to, 3, &[b"second"]), Pushed::Written);
        let got = take_all(&mut b);
        let from = sa.local_addr().unwrap();
        assert_eq!(
            got,
            vec![
                (from, 2, b"head-payload-tail".to_vec()),
                (from, 3, b"second".to_vec())
            ]
        );
        assert!(take_all(&mut b).is_empty());
        assert_eq!((a.stats.sent, b.stats.received), (2, 2));
    }

    #[test]
    fn a_full_lane_keeps_later_datagrams_waiting_in_order() {
        let (_sa, mut a) = endpoint();
        let (sb, mut b) = endpoint();
        let (sc, mut c) = endpoint();
        let (to, other) = (sb.local_addr().unwrap(), sc.local_addr().unwrap());
        for k in 0..DEPTH {
            assert_eq!(a.push(to, 0, &[&k.to_le_bytes()]), Pushed::Written);
        }
        assert_eq!(a.push(to, 1, &[b"x"]), Pushed::Queued);
        assert_eq!(a.take_backlog_change(), Some((to, true)));
        // Another destination's lane is not held up.
        assert_eq!(a.push(other, 0, &[b"o"]), Pushed::Written);
        assert_eq!(take_all(&mut c).len(), 1);

        let got = take_all(&mut b);
        assert_eq!(got.len(), DEPTH);
        for (k, (_, _, bytes)) in got.iter().enumerate() {
            assert_eq!(bytes[..], k.to_le_bytes());
        }
        // Room now, but "y" goes behind "x", which waits for a retry.
        assert_eq!(a.push(to, 2, &[b"y"]), Pushed::Queued);
        assert!(a.has_backlog());
        a.retry_backlog(|_| panic!("the lane has room and nobody sleeps"));
        assert!(!a.has_backlog());
        assert_eq!(a.take_backlog_change(), Some((to, false)));
        assert_eq!(a.take_backlog_change(), None);
        let got: Vec<_> = take_all(&mut b)
            .into_iter()
            .map(|(_, t, d)| (t, d))
            .collect();
        assert_eq!(got, vec![(1, b"x".to_vec()), (2, b"y".to_vec())]);
        assert_eq!(a.push(to, 0, &[b"z"]), Pushed::Written);
    }

    #[test]
    fn no_lane_without_a_mailbox_or_to_oneself() {
        let (sa, mut a) = endpoint();
        let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(
            a.push(plain.local_addr().unwrap(), 0, &[b"x"]),
            Pushed::NoLane
        );
        assert_eq!(a.push(sa.local_addr().unwrap(), 0, &[b"x"]), Pushed::NoLane);
    }

    /// The pid of a process that has exited.
    fn dead_pid() -> u32 {
        let mut child = {
            let _spawning = super::host_memory::SPAWNING
                .read()
                .unwrap_or_else(|e| e.into_inner());
            std::process::Command::new("true").spawn().unwrap()
        };
        child.wait().unwrap();
        child.id()
    }

    /// Removes a test's file whatever the test's outcome.
    struct RemoveOnDrop(PathBuf);

    impl Drop for RemoveOnDrop {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn a_stale_mailbox_is_not_used() {
        let (sb, b) = endpoint();
        let to = sb.local_addr().unwrap();
        let _cleanup = RemoveOnDrop(b.path.clone());
        // The file outlives its endpoint (a crash), and the port is free.
        std::mem::forget(b);
        drop(sb);
        let (_sa, mut a) = endpoint();
        assert_eq!(a.push(to, 0, &[b"x"]), Pushed::NoLane);
    }

    #[test]
    fn a_mailbox_whose_process_died_is_removed() {
        let (sb, b) = endpoint();
        let path = b.path.clone();
        let _cleanup = RemoveOnDrop(path.clone());
        b.inbox.u32_at(H_OWNER).store(dead_pid(), Ordering::Release);
        std::mem::forget(b);
        drop(sb);
        let (_sa, _a) = endpoint();
        assert!(!path.exists(), "{} left behind", path.display());
    }

    #[test]
    fn an_unbound_mailbox_of_a_live_process_stays() {
        // Its owner (this process) lives: the address may be between
        // sockets, or the socket table read may have missed it.
        let (sb, b) = endpoint();
        let path = b.path.clone();
        let _cleanup = RemoveOnDrop(path.clone());
        std::mem::forget(b);
        drop(sb);
        let (_sa, _a) = endpoint();
        assert!(path.exists());
    }

    #[test]
    fn a_live_mailbox_is_not_removed_by_the_next_endpoint() {
        let (_sb, b) = endpoint();
        let (_sa, _a) = endpoint();
        assert!(b.path.exists());
    }

    #[test]
    fn mailbox_names_give_their_address() {
        let v4: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let v6: SocketAddr = "[::1]:4791".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:4791".parse().unwrap();
        assert_eq!(mailbox_name("127.0.0.1-4791"), Some((v4, None)));
        assert_eq!(
            mailbox_name("127.0.0.1-4791.1234.tmp"),
            Some((v4, Some(1234)))
        );
        assert_eq!(mailbox_name("::1-4791"), Some((v6, None)));
        assert_eq!(mailbox_name("::1-4791.77.tmp"), Some((v6, Some(77))));
        assert_eq!(mailbox_name("::ffff:127.0.0.1-4791"), Some((mapped, None)));
        assert_eq!(mailbox_name("127.0.0.1"), None);
        assert_eq!(mailbox_name("127.0.0.1-4791.tmp"), None);
        assert_eq!(mailbox_name("x-1"), None);
    }

    #[test]
    fn a_sleeping_receiver_gets_one_doorbell_per_empty_lane() {
        let (_sa, mut a) = endpoint();
        let (sb, mut b) = endpoint();
        let to = sb.local_addr().unwrap();
        assert!(b.begin_sleep());
        assert_eq!(a.push(to, 0, &[b"1"]), Pushed::Doorbell);
        assert_eq!(a.push(to, 0, &[b"2"]), Pushed::Written);
        b.end_sleep();
        // Something waits: no sleeping now.
        assert!(!b.begin_sleep());
        assert_eq!(take_all(&mut b).len(), 2);
        assert!(b.begin_sleep());
        b.end_sleep();
        b.always_ring();
        assert_eq!(a.push(to, 0, &[b"3"]), Pushed::Doorbell);
    }

    #[test]
    fn a_closed_lane_is_drained_then_freed_for_the_next_sender() {
        let (sb, mut b) = endpoint();
        let to = sb.local_addr().unwrap();
        let first_from;
        {
            let (sa, mut a) = endpoint();
            first_from = sa.local_addr().unwrap();
            assert_eq!(a.push(to, 0, &[b"hello"]), Pushed::Written);
            assert_eq!(take_all(&mut b).len(), 1);
            assert_eq!(a.push(to, 0, &[b"last words"]), Pushed::Written);
        }
        // What the sender wrote before it closed still arrives.
        let got = take_all(&mut b);
        assert_eq!(got, vec![(first_from, 0, b"last words".to_vec())]);
        // The lane is free again: the next sender takes lane 0 anew.
        take_all(&mut b);
        let (sc, mut c) = endpoint();
        assert_eq!(c.push(to, 0, &[b"hello"]), Pushed::Written);
        assert_eq!(c.peers[&to].as_ref().map(|l| l.lane), Some(0));
        let got = take_all(&mut b);
        assert_eq!(got, vec![(sc.local_addr().unwrap(), 0, b"hello".to_vec())]);
    }

    #[test]
    fn a_closed_mailbox_sends_its_senders_back_to_udp() {
        let (_sa, mut a) = endpoint();
        let (sb, b) = endpoint();
        let to = sb.local_addr().unwrap();
        assert_eq!(a.push(to, 0, &[b"x"]), Pushed::Written);
        drop(b);
        assert_eq!(a.push(to, 0, &[b"y"]), Pushed::NoLane);
        // For good: a new endpoint at the address is found over UDP.
        assert_eq!(a.push(to, 0, &[b"z"]), Pushed::NoLane);
    }

    #[test]
    fn an_unbalanced_end_of_sleep_takes_no_other_sleeper_count() {
        let (_sa, mut a) = endpoint();
        let (sb, b) = endpoint();
        let to = sb.local_addr().unwrap();
        b.end_sleep();
        assert!(b.begin_sleep());
        assert_eq!(a.push(to, 0, &[b"x"]), Pushed::Doorbell);
        b.end_sleep();
        b.end_sleep();
        assert_eq!(b.inbox.u32_at(H_SLEEPERS).load(Ordering::SeqCst), 0);
    }

    #[test]
    fn lane_counters_written_near_their_end_wrap_around() {
        // Tail and head are only ever compared by their difference, but
        // both come from a mapping other processes write: a mailbox that
        // hands a sender a tail at the very end, or a sender that moves
        // its tail there, must not stop either side (an overflow panics
        // in a debug build).
        let (_sa, mut a) = endpoint();
        let (sb, mut b) = endpoint();
        let to = sb.local_addr().unwrap();
        let near_end = u64::MAX - 1;
        let inbox = &b.inbox;
        inbox
            .u64_at(inbox.lane(0, L_TAIL))
            .store(near_end, Ordering::Relaxed);
        inbox
            .u64_at(inbox.lane(0, L_HEAD))
            .store(near_end, Ordering::Relaxed);
        b.lanes[0].head = near_end;
        for d in [b"0", b"1", b"2"] {
            assert_eq!(a.push(to, 0, &[d]), Pushed::Written);
        }
        let got: Vec<Vec<u8>> = take_all(&mut b).into_iter().map(|d| d.2).collect();
        assert_eq!(got, vec![b"0".to_vec(), b"1".to_vec(), b"2".to_vec()]);
        assert_eq!(a.push(to, 0, &[b"3"]), Pushed::Written);
        assert_eq!(take_all(&mut b).len(), 1);
    }

    #[test]
    fn strangers_answered_over_udp_are_not_remembered_without_bound() {
        // The engine answers any source (a NACK to a stranger, spoofed or
        // not) without keeping it; the lookups its answers cause must not
        // keep it either.
        let (_sa, mut a) = endpoint();
        for port in 1..=3 * UDP_PEERS_REMEMBERED {
            let stranger = SocketAddr::from(([127, 3, 2, 1], port as u16));
            assert_eq!(a.push(stranger, 0, &[b"nack"]), Pushed::NoLane);
        }
        assert!(a.peers.len() <= UDP_PEERS_REMEMBERED, "{}", a.peers.len());
        // A destination with a lane keeps it meanwhile.
        let (sb, mut b) = endpoint();
        let to = sb.local_addr().unwrap();
        assert_eq!(a.push(to, 0, &[b"x"]), Pushed::Written);
        for port in 1..=2 * UDP_PEERS_REMEMBERED {
            let stranger = SocketAddr::from(([127, 3, 2, 2], port as u16));
            a.push(stranger, 0, &[b"nack"]);
        }
        assert_eq!(a.push(to, 0, &[b"y"]), Pushed::Written);
        assert_eq!(take_all(&mut b).len(), 2);
    }

    #[test]
    fn a_lane_its_live_receiver_never_empties_is_tried_for_ever() {
        let (_sa, mut a) = endpoint();
        let (sb, _b) = endpoint();
        let to = sb.local_addr().unwrap();
        for _ in 0..DEPTH {
            assert_eq!(a.push(to, 0, &[b"x"]), Pushed::Written);
        }
        // As after 2^32 tries at a lane whose receiver lives but takes
        // nothing (stopped in a debugger, say): the count of full writes
        // in a row must not overflow (a panic in a debug build).
        a.peers
            .get_mut(&to)
            .unwrap()
            .as_mut()
            .unwrap()
            .full_in_a_row = u32::MAX;
        assert_eq!(a.push(to, 0, &[b"y"]), Pushed::Queued);
        a.retry_backlog(|_| panic!("the lane is full and its receiver lives"));
        assert!(a.has_backlog());
    }

    #[test]
    fn a_lane_claiming_a_foreign_address_is_refused() {
        let (_sa, mut a) = endpoint();
        let (sb, mut b) = endpoint();
        let to = sb.local_addr().unwrap();
        a.push(to, 0, &[b"x"]);
        // Rewrite the claim to name a port this process does not hold.
        let lane = a.peers[&to].as_ref().unwrap().lane;
        let inbox = &b.inbox;
        inbox
            .u32_at(inbox.lane(lane, L_FAMILY))
            .store(4 | 1 << 16, Ordering::Relaxed);
        assert!(take_all(&mut b).is_empty());
        assert_eq!(b.stats.refused, 1);
    }
}
