//! Real faults on a private `redis-server` (never the shared one): `SCRIPT FLUSH`, a
//! stopped and restarted server, killed client connections, a command whose reply is
//! lost while the server still runs it, a lock holder killed with `kill -9`, a network
//! partition through a fault proxy, and a killed release subscriber.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{eventually, fence_counter_key, fence_key, lock_key, store_key, unique_prefix};
use distlock_api::{Acquire, DynLockStore, LockError, LockManager, LockOptions, LockStore, Token, Ttl};
use distlock_conformance::counting::CountingStore;
use distlock_conformance::kit::child::{self, ChildProcess};
use distlock_conformance::kit::proxy::FaultProxy;
use distlock_conformance::kit::redis_server::{monitor_args, RedisServer, Reply};
use distlock_redis::{RedisLockStore, RedisLockStoreBuilder};

/// The store's scripts, as the server runs them.
const EXTEND_SCRIPT: &str = include_str!("../../src/lua/extend.lua");
const FENCED_EXTEND_SCRIPT: &str = include_str!("../../src/lua/fenced_extend.lua");
/// The fair release as the server runs it: the queue helpers, then the script (as
/// `scripts!` in `src/scripts.rs` joins them).
const FAIR_RELEASE_SCRIPT: &str =
    concat!(include_str!("../../src/lua/lib/queue.lua"), include_str!("../../src/lua/fair_release.lua"));

const RETRY: Duration = Duration::from_millis(20);

fn ttl(duration: Duration) -> Ttl {
    Ttl::new(duration).unwrap()
}

/// Short timeouts, so that every failure shows quickly.
/// Fair waiting and notifications on: the faults below are those of the queue's scripts
/// and of the subscriber (the plain wire's are in `frozen_wire.rs`).
fn builder(test: &str, fencing: bool) -> RedisLockStoreBuilder {
    RedisLockStore::builder()
        .key_prefix(unique_prefix(test))
        .fencing(fencing)
        .fair_queue(true)
        .release_notifications(true)
        .response_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(1))
        .reconnect_retries(2)
}

fn script_cached(server: &RedisServer, code: &str) -> bool {
    let sha = distlock_redis::redis::Script::new(code).get_hash().to_owned();
    match server.command(&["SCRIPT", "EXISTS", &sha]) {
        Reply::Array(Some(flags)) => flags == [Reply::Int(1)],
        other => panic!("SCRIPT EXISTS: {other:?}"),
    }
}

