//! seal: authenticated encryption (AES-256-GCM) of every page writeback
//! puts on the swap device, so the file holds no program data in clear and
//! a page changed, swapped or replayed under the instance fails to load
//! instead of loading wrong.
//!
//! Owns the instance's key and a side table with, per device slot, the
//! write version and the 16-byte tag of the page last sealed there. Both
//! live only in memory: the swap file is unlinked and never outlives the
//! instance, so nothing about them needs to be on disk. The key is random
//! per instance, kept in a [`SecretPage`] (locked where allowed, never
//! dumped, wiped on drop with the cipher's expanded key). The nonce is the
//! slot (40 bits) and its write version (56 bits), bumped before every
//! seal of the slot, so no (key, nonce) pair is ever used twice; the
//! version is never reset while the key lives, even when the slot is freed.
//!
//! A page is sealed and opened whole, one slot at a time, so a load can
//! read and check any stretch of slots, whatever run wrote them.
//!
//! Locking: none. A slot's record is written only by the writeback that
//! allocated the slot, before its entries are switched to the device under
//! their shard lock; it is read only by loads of entries that point at the
//! slot, found under that lock (and pinned in the swap map while read), so
//! the shard lock orders every record write before the reads that depend on
//! it. The fields are atomics (relaxed) only so that no access is a data
//! race in the language's terms.

use super::secret::{fill_random, SecretPage};
use crate::swap::{SlotTable, SwapSlot, ZeroedRecord};
use crate::PAGE_SIZE;
use aes_gcm::aead::{AeadInOut, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use zeroize::Zeroize;

/// Slots the nonce can name: 2^40 (a 4 PiB device).
const SLOT_BITS: u32 = 40;
/// Seals of one slot the nonce can count.
const VERSION_LIMIT: u64 = 1 << (96 - SLOT_BITS);

/// Why a page could not be sealed or opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SealError {
    /// The page in this slot failed authentication (or was never sealed).
    Auth(SwapSlot),
    /// The slot was sealed 2^56 times: it cannot take another nonce.
    Exhausted(SwapSlot),
}

#[repr(C)]
struct SlotRecord {
    /// Seals of this slot so far (0: never sealed).
    version: AtomicU64,
    tag: [AtomicU64; 2],
}

// SAFETY: every field is an atomic: all-zero bytes are a valid record (a
// slot never sealed) and shared access is through `&` only.
unsafe impl ZeroedRecord for SlotRecord {}

/// The sealing state of one instance's writeback.
pub(super) struct Sealer {
    cipher: SecretPage<Aes256Gcm>,
    /// One record per slot (reserved, not committed: a large, mostly idle
    /// device costs 24 bytes per slot used, not per slot).
    slots: SlotTable<SlotRecord>,
}

fn nonce(slot: u64, version: u64) -> Nonce<aes_gcm::aead::consts::U12> {
    let mut n = [0u8; 12];
    n[..5].copy_from_slice(&slot.to_le_bytes()[..5]);
    n[5..].copy_from_slice(&version.to_le_bytes()[..7]);
    n.into()
}

