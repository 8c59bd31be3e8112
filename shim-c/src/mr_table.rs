//! The domain's registered memory, as the engine sees it: every remote
//! access is resolved here by key, checked against the region's bounds and
//! its FI_REMOTE_READ / FI_REMOTE_WRITE permission.
//!
//! Addressing follows the domain's MR mode: with FI_MR_VIRT_ADDR (or the
//! pre-1.5 FI_MR_BASIC) a target address is the virtual address of the
//! byte, otherwise it is the offset from the start of the region.

use std::collections::HashMap;
use std::os::raw::c_int;
use std::sync::Arc;

use parking_lot::RwLock;
use uet::{MemoryRegions, MsgBuffer};

use crate::bindings::*;
use crate::buffers::IovBuffer;
use crate::cntr::CntrInner;
use crate::errors::FiResult;

pub(crate) struct Region {
    pub(crate) mem: IovBuffer,
    /// Address of the region's first byte in the target-address space.
    pub(crate) base: u64,
    pub(crate) access: u64,
    /// FI_MR_ENDPOINT: usable only once bound to an endpoint and enabled.
    pub(crate) enabled: bool,
    /// Counters bound with fi_mr_bind (FI_RMA_EVENT), with the
    /// FI_REMOTE_WRITE / FI_REMOTE_READ events each counts.
    counters: Vec<(Arc<CntrInner>, u64)>,
}

pub(crate) struct MrTable {
    regions: RwLock<HashMap<u64, Region>>,
    /// Target addresses are virtual addresses.
    pub(crate) virt_addr: bool,
    /// Regions need fi_mr_enable before use.
    pub(crate) endpoint_mode: bool,
}

impl MrTable {
    pub(crate) fn new(mr_mode: c_int) -> MrTable {
        let basic = mr_mode == FI_MR_BASIC as c_int;
        MrTable {
            regions: RwLock::default(),
            virt_addr: basic || mr_mode & FI_MR_VIRT_ADDR as c_int != 0,
            endpoint_mode: !basic
                && mr_mode != FI_MR_SCALABLE as c_int
                && mr_mode & FI_MR_ENDPOINT as c_int != 0,
        }
    }

    /// Add a region; -FI_ENOKEY when the key is taken.
    pub(crate) fn insert(&self, key: u64, mem: IovBuffer, access: u64) -> FiResult<()> {
        let mut t = self.regions.write();
        if t.contains_key(&key) {
            return Err(FI_ENOKEY);
        }
        let base = if self.virt_addr {
            mem.base_addr() as u64
        } else {
            0
        };
        t.insert(
            key,
            Region {
                mem,
                base,
                access,
                enabled: !self.endpoint_mode,
                counters: Vec::new(),
            },
        );
        Ok(())
    }

    pub(crate) fn remove(&self, key: u64) {
        self.regions.write().remove(&key);
    }

    pub(crate) fn enable(&self, key: u64) {
        if let Some(r) = self.regions.write().get_mut(&key) {
            r.enabled = true;
        }
    }

    /// fi_mr_bind of a counter: it counts peers' accesses to the region in
    /// the directions of `events` (FI_REMOTE_WRITE, FI_REMOTE_READ).
    pub(crate) fn bind_counter(&self, key: u64, cntr: &Arc<CntrInner>, events: u64) {
        if let Some(r) = self.regions.write().get_mut(&key) {
            match r.counters.iter_mut().find(|(c, _)| Arc::ptr_eq(c, cntr)) {
                Some((_, ev)) => *ev |= events,
                None => r.counters.push((Arc::clone(cntr), events)),
            }
        }
    }

    /// Every counter bound to a region.
    pub(crate) fn counters(&self) -> Vec<Arc<CntrInner>> {
        let mut all: Vec<Arc<CntrInner>> = Vec::new();
        for r in self.regions.read().values() {
            for (c, _) in &r.counters {
                if !all.iter().any(|a| Arc::ptr_eq(a, c)) {
                    all.push(Arc::clone(c));
                }
            }
        }
        all
    }

