//! Bit operations on slot bitmaps (1 = allocated), shared by the cluster
//! allocator (one 512-bit map per cluster) and the baseline (one map for the
//! whole device).

/// Bits at every multiple of `1 << order` in a word (order < 6).
const fn align_mask(order: u32) -> u64 {
    let step = 1u32 << order;
    let mut m = 0u64;
    let mut i = 0;
    while i < 64 {
        m |= 1u64 << i;
        i += step;
    }
    m
}

const ALIGN_MASKS: [u64; 6] = [
    align_mask(0),
    align_mask(1),
    align_mask(2),
    align_mask(3),
    align_mask(4),
    align_mask(5),
];

/// First naturally aligned run of `1 << order` clear bits starting at or
/// after bit `from` and ending at or before bit `limit` (exclusive).
#[inline(always)]
pub(crate) fn find_free(map: &[u64], from: usize, limit: usize, order: u32) -> Option<usize> {
    if order == 0 {
        find_zero(map, from, limit)
    } else {
        find_free_run(map, from, limit, order)
    }
}

/// Order 0, the common case: a word at a time, the first clear bit is the
/// lowest set bit of the inverted word.
#[inline(always)]
fn find_zero(map: &[u64], from: usize, limit: usize) -> Option<usize> {
    let mut wi = from / 64;
    let mut m = !map.get(wi)? & (!0u64 << (from % 64));
    loop {
        if m != 0 {
            let pos = wi * 64 + m.trailing_zeros() as usize;
            return (pos < limit).then_some(pos);
        }
        wi += 1;
        if wi * 64 >= limit {
            return None;
        }
        m = !*map.get(wi)?;
    }
}

#[inline(never)]
fn find_free_run(map: &[u64], from: usize, limit: usize, order: u32) -> Option<usize> {
    let n = 1usize << order;
    let mut off = from.checked_add(n - 1)? & !(n - 1);
    if order >= 6 {
        let words = n / 64;
        while off + n <= limit {
            let w = off / 64;
            if map[w..w + words].iter().all(|&x| x == 0) {
                return Some(off);
            }
            off += n;
        }
        return None;
    }
    let mut wi = off / 64;
    let mut low = off % 64;
    while wi * 64 < limit {
        let mut m = !map[wi] & (!0u64 << low);
        // Bit i survives the folding iff bits i..i+n are all clear.
        let mut s = 1;
        while s < n {
            m &= m >> s;
            s <<= 1;
        }
        m &= ALIGN_MASKS[order as usize];
        if m != 0 {
            let pos = wi * 64 + m.trailing_zeros() as usize;
            return (pos + n <= limit).then_some(pos);
        }
        wi += 1;
        low = 0;
    }
    None
}

/// The mask of `off..off+n` when the run lies inside one word (every order
/// below 6, so every order-0 operation): one mask, no loop.
#[inline(always)]
fn one_word(off: usize, n: usize) -> Option<(usize, u64)> {
    let lo = off % 64;
    (n != 0 && lo + n <= 64).then(|| (off / 64, (!0u64 >> (64 - n)) << lo))
}

/// Calls `f(word index, mask)` for every word that `off..off+n` touches.
#[inline(never)]
fn for_each_word(off: usize, n: usize, mut f: impl FnMut(usize, u64)) {
    let mut pos = off;
    let end = off + n;
    while pos < end {
        let w = pos / 64;
        let lo = pos % 64;
        let hi = (end - w * 64).min(64);
        let width = hi - lo;
        let mask = if width == 64 {
            !0
        } else {
            ((1u64 << width) - 1) << lo
        };
        f(w, mask);
        pos = w * 64 + hi;
    }
}

#[inline(always)]
pub(crate) fn all_set(map: &[u64], off: usize, n: usize) -> bool {
    if let Some((w, m)) = one_word(off, n) {
        return map[w] & m == m;
    }
    let mut ok = true;
    for_each_word(off, n, |w, m| ok &= map[w] & m == m);
    ok
}

