//! Send sockets connected to one peer each (`FI_UET_CONNECTED_PEERS`).
//!
//! A `sendmsg` that names its destination makes the kernel look the route
//! up again for every datagram; on a connected socket it reuses the route
//! cached at `connect`. On this project's loopback VM that was 0.4-0.8 us
//! of a 64-byte one-way trip in a C ping-pong (connected against
//! unconnected sends) and 0.2-0.5 us in `fi_pingpong`.
//!
//! Only requests use them: data names its sender's canonical port in the
//! SES `initiator` field, so it may leave from any port, while ACKs and
//! control must leave from socket 0. A connected socket on socket 0's own
//! port would take that peer's arrivals away from socket 0, so each one is
//! bound to a port of its own, which peers never send to: it sees only
//! ICMP errors for what it sent, and those surface as a failed next send,
//! which the driver makes once more (`once_more_if_connected`).
//!
//! At most `limit` peers have one. A peer without one when the table is
//! full takes the slot of one that has not been sent to for
//! [`IDLE_NS`] (a client that crashed long ago), else its datagrams leave
//! from socket 0 as before. When no socket can be opened (descriptors or
//! memory exhausted) none is tried for [`RETRY_NS`]; a peer whose socket
//! cannot be connected (no route to it) is not tried again for as long.

use std::io;
use std::net::{SocketAddr, UdpSocket};

use super::sys;

/// A slot unused this long goes to a peer that needs one.
pub const IDLE_NS: u64 = 1_000_000_000;
/// After a socket could not be opened, how long before trying again.
pub const RETRY_NS: u64 = 1_000_000_000;
/// Receive buffer of a connected socket: it receives nothing but strays.
const RCVBUF_BYTES: usize = 4096;

struct Slot {
    peer: SocketAddr,
    socket: UdpSocket,
    last_used_ns: u64,
}

/// What the table did, for the driver's statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnectedStats {
    /// Sockets handed out for a send.
    pub sends: u64,
    /// Sockets connected (including those that replaced an idle one).
    pub opened: u64,
    /// Slots handed from an idle peer to another.
    pub reused: u64,
    /// Sockets that could not be opened or connected.
    pub failed: u64,
}

pub struct ConnectedSockets {
    /// Address the sockets bind to (socket 0's IP, any port), so the
    /// source IP peers key us by stays the same.
    local: SocketAddr,
    limit: usize,
    send_buffer: usize,
    slots: Vec<Slot>,
    /// The slot the last lookup found: a ping-pong or a stream asks for
    /// the same peer again and again.
    last: usize,
    /// No socket is opened before then (descriptors or memory ran out).
    retry_at_ns: u64,
    /// Peers whose socket could not be connected (no route, say), and
    /// when to try again; at most `limit`.
    refused: Vec<(SocketAddr, u64)>,
    pub stats: ConnectedStats,
}

impl ConnectedSockets {
    /// A table for up to `limit` peers (0: none, every send names its
    /// destination), binding to `local`'s IP.
    pub fn new(local: SocketAddr, limit: usize, send_buffer: usize) -> ConnectedSockets {
        // set_port keeps an IPv6 address's scope, which binding needs.
        let mut local = local;
        local.set_port(0);
        ConnectedSockets {
            local,
            limit,
            send_buffer,
            slots: Vec::new(),
            last: 0,
            retry_at_ns: 0,
            refused: Vec::new(),
            stats: ConnectedStats::default(),
        }
    }

    /// The socket connected to `peer`, opened now if there is room (or an
    /// idle slot); `None` when the datagram should leave from socket 0.
    pub fn socket_for(&mut self, peer: SocketAddr, now_ns: u64) -> Option<&UdpSocket> {
        if self.limit == 0 {
            return None;
        }
        let found = match self.slots.get(self.last) {
            Some(s) if s.peer == peer => Some(self.last),
            _ => self.slots.iter().position(|s| s.peer == peer),
        };
        let k = match found {
            Some(k) => k,
            None => self.open_for(peer, now_ns)?,
        };
        self.last = k;
        self.stats.sends += 1;
        let slot = &mut self.slots[k];
        slot.last_used_ns = now_ns;
        Some(&slot.socket)
    }

    /// How many peers have a socket.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// The local address of `peer`'s socket, if it has one.
    #[cfg(test)]
    pub fn local_addr_for(&self, peer: SocketAddr) -> Option<SocketAddr> {
        let slot = self.slots.iter().find(|s| s.peer == peer)?;
        slot.socket.local_addr().ok()
    }

