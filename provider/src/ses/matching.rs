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
    use crate::ops::ProbeFlags;

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