#[inline(always)]
pub(crate) fn set(map: &mut [u64], off: usize, n: usize) {
    if let Some((w, m)) = one_word(off, n) {
        debug_assert_eq!(map[w] & m, 0);
        map[w] |= m;
        return;
    }
    for_each_word(off, n, |w, m| {
        debug_assert_eq!(map[w] & m, 0);
        map[w] |= m;
    });
}

#[inline(always)]
pub(crate) fn clear(map: &mut [u64], off: usize, n: usize) {
    if let Some((w, m)) = one_word(off, n) {
        debug_assert_eq!(map[w] & m, m);
        map[w] &= !m;
        return;
    }
    for_each_word(off, n, |w, m| {
        debug_assert_eq!(map[w] & m, m);
        map[w] &= !m;
    });
}

pub(crate) fn count_ones(map: &[u64]) -> u64 {
    map.iter().map(|w| u64::from(w.count_ones())).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_free_matches_naive_scan() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let mut map = [0u64; 8];
            for w in map.iter_mut() {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                // Sparse and dense maps both.
                *w = if rng & 1 == 0 {
                    rng & (rng >> 3)
                } else {
                    rng | (rng >> 5)
                };
            }
            for order in 0..=9u32 {
                let n = 1usize << order;
                let from = (rng as usize >> 20) % 512;
                let naive = (0..512)
                    .step_by(n)
                    .filter(|&o| o >= from)
                    .find(|&o| (o..o + n).all(|b| map[b / 64] & (1 << (b % 64)) == 0));
                assert_eq!(
                    find_free(&map, from, 512, order),
                    naive,
                    "order {order} from {from}"
                );
            }
        }
    }

    #[test]
    fn word_masks_match_bit_by_bit() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..5000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            // Every run inside one word, ending on a word boundary, or
            // spanning several: offsets 0..=511, lengths 1..=512-off.
            let off = (rng % 512) as usize;
            let n = 1 + ((rng >> 16) as usize % (512 - off));
            let mut map = [
                rng,
                !rng,
                rng.rotate_left(7),
                0,
                !0,
                rng >> 3,
                rng << 5,
                rng,
            ];
            let bit = |m: &[u64; 8], b: usize| m[b / 64] & (1 << (b % 64)) != 0;
            let naive_all = (off..off + n).all(|b| bit(&map, b));
            assert_eq!(all_set(&map, off, n), naive_all, "off {off} n {n}");
            let before = map;
            for b in off..off + n {
                map[b / 64] &= !(1 << (b % 64));
            }
            let cleared = map;
            map = before;
            // `clear` asserts the run is set (debug): set it first.
            for b in off..off + n {
                map[b / 64] |= 1 << (b % 64);
            }
            clear(&mut map, off, n);
            assert_eq!(map, cleared, "clear off {off} n {n}");
            set(&mut map, off, n);
            assert!((off..off + n).all(|b| bit(&map, b)));
            assert!((0..512)
                .filter(|b| !(off..off + n).contains(b))
                .all(|b| bit(&map, b) == bit(&before, b)));
            // A limit below the map's end is respected by the order-0 scan.
            let limit = (rng >> 32) as usize % 513;
            let naive = (off..limit).find(|&b| !bit(&before, b));
            assert_eq!(
                find_free(&before, off, limit, 0),
                naive,
                "off {off} limit {limit}"
            );
        }
    }

    #[test]
    fn set_clear_roundtrip() {
        let mut map = [0u64; 8];
        set(&mut map, 60, 70);
        assert!(all_set(&map, 60, 70));
        assert!(!all_set(&map, 59, 2));
        assert_eq!(count_ones(&map), 70);
        clear(&mut map, 61, 68);
        assert_eq!(count_ones(&map), 2);
        assert!(all_set(&map, 60, 1) && all_set(&map, 129, 1));
    }
}
