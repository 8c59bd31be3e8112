//! Endpoint addresses: `struct sockaddr_in{,6}` bytes <-> `SocketAddr`,
//! name resolution, the default source address, and `fi_av_straddr` text.

use std::ffi::CStr;
use std::mem::size_of;
use std::net::{
    IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, ToSocketAddrs, UdpSocket,
};
use std::os::raw::{c_char, c_void};

use crate::bindings::*;
use crate::errors::FiResult;
use crate::params;

/// Largest address the provider hands out or accepts.
pub(crate) const MAX_ADDRLEN: usize = 64;

/// Which address families an object accepts (its `addr_format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    V4,
    V6,
    Any,
}

impl Family {
    /// From an `addr_format`; `None` for formats the provider does not speak.
    pub(crate) fn from_format(format: u32) -> Option<Family> {
        match format {
            FI_SOCKADDR_IN => Some(Family::V4),
            FI_SOCKADDR_IN6 => Some(Family::V6),
            FI_SOCKADDR | FI_FORMAT_UNSPEC => Some(Family::Any),
            _ => None,
        }
    }

    pub(crate) fn admits(self, a: &SocketAddr) -> bool {
        match self {
            Family::V4 => a.is_ipv4(),
            Family::V6 => a.is_ipv6(),
            Family::Any => true,
        }
    }
}

/// The `addr_format` describing `a`.
pub(crate) fn format_of(a: &SocketAddr) -> u32 {
    if a.is_ipv4() {
        FI_SOCKADDR_IN
    } else {
        FI_SOCKADDR_IN6
    }
}

/// Byte length of the sockaddr encoding of `a`.
#[cfg(test)]
pub(crate) fn len_of(a: &SocketAddr) -> usize {
    if a.is_ipv4() {
        size_of::<libc::sockaddr_in>()
    } else {
        size_of::<libc::sockaddr_in6>()
    }
}

/// Encode as `struct sockaddr_in` / `sockaddr_in6` bytes.
pub(crate) fn to_bytes(a: &SocketAddr) -> Vec<u8> {
    match a {
        SocketAddr::V4(v4) => {
            let mut b = vec![0u8; size_of::<libc::sockaddr_in>()];
            b[0..2].copy_from_slice(&(libc::AF_INET as libc::sa_family_t).to_ne_bytes());
            b[2..4].copy_from_slice(&v4.port().to_be_bytes());
            b[4..8].copy_from_slice(&v4.ip().octets());
            b
        }
        SocketAddr::V6(v6) => {
            let mut b = vec![0u8; size_of::<libc::sockaddr_in6>()];
            b[0..2].copy_from_slice(&(libc::AF_INET6 as libc::sa_family_t).to_ne_bytes());
            b[2..4].copy_from_slice(&v6.port().to_be_bytes());
            b[4..8].copy_from_slice(&v6.flowinfo().to_be_bytes());
            b[8..24].copy_from_slice(&v6.ip().octets());
            b[24..28].copy_from_slice(&v6.scope_id().to_ne_bytes());
            b
        }
    }
}

/// Decode a sockaddr from the start of `b`; returns the address and the
/// number of bytes its encoding takes.
pub(crate) fn from_bytes(b: &[u8]) -> Option<(SocketAddr, usize)> {
    let family = libc::sa_family_t::from_ne_bytes(b.get(0..2)?.try_into().ok()?);
    match i32::from(family) {
        libc::AF_INET => {
            let len = size_of::<libc::sockaddr_in>();
            let b = b.get(..len)?;
            let port = u16::from_be_bytes([b[2], b[3]]);
            let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
            Some((SocketAddr::V4(SocketAddrV4::new(ip, port)), len))
        }
        libc::AF_INET6 => {
            let len = size_of::<libc::sockaddr_in6>();
            let b = b.get(..len)?;
            let port = u16::from_be_bytes([b[2], b[3]]);
            let flow = u32::from_be_bytes(b[4..8].try_into().ok()?);
            let ip: [u8; 16] = b[8..24].try_into().ok()?;
            let scope = u32::from_ne_bytes(b[24..28].try_into().ok()?);
            Some((
                SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), port, flow, scope)),
                len,
            ))
        }
        _ => None,
    }
}

