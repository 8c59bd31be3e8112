//! Address vectors: `fi_addr_t` is the index of an inserted address, for
//! FI_AV_MAP and FI_AV_TABLE alike. A reverse map answers "which fi_addr sent
//! this?" for FI_SOURCE completions.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::raw::{c_char, c_int, c_void};
use std::ptr;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::addr::{self, Family};
use crate::bindings::*;
use crate::domain::{self, DomainInner};
use crate::errors::{guard, ret_int, unsupported, FiResult};
use crate::object::{self, fid_ops, ops_ptr};

/// `FI_ADDR_NOTAVAIL` / `FI_ADDR_UNSPEC` (`(uint64_t) -1`).
pub(crate) const FI_ADDR_NOTAVAIL: fi_addr_t = u64::MAX;
pub(crate) const FI_ADDR_UNSPEC: fi_addr_t = u64::MAX;

/// The addresses of one AV, shared with the endpoints bound to it.
#[derive(Default)]
pub(crate) struct Table {
    addrs: Vec<Option<SocketAddr>>,
    /// Looked up for every received message's source: a fast hash.
    reverse: HashMap<SocketAddr, fi_addr_t, foldhash::fast::RandomState>,
}

impl Table {
    pub(crate) fn insert(&mut self, a: SocketAddr) -> fi_addr_t {
        let idx = self.addrs.len() as fi_addr_t;
        self.addrs.push(Some(a));
        self.reverse.entry(a).or_insert(idx);
        idx
    }

    pub(crate) fn get(&self, fi_addr: fi_addr_t) -> Option<SocketAddr> {
        let i = usize::try_from(fi_addr).ok()?;
        self.addrs.get(i).copied().flatten()
    }

    /// The fi_addr of `a`, or FI_ADDR_NOTAVAIL.
    pub(crate) fn lookup_addr(&self, a: &SocketAddr) -> fi_addr_t {
        self.reverse.get(a).copied().unwrap_or(FI_ADDR_NOTAVAIL)
    }

    pub(crate) fn remove(&mut self, fi_addr: fi_addr_t) -> FiResult<()> {
        let i = usize::try_from(fi_addr).map_err(|_| FI_EINVAL)?;
        let a = self
            .addrs
            .get_mut(i)
            .and_then(Option::take)
            .ok_or(FI_EINVAL)?;
        if self.reverse.get(&a) == Some(&fi_addr) {
            self.reverse.remove(&a);
            // Another entry may hold the same address.
            if let Some(j) = self.addrs.iter().position(|x| *x == Some(a)) {
                self.reverse.insert(a, j as fi_addr_t);
            }
        }
        Ok(())
    }
}

pub(crate) struct AvInner {
    pub(crate) table: Mutex<Table>,
    family: Family,
}

#[repr(C)]
pub(crate) struct Av {
    fid: fid_av,
    pub(crate) inner: Arc<AvInner>,
    _domain: Arc<DomainInner>,
    /// Keeps the domain's close at -FI_EBUSY while this object is open.
    _open: crate::object::ChildOf,
}

pub(crate) static FI_OPS: fi_ops = fid_ops!(av_close);
static OPS: fi_ops_av = fi_ops_av {
    size: std::mem::size_of::<fi_ops_av>(),
    insert: Some(av_insert),
    insertsvc: Some(av_insertsvc),
    insertsym: Some(av_insertsym),
    remove: Some(av_remove),
    lookup: Some(av_lookup),
    straddr: Some(av_straddr),
    av_set: Some(av_set),
};

unsupported! {
    av_insertsym(*mut fid_av, *const c_char, usize, *const c_char, usize, *mut fi_addr_t, u64, *mut c_void) -> c_int = FI_ENOSYS;
    av_set(*mut fid_av, *mut fi_av_set_attr, *mut *mut fid_av_set, *mut c_void) -> c_int = FI_ENOSYS;
}

