use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use distlock_api::{DynLockStore, LockKey, LockManager};
use distlock_jobs::{Job, Outcome};

use super::Keys;

/// Each firing of a job runs on one of five instances (managers on the store), once;
/// the firing stays taken about `at_least` after its run started, and an instance that
/// reaches it too late reports it as run elsewhere, not missed, while it is taken.
pub async fn job_each_firing_runs_once(store: Arc<DynLockStore>) {
    let keys = Keys::new("job");
    let instances: Vec<LockManager> = (0..5).map(|_| LockManager::new(store.clone())).collect();
    let job = Job::new(&keys.key("report"), "* * * * * *")
        .unwrap()
        .at_most(Duration::from_secs(60))
        .at_least(Duration::from_secs(8))
        .late_start(Duration::from_secs(2));
    let runs = Arc::new(AtomicUsize::new(0));
    let mut firing = job.next_firing(SystemTime::now()).unwrap();
    for round in 0..3 {
        let mut ran = 0;
        for (n, locks) in instances.iter().enumerate() {
            // The instances' timers fire up to 2 s apart.
            let now = firing.instant() + Duration::from_millis(400 * n as u64);
            let runs = runs.clone();
            let outcome = job
                .fire_at(locks, firing, now, |run| async move {
                    assert_eq!(run.firing, firing);
                    runs.fetch_add(1, Ordering::SeqCst);
                })
                .await
                .unwrap();
            match outcome {
                Outcome::Ran { .. } => ran += 1,
                Outcome::RanElsewhere => {}
                other => panic!("round {round}, instance {n}: {other:?}"),
            }
        }
        assert_eq!(ran, 1, "round {round}: {ran} instances ran the firing");
        let key = LockKey::new(job.key(firing)).unwrap().to_store_key();
        let left = store.inspect(&key).await.unwrap().expect("the firing stays taken").ttl_left;
        let granted = store.capabilities().granted_ttl(Duration::from_secs(8));
        assert!(left <= granted && left > Duration::from_secs(4), "{left:?} left, expected about 8 s");
        let late = firing.instant() + Duration::from_secs(5);
        let outcome = job.fire_at(&instances[0], firing, late, |_| async { panic!("ran late") }).await.unwrap();
        assert_eq!(outcome, Outcome::RanElsewhere);
        firing = job.next_firing(firing.instant()).unwrap();
    }
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

/// Firings that every instance missed are reported by the first instance that starts,
/// each once across the fleet, back to the last recorded run; their records outlive the
/// firings' locks, so a later instance neither reports nor runs them again.
pub async fn job_missed_firings_are_reported_once(store: Arc<DynLockStore>) {
    let keys = Keys::new("job-missed");
    let (first, second) = (LockManager::new(store.clone()), LockManager::new(store.clone()));
    let job = Job::new(&keys.key("report"), "* * * * * *")
        .unwrap()
        .at_most(Duration::from_secs(60))
        .at_least(Duration::from_secs(8))
        .late_start(Duration::from_secs(2));
    let ran = job.next_firing(SystemTime::now() - Duration::from_secs(30)).unwrap();
    let outcome = job.fire_at(&first, ran, ran.instant(), |_| async {}).await.unwrap();
    assert!(matches!(outcome, Outcome::Ran { .. }), "{outcome:?}");
    // Nobody ran the next four firings; an instance starts 2.5 s after the fourth.
    let now = ran.instant() + Duration::from_millis(6_500);
    let missed: Vec<u64> = job.missed_before(&second, now).await.unwrap().iter().map(|f| f.unix_seconds()).collect();
    assert_eq!(missed, (1..=4).map(|n| ran.unix_seconds() + n).collect::<Vec<_>>());
    assert_eq!(job.missed_before(&first, now).await.unwrap(), Vec::new(), "reported twice");
    let record = LockKey::new(job.ran_key(ran)).unwrap().to_store_key();
    let left = store.inspect(&record).await.unwrap().expect("the run's record").ttl_left;
    assert!(left > Duration::from_secs(60), "the run's record lasts {left:?}");
}
