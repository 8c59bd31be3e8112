//! Buffers of finished operations, kept for the next ones: a steady stream
//! of messages (a ping-pong, a halo exchange) then allocates nothing per
//! message, neither for the copy of a small send nor for the box that
//! describes the application's memory of a receive or a large send.

use std::any::Any;

use crate::ops::{MsgBuffer, Payload};

/// Most buffers of each kind kept.
const KEPT: usize = 32;
/// Payload copies larger than this are freed rather than kept.
const PAYLOAD_CAPACITY_KEPT: usize = 16 * 1024;

#[derive(Default)]
pub(crate) struct Spares {
    payloads: Vec<Vec<u8>>,
    boxes: Vec<Box<dyn MsgBuffer>>,
}

impl Spares {
    /// The payload of a retired send: a small copy, or the box of the
    /// application's memory, is kept.
    pub(crate) fn keep_payload(&mut self, payload: Payload) {
        match payload {
            Payload::Owned(mut v) => {
                let capacity = v.capacity();
                if capacity > 0 && capacity <= PAYLOAD_CAPACITY_KEPT && self.payloads.len() < KEPT {
                    v.clear();
                    self.payloads.push(v);
                }
            }
            Payload::Borrowed(b) => self.keep_box(b),
        }
    }

    /// An empty vector for a payload copy, kept from an earlier send when
    /// there is one.
    pub(crate) fn payload(&mut self) -> Vec<u8> {
        self.payloads.pop().unwrap_or_default()
    }

    /// The buffer of a finished operation: kept when its type can be
    /// refilled ([`MsgBuffer::as_any_mut`]).
    pub(crate) fn keep_box(&mut self, mut buffer: Box<dyn MsgBuffer>) {
        if self.boxes.len() < KEPT && buffer.as_any_mut().is_some() {
            self.boxes.push(buffer);
        }
    }

    /// `value` boxed, in the box of a finished operation when one of the
    /// same type was kept.
    pub(crate) fn boxed<T: MsgBuffer + Any>(&mut self, value: T) -> Box<dyn MsgBuffer> {
        if let Some(mut spare) = self.boxes.pop() {
            if let Some(slot) = spare.as_any_mut().and_then(|a| a.downcast_mut::<T>()) {
                *slot = value;
                return spare;
            }
        }
        Box::new(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A receive buffer whose box can be refilled.
    struct Refillable(Vec<u8>);

    impl MsgBuffer for Refillable {
        fn len(&self) -> usize {
            self.0.len()
        }
        fn read_at(&self, offset: usize, out: &mut [u8]) {
            self.0.read_at(offset, out)
        }
        fn write_at(&mut self, offset: usize, data: &[u8]) {
            self.0.write_at(offset, data)
        }
        fn as_any_mut(&mut self) -> Option<&mut dyn Any> {
            Some(self)
        }
    }

    #[test]
    fn a_kept_box_is_refilled_with_the_new_value() {
        let mut s = Spares::default();
        let first = s.boxed(Refillable(vec![1; 8]));
        let address = &*first as *const dyn MsgBuffer as *const u8;
        s.keep_box(first);
        let second = s.boxed(Refillable(vec![2; 3]));
        assert_eq!(&*second as *const dyn MsgBuffer as *const u8, address);
        let mut out = [0u8; 3];
        second.read_at(0, &mut out);
        assert_eq!((second.len(), out), (3, [2, 2, 2]));
    }

    #[test]
    fn buffers_that_cannot_be_refilled_are_not_kept() {
        let mut s = Spares::default();
        s.keep_box(Box::new(vec![0u8; 4]));
        assert!(s.boxes.is_empty());
    }

    #[test]
    fn small_payload_copies_come_back_empty_and_large_ones_are_freed() {
        let mut s = Spares::default();
        s.keep_payload(Payload::Owned(vec![9; 64]));
        s.keep_payload(Payload::Owned(vec![9; PAYLOAD_CAPACITY_KEPT + 1]));
        s.keep_payload(Payload::Borrowed(Box::new(Refillable(vec![9; 4]))));
        assert_eq!(s.boxes.len(), 1);
        let v = s.payload();
        assert!(v.is_empty() && v.capacity() >= 64);
        assert_eq!(s.payload().capacity(), 0);
    }

    #[test]
    fn at_most_kept_buffers_are_held() {
        let mut s = Spares::default();
        for _ in 0..KEPT + 10 {
            s.keep_payload(Payload::Owned(vec![0; 16]));
            s.keep_box(Box::new(Refillable(vec![0; 16])));
        }
        assert_eq!((s.payloads.len(), s.boxes.len()), (KEPT, KEPT));
    }
}