/// The AV behind a fid, if it is ours.
///
/// # Safety
/// `p` must be NULL or a live fid.
pub(crate) unsafe fn from_fid<'a>(p: *const fid) -> Option<&'a Av> {
    // SAFETY: guaranteed by the caller.
    unsafe { object::obj::<Av>(p, &FI_OPS) }
}

fn from_ptr<'a>(p: *mut fid_av) -> Option<&'a Av> {
    // SAFETY: a fid_av starts with its fid; obj checks it is one of ours.
    unsafe { from_fid(p.cast()) }
}

pub(crate) unsafe extern "C" fn open(
    domain: *mut fid_domain,
    attr: *mut fi_av_attr,
    av: *mut *mut fid_av,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        ret_int((|| {
            let dom = domain::from_ptr(domain).ok_or(FI_EINVAL)?;
            if av.is_null() {
                return Err(FI_EINVAL);
            }
            // SAFETY: attr is NULL or a valid fi_av_attr.
            if let Some(a) = unsafe { attr.as_ref() } {
                if a.type_ != FI_AV_UNSPEC && a.type_ != FI_AV_MAP && a.type_ != FI_AV_TABLE {
                    return Err(FI_EINVAL);
                }
                if !a.name.is_null() || a.rx_ctx_bits != 0 {
                    return Err(FI_ENOSYS); // named (shared) AVs, scalable endpoints
                }
            }
            let obj = Box::new(Av {
                fid: fid_av {
                    fid: fid {
                        fclass: FI_CLASS_AV as usize,
                        context,
                        ops: ops_ptr(&FI_OPS),
                    },
                    ops: ops_ptr(&OPS),
                },
                inner: Arc::new(AvInner {
                    table: Mutex::default(),
                    family: dom.inner.family,
                }),
                _domain: Arc::clone(&dom.inner),
                _open: dom.inner.children.child(),
            });
            // SAFETY: av is a valid out-pointer (checked above).
            unsafe { *av = &mut Box::leak(obj).fid };
            Ok(())
        })())
    })
}

extern "C" fn av_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: take_idle verifies the fid is one of our AVs. An open
        // endpoint bound to it holds its own Arc: -FI_EBUSY then.
        match unsafe { object::take_idle::<Av>(f, &FI_OPS, |a| object::shared(&a.inner)) } {
            Ok(b) => {
                drop(b);
                0
            }
            Err(rc) => rc,
        }
    })
}

/// Byte length of the entry at `p` in a packed address array: the AV's
/// family fixes it; an "either family" AV reads it from the entry's family.
///
/// # Safety
/// `p` must point to at least two readable bytes.
unsafe fn entry_len(family: Family, p: *const u8) -> Option<usize> {
    let v4 = std::mem::size_of::<libc::sockaddr_in>();
    let v6 = std::mem::size_of::<libc::sockaddr_in6>();
    match family {
        Family::V4 => Some(v4),
        Family::V6 => Some(v6),
        Family::Any => {
            // SAFETY: guaranteed by the caller.
            let fam = unsafe { ptr::read_unaligned(p.cast::<libc::sa_family_t>()) };
            match i32::from(fam) {
                libc::AF_INET => Some(v4),
                libc::AF_INET6 => Some(v6),
                _ => None,
            }
        }
    }
}

