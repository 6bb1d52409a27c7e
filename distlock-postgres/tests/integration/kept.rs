//! Kept connections: acquire and release statements keep their connection for the next
//! one instead of giving it back to the pool (and its ping) after each statement, while
//! the pool's other users, its closing and its small sizes still get their connections.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{key, TEST_SCHEMA};
use distlock_api::{
    GroupAcquire, GroupLockStore, GroupRequest, LockError, LockKey, LockMode, LockStore, OwnerId, StoreMember, Token,
    Ttl,
};
use distlock_conformance::kit::{self, postgres_server};
use distlock_postgres::sqlx::postgres::PgPool;
use distlock_postgres::sqlx::Postgres;
use distlock_postgres::PostgresLockStore;

/// A store on a new table over a pool of `connections` that counts the connections given
/// back to it (sqlx pings each of them then).
async fn counted_store(test: &str, connections: u32) -> Option<(PostgresLockStore, PgPool, Arc<AtomicUsize>)> {
    let url = kit::postgres_url(test)?;
    let (pool, returned) = kit::kept::counting_pool::<Postgres>(&url, connections).await;
    let store = PostgresLockStore::builder()
        .schema(TEST_SCHEMA)
        .table(postgres_server::random_identifier("t"))
        .build(pool.clone())
        .expect("store");
    store.ensure_schema().await.expect("ensure_schema");
    Some((store, pool, returned))
}

fn ttl() -> Ttl {
    Ttl::new(Duration::from_secs(30)).unwrap()
}

/// One acquire and release of `name` with a fresh token, both succeeding.
async fn cycle(store: &PostgresLockStore, name: &str) {
    let (k, token) = (key(name), Token::generate());
    assert!(store.try_acquire(&k, &token, ttl()).await.unwrap().is_acquired());
    assert!(store.release(&k, &token).await.unwrap());
}

#[tokio::test]
async fn acquire_and_release_keep_their_connection_between_statements() {
    let Some((store, pool, returned)) = counted_store("kept connections", 4).await else { return };
    // The first release creates the queue table on a pooled connection.
    cycle(&store, "warm-up").await;
    kit::kept::assert_kept(&returned, 4, || cycle(&store, "hot")).await;
    pool.close().await;
}

/// Group grants and releases keep their connection too.
#[tokio::test]
async fn group_grants_and_releases_keep_their_connection_between_statements() {
    let Some((store, pool, returned)) = counted_store("kept connections", 4).await else { return };
    let owner = OwnerId::new("test", "kept").unwrap();
    let members: Vec<StoreMember> = ["a", "b"]
        .into_iter()
        .map(|name| StoreMember::new(LockKey::new(name).unwrap().to_store_key(), LockMode::Exclusive, Some(1)))
        .collect();
    let keys: Vec<_> = members.iter().map(|member| member.key.clone()).collect();
    let cycle = || async {
        let token = Token::generate();
        let request = GroupRequest::new(&members, &token, &owner, ttl(), None, None);
        let answer = store.try_acquire_group(request).await.unwrap();
        assert!(matches!(answer, GroupAcquire::Acquired { .. }), "{answer:?}");
        assert_eq!(store.release_group(&keys, &token).await.unwrap(), 2);
    };
    // The first grant creates the group objects on pooled connections.
    cycle().await;
    kit::kept::assert_kept(&returned, 4, cycle).await;
    pool.close().await;
}

#[tokio::test]
async fn closing_the_pool_closes_the_kept_connections() {
    // One connection: each statement waits for the one before it to give it back, so once
    // the last release kept it no connection is on its way back to the pool (sqlx parks a
    // connection whose return ends after `close` in the closed pool's idle list).
    let Some((store, pool, _)) = counted_store("kept connections", 1).await else { return };
    // The first release creates the queue table; the second cycle ends with the kept one.
    cycle(&store, "k").await;
    cycle(&store, "k").await;
    assert_eq!(pool.size(), 1, "the store keeps the pool's connection");
    pool.close().await;
    // sqlx's `close` closes the idle connections; the kept ones go back to the closed pool
    // (which closes them) within the 50 ms a kept connection may stay unused.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while pool.size() > 0 {
        assert!(std::time::Instant::now() < deadline, "{} connections still open after closing the pool", pool.size());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let err = store.try_acquire(&key("k"), &Token::generate(), ttl()).await.unwrap_err();
    assert!(matches!(err, LockError::Store { operation: "acquire", .. }), "{err}");
}

#[tokio::test]
async fn a_one_connection_pool_serves_other_statements_beside_a_kept_one() {
    let Some((store, pool, _)) = counted_store("kept connections", 1).await else { return };
    let (k, token) = (key("k"), Token::generate());
    assert!(store.try_acquire(&k, &token, ttl()).await.unwrap().is_acquired());
    // The pool's only connection is kept by the store now; `inspect` runs through the
    // pool, and gets it back well within the pool's 5 s acquire timeout.
    let started = std::time::Instant::now();
    let info = store.inspect(&k).await.unwrap().expect("held");
    assert_eq!(info.token, token);
    assert!(started.elapsed() < Duration::from_secs(3), "inspect waited {:?}", started.elapsed());
    assert!(store.release(&k, &token).await.unwrap());
    pool.close().await;
}

/// Tasks that find no kept connection take one from the pool, or one handed back while
/// they wait: 16 tasks on a pool of 2 all finish their cycles, none timing out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_tasks_than_connections_all_get_one() {
    let Some((store, pool, _)) = counted_store("kept connections", 2).await else { return };
    let tasks: Vec<_> = (0..16)
        .map(|task| {
            let store = store.clone();
            tokio::spawn(async move {
                for _ in 0..20 {
                    cycle(&store, &format!("task-{task}")).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    pool.close().await;
}

/// A store dropped where no Tokio runtime runs lets its kept connections go without a
/// panic (giving one back to the pool needs a runtime).
#[test]
fn a_store_dropped_outside_a_runtime_lets_its_kept_connections_go() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Some((store, pool, _)) = runtime.block_on(counted_store("kept connections", 4)) else { return };
    runtime.block_on(cycle(&store, "k"));
    assert!(pool.size() > 0, "the store keeps a connection");
    std::thread::spawn(move || drop(store)).join().expect("the store dropped without a panic");
    runtime.block_on(pool.close());
}
