//! Memory store benchmark, each scenario beside a raw baseline in the same run.
//!
//! ```text
//! cargo bench -p distlock-memory
//! cargo bench -p distlock-memory -- locks   # the uncontended and distinct-key cycles only
//! ```
//!
//! - uncontended: one acquire + release cycle, one task, the variants taking turns 500
//!   cycles at a time:
//!   - `raw`: a `tokio::sync::Mutex<HashMap<String, (owner, expiry)>>`, insert if free
//!     (or expired), remove if still ours;
//!   - `store`: `MemoryLockStore::try_acquire` + `release` (fixed token);
//!   - `manager`: `LockManager::try_lock` + `DistributedLock::release` (key validation,
//!     token generation, the handle).
//! - distinct: 8 tasks, each cycling its own key, same three variants.
//! - scaling: cycles per second with 8 tasks on distinct keys ÷ with 1 task, for each
//!   variant, beside `cpu only` (a cycle of CPU work alone, nothing shared): what a
//!   second core adds on this machine, the ceiling for the others. The runs take turns,
//!   the median of per-round speed-ups is reported.
//! - hot key: 8 tasks taking turns on one key (waiting with a 1 ms retry interval, woken
//!   on release) vs the same 8 tasks on one `tokio::sync::Mutex`.
//! - hand-off: 8 waiters on one key, hold 0, retry interval 50 ms: latency from release
//!   to the next holder (p50/p99) and sections/s, with release notifications vs polling.
//!
//! - lock groups (`kit::group_bench`): a two-name group cycle and a read-lock cycle vs a
//!   single-key lock cycle; 8 readers vs 8 writers of one name holding it 5 ms; a
//!   writer's wait among continuous readers vs the longest read hold.
//!
//! The scenarios, rounds and report are the conformance kit's (`kit::bench`,
//! `kit::handoff`); rounds rotate the order of the variants, the median round is reported.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, LockError, LockManager};
use distlock_conformance::kit::bench::record::{self, RatioRow, Ratios, Record};
use distlock_conformance::kit::bench::{
    interleaved_rounds, median, on_worker, report_against_first, rounds, run, Library, Locker, RawMemory, Scenario,
    SideBySide, Stop, StoreDirect, Unit,
};
use distlock_conformance::kit::fair_bench::{self, FairPlan};
use distlock_conformance::kit::group_bench::{self, GroupPlan};
use distlock_conformance::kit::handoff::{self, Plan};
use distlock_memory::MemoryLockStore;
use tokio::sync::{Mutex, OwnedMutexGuard};

const CYCLES: u64 = 50_000;
/// Uncontended cycles of one variant between two clock reads.
const TURN: u64 = 500;
const TASKS: usize = 8;
const HOT_SECTIONS: u64 = 8_000;
const TTL: Duration = Duration::from_secs(30);
const RETRY: Duration = Duration::from_millis(1);
/// Cycles per run of the scaling comparison (one task, or shared by all of them).
const SCALE_CYCLES: u64 = 200_000;
/// Steps of `cpu only`'s cycle: about as long as a manager cycle.
const CPU_STEPS: u64 = 400;

/// The ideal in-process hot key: one `tokio::sync::Mutex`, whatever the key.
#[derive(Default)]
struct OneMutex(Arc<Mutex<()>>);

impl Locker for OneMutex {
    type Key = ();
    type Guard = OwnedMutexGuard<()>;

    fn key(&self, _name: &str) -> Result<(), LockError> {
        Ok(())
    }

    async fn acquire(&self, (): &(), _wait: Duration) -> Result<Option<OwnedMutexGuard<()>>, LockError> {
        Ok(Some(Arc::clone(&self.0).lock_owned().await))
    }

    async fn release(&self, (): &(), guard: OwnedMutexGuard<()>) -> Result<bool, LockError> {
        drop(guard);
        Ok(true)
    }
}

/// A cycle of CPU work alone, nothing shared between tasks: how much a second core adds.
struct CpuOnly;

impl Locker for CpuOnly {
    type Key = ();
    type Guard = ();

    fn key(&self, _name: &str) -> Result<(), LockError> {
        Ok(())
    }

    async fn acquire(&self, (): &(), _wait: Duration) -> Result<Option<()>, LockError> {
        let mut state = 0u64;
        for step in 0..CPU_STEPS {
            state = std::hint::black_box(state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(step));
        }
        Ok(Some(()))
    }

    async fn release(&self, (): &(), (): ()) -> Result<bool, LockError> {
        Ok(true)
    }
}