    /// A slot for `peer`: a new one while below the limit, else the
    /// longest idle one if idle for [`IDLE_NS`].
    fn open_for(&mut self, peer: SocketAddr, now_ns: u64) -> Option<usize> {
        if now_ns < self.retry_at_ns || peer.is_ipv4() != self.local.is_ipv4() {
            return None;
        }
        if let Some(k) = self.refused.iter().position(|r| r.0 == peer) {
            if now_ns < self.refused[k].1 {
                return None;
            }
            self.refused.swap_remove(k);
        }
        let reuse = if self.slots.len() < self.limit {
            None
        } else {
            let (k, idle) = self
                .slots
                .iter()
                .enumerate()
                .min_by_key(|(_, s)| s.last_used_ns)?;
            if now_ns.saturating_sub(idle.last_used_ns) < IDLE_NS {
                return None;
            }
            Some(k)
        };
        let socket = match connect(self.local, peer, self.send_buffer) {
            Ok(s) => s,
            Err(e) => {
                self.stats.failed += 1;
                let retry = now_ns.saturating_add(RETRY_NS);
                let exhausted = matches!(
                    e.raw_os_error(),
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                );
                if exhausted {
                    self.retry_at_ns = retry;
                } else if self.refused.len() < self.limit {
                    self.refused.push((peer, retry));
                } else if let Some(oldest) = self.refused.iter_mut().min_by_key(|r| r.1) {
                    *oldest = (peer, retry);
                }
                return None;
            }
        };
        self.stats.opened += 1;
        let slot = Slot {
            peer,
            socket,
            last_used_ns: now_ns,
        };
        Some(match reuse {
            Some(k) => {
                self.stats.reused += 1;
                // Dropping the old slot closes its socket.
                self.slots[k] = slot;
                k
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        })
    }
}

/// A non-blocking UDP socket bound to `local` (any port) and connected to
/// `peer`, sending with the driver's default TOS.
fn connect(local: SocketAddr, peer: SocketAddr, send_buffer: usize) -> io::Result<UdpSocket> {
    let socket = super::udp_socket(local)?;
    let _ = socket.set_recv_buffer_size(RCVBUF_BYTES);
    super::set_send_buffer(&socket, send_buffer);
    socket.set_nonblocking(true)?;
    socket.bind(&local.into())?;
    socket.connect(&peer.into())?;
    let socket: UdpSocket = socket.into();
    sys::set_default_tos(&socket, local.is_ipv6())?;
    Ok(socket)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener() -> (UdpSocket, SocketAddr) {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let a = s.local_addr().unwrap();
        (s, a)
    }

    fn local() -> SocketAddr {
        "127.0.0.1:0".parse().unwrap()
    }

    #[test]
    fn a_peer_keeps_its_socket_and_datagrams_arrive_from_its_port() {
        let (rx, peer) = listener();
        let mut table = ConnectedSockets::new(local(), 4, 1 << 20);
        let port = table.socket_for(peer, 0).unwrap().local_addr().unwrap();
        let again = table.socket_for(peer, 5).unwrap().local_addr().unwrap();
        assert_eq!(port, again);
        assert_eq!(table.stats.opened, 1);
        let socket = table.socket_for(peer, 6).unwrap();
        sys::send_parts(
            socket,
            sys::Dest::Connected(peer),
            sys::DEFAULT_TOS,
            &[b"hi"],
        )
        .unwrap();
        let mut buf = [0u8; 8];
        rx.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let (n, from) = rx.recv_from(&mut buf).unwrap();
        assert_eq!((&buf[..n], from), (&b"hi"[..], port));
    }

    #[test]
    fn a_full_table_hands_over_only_idle_slots() {
        let peers: Vec<SocketAddr> = (0..3).map(|_| listener().1).collect();
        let mut table = ConnectedSockets::new(local(), 2, 1 << 20);
        assert!(table.socket_for(peers[0], 0).is_some());
        assert!(table.socket_for(peers[1], 10).is_some());
        // Both used within IDLE_NS: the third peer sends from socket 0.
        assert!(table.socket_for(peers[2], IDLE_NS - 1).is_none());
        assert_eq!(table.len(), 2);
        // peers[0] has been idle longest and long enough: its slot goes.
        table.socket_for(peers[1], IDLE_NS).unwrap();
        assert!(table.socket_for(peers[2], IDLE_NS).is_some());
        assert_eq!(table.stats.reused, 1);
        assert!(table.local_addr_for(peers[0]).is_none());
        assert!(table.local_addr_for(peers[1]).is_some());
        assert!(table.local_addr_for(peers[2]).is_some());
    }

    #[test]
    fn no_limit_means_no_sockets_and_other_families_are_left_alone() {
        let (_rx, peer) = listener();
        let mut off = ConnectedSockets::new(local(), 0, 1 << 20);
        assert!(off.socket_for(peer, 0).is_none());
        let mut table = ConnectedSockets::new(local(), 4, 1 << 20);
        let v6: SocketAddr = "[::1]:9".parse().unwrap();
        assert!(table.socket_for(v6, 0).is_none());
        assert_eq!((table.len(), table.stats.failed), (0, 0));
    }

    #[test]
    fn a_peer_that_cannot_be_connected_is_left_alone_for_a_while() {
        // Connecting to the broadcast address without SO_BROADCAST fails
        // (EACCES): a failure of that peer's, not of the table's.
        let broadcast: SocketAddr = "255.255.255.255:9".parse().unwrap();
        let (_rx, peer) = listener();
        let mut table = ConnectedSockets::new(local(), 4, 1 << 20);
        assert!(table.socket_for(broadcast, 0).is_none());
        assert!(table.socket_for(broadcast, 1).is_none());
        assert_eq!(table.stats.failed, 1, "tried again at once");
        assert!(table.socket_for(peer, 2).is_some(), "others blocked");
        assert!(table.socket_for(broadcast, RETRY_NS).is_none());
        assert_eq!(table.stats.failed, 2);
    }

    #[test]
    fn a_peer_that_went_away_costs_failed_sends_not_the_table() {
        let (rx, peer) = listener();
        drop(rx);
        let mut table = ConnectedSockets::new(local(), 4, 1 << 20);
        let mut refused = 0;
        for _ in 0..20 {
            let socket = table.socket_for(peer, 0).unwrap();
            match sys::send_parts(
                socket,
                sys::Dest::Connected(peer),
                sys::DEFAULT_TOS,
                &[b"x"],
            ) {
                Ok(()) => {}
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(libc::ECONNREFUSED), "{e}");
                    refused += 1;
                }
            }
        }
        // The port unreachable answers come back as refused sends.
        assert!(refused > 0);
        assert_eq!(table.stats.opened, 1);
    }
}
