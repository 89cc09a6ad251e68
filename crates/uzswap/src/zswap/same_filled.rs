//! Same-filled pages (seed 004): a page whose 8-byte words are all equal is
//! kept as that word. Zero pages are the common case; non-zero repeated words
//! (17-40% of same-filled pages in the data the seed quotes) are kept too
//! unless the instance turns that off.

use crate::PAGE_SIZE;

/// The repeated word if `page` is same-filled.
///
/// The page is read front to back, a cache line at a time, and the scan
/// stops at the first line that differs: for a page of data that is the
/// first line, which the compressor reads first anyway. The kernel
/// (`zswap_is_folio_same_filled`) compares the last word before its scan,
/// which catches a page with a zero head and data at its end one scan
/// sooner, but costs every page of data a load from the page's far end
/// before the compressor streams it from the front: a second cache miss
/// that nothing overlaps, taken just as the hardware prefetcher should be
/// following the stream. Measured on `bench engine`'s lz4 index store, one
/// build with both orders selectable: 0.73 of raw lz4 with the last word
/// first, 0.84-0.85 front to back, the same as skipping the check
/// (docs/BENCHMARKS.md, "The same-filled check reads the page front to
/// back"). Only the first word's line is sure to be read; a compiler may
/// not hoist a later line's loads above the early exit, as it may two
/// independent word loads.
pub(crate) fn same_filled_value(page: &[u8]) -> Option<u64> {
    debug_assert_eq!(page.len(), PAGE_SIZE);
    // SAFETY: every bit pattern is a valid u64; align_to only reinterprets
    // the aligned middle of the slice and hands back the unaligned ends.
    let (head, words, tail) = unsafe { page.align_to::<u64>() };
    if !head.is_empty() || !tail.is_empty() {
        // Unaligned page (not from a region or the pool): compare bytewise.
        let first: [u8; 8] = page[..8].try_into().expect("a page has 8 bytes");
        return page
            .chunks_exact(8)
            .all(|w| w == first)
            .then_some(u64::from_ne_bytes(first));
    }
    let first = words[0];
    // A line's eight words at once (the OR of their differences): one
    // vector compare and one branch per line.
    for line in words.chunks_exact(LINE_WORDS) {
        if line.iter().fold(0, |d, &w| d | (w ^ first)) != 0 {
            return None;
        }
    }
    Some(first)
}

/// 8-byte words in a 64-byte cache line.
const LINE_WORDS: usize = 8;

/// Fill `out` with `value` repeated.
pub(crate) fn fill(out: &mut [u8], value: u64) {
    if value == 0 {
        out.fill(0);
        return;
    }
    let pat = value.to_ne_bytes();
    for w in out.chunks_exact_mut(8) {
        w.copy_from_slice(&pat);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_zero_and_repeated_words() {
        let mut p = vec![0u8; PAGE_SIZE];
        assert_eq!(same_filled_value(&p), Some(0));
        fill(&mut p, 0xdead_beef_0bad_f00d);
        assert_eq!(same_filled_value(&p), Some(0xdead_beef_0bad_f00d));
        for pos in [0, 1, 7, 8, 2048, PAGE_SIZE - 9, PAGE_SIZE - 1] {
            let mut q = p.clone();
            q[pos] ^= 1;
            assert_eq!(same_filled_value(&q), None, "byte {pos}");
        }
    }

    #[test]
    fn unaligned_page_is_handled() {
        let mut buf = vec![7u8; PAGE_SIZE + 1];
        assert_eq!(
            same_filled_value(&buf[1..]),
            Some(u64::from_ne_bytes([7; 8]))
        );
        buf[100] = 8;
        assert_eq!(same_filled_value(&buf[1..]), None);
    }
}
