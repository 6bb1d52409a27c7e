//! What the SQLite store promises on one host: leases on the boot clock (wall-clock steps
//! change nothing, another boot's leases are expired), holder processes checked by id and
//! start time (a killed holder frees its lock at once), and waiting processes woken by a
//! release.
//!
//! Child processes re-run this test binary (see `distlock_conformance::kit::child`): the
//! `child_*` tests are their entries and return at once when run normally.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock_api::{LockManager, LockOptions, LockStore, QueueStore};
use distlock_conformance::kit::child::{self, ChildProcess};
use distlock_sqlite::SqliteLockStore;

const CHILD_START: Duration = Duration::from_secs(60);
/// The retry interval (or longest wait) the waking tests give their waiters: far longer
/// than a wake, so a waiter that slept until it fails them.
const RETRY: Duration = Duration::from_secs(20);
/// How soon a woken waiter acquires, at most: a quarter of [`RETRY`], however loaded the
/// machine (where a wake can take a few hundred milliseconds).
const WOKEN_WITHIN: Duration = Duration::from_secs(RETRY.as_secs() / 4);

/// A database URL of its own for one test.
fn fresh_url(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("distlock-sqlite-host-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    let path: PathBuf = dir.join(format!("{name}-{}.db", distlock_api::Token::generate().short()));
    format!("sqlite://{}", path.display())
}

async fn open(url: &str) -> (SqliteLockStore, LockManager) {
    let store = SqliteLockStore::connect(url).await.expect("connect");
    (store.clone(), LockManager::new(Arc::new(store)))
}

/// Seconds of the wall clock, as this process sees it.
fn wall_seconds() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs()
}

#[tokio::test]
async fn the_store_clock_is_the_boot_clock() {
    // /proc/uptime is CLOCK_BOOTTIME in hundredths of a second.
    let before = SqliteLockStore::clock();
    let uptime: f64 =
        std::fs::read_to_string("/proc/uptime").unwrap().split_whitespace().next().unwrap().parse().unwrap();
    let after = SqliteLockStore::clock();
    let uptime = Duration::from_secs_f64(uptime);
    assert!(
        uptime + Duration::from_millis(20) >= before && uptime <= after + Duration::from_millis(20),
        "{uptime:?} vs {before:?}..{after:?}"
    );
    let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    assert!(after < wall / 2, "the store's clock counts from boot, not from 1970: {after:?}");
}

#[tokio::test]
async fn a_lease_of_another_boot_is_expired() {
    let url = fresh_url("boot");
    let (store, locks) = open(&url).await;
    let ttl = Duration::from_secs(60);
    let _held = locks.lock("job", ttl).await.unwrap().leak();
    sqlx::query("UPDATE distlock SET boot = '00000000-0000-4000-8000-000000000000'")
        .execute(store.pool())
        .await
        .unwrap();
    let key = distlock_api::LockKey::new("job").unwrap().to_store_key();
    assert_eq!(store.inspect(&key).await.unwrap(), None, "a lease of another boot is not held");
    assert!(locks.try_lock("job", ttl).await.unwrap().is_some(), "and can be taken");
}

#[tokio::test]
async fn the_first_store_of_a_boot_clears_older_boots_and_raises_fences() {
    let url = fresh_url("epoch");
    let (store, locks) = open(&url).await;
    let first = locks.lock("job", Duration::from_secs(60)).await.unwrap();
    let fence = first.fence().unwrap();
    let _ = first.leak();
    // As if the file had last been opened before a reboot.
    let other = "00000000-0000-4000-8000-000000000000";
    for statement in ["UPDATE distlock SET boot = ?1", "UPDATE distlock_boots SET boot = ?1"] {
        sqlx::query(statement).bind(other).execute(store.pool()).await.unwrap();
    }
    let (store, locks) = open(&url).await;
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM distlock").fetch_one(store.pool()).await.unwrap();
    assert_eq!(rows, 0, "rows of another boot are removed");
    let next = locks.lock("job", Duration::from_secs(60)).await.unwrap();
    assert!(
        next.fence().unwrap() >= fence + (1 << 40),
        "a new boot's fences start in a new range: {fence} → {:?}",
        next.fence()
    );
}

