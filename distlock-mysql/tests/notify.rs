//! Release notifications across stores (each with its own listener connection), and what
//! a waiter does when its listener is killed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_api::{LockKey, LockManager, LockOptions, LockStore, StoreKey, Token};
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