fn assert_store_error<T: std::fmt::Debug>(result: Result<T, LockError>, operation: &str) {
    match result {
        Err(LockError::Store { backend: "redis", operation: op, .. }) if op == operation => {}
        other => panic!("expected a redis store error from {operation}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn script_flush_then_release_and_extend_still_work() {
    let Some(server) = RedisServer::start_or_skip("script_flush") else { return };
    for fencing in [false, true] {
        let store = builder("flush", fencing).connect(&server.url()).await.unwrap();
        let key = store_key("flushed");
        let token = Token::generate();

        // In fencing mode acquire is a script too.
        server.script_flush();
        let acquired = store.try_acquire(&key, &token, ttl(Duration::from_secs(30))).await.unwrap();
        assert_eq!(acquired, Acquire::Acquired { fence: fencing.then_some(1) });

        // Fencing mode extends with its own script (the fence key too).
        let extend_script = if fencing { FENCED_EXTEND_SCRIPT } else { EXTEND_SCRIPT };
        server.script_flush();
        assert!(!script_cached(&server, extend_script));
        assert!(store.extend(&key, &token, ttl(Duration::from_secs(60))).await.unwrap(), "fencing={fencing}");
        assert!(script_cached(&server, extend_script), "the NOSCRIPT fallback sent EVAL, which caches the script");
        if fencing {
            let pttl = server.command(&["PTTL", &fence_key(&store, &key)]).as_int().unwrap();
            assert!(pttl > 30_000, "the fence key extended too: PTTL {pttl}");
        }
        let pttl = server.command(&["PTTL", &lock_key(&store, &key)]).as_int().unwrap();
        assert!(pttl > 30_000, "extended: PTTL {pttl}");

        server.script_flush();
        assert!(!script_cached(&server, FAIR_RELEASE_SCRIPT));
        assert!(store.release(&key, &token).await.unwrap(), "fencing={fencing}");
        assert!(script_cached(&server, FAIR_RELEASE_SCRIPT));
        assert_eq!(server.command(&["EXISTS", &lock_key(&store, &key)]), Reply::Int(0));

        server.script_flush();
        assert!(store.inspect(&key).await.unwrap().is_none());
        assert!(!store.release(&key, &token).await.unwrap(), "a foreign or absent lock is never reported released");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn stopped_server_gives_store_errors_and_the_same_store_recovers_after_restart() {
    let Some(mut server) = RedisServer::start_or_skip("stop_restart") else { return };
    let store = Arc::new(builder("stop", true).connect(&server.url()).await.unwrap());
    let locks = LockManager::new(store.clone());
    let held = locks.try_lock("held", Duration::from_secs(60)).await.unwrap().unwrap();
    assert_eq!(held.fence(), Some(1));
    let (held_key, held_token) = (held.store_key().clone(), held.token().clone());
    let _ = held.leak();

    server.stop();
    let bound = Duration::from_secs(10);
    for _round in 0..2 {
        let other = store_key("other");
        let long = ttl(Duration::from_secs(60));
        let started = Instant::now();
        assert_store_error(store.try_acquire(&other, &Token::generate(), long).await, "acquire");
        assert_store_error(store.release(&held_key, &held_token).await, "release");
        assert_store_error(store.extend(&held_key, &held_token, long).await, "extend");
        assert_store_error(store.inspect(&held_key).await, "inspect");
        assert_store_error(locks.try_lock("other", Duration::from_secs(60)).await.map(|l| l.is_some()), "acquire");
        assert_store_error(
            locks
                .lock_opts(
                    "other",
                    Duration::from_secs(60),
                    &LockOptions::new().wait(Duration::from_secs(1)).retry_interval(RETRY),
                )
                .await
                .map(|_| ()),
            "acquire",
        );
        let elapsed = started.elapsed();
        assert!(elapsed < 6 * bound, "six failing operations took {elapsed:?}");
        eprintln!("six operations against a stopped server failed in {elapsed:?}");
    }

    server.restart();
    // The same store reconnects by itself; the first operations may still fail while it does.
    let (holder, failures) = eventually(Duration::from_secs(15), || store.inspect(&held_key)).await;
    eprintln!("{failures} operations failed while reconnecting");
    assert_eq!(holder, None, "no persistence: the restart dropped the lock");
    let lock = locks.try_lock("held", Duration::from_secs(60)).await.unwrap().unwrap();
    assert_eq!(lock.fence(), Some(1), "no persistence: the restart also reset the fencing counter");
    assert!(lock.extend(Duration::from_secs(30)).await.unwrap());
    assert!(lock.release().await.unwrap());
    locks.flush_releases().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fences_survive_a_restart_with_persistence() {
    if !RedisServer::binary_available() {
        eprintln!("SKIPPED fences_survive_a_restart_with_persistence: no redis-server");
        return;
    }
    let mut server = RedisServer::start_persistent();
    let store = builder("persist", true).connect(&server.url()).await.unwrap();
    let key = store_key("job");
    let long = ttl(Duration::from_secs(60));
    for expected in 1..=2 {
        let token = Token::generate();
        assert_eq!(store.try_acquire(&key, &token, long).await.unwrap(), Acquire::Acquired { fence: Some(expected) });
        assert!(store.release(&key, &token).await.unwrap());
    }
    let holder = Token::generate();
    assert_eq!(store.try_acquire(&key, &holder, long).await.unwrap(), Acquire::Acquired { fence: Some(3) });

    server.stop(); // SIGKILL; the append-only file is fsynced on every write
    server.restart();
    let (info, _) = eventually(Duration::from_secs(15), || store.inspect(&key)).await;
    let info = info.expect("the lease survived the restart");
    assert_eq!((info.token, info.fence), (holder.clone(), Some(3)));
    assert!(store.release(&key, &holder).await.unwrap());
    assert_eq!(store.try_acquire(&key, &Token::generate(), long).await.unwrap(), Acquire::Acquired { fence: Some(4) });
    // The store's one counter survived too: another key continues from it.
    let other = store_key("other-job");
    assert_eq!(
        store.try_acquire(&other, &Token::generate(), long).await.unwrap(),
        Acquire::Acquired { fence: Some(5) }
    );
    let counter = server.command(&["GET", &fence_counter_key(&store)]).as_text();
    assert_eq!(counter.as_deref(), Some("5"));
}

#[tokio::test(flavor = "multi_thread")]
async fn client_kill_mid_run_resumes_without_false_results() {
    let Some(server) = RedisServer::start_or_skip("client_kill") else { return };
    let store = Arc::new(builder("kill", false).connect(&server.url()).await.unwrap());
    let locks = LockManager::new(store.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let cycles = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicUsize::new(0));

    let mut workers = Vec::new();
    for worker in 0..4 {
        let (store, locks, stop, cycles, errors) =
            (store.clone(), locks.clone(), stop.clone(), cycles.clone(), errors.clone());
        workers.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                // A fresh key per cycle: "held" or "not released" can only be false results.
                let key = format!("w{worker}-{n}");
                let lock = match locks.try_lock(&key, Duration::from_secs(30)).await {
                    Ok(Some(lock)) => lock,
                    Ok(None) => panic!("{key}: a fresh key was reported held"),
                    Err(err) => {
                        assert!(matches!(err, LockError::Store { operation: "acquire", .. }), "{err}");
                        errors.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                };
                match store.inspect(lock.store_key()).await {
                    Ok(Some(info)) => assert_eq!(&info.token, lock.token(), "{key}"),
                    Ok(None) => panic!("{key}: reported acquired but not held"),
                    Err(err) => {
                        assert!(matches!(err, LockError::Store { operation: "inspect", .. }), "{err}");
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                match lock.release().await {
                    Ok(true) => {
                        cycles.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(false) => panic!("{key}: release of a held lock reported false"),
                    Err(err) => {
                        assert!(matches!(err, LockError::Store { operation: "release", .. }), "{err}");
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }

    let progress = |target: usize| {
        let cycles = cycles.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            while cycles.load(Ordering::Relaxed) < target {
                assert!(Instant::now() < deadline, "no progress to {target} cycles");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    let mut kills = 0;
    for _ in 0..3 {
        progress(cycles.load(Ordering::Relaxed) + 50).await;
        let killed = tokio::task::block_in_place(|| server.client_kill_all_normal());
        assert!(killed >= 1, "the store's connection was killed");
        kills += killed;
    }
    progress(cycles.load(Ordering::Relaxed) + 50).await;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.unwrap();
    }
    locks.flush_releases().await;

    let errors = errors.load(Ordering::Relaxed);
    let leftover = tokio::task::block_in_place(|| server.keys(&format!("{}:*", store.key_prefix())));
    eprintln!(
        "{} cycles, {kills} connections killed, {errors} store errors, leftover {leftover:?}",
        cycles.load(Ordering::Relaxed)
    );
    // A lease is left only when its acquire or release failed *and* the manager's background
    // release failed too; it then expires with its TTL.
    assert!(leftover.len() <= errors, "{} leftover leases for {errors} errors", leftover.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_acquire_whose_reply_is_lost_leaves_no_orphan_lease() {
    let Some(server) = RedisServer::start_or_skip("lost_reply") else { return };
    for fencing in [false, true] {
        let store = builder("lost", fencing).response_timeout(Duration::from_millis(300)).connect(&server.url()).await;
        let store = Arc::new(store.unwrap());
        let locks = LockManager::new(store.clone());
        // Load the scripts (server-wide) so the release's EVALSHA finds its script once the
        // server runs it; through a store with a 1 s timeout, so that load cannot fail it.
        let patient = builder("lost", fencing).key_prefix(store.key_prefix()).connect(&server.url()).await.unwrap();
        let warm = Token::generate();
        assert!(patient
            .try_acquire(&store_key("warm-up"), &warm, ttl(Duration::from_secs(5)))
            .await
            .unwrap()
            .is_acquired());
        assert!(patient.release(&store_key("warm-up"), &warm).await.unwrap());

        let key = store_key("uncertain");
        let redis_key = lock_key(&store, &key);
        let release_sha = distlock_redis::redis::Script::new(FAIR_RELEASE_SCRIPT).get_hash().to_owned();
        let monitor = tokio::task::block_in_place(|| server.monitor());
        // The server holds writes for 1.5 s, then runs them: the client gives up after 0.3 s
        // although its SET will run.
        tokio::task::block_in_place(|| server.pause_writes(Duration::from_millis(1_500)));
        let err = locks.try_lock("uncertain", Duration::from_secs(60)).await.unwrap_err();
        assert!(matches!(err, LockError::Store { operation: "acquire", .. }), "{err}");
        locks.flush_releases().await;

        // The SET ran after the pause, and the manager's release (same token) right after it.
        let lines = tokio::task::block_in_place(|| monitor.lines_until(&release_sha, Duration::from_secs(10)));
        let commands: Vec<Vec<String>> =
            lines.iter().filter(|line| !line.contains(" lua]")).map(|line| monitor_args(line)).collect();
        let acquired = commands.iter().position(|args| args.contains(&redis_key)).unwrap();
        let released = commands.len() - 1;
        assert!(acquired < released, "{commands:?}");
        // EVALSHA <sha> 3 <key> <queue> <queue-ttl> <token> <channel>
        let token = &commands[released][6];
        assert!(commands[acquired].contains(token), "released with the acquiring token: {commands:?}");
        assert_eq!(commands[released][3], redis_key);
        assert_eq!(
            tokio::task::block_in_place(|| server.command(&["EXISTS", &redis_key])),
            Reply::Int(0),
            "fencing={fencing}: the lease taken by the lost command was released, not orphaned for 60 s"
        );
        assert!(patient
            .try_acquire(&key, &Token::generate(), ttl(Duration::from_secs(5)))
            .await
            .unwrap()
            .is_acquired());
    }
}

/// The child side of [`killed_holder_process_frees_the_lock_only_after_its_ttl`]: takes
/// the lock and waits to be killed. Returns at once when run as an ordinary test.
#[tokio::test(flavor = "multi_thread")]
async fn child_entry_holds_redis_lock() {
    let Some(arg) = child::role_arg("redis-holder") else { return };
    let mut parts = arg.split(' ');
    let (Some(url), Some(prefix), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
        panic!("bad child argument {arg:?}")
    };
    let store = RedisLockStore::builder().key_prefix(prefix).connect(url).await.unwrap();
    let locks = LockManager::new(Arc::new(store));
    let lock = locks.try_lock(key, HOLDER_TTL).await.unwrap().expect("the child takes the lock");
    child::announce(&format!("ACQUIRED {}", lock.token().as_str()));
    child::park().await;
}

const HOLDER_TTL: Duration = Duration::from_secs(3);

#[test]
fn killed_holder_process_frees_the_lock_only_after_its_ttl() {
    let Some(server) = RedisServer::start_or_skip("kill -9 holder") else { return };
    let prefix = unique_prefix("kill9");
    let arg = format!("{} {prefix} job:1", server.url());
    let mut holder = ChildProcess::spawn("faults::child_entry_holds_redis_lock", "redis-holder", &arg);
    let line = holder.wait_for_line("ACQUIRED ", Duration::from_secs(60));
    let child_token = Token::parse(line.trim_start_matches("ACQUIRED ")).unwrap();
    holder.kill9();
    let killed_at = Instant::now();

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let store = Arc::new(RedisLockStore::builder().key_prefix(&prefix).connect(&server.url()).await.unwrap());
        let locks = LockManager::new(store.clone());
        let key = store_key("job:1");

        // The dead process still holds the lease: its TTL, not its death, frees it.
        let asked_at = Instant::now();
        let info = store.inspect(&key).await.unwrap().expect("still held after kill -9");
        assert_eq!(info.token, child_token);
        assert!(info.ttl_left <= HOLDER_TTL && !info.ttl_left.is_zero(), "{info:?}");
        let expires_no_sooner_than = asked_at + info.ttl_left;
        let early = locks.try_lock("job:1", Duration::from_secs(10)).await.unwrap();
        assert!(early.is_none(), "acquired {:?} after kill -9, before the TTL ran out", killed_at.elapsed());

        let lock = locks
            .lock_opts(
                "job:1",
                Duration::from_secs(10),
                &LockOptions::new().wait(HOLDER_TTL + Duration::from_secs(3)).retry_interval(RETRY),
            )
            .await
            .expect("acquired once the dead holder's TTL ran out");
        let acquired_at = Instant::now();
        // Redis rounds PTTL to whole milliseconds.
        assert!(
            acquired_at + Duration::from_millis(20) >= expires_no_sooner_than,
            "acquired {:?} before the lease's expiry",
            expires_no_sooner_than - acquired_at
        );
        eprintln!("acquired {:?} after kill -9 (TTL {HOLDER_TTL:?})", acquired_at - killed_at);
        assert!(lock.release().await.unwrap());
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partition_through_the_proxy_fires_lost_before_the_ttl() {
    let Some(server) = RedisServer::start_or_skip("partition") else { return };
    let upstream = std::net::SocketAddr::from(([127, 0, 0, 1], server.port()));
    for fencing in [false, true] {
        let proxy = FaultProxy::start(upstream).await.unwrap();
        let prefix = unique_prefix("partition");
        // Default timeouts: the 2 s response timeout is shorter than the case's 10 s TTL.
        let via_proxy = RedisLockStore::builder()
            .key_prefix(&prefix)
            .fencing(fencing)
            .connect(&format!("redis://{}", proxy.addr()))
            .await
            .unwrap();
        let direct =
            RedisLockStore::builder().key_prefix(&prefix).fencing(fencing).connect(&server.url()).await.unwrap();
        let (via_proxy, direct): (Arc<DynLockStore>, Arc<DynLockStore>) = (Arc::new(via_proxy), Arc::new(direct));
        distlock_conformance::cases::partition_fires_lost_before_the_ttl(via_proxy, &proxy, direct).await;
    }
}

/// Measures one hand-off on `key`: a holder, one waiter (`retry`) that has already found
/// the lock held and is waiting, then the release. Returns release → waiter holds it, and
/// how many acquire attempts the waiter made while the lock was held for `hold`.
async fn hand_off(counting: &Arc<CountingStore>, key: &str, retry: Duration, hold: Duration) -> (Duration, usize) {
    let locks = LockManager::new(counting.clone());
    let held = locks.lock(key, Duration::from_secs(30)).await.unwrap();
    let (acquires, waits) = (counting.acquires(), counting.waits());
    let waiter = tokio::spawn({
        let (locks, key) = (locks.clone(), key.to_owned());
        async move {
            let lock = locks
                .lock_opts(
                    &key,
                    Duration::from_secs(30),
                    &LockOptions::new().wait(Duration::from_secs(20)).retry_interval(retry),
                )
                .await
                .unwrap();
            let acquired_at = Instant::now();
            assert!(lock.release().await.unwrap());
            acquired_at
        }
    });
    counting.wait_for_acquires(acquires + 1).await;
    counting.wait_until(|c| c.waits() > waits).await;
    tokio::time::sleep(hold).await; // the holder's critical section
    let attempts = counting.acquires() - acquires;
    let released_at = Instant::now();
    assert!(held.release().await.unwrap());
    let acquired_at =
        tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("the waiter got the lock").unwrap();
    (acquired_at - released_at, attempts)
}

/// Polls the server until `channel` has `expected` subscribers (an outside observation,
/// not a stand-in for one of the store's own signals).
async fn until_subscribers(server: &RedisServer, channel: &str, expected: i64) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = tokio::task::block_in_place(|| server.subscribers(channel));
        if now == expected {
            return;
        }
        assert!(Instant::now() < deadline, "{channel}: {now} subscribers, expected {expected}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_subscriber_falls_back_to_polling_and_notifications_come_back() {
    let Some(server) = RedisServer::start_or_skip("killed subscriber") else { return };
    let store = Arc::new(builder("subscriber", false).connect(&server.url()).await.unwrap());
    let channel = format!("{}:released", store.key_prefix());
    let counting = CountingStore::new(store.clone());
    let notified_bound = Duration::from_millis(500);
    let slow_retry = Duration::from_secs(2);

    // Notified: the first wait opened the store's one subscriber connection.
    let (took, _) = hand_off(&counting, "job", slow_retry, Duration::ZERO).await;
    assert!(took < notified_bound, "notified hand-off took {took:?} (retry {slow_retry:?})");
    assert_eq!(tokio::task::block_in_place(|| server.subscribers(&channel)), 1, "one subscriber per store");

    // A killed subscriber reconnects by itself and notifications come back.
    assert!(tokio::task::block_in_place(|| server.client_kill_pubsub()) >= 1);
    until_subscribers(&server, &channel, 1).await;
    let (took, _) = hand_off(&counting, "job", slow_retry, Duration::ZERO).await;
    assert!(took < notified_bound, "after a reconnect: hand-off took {took:?}");

    // Killed and unable to subscribe again (SUBSCRIBE refused): waiters poll — every
    // retry interval, no faster — and still get the lock.
    tokio::task::block_in_place(|| server.command(&["ACL", "SETUSER", "default", "-subscribe"]));
    assert!(tokio::task::block_in_place(|| server.client_kill_pubsub()) >= 1);
    until_subscribers(&server, &channel, 0).await;
    let retry = Duration::from_millis(300);
    let hold = Duration::from_millis(1_500);
    let (took, attempts) = hand_off(&counting, "job", retry, hold).await;
    assert!(took < Duration::from_secs(2), "polling hand-off took {took:?} (retry {retry:?})");
    // 1.5 s held, one attempt per 300 ms (plus the first): polling, not a busy loop, not stuck.
    assert!((3..=9).contains(&attempts), "{attempts} acquire attempts in {hold:?} with retry {retry:?}");

    // SUBSCRIBE allowed again: the subscriber is back within its back-off, notifications too.
    tokio::task::block_in_place(|| server.command(&["ACL", "SETUSER", "default", "+subscribe"]));
    until_subscribers(&server, &channel, 1).await;
    let (took, attempts) = hand_off(&counting, "job", slow_retry, Duration::from_millis(500)).await;
    assert!(took < notified_bound, "notifications back: hand-off took {took:?}");
    assert!(attempts <= 2, "a notified waiter does not poll: {attempts} attempts");
}
