//! Posted-receive and unexpected-message queues.
//!
//! The first posted receive that matches a message wins, and unexpected
//! messages are taken in the order they were matched against (which is
//! per-peer send order).
//!
//! Tagged receives are indexed so that matching does not grow with the
//! number posted: receives are grouped by their ignore mask (applications
//! use a handful of masks), and within a mask by the tag bits that take part
//! (`tag & !ignore`). A message looks up its bucket in each mask class and
//! takes the candidate posted first (a sequence number per receive keeps
//! posting order across classes). Only directed receives for other peers in
//! the same bucket are scanned past.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
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

struct Posted {
    /// Posting order across all mask classes.
    seq: u64,
    recv: RecvOp,
}

/// Hashes a tag with the murmur3 finaliser: a few cycles instead of
/// SipHash's dozens, and every input bit reaches the low bits the table
/// indexes with. Keys are the application's own tags, so flooding is not a
/// concern; a peer's tag is only looked up.
#[derive(Default)]
struct TagHasher(u64);

impl Hasher for TagHasher {
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// Tagged receives sharing one ignore mask, bucketed by `tag & !ignore`.
struct MaskClass {
    ignore: u64,
    buckets: HashMap<u64, VecDeque<Posted>, BuildHasherDefault<TagHasher>>,
}

/// Mask classes kept while empty, so a receive posted after the last one
/// was matched reuses its class's table instead of allocating a new one.
const IDLE_CLASSES: usize = 8;
/// Emptied buckets stay in their table (a ping-pong on one tag then costs
/// no allocation and one lookup per side) until this many more than live
/// receives exist; then they are swept.
const IDLE_BUCKETS: usize = 64;

/// Receives the application posted and no message has matched yet.
#[derive(Default)]
pub struct PostedQueues {
    msg: VecDeque<RecvOp>,
    tagged: Vec<MaskClass>,
    tagged_len: usize,
    next_seq: u64,
}

impl PostedQueues {
    pub fn push(&mut self, recv: RecvOp) {
        if !recv.tagged {
            self.msg.push_back(recv);
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.tagged_len += 1;
        let ignore = recv.ignore;
        let i = match self.tagged.iter().position(|c| c.ignore == ignore) {
            Some(i) => i,
            None => {
                if self.tagged.len() >= IDLE_CLASSES {
                    self.tagged
                        .retain(|c| c.buckets.values().any(|q| !q.is_empty()));
                }
                self.tagged.push(MaskClass {
                    ignore,
                    buckets: HashMap::default(),
                });
                self.tagged.len() - 1
            }
        };
        let buckets = &mut self.tagged[i].buckets;
        let key = recv.tag & !ignore;
        match buckets.get_mut(&key) {
            Some(q) => q.push_back(Posted { seq, recv }),
            None => {
                if buckets.len() >= 2 * self.tagged_len + IDLE_BUCKETS {
                    buckets.retain(|_, q| !q.is_empty());
                }
                buckets.insert(key, VecDeque::from([Posted { seq, recv }]));
            }
        }
    }

    /// Take the first receive that accepts a message with these properties.
    pub fn take_match(&mut self, src: SocketAddr, tagged: bool, tag: u64) -> Option<RecvOp> {
        if !tagged {
            let i = self.msg.iter().position(|r| accepts(r, src, false, tag))?;
            return self.msg.remove(i);
        }
        if self.tagged_len == 0 {
            return None;
        }
        let from_src = |p: &Posted| p.recv.src.is_none_or(|s| s == src);
        // One ignore mask (the usual case): no posting order to compare.
        if let [class] = self.tagged.as_mut_slice() {
            let q = class.buckets.get_mut(&(tag & !class.ignore))?;
            let posted = if q.front().is_some_and(from_src) {
                q.pop_front()
            } else {
                let pos = q.iter().position(from_src)?;
                q.remove(pos)
            }?;
            self.tagged_len -= 1;
            return Some(posted.recv);
        }
        // (bucket, position in it, seq) of the earliest candidate. The
        // classes' tables are disjoint, so the winner's bucket is kept
        // borrowed while the others are looked at: no second lookup.
        let mut best: Option<(&mut VecDeque<Posted>, usize, u64)> = None;
        for class in self.tagged.iter_mut() {
            let Some(q) = class.buckets.get_mut(&(tag & !class.ignore)) else {
                continue;
            };
            // Usually the bucket's first receive (not directed elsewhere).
            let pos = match q.front() {
                Some(first) if from_src(first) => 0,
                _ => match q.iter().position(from_src) {
                    Some(pos) => pos,
                    None => continue,
                },
            };
            let seq = q[pos].seq;
            if best.as_ref().is_none_or(|&(_, _, b)| seq < b) {
                best = Some((q, pos, seq));
            }
        }
        let (q, pos, _) = best?;
        let posted = if pos == 0 {
            q.pop_front()
        } else {
            q.remove(pos)
        }?;
        self.tagged_len -= 1;
        Some(posted.recv)
    }

    fn remove_tagged(&mut self, ci: usize, key: u64, pos: usize) -> Option<RecvOp> {
        let posted = self.tagged[ci].buckets.get_mut(&key)?.remove(pos)?;
        self.tagged_len -= 1;
        Some(posted.recv)
    }

    /// Like [`take_match`](Self::take_match) for a message of `len` bytes: a
    /// multi-receive buffer gives up a piece and stays posted.
    #[inline]
    pub fn take_match_len(
        &mut self,
        src: SocketAddr,
        tagged: bool,
        tag: u64,
        len: u64,
    ) -> Option<RecvOp> {
        // FI_MULTI_RECV buffers are untagged receives (fi_recvmsg).
        if tagged {
            return self.take_match(src, tagged, tag);
        }
        let i = self.msg.iter().position(|r| accepts(r, src, false, tag))?;
        if let Some(piece) = self.msg[i].carve(len) {
            return Some(piece);
        }
        self.msg.remove(i)
    }

    /// Remove the receive posted with `context` (fi_cancel).
    pub fn take_context(&mut self, context: Context) -> Option<RecvOp> {
        if let Some(i) = self.msg.iter().position(|r| r.context == context) {
            return self.msg.remove(i);
        }
        let found = self.tagged.iter().enumerate().find_map(|(ci, c)| {
            c.buckets.iter().find_map(|(&key, q)| {
                q.iter()
                    .position(|p| p.recv.context == context)
                    .map(|pos| (ci, key, pos))
            })
        });
        let (ci, key, pos) = found?;
        self.remove_tagged(ci, key, pos)
    }

    pub fn len(&self) -> usize {
        self.msg.len() + self.tagged_len
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
/// full header live in the peer's inbound state, found by `seq`, its
/// position in the sender's message order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unexpected {
    pub peer: usize,
    pub src: SocketAddr,
    pub seq: u64,
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

/// Holes an [`UnexpectedQueue`] keeps beyond as many as its live entries
/// before compacting (few in tests, so the property test compacts often).
const COMPACT_SLACK: usize = if cfg!(test) { 4 } else { 64 };

/// Where an [`UnexpectedQueue`] entry is: its place in arrival order, good
/// until the entry is removed or the next push (which may renumber).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnexpectedSlot(u64);

/// Unexpected messages in arrival order, indexed so that a receive for one
/// tag (no ignore bits, the common case) or an untagged receive looks only
/// at the messages it could take: posting a receive then does not grow
/// with the number of messages waiting for others. A receive with ignore
/// bits looks at each tag waiting (or at every message, when there are no
/// fewer); a claim by context and a peer's departure look at every
/// message.
///
/// Entries live in `slots` (`None` once removed) at `seq - base`; the
/// buckets hold sequence numbers, oldest first. Removed slots at the front
/// are dropped at once, and the whole queue is compacted when holes
/// behind an old entry outnumber the live ones. Emptied buckets stay for
/// the tag's next message, as the posted receives' do.
#[derive(Default)]
pub struct UnexpectedQueue {
    slots: VecDeque<Option<Unexpected>>,
    /// Sequence number of `slots[0]`.
    base: u64,
    live: usize,
    untagged: VecDeque<u64>,
    by_tag: HashMap<u64, VecDeque<u64>, BuildHasherDefault<TagHasher>>,
}

impl UnexpectedQueue {
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    pub fn push(&mut self, u: Unexpected) {
        if self.slots.len() >= 2 * self.live + COMPACT_SLACK {
            self.compact();
        }
        let seq = self.base + self.slots.len() as u64;
        self.slots.push_back(Some(u));
        self.live += 1;
        if !u.tagged {
            self.untagged.push_back(seq);
            return;
        }
        if let Some(b) = self.by_tag.get_mut(&u.tag) {
            b.push_back(seq);
            return;
        }
        if self.by_tag.len() >= 2 * self.live + IDLE_BUCKETS {
            self.by_tag.retain(|_, b| !b.is_empty());
        }
        self.by_tag.insert(u.tag, VecDeque::from([seq]));
    }

    fn entry(&self, seq: u64) -> Option<&Unexpected> {
        let i = usize::try_from(seq.checked_sub(self.base)?).ok()?;
        self.slots.get(i)?.as_ref()
    }

    /// The oldest message `recv` (its probe flags aside) would take.
    pub fn find(&self, recv: &RecvOp) -> Option<UnexpectedSlot> {
        let first_in = |bucket: &VecDeque<u64>| {
            bucket
                .iter()
                .copied()
                .find(|&seq| self.entry(seq).is_some_and(|u| u.matches(recv)))
        };
        let found = match (recv.tagged, recv.ignore) {
            (false, _) => first_in(&self.untagged),
            (true, 0) => self.by_tag.get(&recv.tag).and_then(first_in),
            // Ignore bits: the oldest of each matching tag's first, when
            // fewer tags than messages wait (many messages per tag, as
            // from ranks that send ahead); else one pass in arrival order.
            (true, ignore) if self.by_tag.len() < self.live => self
                .by_tag
                .iter()
                .filter(|&(&tag, _)| tag_matches(recv.tag, ignore, tag))
                .filter_map(|(_, bucket)| first_in(bucket))
                .min(),
            (true, _) => (0..self.slots.len() as u64)
                .map(|i| self.base + i)
                .find(|&seq| self.entry(seq).is_some_and(|u| u.matches(recv))),
        };
        found.map(UnexpectedSlot)
    }

    /// The message a FI_PEEK|FI_CLAIM reserved for `context`.
    pub fn find_claimed(&self, context: Context) -> Option<UnexpectedSlot> {
        (0..self.slots.len() as u64)
            .map(|i| self.base + i)
            .find(|&seq| self.entry(seq).is_some_and(|u| u.claimed == Some(context)))
            .map(UnexpectedSlot)
    }

    pub fn get(&self, slot: UnexpectedSlot) -> Option<&Unexpected> {
        self.entry(slot.0)
    }

    /// Reserve the message for the receive with `context` (FI_CLAIM).
    pub fn claim(&mut self, slot: UnexpectedSlot, context: Context) {
        let Some(i) = slot.0.checked_sub(self.base) else {
            return;
        };
        if let Some(Some(u)) = usize::try_from(i).ok().and_then(|i| self.slots.get_mut(i)) {
            u.claimed = Some(context);
        }
    }

    pub fn remove(&mut self, slot: UnexpectedSlot) -> Option<Unexpected> {
        let seq = slot.0;
        let i = usize::try_from(seq.checked_sub(self.base)?).ok()?;
        let u = self.slots.get_mut(i)?.take()?;
        self.live -= 1;
        let bucket = match u.tagged {
            true => self.by_tag.get_mut(&u.tag),
            false => Some(&mut self.untagged),
        };
        if let Some(b) = bucket {
            // Nearly always the front: the oldest match is taken.
            if let Some(k) = b.iter().position(|&s| s == seq) {
                b.remove(k);
            }
        }
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.base += 1;
        }
        Some(u)
    }

    /// Keep only the messages `keep` accepts, in their order: one pass,
    /// then the buckets rebuilt (removing entries one by one would search
    /// a bucket for each).
    pub fn retain(&mut self, mut keep: impl FnMut(&Unexpected) -> bool) {
        let before = self.live;
        for slot in self.slots.iter_mut() {
            if slot.as_ref().is_some_and(|u| !keep(u)) {
                *slot = None;
                self.live -= 1;
            }
        }
        if self.live != before {
            self.compact();
        }
    }

    /// Every message, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Unexpected> {
        self.slots.iter().flatten()
    }

    /// Renumber the live entries from `base` without holes.
    fn compact(&mut self) {
        let live: Vec<Unexpected> = self.slots.drain(..).flatten().collect();
        self.untagged.clear();
        self.by_tag.clear();
        for (k, u) in live.iter().enumerate() {
            let seq = self.base + k as u64;
            match u.tagged {
                true => self.by_tag.entry(u.tag).or_default().push_back(seq),
                false => self.untagged.push_back(seq),
            }
        }
        self.slots.extend(live.into_iter().map(Some));
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

    #[test]
    fn posting_order_wins_across_ignore_masks() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let mut q = PostedQueues::default();
        q.push(recv(true, 0x10, 0xff, None, 1)); // any tag 0x00..=0xff
        q.push(recv(true, 0x42, 0, None, 2));
        q.push(recv(true, 0x42, 0, None, 3));
        q.push(recv(true, 0x40, 0x0f, None, 4));
        assert_eq!(q.take_match(a, true, 0x42).map(|r| r.context), Some(1));
        assert_eq!(q.take_match(a, true, 0x42).map(|r| r.context), Some(2));
        assert_eq!(q.take_match(a, true, 0x42).map(|r| r.context), Some(3));
        assert_eq!(q.take_match(a, true, 0x42).map(|r| r.context), Some(4));
        assert!(q.take_match(a, true, 0x42).is_none());
        assert!(q.is_empty());
    }

    #[test]
    fn many_distinct_tags_and_masks_come_and_go() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let mut q = PostedQueues::default();
        let mut reference = Vec::new();
        for round in 0..3u64 {
            for i in 0..500u64 {
                let (tag, ignore) = (i + round * 1000, i % 20);
                q.push(recv(true, tag, ignore, None, tag));
                reference.push(recv(true, tag, ignore, None, tag));
            }
            for i in (0..500u64).rev() {
                let tag = i + round * 1000;
                let got = q.take_match(a, true, tag).map(|r| r.context);
                assert_eq!(got, linear_match(&mut reference, a, true, tag));
            }
            // Masked receives may have taken other tags' messages: cancel
            // what is left, in both.
            assert_eq!(q.len(), reference.len());
            for r in std::mem::take(&mut reference) {
                assert_eq!(
                    q.take_context(r.context).map(|r| r.context),
                    Some(r.context)
                );
            }
            assert!(q.is_empty());
            // Emptied buckets are swept when new tags come, not kept forever.
            let buckets: usize = q.tagged.iter().map(|c| c.buckets.len()).sum();
            assert!(buckets <= 20 * IDLE_BUCKETS + 500, "{buckets} buckets kept");
        }
    }

