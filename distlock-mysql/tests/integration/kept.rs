//! Kept connections: acquire and release statements keep their connection for the next
//! one instead of giving it back to the pool (and its ping) after each statement, while
//! the pool's other users and its closing still get their connections.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_api::{LockKey, LockStore, StoreKey, Token, Ttl};
use distlock_conformance::kit;
use distlock_mysql::sqlx::mysql::MySqlPool;
use distlock_mysql::sqlx::MySql;
use distlock_mysql::MysqlLockStore;

/// A store over a pool of `connections` that counts the connections given back to it
/// (sqlx pings each of them then).
async fn counted_store(connections: u32) -> Option<(MysqlLockStore, MySqlPool, Arc<AtomicUsize>)> {
    let url = kit::mysql_url("mysql kept connections")?;
    let (pool, returned) = kit::kept::counting_pool::<MySql>(&url, connections).await;
    let store = MysqlLockStore::builder().build(pool.clone()).expect("store");
    // The test makes the tables it uses, whatever ran before.
    store.ensure_schema().await.expect("ensure_schema");
    Some((store, pool, returned))
}

fn key(case: &str) -> StoreKey {
    LockKey::new(format!("kept:{}:{case}", Token::generate().short())).unwrap().to_store_key()
}

fn ttl() -> Ttl {
    Ttl::new(Duration::from_secs(30)).unwrap()
}

#[tokio::test]
async fn acquire_and_release_keep_their_connection_between_statements() {
    let Some((store, pool, returned)) = counted_store(4).await else { return };
    let k = key("hot");
    kit::kept::assert_kept(&returned, 4, || async {
        let token = Token::generate();
        assert!(store.try_acquire(&k, &token, ttl()).await.unwrap().is_acquired());
        assert!(store.release(&k, &token).await.unwrap());
    })
    .await;
    pool.close().await;
}

#[tokio::test]
async fn a_one_connection_pool_serves_other_statements_beside_a_kept_one() {
    let Some((store, pool, _)) = counted_store(1).await else { return };
    let (k, token) = (key("k"), Token::generate());
    assert!(store.try_acquire(&k, &token, ttl()).await.unwrap().is_acquired());
    // The pool's only connection is kept by the store now; `inspect` runs through the
    // pool, and gets it back well within the pool's 5 s acquire timeout.
    let started = Instant::now();
    let info = store.inspect(&k).await.unwrap().expect("held");
    assert_eq!(info.token, token);
    assert!(started.elapsed() < Duration::from_secs(3), "inspect waited {:?}", started.elapsed());
    assert!(store.release(&k, &token).await.unwrap());
    pool.close().await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while pool.size() > 0 {
        assert!(Instant::now() < deadline, "{} connections still open after closing the pool", pool.size());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
