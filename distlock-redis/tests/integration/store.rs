//! The store's own behaviour against the shared Redis (`DISTLOCK_REDIS_URL`), each test
//! under its own random key prefix.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{cleanup, fence_counter_key, fence_key, lock_key, raw, shared_store, store_key};
use distlock_api::{Acquire, LockError, LockManager, LockOptions, LockStore, QueuedAttempt, Token, Ttl};
use distlock_redis::RedisLockStore;

const LONG: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread")]
async fn acquire_inspect_extend_release_round_trip() {
    let Some(store) = shared_store("round_trip", RedisLockStore::builder()).await else { return };
    let store = Arc::new(store);
    let locks = LockManager::new(store.clone());
    let redis_key = format!("{}:lock:order:1", store.key_prefix());

    let lock = locks.try_lock("order:1", Duration::from_secs(10)).await;
    let lock = lock.unwrap().expect("a free key is acquired");
    assert_eq!(lock.fence(), None, "default mode does not fence");
    let value: String = raw(&store, &["GET", &redis_key]).await;
    assert_eq!(value, lock.token().as_str(), "the lock key's value is the token");
    let pttl: i64 = raw(&store, &["PTTL", &redis_key]).await;
    assert!((1..=10_000).contains(&pttl), "PTTL {pttl}");

    let info = store.inspect(lock.store_key()).await.unwrap().expect("held");
    assert_eq!(&info.token, lock.token());
    assert_eq!(info.fence, None);
    assert!(info.ttl_left <= Duration::from_secs(10) && info.ttl_left > Duration::from_secs(1), "{info:?}");

    let again = locks.try_lock("order:1", Duration::from_secs(10)).await;
    assert!(again.unwrap().is_none(), "not reentrant");

    assert!(lock.extend(LONG).await.unwrap());
    let pttl: i64 = raw(&store, &["PTTL", &redis_key]).await;
    assert!(pttl > 10_000 && pttl <= 30_000, "extended PTTL {pttl}");

    let token = lock.token().clone();
    let key = lock.store_key().clone();
    assert!(lock.release().await.unwrap());
    let exists: i64 = raw(&store, &["EXISTS", &redis_key]).await;
    assert_eq!(exists, 0);
    assert!(store.inspect(&key).await.unwrap().is_none());
    assert!(!store.release(&key, &token).await.unwrap(), "a second release reports false");
    assert!(!store.extend(&key, &token, Ttl::new(LONG).unwrap()).await.unwrap());
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ttl_is_sent_in_whole_milliseconds() {
    let Some(store) = shared_store("ttl_ms", RedisLockStore::builder()).await else { return };
    let key = store_key("ttl");
    let redis_key = lock_key(&store, &key);
    // 20 s and half a millisecond: rounded up to 20 001 ms, never truncated.
    let ttl = Ttl::new(Duration::from_micros(20_000_500)).unwrap();
    assert!(store.try_acquire(&key, &Token::generate(), ttl).await.unwrap().is_acquired());
    let pttl: i64 = raw(&store, &["PTTL", &redis_key]).await;
    assert!(pttl > 20_000 - 5_000 && pttl <= 20_001, "PTTL {pttl}");
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_foreign_lock_is_never_touched() {
    let Some(store) = shared_store("foreign", RedisLockStore::builder()).await else { return };
    let key = store_key("shared");
    let redis_key = lock_key(&store, &key);
    let owner = Token::generate();
    let _: () = raw(&store, &["SET", &redis_key, owner.as_str(), "PX", "30000"]).await;

    let intruder = Token::generate();
    let ttl = Ttl::new(LONG).unwrap();
    assert_eq!(store.try_acquire(&key, &intruder, ttl).await.unwrap(), Acquire::Held { ttl_left: None });
    assert!(!store.release(&key, &intruder).await.unwrap());
    assert!(!store.extend(&key, &intruder, Ttl::new(Duration::from_secs(300)).unwrap()).await.unwrap());
    let value: String = raw(&store, &["GET", &redis_key]).await;
    assert_eq!(value, owner.as_str());
    let pttl: i64 = raw(&store, &["PTTL", &redis_key]).await;
    assert!(pttl <= 30_000, "the foreign lease was not extended: {pttl}");
    assert_eq!(store.inspect(&key).await.unwrap().map(|info| info.token), Some(owner));
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn inspect_reports_values_this_store_did_not_write_as_store_errors() {
    let Some(store) = shared_store("inspect_foreign", RedisLockStore::builder()).await else { return };
    let not_a_token = store_key("not-a-token");
    let _: () = raw(&store, &["SET", &lock_key(&store, &not_a_token), "hello", "PX", "30000"]).await;
    let err = store.inspect(&not_a_token).await.unwrap_err();
    assert!(matches!(err, LockError::Store { backend: "redis", operation: "inspect", .. }), "{err}");

    let no_expiry = store_key("no-expiry");
    let _: () = raw(&store, &["SET", &lock_key(&store, &no_expiry), Token::generate().as_str()]).await;
    let err = store.inspect(&no_expiry).await.unwrap_err();
    assert!(matches!(err, LockError::Store { operation: "inspect", .. }), "{err}");
    assert!(!err.to_string().contains("hello"));

    let wrong_type = store_key("wrong-type");
    let _: i64 = raw(&store, &["LPUSH", &lock_key(&store, &wrong_type), "x"]).await;
    let err = store.try_acquire(&wrong_type, &Token::generate(), Ttl::new(LONG).unwrap()).await;
    assert!(matches!(err, Ok(Acquire::Held { .. })), "SET NX on an existing key of another type: {err:?}");
    let err = store.release(&wrong_type, &Token::generate()).await.unwrap_err();
    assert!(matches!(err, LockError::Store { operation: "release", .. }), "{err}");
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fencing_numbers_increase_across_release_and_expiry() {
    let Some(store) = shared_store("fencing", RedisLockStore::builder().fencing(true)).await else { return };
    assert!(store.capabilities().fencing);
    let key = store_key("job");
    let redis_key = lock_key(&store, &key);
    let fence_key = fence_key(&store, &key);
    let ttl = Ttl::new(LONG).unwrap();

    let first = Token::generate();
    assert_eq!(store.try_acquire(&key, &first, ttl).await.unwrap(), Acquire::Acquired { fence: Some(1) });
    let value: String = raw(&store, &["GET", &redis_key]).await;
    assert_eq!(value, first.as_str(), "the lock value stays the token, so seed 000 release works");
    match store.try_acquire(&key, &Token::generate(), ttl).await.unwrap() {
        Acquire::Held { ttl_left: Some(left) } => assert!(left <= LONG && left > Duration::from_secs(20), "{left:?}"),
        other => panic!("expected Held with the time left, got {other:?}"),
    }
    let info = store.inspect(&key).await.unwrap().unwrap();
    assert_eq!((info.token, info.fence), (first.clone(), Some(1)));
    assert!(store.release(&key, &first).await.unwrap());

    let second = Token::generate();
    assert_eq!(
        store.try_acquire(&key, &second, Ttl::new(Duration::from_millis(100)).unwrap()).await.unwrap(),
        Acquire::Acquired { fence: Some(2) }
    );
    // Let the lease expire (on Redis's clock), then take it over.
    let (taken, _) = common::eventually(Duration::from_secs(10), || {
        let store = &store;
        let key = &key;
        async move {
            match store.try_acquire(key, &Token::generate(), ttl).await {
                Ok(Acquire::Acquired { fence }) => Ok(fence),
                Ok(held) => Err(format!("{held:?}")),
                Err(err) => panic!("{err}"),
            }
        }
    })
    .await;
    assert_eq!(taken, Some(3), "a take-over after expiry gets the next number");
    assert!(!store.release(&key, &second).await.unwrap(), "the expired holder cannot release");

    let issued: String = raw(&store, &["GET", &fence_counter_key(&store)]).await;
    assert_eq!(issued, "3", "one counter for the store");
    let holder: String = raw(&store, &["GET", &fence_key]).await;
    assert!(holder.starts_with("3:"), "the holder's number: {holder}");
    // Another key draws from the same counter: still strictly increasing for each key.
    assert_eq!(
        store.try_acquire(&store_key("other"), &Token::generate(), ttl).await.unwrap(),
        Acquire::Acquired { fence: Some(4) }
    );
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fencing_extend_keeps_the_fence_key_alive_as_long_as_the_lease() {
    let Some(store) = shared_store("fence_extend", RedisLockStore::builder().fencing(true)).await else { return };
    let key = store_key("long-job");
    let (redis_key, fence_key) = (lock_key(&store, &key), fence_key(&store, &key));
    let token = Token::generate();
    let short = Ttl::new(Duration::from_secs(5)).unwrap();
    assert_eq!(store.try_acquire(&key, &token, short).await.unwrap(), Acquire::Acquired { fence: Some(1) });
    let pttl: i64 = raw(&store, &["PTTL", &fence_key]).await;
    assert!((1..=5_000).contains(&pttl), "the fence key has the lease's PX: {pttl}");

    assert!(store.extend(&key, &token, Ttl::new(LONG).unwrap()).await.unwrap());
    for k in [&redis_key, &fence_key] {
        let pttl: i64 = raw(&store, &["PTTL", k]).await;
        assert!(pttl > 5_000 && pttl <= 30_000, "{k} extended: PTTL {pttl}");
    }
    assert!(!store.extend(&key, &Token::generate(), Ttl::new(Duration::from_secs(300)).unwrap()).await.unwrap());
    let pttl: i64 = raw(&store, &["PTTL", &fence_key]).await;
    assert!(pttl <= 30_000, "a wrong token extends nothing: {pttl}");
    assert_eq!(store.inspect(&key).await.unwrap().and_then(|info| info.fence), Some(1));

    // Release is seed 000's script (the lock key only); the fence key expires by itself.
    assert!(store.release(&key, &token).await.unwrap());
    assert!(store.inspect(&key).await.unwrap().is_none());
    let pttl: i64 = raw(&store, &["PTTL", &fence_key]).await;
    assert!((1..=30_000).contains(&pttl), "left to expire with the released lease's PX: {pttl}");
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fencing_inspect_ignores_a_counter_issued_to_another_token() {
    let Some(store) = shared_store("fence_other", RedisLockStore::builder().fencing(true)).await else { return };
    let key = store_key("mixed");
    let ttl = Ttl::new(LONG).unwrap();
    let fenced = Token::generate();
    assert!(store.try_acquire(&key, &fenced, ttl).await.unwrap().is_acquired());
    assert!(store.release(&key, &fenced).await.unwrap());
    // A default-mode client on the same prefix takes the key: it has no fence.
    let plain =
        RedisLockStore::builder().key_prefix(store.key_prefix()).build(store.connection_manager().clone()).unwrap();
    let unfenced = Token::generate();
    assert_eq!(plain.try_acquire(&key, &unfenced, ttl).await.unwrap(), Acquire::Acquired { fence: None });
    let info = store.inspect(&key).await.unwrap().unwrap();
    assert_eq!((info.token, info.fence), (unfenced, None));
    cleanup(&store).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_acquirers_get_one_winner_in_both_modes() {
    for fencing in [false, true] {
        let Some(store) = shared_store("race", RedisLockStore::builder().fencing(fencing)).await else { return };
        let store = Arc::new(store);
        let key = store_key("contended");
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let store = store.clone();
            let key = key.clone();
            tasks.push(tokio::spawn(async move {
                store.try_acquire(&key, &Token::generate(), Ttl::new(LONG).unwrap()).await.unwrap()
            }));
        }
        let mut winners = Vec::new();
        for task in tasks {
            if let Acquire::Acquired { fence } = task.await.unwrap() {
                winners.push(fence);
            }
        }
        assert_eq!(winners.len(), 1, "fencing={fencing}: {winners:?}");
        assert_eq!(winners[0], fencing.then_some(1));
        cleanup(&store).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn default_prefix_and_existing_connection() {
    let Some(url) = distlock_conformance::kit::redis_url("default_prefix") else { return };
    let client = distlock_redis::redis::Client::open(url.as_str()).unwrap();
    let conn = client.get_connection_manager().await.unwrap();
    let store = RedisLockStore::builder().build(conn).unwrap();
    assert_eq!(store.key_prefix(), "distlock");
    assert!(!store.fencing());
    // A unique application key keeps this test apart from others on the default prefix.
    let name = format!("dltest-default-{}", Token::generate().as_str());
    let key = store_key(&name);
    assert_eq!(lock_key(&store, &key), format!("distlock:lock:{name}"));
    let token = Token::generate();
    assert!(store.try_acquire(&key, &token, Ttl::new(LONG).unwrap()).await.unwrap().is_acquired());
    let value: String = raw(&store, &["GET", &format!("distlock:lock:{name}")]).await;
    assert_eq!(value, token.as_str());
    assert!(store.release(&key, &token).await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn waiting_without_notifications_sleeps_the_whole_interval() {
    let Some(store) = shared_store("wait", RedisLockStore::builder()).await else { return };
    assert!(!store.capabilities().release_notifications);
    let started = tokio::time::Instant::now();
    store.wait_for_release(&store_key("any"), Duration::from_millis(200)).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(200));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wait_on_a_free_key_returns_at_once() {
    let Some(store) = shared_store("wait_free", RedisLockStore::builder().release_notifications(true)).await else {
        return;
    };
    assert!(store.capabilities().release_notifications);
    // The first wait starts the subscriber; either way the key is free, so the
    // `EXISTS` after registering ends the wait long before its 10 s.
    for _ in 0..3 {
        let started = tokio::time::Instant::now();
        store.wait_for_release(&store_key("never-taken"), Duration::from_secs(10)).await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_wakes_every_waiter_of_the_key_and_only_them() {
    let Some(store) = shared_store("wake_all", RedisLockStore::builder().release_notifications(true)).await else {
        return;
    };
    let store = Arc::new(store);
    let (key, other) = (store_key("busy"), store_key("other"));
    let ttl = Ttl::new(LONG).unwrap();
    let (holder, other_holder) = (Token::generate(), Token::generate());
    assert!(store.try_acquire(&key, &holder, ttl).await.unwrap().is_acquired());
    assert!(store.try_acquire(&other, &other_holder, ttl).await.unwrap().is_acquired());
    let wait = |key: distlock_api::StoreKey| {
        let store = store.clone();
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            store.wait_for_release(&key, Duration::from_secs(20)).await.unwrap();
            started.elapsed()
        })
    };
    let waiters: Vec<_> = (0..4).map(|_| wait(key.clone())).collect();
    let bystander = wait(other.clone());
    // Let every waiter register and subscribe (it would return at once if the key were free).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(waiters.iter().all(|w| !w.is_finished()) && !bystander.is_finished(), "nobody wakes before a release");
    assert!(store.release(&key, &holder).await.unwrap());
    for waiter in waiters {
        let waited = tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("woken by the release").unwrap();
        assert!(waited < Duration::from_secs(5), "{waited:?}");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!bystander.is_finished(), "a release of another key wakes nobody here");
    assert!(store.release(&other, &other_holder).await.unwrap());
    tokio::time::timeout(Duration::from_secs(5), bystander).await.expect("woken by its own key").unwrap();
    cleanup(&store).await;
}

/// With fair waiting, a release that hands the key over wakes the waiter it hands the key
/// to and no other waiter of the key: the others would only find it held again.
#[tokio::test(flavor = "multi_thread")]
async fn a_hand_over_wakes_only_the_waiter_it_hands_the_key_to() {
    let builder = RedisLockStore::builder().fair_queue(true).release_notifications(true);
    let Some(store) = shared_store("hand_over_wake", builder).await else { return };
    let store = Arc::new(store);
    let key = store_key("busy");
    let (ttl, place) = (Ttl::new(LONG).unwrap(), Ttl::new(LONG).unwrap());
    let holder = Token::generate();
    assert!(store.try_acquire(&key, &holder, ttl).await.unwrap().is_acquired());
    let queue = store.queue().unwrap();
    let waiters: Vec<Token> = (0..3).map(|_| Token::generate()).collect();
    for token in &waiters {
        let attempt = QueuedAttempt { key: &key, token, ttl, place };
        assert!(!queue.try_acquire_queued(attempt).await.unwrap().is_acquired(), "queued behind the holder");
    }
    let mut waits: Vec<_> = waiters
        .iter()
        .map(|token| {
            let (store, key, token) = (store.clone(), key.clone(), token.clone());
            tokio::spawn(
                async move { store.queue().unwrap().wait_for_turn(&key, &token, Duration::from_secs(20)).await },
            )
        })
        .collect();
    // Every waiter registered (the lock key and three turns) and the subscriber listens.
    let registered = || {
        let debug = format!("{store:?}");
        debug.contains("subscribed: true") && debug.contains("keys_waited_on: 4")
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !registered() {
        assert!(tokio::time::Instant::now() < deadline, "waiters never registered: {store:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut releaser = holder;
    for (turn, token) in waiters.iter().enumerate() {
        assert!(waits.iter().all(|wait| !wait.is_finished()), "turn {turn}: nobody wakes before the release");
        assert!(store.release(&key, &releaser).await.unwrap());
        let woken = waits.remove(0);
        tokio::time::timeout(Duration::from_secs(5), woken).await.expect("the first waiter is woken").unwrap().unwrap();
        // The others stay asleep (a wrong wake would end their wait within this time).
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(waits.iter().all(|wait| !wait.is_finished()), "turn {turn}: a waiter behind the first woke");
        let attempt = QueuedAttempt { key: &key, token, ttl, place };
        assert!(queue.try_acquire_queued(attempt).await.unwrap().is_acquired(), "turn {turn}: handed to it");
        releaser = token.clone();
    }
    assert!(store.release(&key, &releaser).await.unwrap());
    cleanup(&store).await;
}

#[test]
fn futures_and_store_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<RedisLockStore>();
    fn assert_send<T: Send>(_: &T) {}
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let connect = RedisLockStore::connect("redis://127.0.0.1:1");
        assert_send(&connect);
    });
}

/// In fencing mode an acquisition that finds the key held learns the holder's time left;
/// a waiter with a long retry interval tries again when that lease ends (an expiry sends
/// no release notification), not a whole retry interval later.
#[tokio::test(flavor = "multi_thread")]
async fn a_waiter_retries_when_the_holders_lease_ends() {
    let Some(store) = shared_store("expiry_wake", RedisLockStore::builder().fencing(true)).await else { return };
    let locks = LockManager::new(Arc::new(store.clone()));
    let _token = locks.lock("expiring", Duration::from_millis(300)).await.unwrap().leak();
    let started = std::time::Instant::now();
    let options = LockOptions::new().wait(Duration::from_secs(60)).retry_interval(Duration::from_secs(30));
    let lock = locks.lock_opts("expiring", LONG, &options).await.unwrap();
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(5), "waited {waited:?}: slept the 30 s retry interval");
    assert!(lock.release().await.unwrap());
    cleanup(&store).await;
}