    /// The reference: one list searched in posting order.
    fn linear_match(
        list: &mut Vec<RecvOp>,
        src: SocketAddr,
        tagged: bool,
        tag: u64,
    ) -> Option<u64> {
        let i = list.iter().position(|r| accepts(r, src, tagged, tag))?;
        Some(list.remove(i).context)
    }

    proptest::proptest! {
        /// Any sequence of posts, matches and cancels gives what a linear
        /// search in posting order gives.
        #[test]
        fn same_as_linear_search(ops in proptest::collection::vec(
            (0u8..4, 0u64..8, proptest::sample::select(vec![0u64, 1, 3, 7, !0]), 0u16..3, proptest::bool::ANY),
            0..200,
        )) {
            let mut q = PostedQueues::default();
            let mut reference = Vec::new();
            for (ctx, (op, tag, ignore, port, tagged)) in ops.into_iter().enumerate() {
                let src = (port > 0).then(|| SocketAddr::from(([127, 0, 0, 1], port)));
                let from = SocketAddr::from(([127, 0, 0, 1], 1 + port % 2));
                match op {
                    0 | 1 => {
                        q.push(recv(tagged, tag, ignore, src, ctx as u64));
                        reference.push(recv(tagged, tag, ignore, src, ctx as u64));
                    }
                    2 => {
                        let got = q.take_match(from, tagged, tag).map(|r| r.context);
                        proptest::prop_assert_eq!(got, linear_match(&mut reference, from, tagged, tag));
                    }
                    _ => {
                        let target = (tag as usize * 7) % (ctx + 1);
                        let got = q.take_context(target as u64).map(|r| r.context);
                        let want = reference.iter().position(|r| r.context == target as u64)
                            .map(|i| reference.remove(i).context);
                        proptest::prop_assert_eq!(got, want);
                    }
                }
                proptest::prop_assert_eq!(q.len(), reference.len());
            }
        }
    }

