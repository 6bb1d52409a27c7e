//! Release notifications across stores (each with its own listener connection), and what
//! a waiter does when its listener is killed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_api::{GroupMember, LockGroup, LockKey, LockManager, LockOptions, LockStore, StoreKey, Token};
use distlock_conformance::kit::mysql_server::{self, MysqlServer};
use distlock_conformance::kit::{self};
use distlock_mysql::{sqlx, MysqlLockStore};

fn name(case: &str) -> String {
    format!("notify:{}:{case}", Token::generate().short())
}

/// Waits until some listener is registered for `key` (the waiter is asleep).
async fn wait_for_registration(store: &MysqlLockStore, key: &StoreKey) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM distribute_lock_waiters WHERE lock_key = ?")
            .bind(key.as_str())
            .fetch_one(store.pool())
            .await
            .unwrap();
        if count > 0 {
            return;
        }
        assert!(Instant::now() < deadline, "no waiter registered");
        tokio::task::yield_now().await;
    }
}

/// A release through one store wakes a waiter of another store (another pool, another
/// listener) long before the waiter's 5 s retry interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_of_another_store() {
    let Some(url) = kit::mysql_url("mysql notify across stores") else { return };
    let (holder_store, waiter_store) =
        (MysqlLockStore::connect(&url).await.unwrap(), MysqlLockStore::connect(&url).await.unwrap());
    holder_store.ensure_schema().await.unwrap();
    let (holders, waiters) =
        (LockManager::new(Arc::new(holder_store.clone())), LockManager::new(Arc::new(waiter_store)));
    let name = name("across");
    let key = LockKey::new(name.as_str()).unwrap().to_store_key();
    let held = holders.lock(&name, Duration::from_secs(30)).await.unwrap();
    let waiter = tokio::spawn({
        let name = name.clone();
        async move {
            let options = LockOptions::new().wait(Duration::from_secs(20)).retry_interval(Duration::from_secs(5));
            let lock = waiters.lock_opts(&name, Duration::from_secs(30), &options).await.unwrap();
            let at = Instant::now();
            lock.release().await.unwrap();
            at
        }
    });
    wait_for_registration(&holder_store, &key).await;
    let released_at = Instant::now();
    assert!(held.release().await.unwrap());
    let acquired_at = waiter.await.unwrap();
    let hand_off = acquired_at - released_at;
    assert!(hand_off < Duration::from_millis(1_500), "hand-off took {hand_off:?} with a 5 s retry interval");
}

/// The waiter's listener (with every other connection of its user) is killed while it
/// waits: the waiter still gets the lock after the release, within its retry interval
/// and the listener's reconnection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_listener_falls_back_to_the_retry_interval() {
    let Some(server) = MysqlServer::start_or_skip("mysql killed listener") else { return };
    let app_url = server.create_user("distlock_waiter").await;
    let holder_store = MysqlLockStore::connect(&server.url()).await.unwrap();
    holder_store.ensure_schema().await.unwrap();
    let waiter_store = MysqlLockStore::connect(&app_url).await.unwrap();
    let (holders, waiters) =
        (LockManager::new(Arc::new(holder_store.clone())), LockManager::new(Arc::new(waiter_store)));
    let name = name("killed-listener");
    let key = LockKey::new(name.as_str()).unwrap().to_store_key();
    let held = holders.lock(&name, Duration::from_secs(30)).await.unwrap();
    let waiter = tokio::spawn({
        let name = name.clone();
        async move {
            let options = LockOptions::new().wait(Duration::from_secs(20)).retry_interval(Duration::from_millis(500));
            let lock = waiters.lock_opts(&name, Duration::from_secs(30), &options).await.unwrap();
            let at = Instant::now();
            lock.release().await.unwrap();
            at
        }
    });
    wait_for_registration(&holder_store, &key).await;
    let killed = mysql_server::kill_connections(&server.url(), "distlock_waiter").await;
    assert!(killed > 0, "the waiter's connections were not found");
    let released_at = Instant::now();
    assert!(held.release().await.unwrap());
    let acquired_at = waiter.await.unwrap();
    let hand_off = acquired_at - released_at;
    assert!(hand_off < Duration::from_secs(5), "hand-off took {hand_off:?} after the listener was killed");
    assert!(holder_store.inspect(&key).await.unwrap().is_none());
}

