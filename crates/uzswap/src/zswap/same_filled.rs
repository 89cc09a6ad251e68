//! Same-filled pages (seed 004): a page whose 8-byte words are all equal is
//! kept as that word. Zero pages are the common case; non-zero repeated words
//! (17-40% of same-filled pages in the data the seed quotes) are kept too
//! unless the instance turns that off.

use crate::PAGE_SIZE;

/// The repeated word if `page` is same-filled.
pub(crate) fn same_filled_value(page: &[u8]) -> Option<u64> {
    debug_assert_eq!(page.len(), PAGE_SIZE);
    let word = |i: usize| u64::from_ne_bytes(page[i * 8..i * 8 + 8].try_into().unwrap());
    let first = word(0);
    // Most pages differ early or late: check the last word before the scan,
    // as the kernel does, so typical non-same pages cost two loads.
    if word(PAGE_SIZE / 8 - 1) != first {
        return None;
    }
    // SAFETY: every bit pattern is a valid u64; align_to only reinterprets
    // the aligned middle of the slice and hands back the unaligned ends.
    let (head, words, tail) = unsafe { page.align_to::<u64>() };
    if !head.is_empty() || !tail.is_empty() {
        // Unaligned page (not from a region or the pool): compare bytewise.
        let pat = first.to_ne_bytes();
        return page.chunks_exact(8).all(|w| w == pat).then_some(first);
    }
    words.iter().all(|&w| w == first).then_some(first)
}

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
