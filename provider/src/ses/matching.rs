//! Posted-receive and unexpected-message queues.
//!
//! Both are searched in order, so the first posted receive that matches wins
//! and unexpected messages are taken in the order they were matched against
//! (which is per-peer send order).

use std::collections::VecDeque;
use std::net::SocketAddr;

use crate::ops::{Context, RecvOp};

/// libfabric tag matching: bits set in `ignore` do not take part.
pub fn tag_matches(posted_tag: u64, ignore: u64, msg_tag: u64) -> bool {
    (posted_tag ^ msg_tag) & !ignore == 0
}

fn accepts(recv: &RecvOp, src: SocketAddr, tagged: bool, tag: u64) -> bool {
    recv.tagged == tagged
        && recv.src.is_none_or(|s| s == src)
        && (!tagged || tag_matches(recv.tag, recv.ignore, tag))
}

/// Receives the application posted and no message has matched yet.
#[derive(Default)]
pub struct PostedQueues {
    msg: VecDeque<RecvOp>,
    tagged: VecDeque<RecvOp>,
}

impl PostedQueues {
    pub fn push(&mut self, recv: RecvOp) {
        if recv.tagged {
            self.tagged.push_back(recv);
        } else {
            self.msg.push_back(recv);
        }
    }

    /// Take the first receive that accepts a message with these properties.
    pub fn take_match(&mut self, src: SocketAddr, tagged: bool, tag: u64) -> Option<RecvOp> {
        let q = if tagged {
            &mut self.tagged
        } else {
            &mut self.msg
        };
        let i = q.iter().position(|r| accepts(r, src, tagged, tag))?;
        q.remove(i)
    }

    /// Like [`take_match`](Self::take_match) for a message of `len` bytes: a
    /// multi-receive buffer gives up a piece and stays posted.
    pub fn take_match_len(
        &mut self,
        src: SocketAddr,
        tagged: bool,
        tag: u64,
        len: u64,
    ) -> Option<RecvOp> {
        let q = if tagged {
            &mut self.tagged
        } else {
            &mut self.msg
        };
        let i = q.iter().position(|r| accepts(r, src, tagged, tag))?;
        if let Some(piece) = q[i].carve(len) {
            return Some(piece);
        }
        q.remove(i)
    }

    /// Remove the receive posted with `context` (fi_cancel).
    pub fn take_context(&mut self, context: Context) -> Option<RecvOp> {
        for q in [&mut self.msg, &mut self.tagged] {
            if let Some(i) = q.iter().position(|r| r.context == context) {
                return q.remove(i);
            }
        }
        None
    }

    pub fn len(&self) -> usize {
        self.msg.len() + self.tagged.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl RecvOp {
    /// A receive for the first `len` bytes of this one's buffer, when the
    /// buffer is a multi-receive buffer with room to spare (see
    /// [`crate::ops::MsgBuffer::split_front`]).
    pub fn carve(&mut self, len: u64) -> Option<RecvOp> {
        let buffer = self.buffer.split_front(usize::try_from(len).ok()?)?;
        Some(RecvOp {
            src: self.src,
            tagged: self.tagged,
            tag: self.tag,
            ignore: self.ignore,
            buffer,
            context: self.context,
            signal: self.signal,
            probe: self.probe,
        })
    }
}

/// A message that arrived before any receive matched it. Its payload and
/// full header live in the peer's inbound table under `msg_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unexpected {
    pub peer: usize,
    pub src: SocketAddr,
    pub msg_id: u16,
    pub tagged: bool,
    pub tag: u64,
    /// Reserved by FI_PEEK|FI_CLAIM for the receive with this context.
    pub claimed: Option<Context>,
}

impl Unexpected {
    /// Would `recv` (ignoring its probe flags) match this message?
    pub fn matches(&self, recv: &RecvOp) -> bool {
        self.claimed.is_none() && accepts(recv, self.src, self.tagged, self.tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{MsgBuffer, ProbeFlags};

    fn recv(tagged: bool, tag: u64, ignore: u64, src: Option<SocketAddr>, context: u64) -> RecvOp {
        RecvOp {
            src,
            tagged,
            tag,
            ignore,
            buffer: Box::new(Vec::new()),
            context,
            signal: true,
            probe: ProbeFlags::default(),
        }
    }

    /// A buffer that gives away pieces of `room` bytes while at least
    /// `min` would remain.
    struct Pieces {
        room: usize,
        min: usize,
    }

    impl MsgBuffer for Pieces {
        fn len(&self) -> usize {
            self.room
        }
        fn read_at(&self, _: usize, _: &mut [u8]) {}
        fn write_at(&mut self, _: usize, _: &[u8]) {}
        fn split_front(&mut self, len: usize) -> Option<Box<dyn MsgBuffer>> {
            if len > self.room || self.room - len < self.min {
                return None;
            }
            self.room -= len;
            Some(Box::new(vec![0u8; len]))
        }
    }

    #[test]
    fn multi_receive_buffer_stays_posted_until_used_up() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let mut q = PostedQueues::default();
        let mut multi = recv(false, 0, 0, None, 9);
        multi.buffer = Box::new(Pieces {
            room: 1000,
            min: 200,
        });
        q.push(multi);
        q.push(recv(false, 0, 0, None, 10));
        let first = q.take_match_len(a, false, 0, 300).unwrap();
        assert_eq!((first.context, first.buffer.len()), (9, 300));
        let second = q.take_match_len(a, false, 0, 300).unwrap();
        assert_eq!((second.context, second.buffer.len()), (9, 300));
        // 400 left, 300 more would leave less than 200: the rest goes whole.
        let last = q.take_match_len(a, false, 0, 300).unwrap();
        assert_eq!((last.context, last.buffer.len()), (9, 400));
        assert_eq!(
            q.take_match_len(a, false, 0, 1).map(|r| r.context),
            Some(10)
        );
        assert!(q.is_empty());
    }

    #[test]
    fn ignore_bits() {
        assert!(tag_matches(0xff00, 0x00ff, 0xff42));
        assert!(!tag_matches(0xff00, 0x000f, 0xff42));
    }

    #[test]
    fn first_posted_match_wins_and_directed_filters() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let mut q = PostedQueues::default();
        q.push(recv(true, 7, 0, Some(b), 1));
        q.push(recv(true, 7, 0, None, 2));
        q.push(recv(true, 7, 0, None, 3));
        q.push(recv(false, 0, 0, None, 4));
        assert_eq!(q.take_match(a, true, 7).map(|r| r.context), Some(2));
        assert_eq!(q.take_match(b, true, 7).map(|r| r.context), Some(1));
        assert_eq!(q.take_match(a, false, 99).map(|r| r.context), Some(4));
        assert!(q.take_match(a, true, 8).is_none());
        assert_eq!(q.take_context(3).map(|r| r.context), Some(3));
        assert!(q.is_empty());
    }
}