    fn message(seq: usize, tagged: bool, tag: u64, port: u16) -> Unexpected {
        Unexpected {
            peer: port as usize,
            src: SocketAddr::from(([127, 0, 0, 1], port)),
            seq: seq as u64,
            tagged,
            tag,
            claimed: None,
        }
    }

    /// The oldest entry `recv` matches, by the definition: a pass in
    /// arrival order.
    fn first_match(reference: &[Unexpected], recv: &RecvOp) -> Option<usize> {
        reference.iter().position(|u| u.matches(recv))
    }

    #[test]
    fn unexpected_queue_takes_the_oldest_match_of_each_kind() {
        let mut q = UnexpectedQueue::default();
        q.push(message(0, true, 5, 1));
        q.push(message(1, false, 0, 2));
        q.push(message(2, true, 6, 2));
        q.push(message(3, true, 5, 2));
        // Exact tag, from anyone: the older of the two tag-5 messages.
        let slot = q.find(&recv(true, 5, 0, None, 9)).expect("tag 5");
        assert_eq!(q.get(slot).map(|u| u.seq), Some(0));
        // Exact tag, directed at port 2: the one from port 2.
        let from_2 = Some(SocketAddr::from(([127, 0, 0, 1], 2)));
        let slot = q.find(&recv(true, 5, 0, from_2, 9)).expect("tag 5 from 2");
        assert_eq!(q.get(slot).map(|u| u.seq), Some(3));
        // Any tag: the oldest tagged message.
        let slot = q.find(&recv(true, 0, !0, from_2, 9)).expect("any tag");
        assert_eq!(q.get(slot).map(|u| u.seq), Some(2));
        // Untagged.
        let slot = q.find(&recv(false, 0, 0, None, 9)).expect("untagged");
        assert_eq!(q.remove(slot).map(|u| u.seq), Some(1));
        assert!(q.find(&recv(false, 0, 0, None, 9)).is_none());
        // A claimed message is skipped, and found by its claim.
        let slot = q.find(&recv(true, 5, 0, None, 9)).expect("tag 5");
        q.claim(slot, 77);
        let next = q.find(&recv(true, 5, 0, None, 9)).expect("second tag 5");
        assert_eq!(q.get(next).map(|u| u.seq), Some(3));
        assert_eq!(q.find_claimed(77), Some(slot));
        assert_eq!(q.len(), 3);
        q.retain(|u| u.tag != 5);
        assert_eq!(q.iter().map(|u| u.seq).collect::<Vec<_>>(), vec![2]);
    }

