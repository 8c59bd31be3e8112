//! The sans-IO engine of one endpoint (being written).
use crate::ops::*;
use crate::{Config, Result};
use std::net::SocketAddr;

/// A datagram the engine wrote into the caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub dest: SocketAddr,
    pub len: usize,
}

pub struct Engine {
    completions: std::collections::VecDeque<Completion>,
}
impl Engine {
    pub fn new(_config: &Config, _local: SocketAddr, _seed: u64) -> Engine {
        Engine {
            completions: Default::default(),
        }
    }
    pub fn post_send(&mut self, _now: u64, _op: SendOp) -> Result<()> {
        Ok(())
    }
    pub fn post_recv(&mut self, _now: u64, _op: RecvOp) -> Result<()> {
        Ok(())
    }
    pub fn cancel(&mut self, _context: Context) -> bool {
        false
    }
    pub fn handle_datagram(&mut self, _now: u64, _from: SocketAddr, _data: &[u8]) {}
    pub fn handle_timeout(&mut self, _now: u64) {}
    pub fn next_timeout(&self) -> Option<u64> {
        None
    }
    pub fn poll_transmit(&mut self, _now: u64, _buf: &mut [u8]) -> Option<Transmit> {
        None
    }
    pub fn requeue(&mut self, _t: &Transmit) {}
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }
    pub fn has_completions(&self) -> bool {
        !self.completions.is_empty()
    }
}
