//! Lock-group benchmarks, each beside its baseline in the same run, reported as ratios:
//!
//! 1. a two-name group cycle (both exclusive) vs a single-key lock cycle (one task);
//! 2. a read-lock cycle vs a single-key lock cycle (one task) — 1 and 2 take turns cycle
//!    by cycle ([`interleaved_cycles`]);
//! 3. 8 tasks reading one name vs 8 tasks writing it, each holding it `hold` per cycle:
//!    throughput of the readers ÷ the writers';
//! 4. readers arriving continuously (8 tasks, holds up to `hold`) and one writer taking
//!    the name again and again: the writer's p99 wait ÷ the longest read hold — once with
//!    every waiter polling every 5 ms besides being woken by releases (the figure
//!    returned), once with the default waiting options (polling every
//!    [`LockOptions::DEFAULT_RETRY_INTERVAL`]), where the writer depends on being woken.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_api::{DynLockStore, GroupMember, LockGroup, LockManager, LockOptions};

use super::bench::{interleaved_cycles, interleaved_rounds, median, report_against_first, scaled};

/// What [`compare`] runs.
#[derive(Debug, Clone, Copy)]
pub struct GroupPlan {
    /// Cycles per round in the one-task comparisons.
    pub cycles: u64,
    /// Rounds of each comparison.
    pub rounds: usize,
    /// How long a reader or writer holds the name in comparisons 3 and 4.
    pub hold: Duration,
    /// Cycles per task and round in comparison 3.
    pub hot_cycles: u64,
    /// Writer acquisitions measured in comparison 4.
    pub writer_samples: usize,
    /// Comparison 4 again with these longer holds (readers' and the writer's), printed
    /// only: how the writer's wait ÷ the longest hold changes once the eight readers no
    /// longer keep the machine's cores busy. Empty: only `hold`.
    pub longer_holds: &'static [Duration],
}

const TTL: Duration = Duration::from_secs(30);
const TASKS: usize = 8;

fn group(members: impl IntoIterator<Item = GroupMember>) -> LockGroup {
    LockGroup::new(members).expect("benchmark groups are valid")
}