impl Sealer {
    /// A fresh random key for a device of `capacity` slots.
    pub fn new(capacity: u64) -> io::Result<Sealer> {
        if capacity > 1 << SLOT_BITS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a device of {capacity} slots is beyond the {SLOT_BITS}-bit slot nonce"),
            ));
        }
        let cipher = SecretPage::new::<32>(
            |k| fill_random(k),
            |key| Aes256Gcm::new_from_slice(key).expect("a 32-byte key"),
        )?;
        Ok(Sealer {
            cipher,
            slots: SlotTable::new(capacity as usize)?,
        })
    }

    /// Seal `buf`, pages for the slots from `first` on, in place.
    pub fn seal(&self, first: SwapSlot, buf: &mut [u8]) -> Result<(), SealError> {
        for (i, page) in buf.chunks_exact_mut(PAGE_SIZE).enumerate() {
            let slot = first.0 + i as u64;
            let rec = self.slots.get(slot);
            let v = rec.version.load(Relaxed) + 1;
            if v >= VERSION_LIMIT {
                return Err(SealError::Exhausted(SwapSlot(slot)));
            }
            rec.version.store(v, Relaxed);
            let tag = self
                .cipher
                .encrypt_inout_detached(&nonce(slot, v), &[], page.into())
                .expect("AES-GCM seals a page of any content");
            let t: [u8; 16] = tag.into();
            rec.tag[0].store(u64::from_le_bytes(t[..8].try_into().unwrap()), Relaxed);
            rec.tag[1].store(u64::from_le_bytes(t[8..].try_into().unwrap()), Relaxed);
        }
        Ok(())
    }

    /// Check and decrypt `buf`, pages read from the slots from `first` on,
    /// in place. On failure the page that failed is zeroed (its bytes are
    /// not program data anyone may see) and named.
    pub fn open(&self, first: SwapSlot, buf: &mut [u8]) -> Result<(), SealError> {
        for (i, page) in buf.chunks_exact_mut(PAGE_SIZE).enumerate() {
            let slot = first.0 + i as u64;
            let rec = self.slots.get(slot);
            let v = rec.version.load(Relaxed);
            let mut t = [0u8; 16];
            t[..8].copy_from_slice(&rec.tag[0].load(Relaxed).to_le_bytes());
            t[8..].copy_from_slice(&rec.tag[1].load(Relaxed).to_le_bytes());
            let ok = v != 0
                && self
                    .cipher
                    .decrypt_inout_detached(
                        &nonce(slot, v),
                        &[],
                        (&mut *page).into(),
                        &Tag::from(t),
                    )
                    .is_ok();
            if !ok {
                page.zeroize();
                return Err(SealError::Auth(SwapSlot(slot)));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(tag: u8) -> Vec<u8> {
        (0..PAGE_SIZE).map(|i| (i as u8) ^ tag).collect()
    }

    #[test]
    fn seal_then_open_round_trips_and_hides_the_page() {
        let s = Sealer::new(64).unwrap();
        let plain = [page(1), page(2)].concat();
        let mut buf = plain.clone();
        s.seal(SwapSlot(10), &mut buf).unwrap();
        assert_ne!(buf[..PAGE_SIZE], plain[..PAGE_SIZE]);
        assert_ne!(buf[PAGE_SIZE..], plain[PAGE_SIZE..]);
        s.open(SwapSlot(10), &mut buf).unwrap();
        assert_eq!(buf, plain);
    }

    #[test]
    fn a_flipped_bit_a_moved_page_or_a_replay_fails() {
        let s = Sealer::new(64).unwrap();
        let mut a = page(7);
        s.seal(SwapSlot(3), &mut a).unwrap();
        // Flipped bit.
        let mut bad = a.clone();
        bad[100] ^= 1;
        assert_eq!(
            s.open(SwapSlot(3), &mut bad),
            Err(SealError::Auth(SwapSlot(3)))
        );
        assert!(bad.iter().all(|&b| b == 0), "a failed page is zeroed");
        // Moved to another slot (sealed there too, so it has a tag).
        let mut other = page(8);
        s.seal(SwapSlot(4), &mut other).unwrap();
        let mut moved = a.clone();
        assert!(s.open(SwapSlot(4), &mut moved).is_err());
        // Replayed: slot 3 sealed again, the old ciphertext no longer opens.
        let mut newer = page(9);
        s.seal(SwapSlot(3), &mut newer).unwrap();
        let mut old = a.clone();
        assert!(s.open(SwapSlot(3), &mut old).is_err());
        s.open(SwapSlot(3), &mut newer).unwrap();
        assert_eq!(newer, page(9));
        // Never sealed.
        let mut z = vec![0u8; PAGE_SIZE];
        assert!(s.open(SwapSlot(20), &mut z).is_err());
    }

    #[test]
    fn two_instances_do_not_share_a_key() {
        let (s1, s2) = (Sealer::new(8).unwrap(), Sealer::new(8).unwrap());
        let (mut a, mut b) = (page(1), page(1));
        s1.seal(SwapSlot(0), &mut a).unwrap();
        s2.seal(SwapSlot(0), &mut b).unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn nonces_are_distinct_per_slot_and_version() {
        assert_ne!(nonce(1, 2), nonce(2, 1));
        assert_ne!(nonce(1 << 39, 1), nonce(0, 1));
        assert_ne!(nonce(0, VERSION_LIMIT - 1), nonce(0, 1));
    }
}

#[cfg(test)]
mod speed {
    use super::*;

    /// `cargo test --release -p uzswap --lib seal_speed -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn seal_speed() {
        let s = Sealer::new(1024).unwrap();
        let mut buf = vec![7u8; 64 * PAGE_SIZE];
        let t = std::time::Instant::now();
        let rounds = 200;
        for _ in 0..rounds {
            s.seal(SwapSlot(0), &mut buf).unwrap();
            s.open(SwapSlot(0), &mut buf).unwrap();
        }
        let per = t.elapsed().as_secs_f64() / (rounds * 64) as f64 / 2.0;
        eprintln!(
            "seal or open: {:.2} us per page, {:.0} MB/s",
            per * 1e6,
            PAGE_SIZE as f64 / per / 1e6
        );
    }
}
