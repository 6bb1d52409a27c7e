//! A pool full of dead connections (every backend terminated, as a server restart or a
//! failover leaves it): release, extend, acquire and lease values still get through at
//! once, on a live connection, instead of failing once per dead connection while the key
//! stays locked for its whole TTL.

use crate::common;

use std::time::{Duration, Instant};

use common::{key, TestTable};
use distlock_api::{Acquire, LeaseValue, LockStore, StoreKey, Token, Ttl};
use distlock_conformance::kit::postgres_server;
use distlock_postgres::sqlx;

const POOL: u32 = 8;

fn ttl(ms: u64) -> Ttl {
    Ttl::new(Duration::from_millis(ms)).unwrap()
}

/// Opens `POOL` connections in the store's pool, returns them idle, then terminates
/// every one of their backends from a separate admin connection.
async fn kill_a_full_pool(t: &TestTable) {
    let pool = t.store.pool();
    let mut held = Vec::new();
    for _ in 0..POOL {
        held.push(pool.acquire().await.expect("a pooled connection"));
    }
    drop(held);
    // The pool pings each returned connection before it is idle again.
    let deadline = Instant::now() + Duration::from_secs(15);
    while pool.num_idle() < POOL as usize {
        assert!(Instant::now() < deadline, "the pool never had {POOL} idle connections: {}", pool.num_idle());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let killed = postgres_server::terminate_backends(&t.url, &t.application_name).await;
    assert_eq!(killed, u64::from(POOL), "every pooled backend is terminated");
    assert_eq!(pool.num_idle(), POOL as usize, "the pool still holds its {POOL} (dead) connections");
}

/// The token the table holds for `key` with a live lease, read on an admin connection.
async fn holder(t: &TestTable, key: &StoreKey) -> Option<String> {
    let sql = format!("SELECT token FROM {} WHERE key = $1 AND expires_at > clock_timestamp()", t.store.table_name());
    let mut admin = postgres_server::admin_connection(&t.url).await;
    sqlx::query_scalar(&sql).bind(key.as_str()).fetch_optional(&mut admin).await.unwrap().flatten()
}

async fn new_table(test: &str) -> Option<TestTable> {
    let t = TestTable::new(test).await?;
    assert_eq!(t.store.pool().options().get_max_connections(), POOL);
    Some(t)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_gets_through_a_pool_of_dead_connections() {
    let Some(t) = new_table("release_gets_through_a_pool_of_dead_connections").await else { return };
    let (k, token) = (key("release"), Token::generate());
    assert!(t.store.try_acquire(&k, &token, ttl(60_000)).await.unwrap().is_acquired());
    kill_a_full_pool(&t).await;

    let started = Instant::now();
    assert!(t.store.release(&k, &token).await.expect("release on a live connection"), "released");
    assert!(started.elapsed() < Duration::from_secs(5), "release took {:?}", started.elapsed());
    assert_eq!(holder(&t, &k).await, None, "the key is free at once, not after its 60 s TTL");
    let next = Token::generate();
    assert!(t.store.try_acquire(&k, &next, ttl(60_000)).await.unwrap().is_acquired(), "free for the next owner");
    assert!(t.store.release(&k, &next).await.unwrap());
    t.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_gets_through_a_pool_of_dead_connections() {
    let Some(t) = new_table("extend_gets_through_a_pool_of_dead_connections").await else { return };
    let (k, token) = (key("extend"), Token::generate());
    assert!(t.store.try_acquire(&k, &token, ttl(10_000)).await.unwrap().is_acquired());
    kill_a_full_pool(&t).await;

    assert!(t.store.extend(&k, &token, ttl(120_000)).await.expect("extend on a live connection"), "extended");
    let info = t.store.inspect(&k).await.unwrap().expect("held");
    assert!(info.ttl_left > Duration::from_secs(100), "the lease was reset to 120 s: {info:?}");
    assert!(t.store.release(&k, &token).await.unwrap());
    t.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_values_get_through_a_pool_of_dead_connections() {
    let Some(t) = new_table("lease_values_get_through_a_pool_of_dead_connections").await else { return };
    let (k, token) = (key("value"), Token::generate());
    let values = t.store.values().expect("lease values");
    assert!(t.store.try_acquire(&k, &token, ttl(60_000)).await.unwrap().is_acquired());
    assert!(values.inspect_value(&k).await.unwrap().is_some(), "the values table is made");
    kill_a_full_pool(&t).await;
    let value = LeaseValue::new("10.0.0.7:8080").unwrap();
    assert!(values.set_value(&k, &token, &value).await.expect("set_value on a live connection"));
    kill_a_full_pool(&t).await;
    let seen = values.inspect_value(&k).await.expect("inspect_value on a live connection").expect("held");
    assert_eq!(seen.value, Some(value));
    assert!(t.store.release(&k, &token).await.unwrap());
    t.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_gets_through_a_pool_of_dead_connections_with_one_fence() {
    let Some(t) = new_table("acquire_gets_through_a_pool_of_dead_connections").await else { return };
    let k = key("acquire");
    let first = Token::generate();
    let Acquire::Acquired { fence: Some(before) } = t.store.try_acquire(&k, &first, ttl(60_000)).await.unwrap() else {
        panic!("the first acquisition failed")
    };
    assert!(t.store.release(&k, &first).await.unwrap());
    kill_a_full_pool(&t).await;

    let token = Token::generate();
    let Acquire::Acquired { fence: Some(fence) } =
        t.store.try_acquire(&k, &token, ttl(60_000)).await.expect("acquire on a live connection")
    else {
        panic!("a free key was not acquired")
    };
    assert!(fence > before, "{fence} after {before}");
    assert_eq!(holder(&t, &k).await.as_deref(), Some(token.as_str()));
    assert_eq!(t.store.inspect(&k).await.unwrap().unwrap().fence, Some(fence));
    assert!(t.store.release(&k, &token).await.unwrap());
    t.drop().await;
}

/// The statement a retried acquisition runs: a live lease of the same token counts as
/// acquired and keeps its fence (and its `waiting` flag); another token's live lease does
/// not; an expired lease is taken over with a new, larger fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_acquisition_recognises_its_own_lease_without_a_second_fence() {
    let Some(t) = new_table("a_retried_acquisition_recognises_its_own_lease").await else { return };
    let statement = t.sql_file(include_str!("../../src/sql/lease/reacquire.sql"));
    let reacquire = |key: &StoreKey, token: &Token, ms: i64| {
        sqlx::query_as::<_, (i64, bool)>(&statement)
            .bind(key.as_str().to_owned())
            .bind(token.as_str().to_owned())
            .bind(ms)
    };
    let (k, token) = (key("retried"), Token::generate());
    let Acquire::Acquired { fence: Some(fence) } = t.store.try_acquire(&k, &token, ttl(60_000)).await.unwrap() else {
        panic!("not acquired")
    };
    t.admin(&format!("UPDATE {{table}} SET waiting = true WHERE key = '{}'", k.as_str())).await;
    let (again, in_time) = reacquire(&k, &token, 60_000).fetch_one(t.store.pool()).await.unwrap();
    assert_eq!((again, in_time), (i64::try_from(fence).unwrap(), true), "the same fence, not a second one");
    let waiting: bool = sqlx::query_scalar(&format!("SELECT waiting FROM {} WHERE key = $1", t.store.table_name()))
        .bind(k.as_str())
        .fetch_one(t.store.pool())
        .await
        .unwrap();
    assert!(waiting, "a waiter's flag on the lease survives the retry");

    let other = Token::generate();
    assert_eq!(reacquire(&k, &other, 60_000).fetch_optional(t.store.pool()).await.unwrap(), None, "held by another");
    assert!(!t.store.try_acquire(&k, &token, ttl(60_000)).await.unwrap().is_acquired(), "the first try stays strict");

    t.age(&k, "1 second").await;
    let (taken_over, _) = reacquire(&k, &other, 60_000).fetch_one(t.store.pool()).await.unwrap();
    assert!(taken_over > i64::try_from(fence).unwrap(), "an expired lease gets a new fence");
    assert!(t.store.release(&k, &other).await.unwrap());
    t.drop().await;
}