/// Runs the four comparisons on `store`, names under `prefix`; prints them and returns
/// the four ratios (group ÷ single, read ÷ single, readers' ÷ writers' throughput,
/// writer p99 wait ÷ longest hold).
///
/// # Panics
///
/// When the store fails: a benchmark has no one to hand its error to.
pub async fn compare(store: Arc<DynLockStore>, prefix: &str, plan: GroupPlan) -> [f64; 4] {
    let plan = GroupPlan {
        hot_cycles: scaled(plan.hot_cycles as usize) as u64,
        writer_samples: scaled(plan.writer_samples),
        ..plan
    };
    let locks = LockManager::new(store);
    let (a, b, single) = (format!("{prefix}group:a"), format!("{prefix}group:b"), format!("{prefix}group:single"));
    let pair = group([GroupMember::exclusive(&a).expect("key"), GroupMember::exclusive(&b).expect("key")]);
    let read = group([GroupMember::shared(&a).expect("key")]);
    let write = group([GroupMember::exclusive(&a).expect("key")]);

    // 1 and 2: one task, uncontended; the three cycles take turns one by one.
    let samples = interleaved_cycles(&[0, 1, 2], plan.rounds, plan.cycles, |variant| {
        let (locks, single, pair, read) = (&locks, &single, &pair, &read);
        async move {
            match variant {
                0 => {
                    let held = locks.try_lock(single, TTL).await.expect("single").expect("free");
                    assert!(held.release().await.expect("release"));
                }
                1 => {
                    let held = locks.try_lock_group(pair, TTL).await.expect("group").expect("free");
                    held.release().await.expect("release");
                }
                _ => {
                    let held = locks.try_lock_group(read, TTL).await.expect("read").expect("free");
                    held.release().await.expect("release");
                }
            }
        }
    })
    .await;
    #[allow(clippy::cast_precision_loss)]
    let medians = report_against_first(
        &format!("lock groups: one task, {} cycles/round, taking turns cycle by cycle", plan.cycles),
        "µs/cycle",
        plan.cycles as f64,
        &["single-key lock", "two-name group", "read lock"],
        &samples,
    );
    let (group_ratio, read_ratio) = (medians[1] / medians[0], medians[2] / medians[0]);

    // 3: 8 readers vs 8 writers of one name, holding it `hold` each time.
    let waiting = LockOptions::new().wait(Duration::from_secs(60)).retry_interval(Duration::from_millis(5));
    let samples = interleaved_rounds(&[0, 1], plan.rounds, |variant| {
        let (locks, read, write, waiting) = (locks.clone(), read.clone(), write.clone(), waiting);
        async move {
            let tasks: Vec<_> = (0..TASKS)
                .map(|_| {
                    let (locks, group) = (locks.clone(), if variant == 0 { write.clone() } else { read.clone() });
                    tokio::spawn(async move {
                        for _ in 0..plan.hot_cycles {
                            let held = locks.lock_group_opts(&group, TTL, &waiting).await.expect("hot name");
                            tokio::time::sleep(plan.hold).await;
                            held.release().await.expect("release");
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.expect("task");
            }
        }
    })
    .await;
    #[allow(clippy::cast_precision_loss)]
    let sections = (TASKS as u64 * plan.hot_cycles) as f64;
    let medians = report_against_first(
        &format!("one name, {TASKS} tasks × {} sections holding {:?} (wall time)", plan.hot_cycles, plan.hold),
        "µs/section",
        sections,
        &["writers", "readers"],
        &samples,
    );
    let throughput_ratio = medians[0] / medians[1];
    println!("  readers' throughput: {throughput_ratio:.1}× the writers'");

    // 4: continuous readers, one writer: its waits against the longest read hold, with
    // the waiters polling every 5 ms (as above) and with the default waiting options
    // (woken by releases, polling every `LockOptions::DEFAULT_RETRY_INTERVAL`).
    let wait_ratio = writer_among_readers(&locks, &read, &write, plan, waiting, "retry interval 5 ms").await;
    let default_waiting = LockOptions::new().wait(Duration::from_secs(60));
    writer_among_readers(&locks, &read, &write, plan, default_waiting, "default waiting options").await;
    for &hold in plan.longer_holds {
        let longer = GroupPlan { hold, ..plan };
        writer_among_readers(&locks, &read, &write, longer, waiting, "retry interval 5 ms").await;
        writer_among_readers(&locks, &read, &write, longer, default_waiting, "default waiting options").await;
    }
    [group_ratio, read_ratio, throughput_ratio, wait_ratio]
}

/// The machine's CPU time so far from `/proc/stat` (Linux): `(busy, total)` in ticks,
/// busy being everything but idle and I/O wait; `None` elsewhere.
fn cpu_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<u64> = stat.lines().next()?.split_whitespace().skip(1).filter_map(|t| t.parse().ok()).collect();
    let total: u64 = ticks.iter().sum();
    let idle = ticks.get(3)? + ticks.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// Comparison 4: readers arriving continuously ([`TASKS`] tasks, holds spread over
/// `(0, plan.hold]`) and one writer taking the name `plan.writer_samples` times, every
/// waiter with `waiting`; prints the writer's waits and returns its p99 wait ÷ the
/// longest read hold.
async fn writer_among_readers(
    locks: &LockManager,
    read: &LockGroup,
    write: &LockGroup,
    plan: GroupPlan,
    waiting: LockOptions,
    label: &str,
) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..TASKS)
        .map(|i| {
            let (locks, read, stop) = (locks.clone(), read.clone(), Arc::clone(&stop));
            tokio::spawn(async move {
                // Holds spread over (0, hold], staggered so that readers overlap all the time.
                let mine = plan.hold * u32::try_from(i + 1).unwrap_or(1) / u32::try_from(TASKS).unwrap_or(1);
                while !stop.load(Ordering::Relaxed) {
                    let held = locks.lock_group_opts(&read, TTL, &waiting).await.expect("reader");
                    tokio::time::sleep(mine).await;
                    held.release().await.expect("release");
                }
            })
        })
        .collect();
    tokio::time::sleep(plan.hold * 2).await; // the readers are in
    let cpu_before = cpu_ticks();
    let mut waits = Vec::with_capacity(plan.writer_samples);
    for _ in 0..plan.writer_samples {
        let started = Instant::now();
        let held = locks.lock_group_opts(write, TTL, &waiting).await.expect("writer");
        waits.push(started.elapsed().as_secs_f64() * 1e3);
        held.release().await.expect("release");
        tokio::time::sleep(plan.hold).await; // let the readers back in
    }
    let cpu = cpu_before.zip(cpu_ticks()).map_or_else(String::new, |((busy0, total0), (busy1, total1))| {
        #[allow(clippy::cast_precision_loss)]
        let busy = (busy1 - busy0) as f64 * 100.0 / (total1 - total0).max(1) as f64;
        format!(", machine CPU {busy:.0} % busy")
    });
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        reader.await.expect("reader");
    }
    waits.sort_by(f64::total_cmp);
    let p50 = median(waits.clone());
    let p99 = waits[((waits.len() * 99).div_ceil(100)).saturating_sub(1)];
    let hold_ms = plan.hold.as_secs_f64() * 1e3;
    let wait_ratio = p99 / hold_ms;
    println!(
        "writer among continuous readers, {label} ({TASKS} readers, holds up to {hold_ms:.0} ms, {} writes): wait p50 {p50:.1} ms, p99 {p99:.1} ms = {wait_ratio:.2}× the longest read hold{cpu}",
        plan.writer_samples
    );
    wait_ratio
}
