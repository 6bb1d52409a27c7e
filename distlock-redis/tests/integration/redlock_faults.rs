//! Redlock under faults, on private masters: a stopped minority (locks keep working), a
//! stopped majority (acquisition fails cleanly, nothing is granted twice), a restarted
//! master (no double grant, fences keep increasing).

use crate::scale_kit;

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{LockError, LockManager, LockStore};
use distlock_redis::RedlockStore;
use scale_kit::{masters, redlock_url};

const TTL: Duration = Duration::from_secs(30);

async fn manager(servers: &[distlock_conformance::kit::redis_server::RedisServer], query: &str) -> LockManager {
    let store = RedlockStore::builder()
        .response_timeout(Duration::from_millis(500))
        .connect(&redlock_url(servers, query))
        .await
        .expect("connect");
    LockManager::new(Arc::new(store))
}

fn stop(server: &mut distlock_conformance::kit::redis_server::RedisServer) {
    tokio::task::block_in_place(|| server.stop());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_minority_does_not_stop_the_locks() {
    for n in [3, 5] {
        let Some(mut servers) = masters(n, "redlock minority") else { return };
        let locks = manager(&servers, "?fencing=true").await;
        let before = locks.try_lock("job", TTL).await.unwrap().expect("all masters up");
        let first_fence = before.fence().unwrap();
        assert!(before.release().await.unwrap());
        for server in servers.iter_mut().take((n - 1) / 2) {
            stop(server);
        }
        let held = locks.try_lock("job", TTL).await.unwrap().expect("a majority is up");
        assert!(held.fence().unwrap() > first_fence);
        assert!(locks.try_lock("job", TTL).await.unwrap().is_none(), "{n} masters: granted twice");
        let key = distlock_api::LockKey::new("job").unwrap().to_store_key();
        let info = locks.store().inspect(&key).await.unwrap().expect("held on a majority");
        assert_eq!(&info.token, held.token());
        assert!(held.extend(TTL).await.unwrap(), "renewal on the majority");
        assert!(held.release().await.unwrap());
        let again = locks.try_lock("job", TTL).await.unwrap().expect("released on the majority");
        assert!(again.fence().unwrap() > first_fence);
        assert!(again.release().await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_majority_fails_acquisitions_cleanly() {
    for n in [3, 5] {
        let Some(mut servers) = masters(n, "redlock majority") else { return };
        let locks = manager(&servers, "").await;
        let holder = locks.try_lock("job", TTL).await.unwrap().expect("all masters up");
        for server in servers.iter_mut().take(n / 2 + 1) {
            stop(server);
        }
        for _ in 0..3 {
            match locks.try_lock("job", TTL).await {
                Err(LockError::Store { backend: "redlock", .. }) => {}
                other => panic!("{n} masters, majority down: expected a store error, got {other:?}"),
            }
            match locks.try_lock("other", TTL).await {
                Err(LockError::Store { backend: "redlock", .. }) => {}
                other => panic!("{n} masters, majority down: a free key must not be granted either, got {other:?}"),
            }
        }
        // The holder cannot renew on a minority: its lease is reported lost.
        assert!(!matches!(holder.extend(TTL).await, Ok(true)), "extended on a minority");
        drop(holder);
        // Restarted (empty, no persistence) after the old lease is gone: locks work again.
        for server in servers.iter_mut().take(n / 2 + 1) {
            tokio::task::block_in_place(|| server.restart());
        }
        let lock = retry_lock(&locks, "other").await;
        assert!(lock.release().await.unwrap());
    }
}

async fn retry_lock(locks: &LockManager, key: &str) -> distlock_api::DistributedLock {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match locks.try_lock(key, TTL).await {
            Ok(Some(lock)) => return lock,
            other if tokio::time::Instant::now() < deadline => {
                eprintln!("waiting for the masters: {other:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("the masters did not come back: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_master_grants_nothing_twice_and_fences_keep_increasing() {
    let Some(mut servers) = masters(3, "redlock restart") else { return };
    let locks = manager(&servers, "?fencing=true").await;
    let mut last = 0;
    for (round, server) in servers.iter_mut().enumerate() {
        let held = retry_lock(&locks, "job").await;
        assert!(held.fence().unwrap() > last, "round {round}");
        last = held.fence().unwrap();
        // One master restarts empty (no persistence): the lease is still on a majority.
        tokio::task::block_in_place(|| server.restart());
        for _ in 0..3 {
            match locks.try_lock("job", TTL).await {
                Ok(None) | Err(_) => {}
                Ok(Some(_)) => panic!("round {round}: granted twice after a master restarted"),
            }
        }
        assert!(held.release().await.unwrap(), "released on the two masters that kept it");
    }
    // The restarted masters' counters start from their clocks: still increasing.
    let after = retry_lock(&locks, "job").await;
    assert!(after.fence().unwrap() > last);
}

#[tokio::test(flavor = "multi_thread")]
async fn connecting_needs_a_majority_and_a_late_master_joins() {
    let Some(mut servers) = masters(3, "redlock connect") else { return };
    let url = redlock_url(&servers, "");
    stop(&mut servers[0]);
    stop(&mut servers[1]);
    match RedlockStore::connect(&url).await {
        Err(LockError::Store { operation: "connect", .. }) => {}
        other => panic!("connected with a majority down: {other:?}"),
    }
    tokio::task::block_in_place(|| servers[1].restart());
    let store = RedlockStore::connect(&url).await.expect("a majority is up");
    assert_eq!(store.quorum(), 2);
    let locks = LockManager::new(Arc::new(store));
    let lock = locks.try_lock("job", TTL).await.unwrap().expect("two of three");
    assert!(lock.release().await.unwrap());
    tokio::task::block_in_place(|| servers[0].restart());
    stop(&mut servers[1]);
    // The master that was down at connect time now counts (lazy connection).
    let lock = retry_lock(&locks, "job").await;
    assert!(lock.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_masters_are_asked_in_parallel() {
    let Some(servers) = masters(3, "redlock fan-out") else { return };
    let store = RedlockStore::builder()
        .response_timeout(Duration::from_secs(5))
        .connect(&redlock_url(&servers, ""))
        .await
        .expect("connect");
    let locks = LockManager::new(Arc::new(store));
    // Every master holds writes (and scripts) for 400 ms: one after the other would take 1.2 s.
    let pause = Duration::from_millis(400);
    for server in &servers {
        tokio::task::block_in_place(|| server.pause_writes(pause));
    }
    let started = tokio::time::Instant::now();
    let lock = locks.try_lock("job", TTL).await.unwrap().expect("free");
    let took = started.elapsed();
    assert!(took >= pause - Duration::from_millis(50), "the pause did not apply: {took:?}");
    assert!(took < pause * 2, "the acquire took {took:?}: the masters were asked one after the other");
    assert!(lock.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn contended_workload_keeps_mutual_exclusion_while_a_master_stops_and_restarts() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let Some(mut servers) = masters(3, "redlock contended minority fault") else { return };
    let locks = manager(&servers, "?fencing=true").await;
    let (inside, halt) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let done = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (locks, inside, halt, done) = (locks.clone(), Arc::clone(&inside), Arc::clone(&halt), Arc::clone(&done));
        workers.push(tokio::spawn(async move {
            let options =
                distlock_api::LockOptions::new().wait(Duration::from_secs(5)).retry_interval(Duration::from_millis(5));
            let mut last = 0;
            while !halt.load(Ordering::Relaxed) {
                let Ok(lock) = locks.lock_opts("hot", Duration::from_secs(5), &options).await else { continue };
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                let fence = lock.fence().unwrap();
                assert!(fence > last, "fences went backwards: {fence} after {last}");
                last = fence;
                tokio::task::yield_now().await;
                inside.store(false, Ordering::SeqCst);
                let _ = lock.release().await;
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let progress = |at_least: u64| {
        let done = Arc::clone(&done);
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            while done.load(Ordering::Relaxed) < at_least {
                assert!(tokio::time::Instant::now() < deadline, "no progress");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    progress(20).await;
    stop(&mut servers[0]);
    let before = done.load(Ordering::Relaxed);
    progress(before + 20).await;
    tokio::task::block_in_place(|| servers[0].restart());
    let before = done.load(Ordering::Relaxed);
    progress(before + 20).await;
    halt.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_master_does_not_hold_up_a_renewal_and_still_gets_it() {
    let Some(servers) = masters(3, "redlock early answer") else { return };
    let store = RedlockStore::builder()
        .response_timeout(Duration::from_secs(5))
        .connect(&redlock_url(&servers, ""))
        .await
        .expect("connect");
    let slow = store.masters()[2].clone();
    let locks = LockManager::new(Arc::new(store));
    let key = distlock_api::LockKey::new("job").unwrap().to_store_key();
    let lock = locks.try_lock("job", TTL).await.unwrap().expect("free");
    assert_eq!(slow.inspect(&key).await.unwrap().map(|holder| holder.token).as_ref(), Some(lock.token()));
    // The third master holds writes: the two others make the majority.
    let pause = Duration::from_millis(800);
    tokio::task::block_in_place(|| servers[2].pause_writes(pause));
    let started = tokio::time::Instant::now();
    assert!(lock.extend(TTL * 4).await.unwrap(), "renewed on the majority");
    assert!(started.elapsed() < pause / 2, "the renewal waited for the slow master: {:?}", started.elapsed());
    // Its renewal was not dropped: it runs once the pause ends.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = slow.inspect(&key).await.unwrap().expect("still held there").ttl_left;
        if left > TTL * 2 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the slow master never got the renewal ({left:?} left)");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A release waits for every master, the slow one included.
    tokio::task::block_in_place(|| servers[2].pause_writes(Duration::from_millis(300)));
    assert!(lock.release().await.unwrap());
    assert!(slow.inspect(&key).await.unwrap().is_none(), "released on every master before the answer");
}
