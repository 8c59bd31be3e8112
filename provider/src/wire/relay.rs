//! Relay encapsulation: how a provider endpoint talks to an emu-net relay
//! (`FI_UET_FABRIC=<relay ip:port>`), so real traffic crosses the software
//! fabric without root.
//!
//! Every datagram between an endpoint and the relay starts with this 24-byte
//! header, followed by the UET packet unchanged:
//!
//! ```text
//!  0      2       3        4            6          8                  24
//!  | magic | version | family | port (BE) | reserved | address (16 B) |
//! ```
//!
//! * magic `0x55 0x52` ("UR"), version 1, family 4 or 6; an IPv4 address
//!   takes the first 4 bytes of the address field, the rest is zero.
//! * Endpoint -> relay: the address is the packet's destination (the peer's
//!   endpoint address). The UDP source port the relay sees is the sender's
//!   entropy socket, which the switch model hashes for ECMP.
//! * Relay -> endpoint: the address is the packet's original source (the
//!   sender's socket, entropy port included). The relay sets the IP TOS byte
//!   of what it delivers (ECN CE marks, trimmed DSCP), and a trimmed packet
//!   arrives truncated after its UET headers.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{be16, put16, WireError};

pub const MAGIC: [u8; 2] = [0x55, 0x52];
pub const VERSION: u8 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelayHeader {
    /// Destination (endpoint -> relay) or original source (relay -> endpoint).
    pub addr: SocketAddr,
}

impl RelayHeader {
    pub const LEN: usize = 24;

    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        if b.len() < Self::LEN {
            return Err(WireError::Truncated);
        }
        if b[0..2] != MAGIC || b[2] != VERSION {
            return Err(WireError::Malformed);
        }
        let port = be16(b, 4);
        let ip = match b[3] {
            4 => IpAddr::V4(Ipv4Addr::new(b[8], b[9], b[10], b[11])),
            6 => {
                let mut a = [0u8; 16];
                a.copy_from_slice(&b[8..24]);
                IpAddr::V6(Ipv6Addr::from(a))
            }
            _ => return Err(WireError::Malformed),
        };
        Ok(RelayHeader {
            addr: SocketAddr::new(ip, port),
        })
    }

    /// Write the header into `b[..LEN]` (panics if `b` is shorter).
    pub fn emit(&self, b: &mut [u8]) {
        let b = &mut b[..Self::LEN];
        b.fill(0);
        b[0..2].copy_from_slice(&MAGIC);
        b[2] = VERSION;
        put16(b, 4, self.addr.port());
        match self.addr.ip() {
            IpAddr::V4(a) => {
                b[3] = 4;
                b[8..12].copy_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                b[3] = 6;
                b[8..24].copy_from_slice(&a.octets());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_v4_v6() {
        for addr in ["127.0.0.12:4793", "[::1]:65535", "10.1.2.3:0"] {
            let h = RelayHeader {
                addr: addr.parse().unwrap(),
            };
            let mut b = [0xffu8; RelayHeader::LEN];
            h.emit(&mut b);
            assert_eq!(RelayHeader::parse(&b), Ok(h));
        }
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(RelayHeader::parse(&[0; 10]), Err(WireError::Truncated));
        assert_eq!(RelayHeader::parse(&[0; 24]), Err(WireError::Malformed));
        let mut b = [0u8; 24];
        RelayHeader {
            addr: "127.0.0.1:1".parse().unwrap(),
        }
        .emit(&mut b);
        b[3] = 5;
        assert_eq!(RelayHeader::parse(&b), Err(WireError::Malformed));
    }
}
