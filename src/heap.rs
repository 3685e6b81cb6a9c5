//! The operator's allocator, jemalloc, and what it gives back to the kernel.
//!
//! The pod cache is many small blocks that live long, rebuilt on each pod event, among the
//! short-lived blocks of decoding that event. glibc's allocator left those live blocks spread
//! over pages it could not give back; jemalloc keeps blocks of one size class together in their
//! own pages, so it holds less RSS per cached pod and spends less CPU per pod event (the
//! measurements are in `e2e/bench/HISTORY.md`). The binary installs [`Allocator`] as its global
//! allocator (`src/main.rs`); the library's own tests keep the system allocator.

use std::time::Duration;

/// The operator binary's global allocator.
pub type Allocator = tikv_jemallocator::Jemalloc;

/// How often the heap is purged: rarely enough to cost nothing, often enough that RSS follows
/// the caches, not the peaks.
pub(crate) const TRIM_EVERY: Duration = Duration::from_secs(10);

/// Returns the free pages of every arena to the kernel now (jemalloc would otherwise give them
/// back only as it allocates again, after its decay time); whether the call succeeded.
pub(crate) fn trim() -> bool {
    // "arena.<MALLCTL_ARENAS_ALL>.purge", MALLCTL_ARENAS_ALL being 4096: a call that takes and
    // returns nothing, so it goes through mallctl itself (tikv-jemalloc-ctl writes a value).
    const PURGE_ALL: &[u8] = b"arena.4096.purge\0";
    // SAFETY: the name is NUL-terminated; no value is read or written, as the call requires.
    unsafe {
        tikv_jemalloc_sys::mallctl(PURGE_ALL.as_ptr().cast(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), 0) == 0
    }
}

/// What the allocator holds: bytes handed out to the program, and bytes it keeps resident
/// beyond them (free space in its pages, pages not yet purged, its own metadata). When RSS grows
/// while `in_use` stays flat, the growth is fragmentation, not a leak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Usage {
    pub in_use: u64,
    pub free: u64,
}

/// jemalloc's counts over all its arenas; `None` if it cannot tell.
pub(crate) fn usage() -> Option<Usage> {
    use tikv_jemalloc_ctl::{epoch, stats};
    // The statistics are a snapshot taken when the epoch advances.
    epoch::advance().ok()?;
    let (allocated, resident) = (stats::allocated::read().ok()?, stats::resident::read().ok()?);
    Some(Usage { in_use: allocated as u64, free: resident.saturating_sub(allocated) as u64 })
}

/// Purges the heap every [`TRIM_EVERY`] until the process ends.
pub async fn trim_periodically() {
    let mut tick = tokio::time::interval(TRIM_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        trim();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::{GlobalAlloc, Layout};
    use std::sync::Mutex;

    /// jemalloc's counts are the whole process's: the tests here allocate and free tens of MiB
    /// through it, so running them side by side makes each see the other's.
    static ONE_BURST_AT_A_TIME: Mutex<()> = Mutex::new(());

    /// Blocks taken from [`Allocator`] itself (this test binary's global allocator is the
    /// system's), freed when dropped.
    struct Blocks(Vec<*mut u8>);

    const BLOCK: Layout = match Layout::from_size_align(4096, 8) {
        Ok(l) => l,
        Err(_) => panic!("a valid layout"),
    };

    impl Blocks {
        fn take(n: usize) -> Self {
            // SAFETY: BLOCK has a non-zero size; each block is written before it is counted.
            Self(
                (0..n)
                    .map(|i| unsafe {
                        let p = Allocator {}.alloc(BLOCK);
                        assert!(!p.is_null());
                        p.write_bytes((i % 251) as u8, BLOCK.size());
                        p
                    })
                    .collect(),
            )
        }
    }

    impl Drop for Blocks {
        fn drop(&mut self) {
            for &p in &self.0 {
                // SAFETY: each pointer came from Allocator::alloc with BLOCK, and is freed once.
                unsafe { Allocator {}.dealloc(p, BLOCK) };
            }
        }
    }

    #[test]
    fn a_freed_burst_is_given_back() {
        let _alone = ONE_BURST_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        // 64 MiB in small blocks, freed but for one: without a purge the freed pages stay
        // resident until jemalloc's decay time passes with allocations going on.
        let mut blocks = Blocks::take(16 * 1024);
        let pin = Blocks(blocks.0.split_off(blocks.0.len() - 1));
        let before = usage().unwrap();
        drop(blocks);
        let freed = usage().unwrap();
        assert!(trim(), "the purge is a known mallctl");
        let after = usage().unwrap();
        let resident = |u: Usage| u.in_use + u.free;
        assert!(freed.in_use + 60 * 1024 * 1024 <= before.in_use, "{before:?} -> {freed:?}");
        assert!(resident(freed) >= resident(after) + 32 * 1024 * 1024, "resident {freed:?} -> {after:?} after the purge");
        drop(pin);
    }

    #[test]
    fn usage_counts_what_is_held_and_what_was_freed() {
        let _alone = ONE_BURST_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let before = usage().unwrap();
        let blocks = Blocks::take(8 * 1024);
        let held = usage().unwrap();
        drop(blocks);
        let freed = usage().unwrap();
        let margin = 30 * 1024 * 1024;
        assert!(held.in_use >= before.in_use + margin, "32 MiB held: {before:?} -> {held:?}");
        assert!(freed.in_use + margin <= held.in_use, "32 MiB freed: {held:?} -> {freed:?}");
        assert!(freed.free >= margin, "freed and not yet purged, so still resident: {freed:?}");
    }
}
