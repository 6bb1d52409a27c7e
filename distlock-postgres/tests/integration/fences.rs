//! Fences are drawn by acquisitions only: a waiter's attempts on a held key, fair or
//! barging, draw none, so a key's consecutive holders get consecutive fences when nothing
//! else draws from the sequence.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{LockManager, LockOptions};
use distlock_conformance::kit::{self, postgres_server};
use distlock_postgres::PostgresLockStore;

async fn waiting_draws_no_fence(fair: bool) {
    let Some(url) = kit::postgres_url("fences::waiting_draws_no_fence") else { return };
    let sequence = postgres_server::random_identifier("seq");
    let table = postgres_server::random_identifier("t");
    let store = PostgresLockStore::builder()
        .schema("distlock_test")
        .table(&table)
        .sequence(&sequence)
        .max_connections(4)
        .connect(&url)
        .await
        .expect("connect");
    store.ensure_schema().await.expect("ensure_schema");
    let locks = LockManager::new(Arc::new(store.clone()));
    let ttl = Duration::from_secs(30);
    let first = locks.lock("k", ttl).await.unwrap();
    let first_fence = first.fence().expect("fenced");
    let options = LockOptions::new().retry_interval(Duration::from_millis(10)).wait(Duration::from_secs(20));
    let options = if fair { options } else { options.barging() };
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock_opts("k", ttl, &options).await.unwrap() })
    };
    // About 50 attempts of the waiter on the held key.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished());
    assert!(first.release().await.unwrap());
    let second = tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("the waiter took the key").unwrap();
    assert_eq!(second.fence(), Some(first_fence + 1), "the waiter's attempts drew fences");
    assert!(second.release().await.unwrap());
    store.pool().close().await;
    let quoted = store.table_name();
    let schema_sequence = store.sequence_name();
    postgres_server::execute(
        &url,
        &format!("DROP TABLE IF EXISTS {quoted}; DROP SEQUENCE IF EXISTS {schema_sequence}"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiting_draws_no_fence() {
    waiting_draws_no_fence(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn barging_waiting_draws_no_fence() {
    waiting_draws_no_fence(false).await;
}