extern "C" fn av_insert(
    av: *mut fid_av,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        let Some(av) = from_ptr(av) else {
            return -(FI_EINVAL as c_int);
        };
        if count == 0 {
            return 0;
        }
        if addr.is_null() {
            return -(FI_EINVAL as c_int);
        }
        let sync_err = flags & FI_SYNC_ERR != 0 && !context.is_null();
        let family = av.inner.family;
        let mut table = av.inner.table.lock();
        let mut offset = 0usize;
        let mut inserted = 0;
        for i in 0..count {
            // SAFETY: the application passes `count` packed addresses of
            // this AV's format; each is read only up to its own length.
            let p = unsafe { addr.cast::<u8>().add(offset) };
            // SAFETY: every entry starts with a 2-byte family.
            let len = unsafe { entry_len(family, p) };
            let parsed = len.and_then(|n| {
                // SAFETY: the entry holds n bytes (its format's length).
                let entry = unsafe { std::slice::from_raw_parts(p, n) };
                addr::from_bytes(entry)
                    .map(|(a, _)| a)
                    .filter(|a| family.admits(a))
            });
            let result = match parsed {
                Some(a) => {
                    inserted += 1;
                    table.insert(a)
                }
                None => FI_ADDR_NOTAVAIL,
            };
            // SAFETY: fi_addr is NULL or an array of `count` entries;
            // with FI_SYNC_ERR, context is an array of `count` ints.
            unsafe {
                if !fi_addr.is_null() {
                    *fi_addr.add(i) = result;
                }
                if sync_err {
                    *context.cast::<c_int>().add(i) = if parsed.is_some() {
                        0
                    } else {
                        -(FI_EINVAL as c_int)
                    };
                }
            }
            match len {
                Some(n) => offset += n,
                None => {
                    // An unreadable entry of unknown size: the rest cannot be
                    // located, so they all fail.
                    for j in i + 1..count {
                        // SAFETY: as above.
                        unsafe {
                            if !fi_addr.is_null() {
                                *fi_addr.add(j) = FI_ADDR_NOTAVAIL;
                            }
                            if sync_err {
                                *context.cast::<c_int>().add(j) = -(FI_EINVAL as c_int);
                            }
                        }
                    }
                    break;
                }
            }
        }
        inserted
    })
}

extern "C" fn av_insertsvc(
    av: *mut fid_av,
    node: *const c_char,
    service: *const c_char,
    fi_addr: *mut fi_addr_t,
    _flags: u64,
    _context: *mut c_void,
) -> c_int {
    guard(|| {
        let Some(av) = from_ptr(av) else {
            return -(FI_EINVAL as c_int);
        };
        // SAFETY: node and service are NULL or C strings.
        let (node, service) = unsafe { (addr::c_str(node), addr::c_str(service)) };
        if node.is_none() || service.is_none() {
            return -(FI_EINVAL as c_int);
        }
        match addr::resolve(node.as_deref(), service.as_deref(), av.inner.family) {
            Ok(a) => {
                let idx = av.inner.table.lock().insert(a);
                // SAFETY: fi_addr is NULL or points to one fi_addr_t.
                if let Some(out) = unsafe { fi_addr.as_mut() } {
                    *out = idx;
                }
                1
            }
            Err(_) => {
                // SAFETY: as above.
                if let Some(out) = unsafe { fi_addr.as_mut() } {
                    *out = FI_ADDR_NOTAVAIL;
                }
                0
            }
        }
    })
}

extern "C" fn av_remove(
    av: *mut fid_av,
    fi_addr: *mut fi_addr_t,
    count: usize,
    _flags: u64,
) -> c_int {
    guard(|| {
        let Some(av) = from_ptr(av) else {
            return -(FI_EINVAL as c_int);
        };
        if fi_addr.is_null() && count > 0 {
            return -(FI_EINVAL as c_int);
        }
        let mut table = av.inner.table.lock();
        let mut rc = Ok(());
        for i in 0..count {
            // SAFETY: fi_addr is an array of `count` entries.
            let a = unsafe { *fi_addr.add(i) };
            rc = rc.and(table.remove(a));
        }
        ret_int(rc)
    })
}

