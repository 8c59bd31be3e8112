//! Same-host rendezvous copies: `process_vm_readv` out of a sender process
//! on this host (see `engine/rendezvous.rs`, `FI_UET_HOST_READ`).
//!
//! A process is named by (host, pid). The host value folds the boot ID
//! together with the PID namespace, so two processes agree on it exactly
//! when the pid one names means the same process to the other. The kernel
//! checks access itself (ptrace rules: same user, Yama's scope); a refused
//! copy makes the receiver pull over the network instead.

use std::os::unix::fs::MetadataExt;

use crate::engine::HostMemory;

/// The driver's [`HostMemory`].
pub struct ProcessMemory {
    host: u64,
    pid: u32,
}

impl ProcessMemory {
    /// `None` when this process cannot name its host (no boot ID or PID
    /// namespace to read): it then neither offers nor takes copies.
    pub fn new() -> Option<ProcessMemory> {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let namespace = std::fs::metadata("/proc/self/ns/pid").ok()?;
        Some(ProcessMemory {
            host: host_value(&boot, namespace.dev(), namespace.ino())?,
            pid: std::process::id(),
        })
    }
}

/// The boot ID (a UUID in text) folded with the PID namespace's device and
/// inode into 64 bits; `None` when the boot ID is not a UUID.
fn host_value(boot_id: &str, ns_dev: u64, ns_ino: u64) -> Option<u64> {
    let hex: String = boot_id.trim().chars().filter(|c| *c != '-').collect();
    let boot = u128::from_str_radix(&hex, 16)
        .ok()
        .filter(|_| hex.len() == 32)?;
    // Multiplying by odd constants spreads the namespace over all bits.
    let ns =
        ns_ino.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ns_dev.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    Some((boot as u64) ^ ((boot >> 64) as u64) ^ ns)
}

impl HostMemory for ProcessMemory {
    fn this_process(&self) -> (u64, u32) {
        (self.host, self.pid)
    }

    fn read(&self, pid: u32, address: u64, dst: &mut [u8]) -> bool {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        let mut done = 0usize;
        while done < dst.len() {
            let Some(from) = address.checked_add(done as u64) else {
                return false;
            };
            let rest = &mut dst[done..];
            let local = libc::iovec {
                iov_base: rest.as_mut_ptr().cast(),
                iov_len: rest.len(),
            };
            let remote = libc::iovec {
                iov_base: from as usize as *mut libc::c_void,
                iov_len: rest.len(),
            };
            // SAFETY: the local iovec covers `rest`, memory we hold mutably
            // for this call; the remote one names memory of another process,
            // which the kernel checks and reads on our behalf (a bad address
            // fails with EFAULT, never touching ours).
            let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
            match n {
                // Large copies may stop short (the kernel caps one call).
                1.. => done += n as usize,
                _ => return false,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_value_needs_a_uuid_and_tells_namespaces_apart() {
        let boot = "6b1f2a7e-3c4d-4e5f-8a9b-0c1d2e3f4a5b\n";
        let a = host_value(boot, 4, 0xeffffffc).unwrap();
        assert_eq!(host_value(boot, 4, 0xeffffffc), Some(a));
        assert_ne!(host_value(boot, 4, 0xeffffffd), Some(a));
        assert_ne!(
            host_value("6b1f2a7e-3c4d-4e5f-8a9b-0c1d2e3f4a5c", 4, 0xeffffffc),
            Some(a)
        );
        assert_eq!(host_value("not-a-uuid", 4, 1), None);
        assert_eq!(host_value("6b1f2a7e", 4, 1), None);
    }

    #[test]
    fn reads_this_process_and_refuses_bad_addresses() {
        let Some(m) = ProcessMemory::new() else {
            panic!("this host has no boot ID or PID namespace to read");
        };
        let (_, pid) = m.this_process();
        let src: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + 1) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        assert!(m.read(pid, src.as_ptr() as u64, &mut dst));
        assert_eq!(dst, src);
        assert!(!m.read(pid, 8, &mut dst[..16]), "page zero is never mapped");
        assert!(
            !m.read(pid, u64::MAX - 4, &mut dst[..16]),
            "a wrapping range"
        );
        assert!(!m.read(u32::MAX, src.as_ptr() as u64, &mut dst[..16]));
    }
}