#[tokio::test]
async fn a_reused_process_id_is_not_the_holder() {
    let url = fresh_url("reused");
    let (store, locks) = open(&url).await;
    let ttl = Duration::from_secs(60);
    let _held = locks.lock("job", ttl).await.unwrap().leak();
    assert!(locks.try_lock("job", ttl).await.unwrap().is_none(), "held by this live process");
    // The holder's id is this process's, its start time another: a process that reused the id.
    sqlx::query("UPDATE distlock SET pid_start = pid_start + 1").execute(store.pool()).await.unwrap();
    assert!(locks.try_lock("job", ttl).await.unwrap().is_some(), "a holder whose process is gone frees the key");
}

#[tokio::test]
async fn without_liveness_a_lease_outlives_its_process() {
    let url = format!("{}?liveness=false", fresh_url("no-liveness"));
    let (store, locks) = open(&url).await;
    let ttl = Duration::from_secs(60);
    let _held = locks.lock("job", ttl).await.unwrap().leak();
    sqlx::query("UPDATE distlock SET pid_start = pid_start + 1").execute(store.pool()).await.unwrap();
    assert!(locks.try_lock("job", ttl).await.unwrap().is_none(), "the lease lasts its TTL");
}

/// Child entry: takes the key named by its argument (`URL KEY`) for a minute and waits
/// to be killed.
#[tokio::test]
async fn child_holds_a_lock() {
    let Some(arg) = child::role_arg("holder") else { return };
    let (url, key) = arg.split_once(' ').expect("URL KEY");
    let (_, locks) = open(url).await;
    let _lock = locks.lock(key, Duration::from_secs(60)).await.expect("acquire").leak();
    child::announce("ACQUIRED");
    child::park().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_frees_its_lock_at_once() {
    let url = fresh_url("killed");
    let mut holder = ChildProcess::spawn("host::child_holds_a_lock", "holder", &format!("{url} job"));
    holder.wait_for_line("ACQUIRED", CHILD_START);
    let (_, locks) = open(&url).await;
    let ttl = Duration::from_secs(60);
    assert!(locks.try_lock("job", ttl).await.unwrap().is_none(), "held by the child");
    // A retry interval far longer than the bound: only the holder's exit can wake the waiter.
    let options = LockOptions::new().wait(Duration::from_secs(30)).retry_interval(RETRY);
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            let lock = locks.lock_opts("job", ttl, &options).await;
            (SqliteLockStore::clock(), lock)
        }
    });
    // The waiter is parked once it holds its place in the queue.
    let key = distlock_api::LockKey::new("job").unwrap().to_store_key();
    let store = SqliteLockStore::connect(&url).await.unwrap();
    let deadline = std::time::Instant::now() + CHILD_START;
    while store.queue_len(&key).await.unwrap() == 0 {
        assert!(std::time::Instant::now() < deadline, "the waiter never queued");
        tokio::task::yield_now().await;
    }
    let killed_at = SqliteLockStore::clock();
    holder.kill9();
    let (acquired_at, lock) = waiter.await.unwrap();
    assert!(lock.is_ok(), "{lock:?}");
    let after = acquired_at.saturating_sub(killed_at);
    println!("acquired {after:?} after kill -9 of the holder");
    assert!(after < WOKEN_WITHIN, "acquired {after:?} after the holder was killed: woken by the retry, not the exit");
}

