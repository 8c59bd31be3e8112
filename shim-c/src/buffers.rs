//! [`MsgBuffer`] over the application's iovecs: the engine reads send
//! payload from, and places received payload into, application memory.

use std::os::raw::c_void;

use smallvec::SmallVec;
use uet::copy::copy_bytes;
use uet::MsgBuffer;

use crate::bindings::*;
use crate::errors::FiResult;

/// One contiguous piece of application memory.
#[derive(Clone, Copy, Debug)]
struct Segment {
    base: *mut u8,
    len: usize,
}

/// An application buffer described by up to `iov_limit` iovecs.
#[derive(Clone, Debug, Default)]
pub(crate) struct IovBuffer {
    /// Inline up to two: a single-buffer send or receive (the busy
    /// ping-pong's every call) allocates nothing for its description.
    segs: SmallVec<[Segment; 2]>,
    len: usize,
}

// SAFETY: the pointers refer to application memory that libfabric's contract
// keeps valid (and untouched by the application) until the operation's
// completion is reported; the engine that holds this buffer is itself
// serialised by the endpoint lock, so no two threads access it at once.
unsafe impl Send for IovBuffer {}
// SAFETY: shared access only reads through the pointers (writes need
// `&mut`); registered regions are read by several endpoints' engines, and
// what the application does with its own memory meanwhile is its contract.
unsafe impl Sync for IovBuffer {}

impl IovBuffer {
    /// A single buffer (`fi_send` / `fi_recv`). NULL is allowed when `len` is 0.
    pub(crate) fn single(buf: *const c_void, len: usize) -> FiResult<IovBuffer> {
        let mut b = IovBuffer::default();
        b.push(buf, len)?;
        Ok(b)
    }

    /// `count` iovecs (`fi_sendv`, `fi_sendmsg`, ...).
    ///
    /// # Safety
    /// `iov` must be NULL (then `count` must be 0) or point to `count` iovecs.
    pub(crate) unsafe fn from_iov(iov: *const iovec, count: usize) -> FiResult<IovBuffer> {
        let mut b = IovBuffer::default();
        if count == 0 {
            return Ok(b);
        }
        if iov.is_null() {
            return Err(FI_EINVAL);
        }
        // SAFETY: guaranteed by the caller.
        let iovs = unsafe { std::slice::from_raw_parts(iov, count) };
        for v in iovs {
            b.push(v.iov_base, v.iov_len)?;
        }
        Ok(b)
    }

    fn push(&mut self, base: *const c_void, len: usize) -> FiResult<()> {
        if len == 0 {
            return Ok(());
        }
        if base.is_null() {
            return Err(FI_EINVAL);
        }
        self.len = self.len.checked_add(len).ok_or(FI_EINVAL)?;
        self.segs.push(Segment {
            base: base.cast_mut().cast(),
            len,
        });
        Ok(())
    }

    /// The bytes from `offset` to the end, as a buffer of its own
    /// (the unused part of a multi-receive buffer).
    pub(crate) fn tail(&self, offset: usize) -> IovBuffer {
        let mut t = IovBuffer::default();
        let mut start = 0usize;
        for s in &self.segs {
            let end = start + s.len;
            if end > offset {
                let skip = offset.saturating_sub(start);
                t.segs.push(Segment {
                    // SAFETY: skip < s.len, so the pointer stays inside the
                    // application's segment.
                    base: unsafe { s.base.add(skip) },
                    len: s.len - skip,
                });
                t.len += s.len - skip;
            }
            start = end;
        }
        t
    }

    /// `len` bytes from `offset` as a buffer of their own.
    pub(crate) fn range(&self, offset: usize, len: usize) -> IovBuffer {
        let mut t = self.tail(offset);
        let mut keep = len;
        t.segs.retain_mut(|s| {
            if keep == 0 {
                return false;
            }
            s.len = s.len.min(keep);
            keep -= s.len;
            true
        });
        t.len = len - keep;
        t
    }

    /// Total bytes described.
    pub(crate) fn len_bytes(&self) -> usize {
        self.len
    }