    /// One message nobody takes, and thousands taken behind it: the holes
    /// are compacted away, and what is left is found as before.
    #[test]
    fn unexpected_queue_compacts_behind_an_old_message() {
        let mut q = UnexpectedQueue::default();
        q.push(message(0, true, 1000, 1));
        for n in 1..5000 {
            q.push(message(n, true, n as u64 % 7, 1));
            let slot = q
                .find(&recv(true, n as u64 % 7, 0, None, 0))
                .expect("just pushed");
            assert_eq!(q.remove(slot).map(|u| u.seq), Some(n as u64));
            assert!(
                q.slots.len() <= 2 * q.len() + COMPACT_SLACK,
                "{} slots",
                q.slots.len()
            );
        }
        let slot = q.find(&recv(true, 1000, 0, None, 0)).expect("the old one");
        assert_eq!(q.remove(slot).map(|u| u.seq), Some(0));
        assert!(q.is_empty() && q.slots.is_empty());
        assert!(q.by_tag.values().all(VecDeque::is_empty));
    }

    proptest::proptest! {
        /// The index finds what a pass in arrival order finds, through
        /// pushes, takes (exact, wildcard, untagged, directed), claims and
        /// removals by peer, compacting along the way (`COMPACT_SLACK`).
        #[test]
        fn unexpected_queue_same_as_arrival_order_pass(ops in proptest::collection::vec(
            (0u8..6, 0u64..6, proptest::sample::select(vec![0u64, 0, 1, !0]), 0u16..3, proptest::bool::ANY),
            0..400,
        )) {
            let mut q = UnexpectedQueue::default();
            let mut reference: Vec<Unexpected> = Vec::new();
            for (n, (op, tag, ignore, port, tagged)) in ops.into_iter().enumerate() {
                let src = (port > 0).then(|| SocketAddr::from(([127, 0, 0, 1], port)));
                match op {
                    0..=2 => {
                        let u = message(n, tagged, tag, 1 + port % 2);
                        q.push(u);
                        reference.push(u);
                    }
                    3 | 4 => {
                        let r = recv(tagged, tag, ignore, src, n as u64);
                        let got = q.find(&r).and_then(|slot| {
                            if op == 4 {
                                q.claim(slot, n as u64);
                                q.get(slot).copied()
                            } else {
                                q.remove(slot)
                            }
                        });
                        let want = first_match(&reference, &r).map(|i| {
                            if op == 4 {
                                reference[i].claimed = Some(n as u64);
                                reference[i]
                            } else {
                                reference.remove(i)
                            }
                        });
                        proptest::prop_assert_eq!(got, want);
                    }
                    _ => {
                        let peer = 1 + port as usize % 2;
                        q.retain(|u| u.peer != peer || u.tag % 2 == 0);
                        reference.retain(|u| u.peer != peer || u.tag % 2 == 0);
                    }
                }
                proptest::prop_assert_eq!(q.len(), reference.len());
                proptest::prop_assert!(q.iter().eq(reference.iter()));
            }
        }
    }
}
