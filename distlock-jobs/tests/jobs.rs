//! One firing on one store, as each instance handles it: who runs, how long the firing
//! stays taken, what counts as missed, and bad input refused before any I/O.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use distlock_api::{LockKey, LockManager};
use distlock_jobs::{Firing, Job, JobError, Outcome};
use distlock_memory::MemoryLockStore;

fn locks() -> LockManager {
    LockManager::new(Arc::new(MemoryLockStore::new()))
}

fn job() -> Job {
    Job::new("report", "* * * * * *").unwrap().at_most(Duration::from_secs(60)).at_least(Duration::from_secs(5))
}

async fn ttl_left(locks: &LockManager, key: &str) -> Option<Duration> {
    let key = LockKey::new(key).unwrap().to_store_key();
    locks.store().inspect(&key).await.unwrap().map(|info| info.ttl_left)
}

/// The first instance to take a firing runs it, once; every other finds it taken, and the
/// firing stays taken `at_least` after the run started, not `at_most`.
#[tokio::test]
async fn one_instance_runs_a_firing_and_it_stays_taken_at_least() {
    let locks = locks();
    let job = job();
    let firing = job.next_firing(SystemTime::now()).unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    for instance in 0..5 {
        let runs = runs.clone();
        let outcome = job
            .fire_at(&locks, firing, firing.instant(), |run| async move {
                assert_eq!(run.firing, firing);
                assert!(run.fence.is_some());
                runs.fetch_add(1, Ordering::SeqCst);
            })
            .await
            .unwrap();
        assert_eq!(outcome == Outcome::RanElsewhere, instance > 0, "{outcome:?}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let left = ttl_left(&locks, &job.key(firing)).await.expect("the firing stays taken");
    assert!(left <= Duration::from_secs(5) && left > Duration::from_secs(3), "{left:?} left, not `at_least`");
    // The next firing is another key.
    let next = job.next_firing(firing.instant()).unwrap();
    assert_eq!(next.unix_seconds(), firing.unix_seconds() + 1);
    assert!(matches!(job.fire_at(&locks, next, next.instant(), |_| async {}).await.unwrap(), Outcome::Ran { .. }));
}

/// A run longer than `at_least` frees its firing when it ends; a later instance is past
/// its `late_start`, finds the run's record and does not run it again.
#[tokio::test]
async fn a_run_longer_than_at_least_frees_its_firing_when_done() {
    let locks = locks();
    let job = job().at_least(Duration::from_millis(100)).late_start(Duration::from_millis(50));
    let firing = Firing::from_unix_seconds(1_000);
    let outcome = job
        .fire_at(&locks, firing, firing.instant(), |_| tokio::time::sleep(Duration::from_millis(150)))
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Ran { took } if took >= Duration::from_millis(150)), "{outcome:?}");
    assert_eq!(ttl_left(&locks, &job.key(firing)).await, None, "released after the run");
    let late = firing.instant() + Duration::from_millis(300);
    assert_eq!(
        job.fire_at(&locks, firing, late, |_| async { panic!("ran a firing twice") }).await.unwrap(),
        Outcome::RanElsewhere,
        "the run's record outlives its lock"
    );
}

/// An instance reaching a firing after `late_start` does not run it: it reports it as run
/// elsewhere while a run holds it, as missed otherwise — unless the job catches up.
#[tokio::test]
async fn a_late_instance_reports_missed_unless_catching_up() {
    let locks = locks();
    let job = job();
    let firing = Firing::from_unix_seconds(2_000);
    let late = firing.instant() + Duration::from_secs(2);
    let outcome = job.fire_at(&locks, firing, late, |_| async { panic!("ran late") }).await.unwrap();
    assert_eq!(outcome, Outcome::Missed { late_by: Duration::from_secs(2) });
    assert_eq!(ttl_left(&locks, &job.key(firing)).await, None, "a missed firing was taken");

    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    let outcome = job
        .clone()
        .catch_up(true)
        .fire_at(&locks, firing, late, |_| async move {
            counter.fetch_add(1, Ordering::SeqCst);
        })
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Ran { .. }), "{outcome:?}");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    let outcome = job.fire_at(&locks, firing, late, |_| async { panic!("ran late") }).await.unwrap();
    assert_eq!(outcome, Outcome::RanElsewhere, "a held firing counted as missed");
}