    /// `v` with a copy of the whole buffer appended (for injected and small
    /// sends; an empty vector kept from an earlier send saves allocating).
    pub(crate) fn copy_into(&self, mut v: Vec<u8>) -> Vec<u8> {
        v.reserve(self.len);
        self.read_pieces(0, self.len, |_, piece| v.extend_from_slice(piece));
        v
    }

    /// The bytes `[offset, offset + n)` one segment's piece at a time, with
    /// each piece's offset within the range.
    fn read_pieces(&self, offset: usize, n: usize, mut f: impl FnMut(usize, &[u8])) {
        self.for_range(offset, n, |base, within, at, take| {
            // SAFETY: `within + take <= segment length`, and the segment is
            // live application memory (see the Send impl).
            f(at, unsafe {
                std::slice::from_raw_parts(base.add(within), take)
            });
        });
    }

    /// Visit the segments overlapping `[offset, offset + n)` as
    /// (segment base, offset within segment, offset within the range, length).
    fn for_range(&self, offset: usize, n: usize, mut f: impl FnMut(*mut u8, usize, usize, usize)) {
        let mut start = 0usize; // message offset of the current segment
        let mut done = 0usize;
        for s in &self.segs {
            if done == n {
                break;
            }
            let end = start + s.len;
            let pos = offset + done;
            if pos < end {
                let within = pos - start;
                let take = (s.len - within).min(n - done);
                f(s.base, within, done, take);
                done += take;
            }
            start = end;
        }
    }
}

/// Shared bookkeeping of one FI_MULTI_RECV buffer.
#[derive(Debug, Default)]
pub(crate) struct MultiState {
    /// Bytes handed to messages so far.
    pub(crate) offset: usize,
    /// Messages placed (or being placed) in the buffer, not yet completed.
    pub(crate) outstanding: usize,
    /// The last message took the rest of the buffer: it is no longer posted.
    pub(crate) whole_taken: bool,
    /// fi_cancel took the rest of the buffer off the posted queue.
    pub(crate) cancelled: bool,
}

/// An FI_MULTI_RECV buffer: each message gets the next piece; once the room
/// left would fall below `min`, the next message takes the rest.
pub(crate) struct MultiBuffer {
    whole: IovBuffer,
    min: usize,
    pub(crate) state: std::sync::Arc<parking_lot::Mutex<MultiState>>,
}

impl MultiBuffer {
    pub(crate) fn new(whole: IovBuffer, min: usize) -> MultiBuffer {
        MultiBuffer {
            whole,
            min,
            state: Default::default(),
        }
    }

    fn offset(&self) -> usize {
        self.state.lock().offset
    }
}

impl MsgBuffer for MultiBuffer {
    fn len(&self) -> usize {
        self.whole.len - self.offset()
    }

    fn read_at(&self, offset: usize, out: &mut [u8]) {
        self.whole.read_at(self.offset() + offset, out);
    }

    fn write_at(&mut self, offset: usize, data: &[u8]) {
        let base = self.offset();
        self.whole.write_at(base + offset, data);
    }

    fn base_addr(&self) -> usize {
        self.whole.tail(self.offset()).base_addr()
    }

    fn split_front(&mut self, len: usize) -> Option<Box<dyn MsgBuffer>> {
        let mut st = self.state.lock();
        st.outstanding += 1;
        let room = self.whole.len - st.offset;
        if len > room || room - len < self.min.max(1) {
            st.whole_taken = true;
            return None;
        }
        let piece = self.whole.range(st.offset, len);
        st.offset += len;
        Some(Box::new(piece))
    }
}

impl MsgBuffer for IovBuffer {
    fn len(&self) -> usize {
        self.len
    }

    fn read_at(&self, offset: usize, out: &mut [u8]) {
        let n = out.len();
        self.read_pieces(offset, n, |at, piece| {
            copy_bytes(&mut out[at..at + piece.len()], piece);
        });
    }

    fn write_at(&mut self, offset: usize, data: &[u8]) {
        self.for_range(offset, data.len(), |base, within, at, take| {
            // SAFETY: as in read_pieces; the application gave us this memory to
            // write into until the receive completes, and nothing else
            // refers to it during this call.
            let dst = unsafe { std::slice::from_raw_parts_mut(base.add(within), take) };
            copy_bytes(dst, &data[at..at + take]);
        });
    }

