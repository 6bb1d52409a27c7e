//! The comparisons every SQL store's benchmark (`cargo bench -p distlock-postgres`,
//! `-p distlock-mysql`, `-p distlock-sqlite`) runs with the same settings, so their figures
//! compare: the store's statements sent raw beside the store and the manager, lock groups,
//! the hand-off of one hot key, and fair waiting across processes.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::DynLockStore;
use distlock_bench::{Locker, Scenario, SideBySide, Unit};

use super::fair_bench::{self, FairPlan};
use super::group_bench::{self, GroupPlan};
use super::handoff::{self, Plan};

/// Acquire + release cycles per variant and round of the one-task scenario, the variants
/// taking turns cycle by cycle: enough that an occasional slow statement (a checkpoint,
/// a `fsync`) moves a round's ratio by a percent or so, not by ten.
pub const UNCONTENDED_CYCLES: u64 = 1_000;
/// Cycles per round of the lock-group comparisons.
pub const CYCLES: u64 = 300;
/// Tasks of the distinct-keys scenario; waiters of the hand-off.
pub const TASKS: usize = 8;
/// Cycles per task and round of the distinct-keys scenario (a round of 2,400 cycles).
pub const TASK_CYCLES: u64 = 300;
/// Tasks of the many-tasks distinct-keys scenario (more tasks than the pool has
/// connections).
pub const MANY_TASKS: usize = 64;
/// Cycles per task and round of the many-tasks scenario (a round of 9,600 cycles: 64
/// tasks queueing for the pool's connections make a round's time vary more than one
/// task's do).
pub const MANY_TASK_CYCLES: u64 = 150;
/// The TTL of every lock taken.
pub const TTL: Duration = Duration::from_secs(30);
/// How often waiting workers retry.
pub const RETRY: Duration = Duration::from_millis(50);
/// Processes of the cross-process fair-waiting comparison, one task each.
pub const FAIR_PROCESSES: usize = 8;
/// The writer among continuous readers again with these longer holds (see `GroupPlan`).
const LONGER_HOLDS: [Duration; 2] = [Duration::from_millis(10), Duration::from_millis(20)];

/// One task cycling one key, then [`TASKS`] and [`MANY_TASKS`] tasks cycling a key each:
/// `raw` (the store's own statements) beside the store and the manager over `store`;
/// titles start with `label`, keys with `prefix`.
pub async fn cycles<R: Locker>(raw: R, store: Arc<DynLockStore>, label: &str, prefix: &str, rounds: usize) {
    let bench = SideBySide::new(raw, store, TTL, RETRY, prefix).expect("bench");
    let title = format!(
        "{label}uncontended acquire+release, 1 task, {UNCONTENDED_CYCLES} cycles/round, taking turns cycle by cycle"
    );
    bench.compare_turns(&title, UNCONTENDED_CYCLES, 1, rounds, Unit::STATEMENT).await;
    let title = format!("{label}distinct keys, {TASKS} tasks × {TASK_CYCLES} cycles/round (wall time)");
    bench.compare(&title, Scenario::Distinct { workers: TASKS }, TASK_CYCLES, rounds, Unit::STATEMENT).await;
    let title = format!("{label}distinct keys, {MANY_TASKS} tasks × {MANY_TASK_CYCLES} cycles/round (wall time)");
    let scenario = Scenario::Distinct { workers: MANY_TASKS };
    bench.compare(&title, scenario, MANY_TASK_CYCLES, rounds, Unit::STATEMENT).await;
}

/// The lock-group comparisons of [`group_bench`] through the manager.
pub async fn groups(store: Arc<DynLockStore>, prefix: &str, rounds: usize) {
    let plan = GroupPlan {
        cycles: CYCLES,
        rounds,
        hold: Duration::from_millis(5),
        hot_cycles: 20,
        writer_samples: 100,
        longer_holds: &LONGER_HOLDS,
    };
    group_bench::compare(store, &format!("{prefix}groups:"), plan).await;
}

/// [`TASKS`] waiters taking turns on one hot key, woken by the store vs polling only
/// ([`handoff::compare`]); titles start with `label`.
pub async fn hand_off(store: Arc<DynLockStore>, label: &str, prefix: &str, rounds: usize) {
    let plan = Plan {
        waiters: TASKS,
        retry: RETRY,
        notified_sections: 1_600,
        polling_sections: 160,
        rounds: rounds.min(5),
        round_trips: true,
    };
    handoff::compare(store, label, &format!("{prefix}handoff:"), plan).await;
}

/// Fair vs barging waiting on one hot key ([`fair_bench::compare`]): [`TASKS`] tasks in
/// this process, then [`FAIR_PROCESSES`] processes of one task each, holding 2 ms, each
/// variant for [`fair_bench::run_for`]. The workers are copies of the benchmark's
/// executable that open the store named by `store_arg` (see [`fair_bench::worker_spec`]);
/// keys start with `prefix`.
pub async fn fair(store: Arc<DynLockStore>, store_arg: &str, prefix: &str) {
    let plan = FairPlan {
        tasks: TASKS,
        processes: &[(FAIR_PROCESSES, 1)],
        hold: Duration::from_millis(2),
        run_for: fair_bench::run_for(),
    };
    fair_bench::compare(store, store_arg, &format!("{prefix}fair:"), plan).await;
}