/// Firings that no instance ran while every instance was down are reported by the first
/// instance that starts — those since the last recorded firing, each once across the
/// fleet — and a late instance finds them recorded.
#[tokio::test]
async fn firings_every_instance_missed_are_reported_once() {
    let store = Arc::new(MemoryLockStore::new());
    let (first, second) = (LockManager::new(store.clone()), LockManager::new(store));
    let job = job();
    let ran = job.next_firing(SystemTime::now() - Duration::from_secs(30)).unwrap();
    let outcome = job.fire_at(&first, ran, ran.instant(), |_| async {}).await.unwrap();
    assert!(matches!(outcome, Outcome::Ran { .. }), "{outcome:?}");
    // Every instance is down for the next five firings; one starts 1.5 s after the fifth
    // (the sixth, 0.5 s ago, is still its timer's to start).
    let fifth = Firing::from_unix_seconds(ran.unix_seconds() + 5);
    let now = fifth.instant() + Duration::from_millis(1_500);
    let missed = job.missed_before(&second, now).await.unwrap();
    let expected: Vec<u64> = (1..=5).map(|n| ran.unix_seconds() + n).collect();
    assert_eq!(missed.iter().map(|firing| firing.unix_seconds()).collect::<Vec<_>>(), expected);
    for firing in &missed {
        assert!(ttl_left(&second, &job.missed_key(*firing)).await.is_some(), "{firing:?} has no record");
        assert_eq!(ttl_left(&second, &job.key(*firing)).await, None, "a missed firing was taken");
    }
    // Reported once: another instance starting finds them recorded.
    assert_eq!(job.missed_before(&first, now).await.unwrap(), Vec::new());
    let late = job.fire_at(&first, missed[2], now, |_| async { panic!("ran late") }).await.unwrap();
    assert!(matches!(late, Outcome::Missed { .. }), "{late:?}");
    // The run's record outlives its lock: a later look-back stops at it.
    assert!(ttl_left(&first, &job.ran_key(ran)).await.unwrap() > Duration::from_secs(60));
}

/// A job with no record of any firing (a new one) has missed nothing.
#[tokio::test]
async fn a_new_job_has_missed_nothing() {
    let locks = locks();
    let missed = job().missed_before(&locks, SystemTime::now()).await.unwrap();
    assert_eq!(missed, Vec::new());
}

/// A job that catches up runs, when it starts, the firings that every instance missed,
/// each once, besides the firings of its timer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catching_up_runs_what_every_instance_missed() {
    let locks = locks();
    let job = job().catch_up(true);
    let ran = job.next_firing(SystemTime::now() - Duration::from_secs(6)).unwrap();
    job.fire_at(&locks, ran, ran.instant(), |_| async {}).await.unwrap();
    let started = SystemTime::now();
    let (sender, mut runs) = tokio::sync::mpsc::unbounded_channel();
    let running = tokio::spawn({
        let (job, locks) = (job.clone(), locks.clone());
        async move {
            job.run(&locks, move |run| {
                let sender = sender.clone();
                async move {
                    let _ = sender.send(run.firing.unix_seconds());
                }
            })
            .await
        }
    });
    // Every firing after the recorded run up to now runs: the missed ones caught up,
    // the last (within `late_start`) and the next ones by the timer.
    let last = job.next_firing(started).unwrap().unix_seconds();
    let mut seen = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        while !((ran.unix_seconds() + 1)..=last).all(|firing| seen.contains(&firing)) {
            seen.push(runs.recv().await.expect("the job stopped"));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("runs {seen:?} of {}..={last}", ran.unix_seconds() + 1));
    running.abort();
    let mut sorted = seen.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), seen.len(), "a firing ran twice: {seen:?}");
    assert!(!seen.contains(&ran.unix_seconds()), "the recorded run ran again");
}

/// A schedule, a name or durations that cannot work are refused before any I/O.
#[tokio::test]
async fn bad_jobs_are_refused_before_any_io() {
    assert!(matches!(Job::new("report", "61 * * * *"), Err(JobError::Schedule { .. })));
    assert!(matches!(Job::new("report", "not a schedule"), Err(JobError::Schedule { .. })));
    assert!(matches!(Job::new("", "* * * * *"), Err(JobError::Name(_))));
    assert!(matches!(Job::new("bad\nname", "* * * * *"), Err(JobError::Name(_))));
    let locks = locks();
    let firing = Firing::from_unix_seconds(3_000);
    for job in [
        job().at_least(Duration::from_secs(60)),
        job().at_most(Duration::ZERO),
        job().late_start(Duration::from_secs(5)),
    ] {
        let err = job.fire_at(&locks, firing, firing.instant(), |_| async { panic!("ran") }).await.unwrap_err();
        assert!(matches!(err, JobError::Durations(_)), "{err}");
        assert_eq!(ttl_left(&locks, &job.key(firing)).await, None);
    }
}

/// Five- and six-field schedules name the expected instants (UTC).
#[test]
fn schedules_name_the_expected_firings() {
    let noon = SystemTime::UNIX_EPOCH + Duration::from_secs(12 * 3600);
    let hourly = Job::new("h", "0 * * * *").unwrap();
    assert_eq!(hourly.next_firing(noon).unwrap().unix_seconds(), 13 * 3600);
    let every_ten_seconds = Job::new("s", "*/10 * * * * *").unwrap();
    assert_eq!(every_ten_seconds.next_firing(noon + Duration::from_secs(1)).unwrap().unix_seconds(), 12 * 3600 + 10);
    assert_eq!(Job::new("d", "@daily").unwrap().next_firing(noon).unwrap().unix_seconds(), 24 * 3600);
}
