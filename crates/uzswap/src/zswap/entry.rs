//! The key of a stored page and the per-page record zswap keeps for it.

use crate::compress::CompressorId;
use crate::swap::SwapSlot;
use crate::zpool::Handle;

/// The key of a stored page: (region id, page index), packed in a u64 with
/// the region in the top 24 bits and the page index in the low 40 (4 PiB of
/// pages per region). Consecutive pages of a region have consecutive keys, so
/// a folio is a contiguous key range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SwapEntry(pub u64);

impl SwapEntry {
    pub const INDEX_BITS: u32 = 40;
    pub const MAX_REGION: u32 = (1 << 24) - 1;

    pub fn new(region: u32, index: u64) -> Self {
        assert!(
            region <= Self::MAX_REGION,
            "region id {region} out of range"
        );
        assert!(
            index < 1 << Self::INDEX_BITS,
            "page index {index} out of range"
        );
        SwapEntry(((region as u64) << Self::INDEX_BITS) | index)
    }
    pub fn region(self) -> u32 {
        (self.0 >> Self::INDEX_BITS) as u32
    }
    pub fn index(self) -> u64 {
        self.0 & ((1 << Self::INDEX_BITS) - 1)
    }
    /// The entry `n` pages after this one (same region).
    pub fn offset(self, n: u64) -> Self {
        debug_assert!(self.index() + n < 1 << Self::INDEX_BITS);
        SwapEntry(self.0 + n)
    }
}

/// Where a stored page's content is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Payload {
    /// Every 8-byte word of the page holds this value (zero pages included):
    /// no pool object, no compression (seed 004).
    SameFilled(u64),
    /// A pool object holding the page compressed by `comp` (`None`: stored
    /// as is, because it compressed poorly).
    Pool {
        handle: Handle,
        len: u16,
        comp: Option<CompressorId>,
    },
    /// Written back: `len` bytes from byte `off` of `slot` on the swap
    /// device (runs are packed, so an object may go on into the next slot)
    /// hold the page compressed by `comp`, or the plain page when `comp` is
    /// `None` (then `len` is PAGE_SIZE). Not on the LRU.
    Device {
        slot: SwapSlot,
        off: u16,
        len: u16,
        comp: Option<CompressorId>,
    },
    /// Inherited at a fork: `len` bytes at `addr` in this process's
    /// copy-on-write copy of the parent's pool (an instance given up in the
    /// child and never called, changed or unmapped again), holding the page
    /// compressed by `comp` or as is (`None`). Memory the child shares with
    /// its parent, so it is charged to neither pool: the entry holds no
    /// memory of this instance, as a written-back one holds none, and is
    /// kept as a clean copy as such entries are (`holds_no_memory`). Never
    /// on the LRU, never written back. (Kernel: the swap entries a child
    /// shares with its parent after `copy_pte_range`'s `swap_duplicate`.)
    Inherited {
        addr: usize,
        len: u16,
        comp: Option<CompressorId>,
    },
}

/// The per-page record (kernel: struct zswap_entry).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ZswapEntry {
    pub payload: Payload,
    /// [`checksum`] of the stored object's bytes, seeded with the key;
    /// binding the key in catches an entry that points at another page's
    /// object.
    pub csum: u32,
    /// Set when stored, cleared by the shrinker's first pass (second chance).
    pub referenced: bool,
    /// For pool entries: the LRU sequence number of this incarnation (unique
    /// for the instance's life, given by the tree on insert and on rotation).
    /// It names the entry's LRU node and lets writeback tell "the same entry"
    /// from "a new entry that reuses the key and even the handle". 0 for
    /// entries not on the LRU (same-filled, written back).
    pub lru_seq: u64,
    /// A pool entry whose page the caller holds unchanged (a
    /// `LoadMode::KeepPinned` load): off the LRU, so the shrinker does not
    /// write back a copy of a resident page, until
    /// [`Zswap::unpin_folio`](super::Zswap::unpin_folio) puts it back.
    pub pinned: bool,
    /// A pool entry that is a droppable copy of a page the caller holds
    /// unchanged (a `LoadMode::KeepClean` load): off the LRU, on its shard's
    /// clean ring. The cache frees clean copies, oldest first and without
    /// I/O, before it writes anything back; the caller claims the copy
    /// ([`Zswap::claim_clean`](super::Zswap::claim_clean)) before it relies
    /// on it again.
    pub clean: bool,
    /// The entry has had its pass through the dense compressor
    /// (`recompress`): its object was recompressed, or would not have
    /// shrunk enough to be worth it. The shrinker writes it back when it
    /// meets it again. Always false without a dense compressor.
    pub recompressed: bool,
}

impl ZswapEntry {
    pub fn handle(&self) -> Option<Handle> {
        match self.payload {
            Payload::Pool { handle, .. } => Some(handle),
            Payload::SameFilled(_) | Payload::Device { .. } | Payload::Inherited { .. } => None,
        }
    }

    /// A stored page whose object is in no memory of this instance's: on
    /// the device, or in the copy of a parent's pool (`Inherited`). A copy
    /// of such a page kept clean frees nothing when dropped (`chunk::KEPT`).
    pub fn holds_no_memory(&self) -> bool {
        matches!(
            self.payload,
            Payload::Device { .. } | Payload::Inherited { .. }
        )
    }

    /// Pool entries are the LRU's members (kernel: entries with a length).
    pub fn on_lru(&self) -> bool {
        matches!(self.payload, Payload::Pool { .. }) && !self.pinned && !self.clean
    }

    /// A pool entry stored as is (it did not compress).
    pub fn is_raw(&self) -> bool {
        matches!(self.payload, Payload::Pool { comp: None, .. })
    }

    pub fn slot(&self) -> Option<crate::swap::SwapSlot> {
        self.place().map(|p| p.slot)
    }

    /// Where a written-back entry's object lies on the device.
    pub fn place(&self) -> Option<super::swap_map::DevicePlace> {
        match self.payload {
            Payload::Device { slot, off, len, .. } => {
                Some(super::swap_map::DevicePlace { slot, off, len })
            }
            _ => None,
        }
    }
}

/// The checksum stored with an object: XXH3-64 seeded with the key, folded
/// to 32 bits. A 32-bit CRC would add a guarantee for short burst errors,
/// which memory and disks do not produce in isolation (a bad page or a
/// misdirected write changes much more, and any change escapes a good
/// 32-bit hash with odds of 2^-32); XXH3 takes half of crc32c's time on
/// this hardware (the crate picks its SIMD width at run time), and every
/// load of a compressed page pays it.
pub(crate) fn checksum(key: SwapEntry, object: &[u8]) -> u32 {
    let h = twox_hash::XxHash3_64::oneshot_with_seed(key.0, object);
    (h ^ h >> 32) as u32
}