/// Child entry: under a faked wall clock (`faketime`), reports how far its wall clock is
/// off, whether it could take the parent's key, and takes a key of its own for 20 s.
#[tokio::test]
async fn child_under_a_faked_wall_clock() {
    let Some(arg) = child::role_arg("stepped") else { return };
    let (url, mine) = arg.split_once(' ').expect("URL KEY");
    let (_, locks) = open(url).await;
    child::announce(&format!("WALL {}", wall_seconds()));
    let parents = locks.try_lock("parent", Duration::from_secs(20)).await.expect("try");
    child::announce(if parents.is_some() { "PARENT'S KEY TAKEN" } else { "PARENT'S KEY HELD" });
    let _mine = locks.lock(mine, Duration::from_secs(20)).await.expect("acquire").leak();
    child::announce("DONE");
    child::park().await;
}

/// A process whose wall clock is ten days ahead (or behind) sees the same leases as one
/// with the true time: a wall-clock step neither ends a lease early nor makes one last
/// longer. Needs libfaketime (Debian package `faketime`, which `scripts/test.sh` installs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_clock_step_changes_no_lease() {
    let Some(faketime) = distlock_conformance::kit::libfaketime() else {
        assert!(
            !distlock_conformance::kit::services_required(),
            "libfaketime is not installed and DISTLOCK_REQUIRE_SERVICES=1 forbids skipping (apt-get install faketime)"
        );
        eprintln!("SKIPPED a_wall_clock_step_changes_no_lease: install faketime to run it");
        return;
    };
    let preload = format!("LD_PRELOAD={}", faketime.display());
    let url = fresh_url("faketime");
    let (store, locks) = open(&url).await;
    let _parent = locks.lock("parent", Duration::from_secs(20)).await.unwrap().leak();
    for (offset, days) in [("+10d", 10i64), ("-10d", -10)] {
        let mine = format!("child{days}");
        // `env` replaces itself with the test binary, so the child's id is the binary's.
        let fake = format!("FAKETIME={offset}");
        let mut child = ChildProcess::spawn_under(
            &["env", &preload, &fake],
            "host::child_under_a_faked_wall_clock",
            "stepped",
            &format!("{url} {mine}"),
        );
        let wall: i64 = child.wait_for_line("WALL ", CHILD_START)["WALL ".len()..].trim().parse().unwrap();
        let skew = wall - i64::try_from(wall_seconds()).unwrap();
        assert!((skew - days * 86_400).abs() < 3_600, "the child's wall clock is off by {skew} s, not {days} days");
        let seen = child.wait_for_line("PARENT'S KEY ", CHILD_START);
        assert_eq!(seen, "PARENT'S KEY HELD", "a lease is not shortened by a wall clock {offset}");
        child.wait_for_line("DONE", CHILD_START);
        let key = distlock_api::LockKey::new(mine).unwrap().to_store_key();
        let left = store.inspect(&key).await.unwrap().expect("the child's lease").ttl_left;
        assert!(left <= Duration::from_secs(20) && left > Duration::from_secs(10), "{offset}: {left:?} left of 20 s");
    }
}

/// Child entry: takes and releases the key (`URL KEY`) until it is killed, reporting the
/// boot clock at each acquisition and before each release. It may run a round ahead of
/// the parent (when its plain first attempt finds the key free), so it never stops on
/// its own: the parent's last round always finds it waiting.
#[tokio::test]
async fn child_takes_turns() {
    let Some(arg) = child::role_arg("turns") else { return };
    let mut parts = arg.split(' ');
    let (url, key) = (parts.next().unwrap(), parts.next().unwrap());
    let (_, locks) = open(url).await;
    let options = LockOptions::new().wait(Duration::from_secs(30)).retry_interval(RETRY);
    for round in 0u64.. {
        let lock = locks.lock_opts(key, Duration::from_secs(30), &options).await.expect("acquire");
        let got = SqliteLockStore::clock().as_micros();
        let released = SqliteLockStore::clock().as_micros();
        assert!(lock.release().await.expect("release"));
        child::announce(&format!("ROUND {round} {got} {released}"));
    }
}