    fn base_addr(&self) -> usize {
        self.segs.first().map_or(0, |s| s.base as usize)
    }

    fn slice_at(&self, offset: usize, len: usize) -> Option<&[u8]> {
        let base = self.span(offset, len)?;
        // SAFETY: `span` found `len` bytes of one segment, live application
        // memory the application leaves alone until the operation completes
        // (see the Send impl); the slice lives no longer than `self`.
        Some(unsafe { std::slice::from_raw_parts(base, len) })
    }

    fn slice_at_mut(&mut self, offset: usize, len: usize) -> Option<&mut [u8]> {
        let base = self.span(offset, len)?;
        // SAFETY: as in `slice_at`; the application gave us this memory to
        // write into until the receive completes, and the `&mut self`
        // borrow keeps every other view of it through this buffer away.
        Some(unsafe { std::slice::from_raw_parts_mut(base, len) })
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }
}

impl IovBuffer {
    /// Start of bytes `offset..offset + len` when they lie in one segment.
    fn span(&self, offset: usize, len: usize) -> Option<*mut u8> {
        let mut start = 0usize;
        for s in &self.segs {
            let end = start + s.len;
            if offset < end {
                let within = offset - start;
                if within + len > s.len {
                    return None;
                }
                // SAFETY: `within <= segment length`: the pointer stays
                // within (or one past) the segment.
                return Some(unsafe { s.base.add(within) });
            }
            start = end;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_only_within_one_segment() {
        let a = [1u8, 2, 3];
        let c = [4u8, 5, 6, 7, 8];
        let iov = [
            iovec {
                iov_base: a.as_ptr() as *mut c_void,
                iov_len: a.len(),
            },
            iovec {
                iov_base: c.as_ptr() as *mut c_void,
                iov_len: c.len(),
            },
        ];
        // SAFETY: two live iovecs.
        let b = unsafe { IovBuffer::from_iov(iov.as_ptr(), 2) }.unwrap();
        assert_eq!(b.slice_at(0, 3), Some(&a[..]));
        assert_eq!(b.slice_at(1, 2), Some(&a[1..]));
        assert_eq!(b.slice_at(3, 5), Some(&c[..]));
        assert_eq!(b.slice_at(4, 2), Some(&c[1..3]));
        assert_eq!(b.slice_at(2, 2), None, "crosses segments");
        assert_eq!(b.slice_at(8, 1), None, "past the end");
    }

    #[test]
    fn scatter_gather_across_segments() {
        let mut a = [0u8; 3];
        let mut b = [0u8; 0];
        let mut c = [0u8; 5];
        let iov = [
            iovec {
                iov_base: a.as_mut_ptr().cast(),
                iov_len: a.len(),
            },
            iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: 0,
            },
            iovec {
                iov_base: c.as_mut_ptr().cast(),
                iov_len: c.len(),
            },
        ];
        // SAFETY: iov describes live local arrays.
        let mut buf = unsafe { IovBuffer::from_iov(iov.as_ptr(), iov.len()) }.unwrap();
        assert_eq!(MsgBuffer::len(&buf), 8);
        buf.write_at(2, &[1, 2, 3, 4]);
        let mut out = [0u8; 8];
        buf.read_at(0, &mut out);
        assert_eq!(out, [0, 0, 1, 2, 3, 4, 0, 0]);
        assert_eq!(buf.copy_into(vec![9]), [&[9u8][..], &out[..]].concat());
        drop(buf);
        assert_eq!(a, [0, 0, 1]);
        assert_eq!(c, [2, 3, 4, 0, 0]);
    }

    #[test]
    fn null_is_fine_only_when_empty() {
        assert!(IovBuffer::single(std::ptr::null(), 0).is_ok());
        assert_eq!(
            IovBuffer::single(std::ptr::null(), 4).unwrap_err(),
            FI_EINVAL
        );
        // SAFETY: count 0 never reads iov.
        assert!(unsafe { IovBuffer::from_iov(std::ptr::null(), 0) }.is_ok());
    }
}