extern "C" fn av_lookup(
    av: *mut fid_av,
    fi_addr: fi_addr_t,
    out: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    guard(|| {
        let Some(av) = from_ptr(av) else {
            return -(FI_EINVAL as c_int);
        };
        if addrlen.is_null() {
            return -(FI_EINVAL as c_int);
        }
        let Some(a) = av.inner.table.lock().get(fi_addr) else {
            return -(FI_EINVAL as c_int);
        };
        let bytes = addr::to_bytes(&a);
        // SAFETY: addrlen is valid (checked); out is NULL or holds *addrlen
        // bytes, of which we write at most that many.
        unsafe {
            let room = *addrlen;
            if !out.is_null() {
                ptr::copy_nonoverlapping(bytes.as_ptr(), out.cast::<u8>(), room.min(bytes.len()));
            }
            *addrlen = bytes.len();
        }
        0
    })
}

extern "C" fn av_straddr(
    _av: *mut fid_av,
    a: *const c_void,
    buf: *mut c_char,
    len: *mut usize,
) -> *const c_char {
    guard(|| {
        if len.is_null() || a.is_null() {
            return ptr::null();
        }
        // SAFETY: `a` is an address in this provider's format (a
        // sockaddr_in or sockaddr_in6, fi_av(3)), read as far as its
        // family says: a sockaddr_in is shorter than a sockaddr_in6.
        let text = match unsafe { addr::from_raw_sized_by_family(a) } {
            Some(s) => addr::straddr(&s),
            None => "fi_addr_format_unknown".to_string(),
        };
        copy_cstr(&text, buf, len)
    })
}

/// Copy `text` into `buf` of `*len` bytes (truncated, NUL-terminated) and
/// set `*len` to the size needed, NUL included. Returns `buf`.
pub(crate) fn copy_cstr(text: &str, buf: *mut c_char, len: *mut usize) -> *const c_char {
    // SAFETY: len is valid (callers check); buf is NULL or holds *len bytes.
    unsafe {
        let room = *len;
        if !buf.is_null() && room > 0 {
            let n = text.len().min(room - 1);
            ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
        *len = text.len() + 1;
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_indices_and_reverse_map() {
        let mut t = Table::default();
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
        assert_eq!(t.insert(a), 0);
        assert_eq!(t.insert(b), 1);
        assert_eq!(t.insert(a), 2);
        assert_eq!(t.lookup_addr(&b), 1);
        assert_eq!(t.get(1), Some(b));
        assert_eq!(t.get(7), None);
        t.remove(0).unwrap();
        assert_eq!(t.get(0), None);
        assert_eq!(t.lookup_addr(&a), 2);
        assert_eq!(t.remove(0), Err(FI_EINVAL));
        assert_eq!(
            t.lookup_addr(&"127.0.0.1:3".parse().unwrap()),
            FI_ADDR_NOTAVAIL
        );
    }

    #[test]
    fn straddr_reads_only_the_address_its_family_names() {
        // Each address in an allocation of exactly its own size.
        let v4 = Box::new(libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 4793u16.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes([10, 1, 2, 3]),
            },
            sin_zero: [0; 8],
        });
        let unknown = Box::new(0xffffu16);
        let mut buf = [0 as c_char; 64];
        let text = |a: *const c_void, buf: &mut [c_char; 64]| {
            let mut len = buf.len();
            av_straddr(ptr::null_mut(), a, buf.as_mut_ptr(), &mut len);
            // SAFETY: av_straddr NUL-terminated buf.
            unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        };
        let v4_text = text(&*v4 as *const libc::sockaddr_in as *const c_void, &mut buf);
        assert!(v4_text.contains("10.1.2.3:4793"), "{v4_text}");
        let unknown_text = text(&*unknown as *const u16 as *const c_void, &mut buf);
        assert_eq!(unknown_text, "fi_addr_format_unknown");
    }

    #[test]
    fn straddr_copy_truncates_and_reports_length() {
        let mut buf = [0x7f as c_char; 8];
        let mut len = buf.len();
        copy_cstr("fi_sockaddr_in://1.2.3.4:5", buf.as_mut_ptr(), &mut len);
        assert_eq!(len, 27);
        assert_eq!(buf[7], 0);
    }
}