/// A lock handed back and forth between two processes: each release wakes the other
/// process's waiter (its retry interval is 20 s), so no hand-off waits for a retry. How
/// fast a hand-off is belongs to the benchmarks; on a loaded machine one takes tens of
/// milliseconds, far below the retry interval either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_wake_waiting_processes() {
    const ROUNDS: u32 = 40;
    let url = fresh_url("turns");
    let (store, locks) = open(&url).await;
    let key = distlock_api::LockKey::new("hot").unwrap().to_store_key();
    let options = LockOptions::new().wait(Duration::from_secs(30)).retry_interval(RETRY);
    let mut lock = locks.lock("hot", Duration::from_secs(30)).await.unwrap();
    let mut child = ChildProcess::spawn("host::child_takes_turns", "turns", &format!("{url} hot"));
    let mut hand_offs = Vec::new();
    for round in 0..ROUNDS {
        // The child waits in the queue before the release.
        let deadline = std::time::Instant::now() + CHILD_START;
        while store.queue_len(&key).await.unwrap() == 0 {
            assert!(std::time::Instant::now() < deadline, "round {round}: the child never queued");
            tokio::task::yield_now().await;
        }
        let released = SqliteLockStore::clock().as_micros();
        assert!(lock.release().await.unwrap());
        lock = locks.lock_opts("hot", Duration::from_secs(30), &options).await.unwrap();
        let back = SqliteLockStore::clock().as_micros();
        let line = child.wait_for_line(&format!("ROUND {round} "), CHILD_START);
        let times: Vec<u128> = line.split(' ').skip(2).map(|t| t.parse().unwrap()).collect();
        // A child that took the key between two rounds without waiting (its first,
        // plain attempt found it free) reports an acquisition from before this release:
        // not a hand-off.
        for hand_off in [times[0].checked_sub(released), back.checked_sub(times[1])].into_iter().flatten() {
            // A waiter that was not woken sleeps the full retry interval (20 s).
            assert!(
                hand_off < WOKEN_WITHIN.as_micros(),
                "round {round}: a hand-off took {hand_off} µs: the waiter slept until its retry instead of being woken"
            );
            hand_offs.push(hand_off);
        }
    }
    assert!(hand_offs.len() >= ROUNDS as usize, "only {} hand-offs in {ROUNDS} rounds", hand_offs.len());
    hand_offs.sort_unstable();
    let p50 = hand_offs[hand_offs.len() / 2];
    let p99 = hand_offs[hand_offs.len() * 99 / 100];
    println!(
        "hand-off between processes: p50 {p50} µs, p99 {p99} µs, max {} µs ({} hand-offs)",
        hand_offs.last().unwrap(),
        hand_offs.len()
    );
}

