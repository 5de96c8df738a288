//! Sampling a run every period until a budget is crossed.

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use crate::procfs::*;
use crate::sample::*;
use crate::usage::*;

/// Sample `scope` every `period` (the first time after one period) until
/// a budget is exceeded, and say which. Each sample reads `/proc` on
/// tokio's blocking pool, never on an async worker thread.
pub async fn watch(scope: Scope, budget: Budget, period: Duration) -> Exceeded {
    watch_from(scope, budget, period, Duration::ZERO, std::sync::Arc::new(ScanCache::default())).await
}

/// [`watch`] with CPU counted from `cpu_baseline` (what the processes had
/// used before: a session's earlier runs) and a shared scan cache.
pub async fn watch_from(
    scope: Scope,
    budget: Budget,
    period: Duration,
    cpu_baseline: Duration,
    cache: std::sync::Arc<ScanCache>,
) -> Exceeded {
    // Held across the watch's samples (see [`HeldFiles`]).
    let held = std::sync::Arc::new(HeldFiles::default());
    let start = tokio::time::Instant::now() + period;
    let mut ticks = tokio::time::interval_at(start, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        ticks.tick().await;
        let cache = std::sync::Arc::clone(&cache);
        let (scope, held) = (scope.clone(), std::sync::Arc::clone(&held));
        let sampled = move || sample_with_held(scope, &cache, &held, budget.memory_bytes);
        let Ok(mut usage) = tokio::task::spawn_blocking(sampled).await else {
            continue;
        };
        usage.cpu = usage.cpu.saturating_sub(cpu_baseline);
        if let Some(exceeded) = usage.check(&budget) {
            return exceeded;
        }
    }
}

/// Bytes in use in the tmpfs holding `dir` (the run's `/work`, `/tmp` and
/// `/dev/shm`: memory no process's PSS shows).
pub fn tmpfs_used(dir: impl AsFd) -> io::Result<u64> {
    let stat = rustix::fs::fstatvfs(dir).map_err(|e| io::Error::from_raw_os_error(e.raw_os_error()))?;
    Ok(stat.f_blocks.saturating_sub(stat.f_bfree).saturating_mul(stat.f_frsize))
}