    /// A peer's write (or atomic) or read of the region under `key` was
    /// served: bump the counters bound to it for that direction.
    pub(crate) fn count_remote(&self, key: u64, write: bool) {
        let event = if write {
            FI_REMOTE_WRITE as u64
        } else {
            FI_REMOTE_READ as u64
        };
        let hit: Vec<Arc<CntrInner>> = match self.regions.read().get(&key) {
            Some(r) => r
                .counters
                .iter()
                .filter(|(_, ev)| ev & event != 0)
                .map(|(c, _)| Arc::clone(c))
                .collect(),
            None => return,
        };
        // Outside the table lock: a counter wakes its waiters.
        for c in hit {
            c.completed(true);
        }
    }
}

impl MemoryRegions for MrTable {
    fn resolve(&self, key: u64, addr: u64, len: u64, write: bool) -> Option<Box<dyn MsgBuffer>> {
        let t = self.regions.read();
        let r = t.get(&key)?;
        let need = if write {
            FI_REMOTE_WRITE as u64
        } else {
            FI_REMOTE_READ as u64
        };
        if !r.enabled || r.access & need == 0 {
            return None;
        }
        let start = addr.checked_sub(r.base)?;
        let end = start.checked_add(len)?;
        if end > r.mem.len() as u64 {
            return None;
        }
        Some(Box::new(r.mem.range(start as usize, len as usize)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accesses_are_checked_by_key_range_and_permission() {
        let mut mem = vec![0u8; 100];
        let t = MrTable::new(0);
        let buf = IovBuffer::single(mem.as_mut_ptr().cast(), 100).unwrap();
        t.insert(5, buf, FI_REMOTE_READ as u64).unwrap();
        assert!(t.resolve(5, 10, 90, false).is_some());
        assert!(t.resolve(5, 10, 91, false).is_none(), "past the end");
        assert!(t.resolve(5, 0, 1, true).is_none(), "no write permission");
        assert!(t.resolve(6, 0, 1, false).is_none(), "unknown key");
        let buf = IovBuffer::single(mem.as_mut_ptr().cast(), 100).unwrap();
        assert_eq!(t.insert(5, buf, 0), Err(FI_ENOKEY));
        t.remove(5);
        assert!(t.resolve(5, 0, 1, false).is_none(), "closed region");

        let v = MrTable::new(FI_MR_VIRT_ADDR as c_int | FI_MR_ENDPOINT as c_int);
        let buf = IovBuffer::single(mem.as_mut_ptr().cast(), 100).unwrap();
        v.insert(1, buf, FI_REMOTE_WRITE as u64).unwrap();
        let va = mem.as_ptr() as u64;
        assert!(v.resolve(1, va, 4, true).is_none(), "not enabled yet");
        v.enable(1);
        assert!(v.resolve(1, va + 96, 4, true).is_some());
        assert!(v.resolve(1, 0, 4, true).is_none(), "offset in virtual mode");
    }

    #[test]
    fn region_counters_count_their_direction_and_region_only() {
        let mut mem = vec![0u8; 64];
        let t = MrTable::new(0);
        let rw = (FI_REMOTE_READ | FI_REMOTE_WRITE) as u64;
        let buf = IovBuffer::single(mem.as_mut_ptr().cast(), 64).unwrap();
        t.insert(5, buf, rw).unwrap();
        let (writes, reads) = (CntrInner::for_test(), CntrInner::for_test());
        t.bind_counter(5, &writes, FI_REMOTE_WRITE as u64);
        t.bind_counter(5, &reads, FI_REMOTE_READ as u64);
        t.bind_counter(5, &reads, FI_REMOTE_READ as u64);
        t.count_remote(5, true);
        t.count_remote(5, true);
        t.count_remote(5, false);
        t.count_remote(6, true);
        assert_eq!((writes.value(), reads.value()), (2, 1));
        assert_eq!(t.counters().len(), 2);
        t.remove(5);
        assert_eq!(
            Arc::strong_count(&writes),
            1,
            "closed region still holds its counter"
        );
        t.count_remote(5, true);
        assert_eq!(writes.value(), 2);
    }
}