/// Waits until `store`'s groups have `count` waiting places on `key`.
async fn wait_for_places(store: &MysqlLockStore, key: &StoreKey, count: usize) {
    let groups = store.groups().expect("groups");
    let deadline = Instant::now() + Duration::from_secs(20);
    while groups.waiting(key).await.unwrap() < count {
        assert!(Instant::now() < deadline, "the waiting groups never took their places");
        tokio::task::yield_now().await;
    }
}

/// A group release through one store wakes a group waiting through another store long
/// before the waiter's 30 s retry interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_release_wakes_a_waiting_group_of_another_store() {
    let Some(url) = kit::mysql_url("mysql group notify across stores") else { return };
    let (holder_store, waiter_store) =
        (MysqlLockStore::connect(&url).await.unwrap(), MysqlLockStore::connect(&url).await.unwrap());
    holder_store.ensure_schema().await.unwrap();
    let (holders, waiters) =
        (LockManager::new(Arc::new(holder_store.clone())), LockManager::new(Arc::new(waiter_store)));
    let (a, b) = (name("group-a"), name("group-b"));
    let group = LockGroup::new([GroupMember::exclusive(&a).unwrap(), GroupMember::exclusive(&b).unwrap()]).unwrap();
    let held = holders.lock_group(&group, Duration::from_secs(30)).await.unwrap();
    let waiter = tokio::spawn({
        let group = group.clone();
        async move {
            let options = LockOptions::new().wait(Duration::from_secs(25)).retry_interval(Duration::from_secs(30));
            let lock = waiters.lock_group_opts(&group, Duration::from_secs(30), &options).await.unwrap();
            let at = Instant::now();
            lock.release().await.unwrap();
            at
        }
    });
    let key = LockKey::new(a.as_str()).unwrap().to_store_key();
    wait_for_places(&holder_store, &key, 1).await;
    wait_for_registration(&holder_store, &key).await;
    // The waiter registers, then checks that the group is still held, then sleeps; nothing
    // tells when it sleeps. A release before the check would end its wait without a
    // wake-up, so give it time to reach the sleep.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = Instant::now();
    held.release().await.unwrap();
    let acquired_at = waiter.await.unwrap();
    let hand_off = acquired_at - released_at;
    assert!(hand_off < Duration::from_millis(1_500), "hand-off took {hand_off:?} with a 30 s retry interval");
}

/// A writer waiting among readers holds a place that keeps later readers waiting; when
/// the writer gives up, its withdrawal wakes the reader behind it, which then shares the
/// name with the reader holding it — long before the reader's 30 s retry interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawn_place_wakes_the_group_behind_it() {
    let Some(url) = kit::mysql_url("mysql withdrawal notify") else { return };
    let store = MysqlLockStore::connect(&url).await.unwrap();
    store.ensure_schema().await.unwrap();
    let locks = LockManager::new(Arc::new(store.clone()));
    let name = name("withdrawn");
    let key = LockKey::new(name.as_str()).unwrap().to_store_key();
    let reading = locks.lock_read(&name, Duration::from_secs(30)).await.unwrap();
    let writer = tokio::spawn({
        let (locks, name) = (locks.clone(), name.clone());
        async move {
            let group = LockGroup::single(GroupMember::exclusive(&name).unwrap()).unwrap();
            let options = LockOptions::new().wait(Duration::from_secs(2)).retry_interval(Duration::from_secs(30));
            let outcome = locks.lock_group_opts(&group, Duration::from_secs(30), &options).await;
            (outcome.map(drop), Instant::now())
        }
    });
    wait_for_places(&store, &key, 1).await;
    let reader = tokio::spawn({
        let (locks, name) = (locks.clone(), name.clone());
        async move {
            let group = LockGroup::single(GroupMember::shared(&name).unwrap()).unwrap();
            let options = LockOptions::new().wait(Duration::from_secs(25)).retry_interval(Duration::from_secs(30));
            let lock = locks.lock_group_opts(&group, Duration::from_secs(30), &options).await.unwrap();
            let at = Instant::now();
            lock.release().await.unwrap();
            at
        }
    });
    wait_for_places(&store, &key, 2).await;
    let (gave_up, withdrawn_at) = writer.await.unwrap();
    assert!(matches!(gave_up, Err(distlock_api::LockError::NotAcquired { .. })), "{gave_up:?}");
    let acquired_at = reader.await.unwrap();
    let woken = acquired_at.saturating_duration_since(withdrawn_at);
    assert!(woken < Duration::from_millis(1_500), "the reader took {woken:?} after the writer gave up");
    reading.release().await.unwrap();
}