/// Decode an application-supplied address of at most `len` bytes.
///
/// # Safety
/// `p` must be NULL or point to at least `len` readable bytes.
pub(crate) unsafe fn from_raw(p: *const c_void, len: usize) -> Option<SocketAddr> {
    if p.is_null() || len == 0 {
        return None;
    }
    // SAFETY: guaranteed by the caller.
    let b = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len.min(MAX_ADDRLEN)) };
    from_bytes(b).map(|(a, _)| a)
}

/// Decode an address given without a length (fi_av_straddr): as long as
/// its family says, never past it.
///
/// # Safety
/// `p` must be NULL or point to a readable address family field and, when
/// that says AF_INET or AF_INET6, to a whole `sockaddr_in` / `sockaddr_in6`.
pub(crate) unsafe fn from_raw_sized_by_family(p: *const c_void) -> Option<SocketAddr> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the family field is readable (caller); it may be unaligned.
    let family = unsafe { p.cast::<libc::sa_family_t>().read_unaligned() };
    let len = match i32::from(family) {
        libc::AF_INET => size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => size_of::<libc::sockaddr_in6>(),
        _ => return None,
    };
    // SAFETY: the caller guarantees a whole address of this family.
    unsafe { from_raw(p, len) }
}

/// Copy a C string argument; `None` for NULL.
///
/// # Safety
/// `p` must be NULL or a NUL-terminated string.
pub(crate) unsafe fn c_str(p: *const c_char) -> Option<String> {
    if p.is_null() {
        None
    } else {
        // SAFETY: guaranteed by the caller.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}

/// Resolve `node:service` into the first address of an admitted family.
/// A missing node means the loopback address, a missing service port 0.
pub(crate) fn resolve(
    node: Option<&str>,
    service: Option<&str>,
    family: Family,
) -> FiResult<SocketAddr> {
    let port: u16 = match service {
        None => 0,
        Some(s) => s.trim().parse().map_err(|_| FI_ENODATA)?,
    };
    let node = match node {
        Some(n) => n.trim_start_matches('[').trim_end_matches(']').to_string(),
        None if family == Family::V6 => "::1".to_string(),
        None => "127.0.0.1".to_string(),
    };
    if let Ok(ip) = node.parse::<IpAddr>() {
        let a = SocketAddr::new(ip, port);
        return if family.admits(&a) {
            Ok(a)
        } else {
            Err(FI_ENODATA)
        };
    }
    (node.as_str(), port)
        .to_socket_addrs()
        .map_err(|_| FI_ENODATA)?
        .find(|a| family.admits(a))
        .ok_or(FI_ENODATA)
}

/// The local address the kernel would use to reach `dest`, with port `port`.
pub(crate) fn source_for(dest: &SocketAddr, port: u16) -> SocketAddr {
    let unspecified: IpAddr = if dest.is_ipv4() {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        Ipv6Addr::UNSPECIFIED.into()
    };
    let ip = if dest.ip().is_loopback() || dest.ip().is_unspecified() {
        dest.ip()
    } else {
        UdpSocket::bind(SocketAddr::new(unspecified, 0))
            .and_then(|s| s.connect(dest).and_then(|()| s.local_addr()))
            .map(|a| a.ip())
            .unwrap_or(unspecified)
    };
    if dest.ip().is_unspecified() {
        return SocketAddr::new(loopback(dest.is_ipv6()), port);
    }
    SocketAddr::new(ip, port)
}

fn loopback(v6: bool) -> IpAddr {
    if v6 {
        Ipv6Addr::LOCALHOST.into()
    } else {
        Ipv4Addr::LOCALHOST.into()
    }
}

/// The address an endpoint binds when the application names nothing:
/// `FI_UET_SRC_ADDR` (an IP, or "auto" for the default-route interface),
/// otherwise loopback, so the name `fi_getname` reports is always usable by a
/// peer on this host.
pub(crate) fn default_source(family: Family, port: u16) -> SocketAddr {
    let v6 = family == Family::V6;
    match params::src_addr().as_deref() {
        Some("auto") => {
            let probe: SocketAddr = if v6 {
                "[2001:4860:4860::8888]:53"
                    .parse()
                    .unwrap_or_else(|_| SocketAddr::new(loopback(true), 53))
            } else {
                SocketAddr::new(Ipv4Addr::new(192, 0, 2, 1).into(), 9)
            };
            let a = source_for(&probe, port);
            if a.ip().is_unspecified() {
                SocketAddr::new(loopback(v6), port)
            } else {
                a
            }
        }
        Some(text) => match text.parse::<IpAddr>() {
            Ok(ip) if family.admits(&SocketAddr::new(ip, port)) => SocketAddr::new(ip, port),
            _ => {
                crate::log::warn(
                    FI_LOG_CORE,
                    &format!("FI_UET_SRC_ADDR={text} is not a usable IP address; using loopback"),
                );
                SocketAddr::new(loopback(v6), port)
            }
        },
        None => SocketAddr::new(loopback(v6), port),
    }
}

/// `fi_av_straddr` text, in libfabric's own format
/// (`fi_sockaddr_in://127.0.0.1:1234`, `fi_sockaddr_in6://[::1]:1234`).
pub(crate) fn straddr(a: &SocketAddr) -> String {
    match a {
        SocketAddr::V4(v4) => format!("fi_sockaddr_in://{}:{}", v4.ip(), v4.port()),
        SocketAddr::V6(v6) => format!("fi_sockaddr_in6://[{}]:{}", v6.ip(), v6.port()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_round_trip() {
        for text in ["127.0.0.1:4793", "[::1]:9", "10.1.2.3:0"] {
            let a: SocketAddr = text.parse().unwrap();
            let b = to_bytes(&a);
            assert_eq!(b.len(), len_of(&a));
            assert_eq!(from_bytes(&b), Some((a, b.len())));
        }
        assert_eq!(from_bytes(&[0u8; 16]), None);
        assert_eq!(from_bytes(&[2u8, 0, 1]), None);
    }

    #[test]
    fn straddr_matches_libfabric() {
        let a: SocketAddr = "127.0.0.1:1234".parse().unwrap();
        assert_eq!(straddr(&a), "fi_sockaddr_in://127.0.0.1:1234");
        let b: SocketAddr = "[::1]:80".parse().unwrap();
        assert_eq!(straddr(&b), "fi_sockaddr_in6://[::1]:80");
    }

    #[test]
    fn resolution() {
        let a = resolve(Some("127.0.0.1"), Some("4000"), Family::Any).unwrap();
        assert_eq!(a, "127.0.0.1:4000".parse().unwrap());
        assert_eq!(
            resolve(None, Some("7"), Family::V4).unwrap(),
            "127.0.0.1:7".parse().unwrap()
        );
        assert_eq!(
            resolve(Some("127.0.0.1"), None, Family::V6),
            Err(FI_ENODATA)
        );
        assert_eq!(
            resolve(Some("localhost"), Some("nope"), Family::Any),
            Err(FI_ENODATA)
        );
        assert_eq!(
            resolve(Some("no-such-host.invalid"), None, Family::Any),
            Err(FI_ENODATA)
        );
        let lo: SocketAddr = "127.0.0.1:5".parse().unwrap();
        assert_eq!(source_for(&lo, 0), "127.0.0.1:0".parse().unwrap());
    }
}
