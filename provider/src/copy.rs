//! Payload copies that stay off a slow path of `rep movsb`.
//!
//! glibc's `memcpy` copies more than about 2 KiB (its
//! `x86_rep_movsb_threshold`) with `rep movsb`. On AMD Zen processors that
//! instruction runs about 15x slower when the destination lies 1 to 31 bytes
//! past the source modulo 4 KiB (`make bench` machine: 2 GB/s against 30).
//! Packets put payloads at every such distance from the application's
//! buffer: a 4 KiB packet's payload follows a 56-byte header, so the
//! distance moves by 56 bytes a packet. Copies at a bad distance are done in
//! pieces below the threshold, which glibc copies with vector registers.
//! Every other copy is a plain `copy_from_slice`.

/// Page size the processor compares addresses modulo.
const ALIAS_SPAN: usize = 4096;
/// Distances (destination minus source, modulo [`ALIAS_SPAN`]) treated as
/// slow: the measured 1..=31, with a margin.
const SLOW_DISTANCE: std::ops::Range<usize> = 1..64;
/// Copies up to this long never use `rep movsb` (below every default
/// threshold of glibc, the lowest being 2048 bytes).
const PIECE: usize = 1024;

/// `dst.copy_from_slice(src)`, in pieces when one `rep movsb` would be slow.
/// The lengths must match, as for `copy_from_slice`.
#[inline]
pub fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    if dst.len() > PIECE && SLOW_DISTANCE.contains(&alias_distance(dst, src)) {
        assert_eq!(dst.len(), src.len(), "copy_bytes: slice lengths differ");
        for (d, s) in dst.chunks_mut(PIECE).zip(src.chunks(PIECE)) {
            d.copy_from_slice(s);
        }
    } else {
        dst.copy_from_slice(src);
    }
}

/// How far `dst` starts past `src`, modulo [`ALIAS_SPAN`].
fn alias_distance(dst: &[u8], src: &[u8]) -> usize {
    (dst.as_ptr() as usize).wrapping_sub(src.as_ptr() as usize) % ALIAS_SPAN
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Source and destination `distance` bytes apart modulo the span, from
    /// one allocation split in two, so the distance is exact.
    fn with_pair(distance: usize, len: usize, f: impl FnOnce(&mut [u8], &[u8])) {
        let mut buf = vec![0u8; 2 * (2 * ALIAS_SPAN + len)];
        let (a, b) = buf.split_at_mut(2 * ALIAS_SPAN + len);
        for (i, x) in a.iter_mut().enumerate() {
            *x = (i * 7 + 3) as u8;
        }
        let src = &a[..len];
        let skip = (distance + ALIAS_SPAN - alias_distance(b, src)) % ALIAS_SPAN;
        let dst = &mut b[skip..skip + len];
        assert_eq!(alias_distance(dst, src), distance);
        f(dst, src);
    }

    /// Every distance near the slow range, lengths around the piece size:
    /// the bytes arrive intact (both paths).
    #[test]
    fn copies_exactly_at_every_distance() {
        for distance in (0..96).chain(ALIAS_SPAN - 32..ALIAS_SPAN) {
            for len in [0, 1, PIECE, PIECE + 1, 4040, 2 * ALIAS_SPAN + 17] {
                with_pair(distance, len, |dst, src| {
                    copy_bytes(dst, src);
                    assert_eq!(dst, src);
                });
            }
        }
    }

    /// Mismatched lengths panic on both paths, as `copy_from_slice` does.
    #[test]
    #[should_panic(expected = "length")]
    fn lengths_must_match() {
        copy_bytes(&mut [0u8; 9], &[1u8; 8]);
    }

    #[test]
    #[should_panic(expected = "length")]
    fn lengths_must_match_on_the_piecewise_path() {
        with_pair(8, 3 * PIECE, |dst, src| copy_bytes(dst, &src[1..]));
    }
}