/// With fair waiting, a release that hands the key over wakes the waiter it hands the key
/// to and no other waiter of the key (they would only find it held again), in this
/// process and through another store's socket alike: two stores on one file, the
/// waiters spread over both, each release from the store of the last holder.
#[tokio::test(flavor = "multi_thread")]
async fn a_hand_over_wakes_only_the_waiter_it_hands_the_key_to() {
    let url = fresh_url("hand-over-wake");
    let stores = [SqliteLockStore::connect(&url).await.unwrap(), SqliteLockStore::connect(&url).await.unwrap()];
    let key = distlock_api::LockKey::new("busy").unwrap().to_store_key();
    let ttl = distlock_api::Ttl::new(Duration::from_secs(60)).unwrap();
    let holder = distlock_api::Token::generate();
    assert!(stores[0].try_acquire(&key, &holder, ttl).await.unwrap().is_acquired());
    // Waiter i waits through store i % 2, in the order of their places.
    let waiters: Vec<distlock_api::Token> = (0..3).map(|_| distlock_api::Token::generate()).collect();
    for (i, token) in waiters.iter().enumerate() {
        let attempt = distlock_api::QueuedAttempt { key: &key, token, ttl, place: ttl };
        let queued = stores[i % 2].try_acquire_queued(attempt).await.unwrap();
        assert!(!queued.is_acquired(), "queued behind the holder");
    }
    let mut waits: Vec<_> = waiters
        .iter()
        .enumerate()
        .map(|(i, token)| {
            let (store, key, token) = (stores[i % 2].clone(), key.clone(), token.clone());
            tokio::spawn(async move { store.wait_for_turn(&key, &token, RETRY).await })
        })
        .collect();
    // Every waiter registered: the key's channel and two turns on the first store, the
    // channel and one turn on the second, each store listening.
    let registered = |store: &SqliteLockStore, keys: usize| {
        let debug = format!("{store:?}");
        debug.contains("listening: true") && debug.contains(&format!("keys_waited_on: {keys}"))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !(registered(&stores[0], 3) && registered(&stores[1], 2)) {
        assert!(std::time::Instant::now() < deadline, "waiters never registered: {stores:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (mut releaser, mut releasing_store) = (holder, 0);
    for (turn, token) in waiters.iter().enumerate() {
        assert!(waits.iter().all(|wait| !wait.is_finished()), "turn {turn}: nobody wakes before the release");
        assert!(stores[releasing_store].release(&key, &releaser).await.unwrap());
        let woken = waits.remove(0);
        tokio::time::timeout(WOKEN_WITHIN, woken).await.expect("the first waiter is woken").unwrap().unwrap();
        // The others stay asleep (a wrong wake would end their wait within this time).
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(waits.iter().all(|wait| !wait.is_finished()), "turn {turn}: a waiter behind the first woke");
        let attempt = distlock_api::QueuedAttempt { key: &key, token, ttl, place: ttl };
        let taken = stores[turn % 2].try_acquire_queued(attempt).await.unwrap();
        assert!(taken.is_acquired(), "turn {turn}: handed to it");
        (releaser, releasing_store) = (token.clone(), turn % 2);
    }
    assert!(stores[releasing_store].release(&key, &releaser).await.unwrap());
}

/// Child entry: holds the group `{shelf: exclusive}` for a minute (`URL`) and waits to be
/// killed.
#[tokio::test]
async fn child_holds_a_group() {
    let Some(url) = child::role_arg("group-holder") else { return };
    let (_, locks) = open(&url).await;
    let group = distlock_api::LockGroup::new([distlock_api::GroupMember::exclusive("shelf").unwrap()]).unwrap();
    let _held = locks.lock_group(&group, Duration::from_secs(60)).await.expect("acquire the group");
    child::announce("ACQUIRED");
    child::park().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_group_holder_frees_its_names_at_once() {
    let url = fresh_url("killed-group");
    let mut holder = ChildProcess::spawn("host::child_holds_a_group", "group-holder", &url);
    holder.wait_for_line("ACQUIRED", CHILD_START);
    let (store, locks) = open(&url).await;
    let group = distlock_api::LockGroup::new([distlock_api::GroupMember::shared("shelf").unwrap()]).unwrap();
    let ttl = Duration::from_secs(60);
    let options = LockOptions::new().wait(Duration::from_secs(30)).retry_interval(RETRY);
    let waiter = tokio::spawn({
        let (locks, group) = (locks.clone(), group.clone());
        async move {
            let held = locks.lock_group_opts(&group, ttl, &options).await;
            (SqliteLockStore::clock(), held)
        }
    });
    // The waiter is parked once its place (intent) is recorded.
    let key = distlock_api::LockKey::new("shelf").unwrap().to_store_key();
    let groups = store.groups().expect("lock groups");
    let deadline = std::time::Instant::now() + CHILD_START;
    while groups.waiting(&key).await.unwrap() == 0 {
        assert!(std::time::Instant::now() < deadline, "the waiter never queued");
        tokio::task::yield_now().await;
    }
    let killed_at = SqliteLockStore::clock();
    holder.kill9();
    let (acquired_at, held) = waiter.await.unwrap();
    assert!(held.is_ok(), "{held:?}");
    let after = acquired_at.saturating_sub(killed_at);
    println!("group acquired {after:?} after kill -9 of the holder");
    assert!(after < WOKEN_WITHIN, "acquired {after:?} after the holder was killed: woken by the retry, not the exit");
}