/// Cycles per second with [`TASKS`] tasks on distinct keys ÷ with one task, each variant
/// beside `cpu only`; the runs of all variants take turns, round by round.
async fn scaling(store: &Arc<DynLockStore>, rounds: usize) {
    const NAMES: [&str; 4] = ["cpu only", "raw", "store", "manager"];
    let cpu = Arc::new(CpuOnly);
    let raw = Arc::new(RawMemory::new(TTL, RETRY));
    let direct = Arc::new(StoreDirect::new(Arc::clone(store), TTL, RETRY).expect("ttl"));
    let library = Arc::new(Library::new(LockManager::new(Arc::clone(store)), TTL, RETRY));
    let runs: Vec<(usize, usize)> = (0..NAMES.len()).flat_map(|variant| [(variant, 1), (variant, TASKS)]).collect();
    let samples = interleaved_rounds(&runs, rounds, |(variant, tasks)| {
        let (cpu, raw, direct, library) =
            (Arc::clone(&cpu), Arc::clone(&raw), Arc::clone(&direct), Arc::clone(&library));
        async move {
            let scenario = if tasks == 1 { Scenario::Uncontended } else { Scenario::Distinct { workers: tasks } };
            let (prefix, stop) = ("bench:scaling:", Stop::Cycles(SCALE_CYCLES / tasks as u64));
            let measured = match variant {
                0 => run(&cpu, scenario, prefix, stop).await,
                1 => run(&raw, scenario, prefix, stop).await,
                2 => run(&direct, scenario, prefix, stop).await,
                _ => run(&library, scenario, prefix, stop).await,
            };
            assert_eq!(measured.expect("scaling").lost, 0);
        }
    })
    .await;
    // Per round: one task's time ÷ the tasks' time, the speed-up.
    let speedups: Vec<Vec<f64>> =
        samples.chunks(2).map(|pair| pair[0].iter().zip(&pair[1]).map(|(one, many)| one / many).collect()).collect();
    let ceiling = median(speedups[0].clone());
    let title = format!(
        "scaling: cycles/s with {TASKS} tasks on distinct keys ÷ with 1 task ({SCALE_CYCLES} cycles a run, 2 worker \
         threads); `cpu only`: CPU work alone, the most a second core adds here"
    );
    println!("{title}");
    let rows = NAMES
        .iter()
        .zip(&speedups)
        .map(|(name, own)| {
            let value = median(own.clone());
            let per_round: Vec<f64> = own.iter().zip(&speedups[0]).map(|(own, cpu)| own / cpu).collect();
            println!("  {name:<9}{value:6.2}× one task   {:.3}× cpu only", value / ceiling);
            RatioRow {
                name: (*name).to_owned(),
                value,
                ratio: value / ceiling,
                min: per_round.iter().copied().fold(f64::INFINITY, f64::min),
                max: per_round.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            }
        })
        .collect();
    let ratios = Ratios { suite: record::suite(), title, unit: "× 1 task".to_owned(), rounds, rows };
    record::emit(&Record::Ratios(ratios));
}

fn main() {
    let rounds = rounds(7);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(on_worker(async move {
        let store: Arc<DynLockStore> = Arc::new(MemoryLockStore::new());
        let bench = SideBySide::new(RawMemory::new(TTL, RETRY), Arc::clone(&store), TTL, RETRY, "bench:").unwrap();
        println!("distlock-memory benchmark: {rounds} rounds, median round");
        let title =
            format!("uncontended acquire+release, 1 task, {CYCLES} cycles/round, taking turns {TURN} cycles at a time");
        bench.compare_turns(&title, CYCLES, TURN, rounds, Unit::CYCLE).await;
        let per_task = CYCLES / TASKS as u64;
        let title = format!("distinct keys, {TASKS} tasks × {per_task} cycles/round (wall time)");
        bench.compare(&title, Scenario::Distinct { workers: TASKS }, per_task, rounds, Unit::CYCLE).await;
        scaling(&store, rounds).await;
        // `cargo bench -p distlock-memory -- locks` stops here.
        if std::env::args().skip(1).any(|arg| arg == "locks") {
            return;
        }

        let (mutex, library) =
            (Arc::new(OneMutex::default()), Arc::new(Library::new(LockManager::new(Arc::clone(&store)), TTL, RETRY)));
        let hot = Scenario::HotKey { workers: TASKS, hand_over: None };
        let quota = Stop::Cycles(HOT_SECTIONS / TASKS as u64);
        let samples = interleaved_rounds(&[0, 1], rounds, |variant| {
            let (mutex, library) = (Arc::clone(&mutex), Arc::clone(&library));
            async move {
                let measured = match variant {
                    0 => run(&mutex, hot, "bench:", quota).await,
                    _ => run(&library, hot, "bench:", quota).await,
                };
                assert_eq!(measured.expect("hot key").violations, 0);
            }
        })
        .await;
        let title = format!("one hot key, {TASKS} tasks, {HOT_SECTIONS} sections/round (wall time)");
        report_against_first(&title, "µs/section", HOT_SECTIONS as f64, &["tokio mutex", "manager"], &samples);

        let plan = Plan {
            waiters: TASKS,
            retry: Duration::from_millis(50),
            notified_sections: 2_000,
            polling_sections: 100,
            rounds: 1,
            round_trips: false,
        };
        handoff::compare(Arc::clone(&store), "", "bench:handoff:", plan).await;

        let plan = GroupPlan {
            cycles: CYCLES / 10,
            rounds,
            hold: Duration::from_millis(5),
            hot_cycles: 40,
            writer_samples: 100,
            longer_holds: &[],
        };
        group_bench::compare(Arc::clone(&store), "bench:", plan).await;

        // In one process only: a memory store is not shared across processes.
        let plan =
            FairPlan { tasks: TASKS, processes: &[], hold: Duration::from_millis(2), run_for: Duration::from_secs(5) };
        fair_bench::compare(store, "", "bench:", plan).await;
    }));
}
