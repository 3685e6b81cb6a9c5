//! Gives freed heap memory back to the kernel.
//!
//! glibc's allocator keeps what a burst freed (a rollout decodes thousands of pod events) inside
//! its heaps, so resident memory stays at the burst's peak. `malloc_trim(0)` releases every
//! whole free page of every arena (with `madvise(MADV_DONTNEED)`), which brings a quiet
//! operator's RSS back to what its caches hold. Other C libraries (musl) have no such call and
//! need none of this.

use std::time::Duration;

/// How often the heap is trimmed: rarely enough to cost nothing (a trim of a few tens of MiB
/// takes well under a millisecond), often enough that RSS follows the caches, not the peaks.
pub const TRIM_EVERY: Duration = Duration::from_secs(10);

/// Returns free heap pages to the kernel; whether any memory was released.
pub fn trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes the arenas' locks itself; any thread may call it at any time.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// What the allocator holds: bytes handed out to the program, and bytes it keeps free inside its
/// heaps (free pages among them are given back by [`trim`], but a page with one live block in it
/// stays resident). When RSS grows while `in_use` stays flat, the growth is fragmentation, not
/// a leak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub in_use: u64,
    pub free: u64,
}

/// The allocator's counts over all its arenas (glibc's `mallinfo2`); `None` where the C library
/// has no such call.
pub fn usage() -> Option<Usage> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 takes each arena's lock itself and only reads.
        let info = unsafe { libc::mallinfo2() };
        Some(Usage { in_use: (info.uordblks + info.hblkhd) as u64, free: info.fordblks as u64 })
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

/// Trims the heap every [`TRIM_EVERY`] until the process ends.
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
    use std::sync::Mutex;

    /// The allocator's counts and RSS are the whole process's: the two tests here allocate and
    /// free tens of MiB each, so running them side by side makes each see the other's burst.
    static ONE_BURST_AT_A_TIME: Mutex<()> = Mutex::new(());

    #[test]
    fn a_freed_burst_is_given_back() {
        let _alone = ONE_BURST_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        // 64 MiB in small blocks, freed but for one block at the top of the heap, which keeps
        // free() from shrinking the heap by itself: without a trim all of it stays resident.
        let mut blocks: Vec<Vec<u8>> = (0..16 * 1024).map(|i| vec![(i % 251) as u8; 4096]).collect();
        let pin = blocks.pop();
        let before = resident_kib();
        drop(blocks);
        trim();
        let after = resident_kib();
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        assert!(before - after > 32 * 1024, "RSS {before} KiB -> {after} KiB");
        let _ = (before, after, pin);
    }

    #[test]
    fn usage_counts_what_is_held_and_what_was_freed() {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        {
            let _alone = ONE_BURST_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
            // Other test threads allocate and free too, so compare with a margin far above their
            // noise, and let one of three tries pass: a counter that never moves fails all three.
            let mut tries = Vec::new();
            for _ in 0..3 {
                let before = usage().unwrap();
                let blocks: Vec<Vec<u8>> = (0..8 * 1024).map(|i| vec![(i % 251) as u8; 4096]).collect();
                let held = usage().unwrap();
                drop(blocks);
                let freed = usage().unwrap();
                let margin = 24 * 1024 * 1024;
                if held.in_use >= before.in_use + margin && freed.in_use + margin <= held.in_use {
                    return;
                }
                tries.push((before, held, freed));
            }
            panic!("32 MiB held then freed was not counted: (before, held, freed) {tries:?}");
        }
        #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
        assert_eq!(usage(), None);
    }

    fn resident_kib() -> i64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        crate::procfs::parse_resident_bytes(&status).map_or(0, |b| (b / 1024.0) as i64)
    }
}
