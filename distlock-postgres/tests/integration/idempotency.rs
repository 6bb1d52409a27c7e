//! The idempotency suite on a real PostgreSQL server, the purge, and completion inside
//! the caller's transaction.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::idempotency::{DynIdempotencyStore, Fingerprint, IdempotencyKey, IdempotencyStore, StoredResponse};
use distlock_api::{Token, Ttl};
use distlock_conformance::idempotency;
use distlock_conformance::kit::child::{self, ChildProcess};
use distlock_idempotency::{Claim, Idempotency};
use distlock_postgres::{sqlx, PostgresIdempotencyStore};

/// A store on its own pool (each test has its own runtime), its table ensured.
async fn connect() -> Option<PostgresIdempotencyStore> {
    let url = distlock_conformance::kit::postgres_url("idempotency on postgres")?;
    Some(connect_url(&url).await)
}

async fn connect_url(url: &str) -> PostgresIdempotencyStore {
    let store = PostgresIdempotencyStore::connect(url).await.expect("connect");
    store.ensure_schema().await.expect("ensure schema");
    store
}

async fn store() -> Option<Arc<DynIdempotencyStore>> {
    Some(Arc::new(connect().await?))
}

distlock_conformance::idempotency_suite!(store);

/// Its own table in its own schema, created by the library; expired records purged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_deletes_only_expired_records() {
    let Some(shared) = connect().await else { return };
    let schema = format!("idem_purge_{}", std::process::id());
    let store =
        PostgresIdempotencyStore::builder().schema(&schema).table("records").build(shared.pool().clone()).unwrap();
    store.ensure_schema().await.unwrap();
    store.ensure_schema().await.unwrap();
    let fp = Fingerprint::of_parts(&[b"a"]);
    let short = Ttl::new(Duration::from_millis(50)).unwrap();
    let long = Ttl::new(Duration::from_secs(60)).unwrap();
    for i in 0..30 {
        let key = IdempotencyKey::new(format!("k{i}")).unwrap();
        let token = Token::generate();
        store.claim(&key, &fp, &token, long).await.unwrap();
        let retention = if i < 20 { short } else { long };
        assert!(store.complete(&key, &token, &StoredResponse::new(200, "x"), retention).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(store.purge().await.unwrap(), 20);
    assert_eq!(store.purge().await.unwrap(), 0);
    let left: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {}", store.table_name()))
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(left, 10);
    sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE")).execute(store.pool()).await.unwrap();
}

/// The stored result commits with the handler's own write, or not at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_commits_with_the_handlers_transaction() {
    let Some(store) = connect().await else { return };
    let table = format!("idem_effect_{}", std::process::id());
    sqlx::query(&format!("CREATE TABLE IF NOT EXISTS {table} (n int)")).execute(store.pool()).await.unwrap();
    let idem = Idempotency::new(Arc::new(store.clone()));
    let fp = Fingerprint::of_parts(&[b"a"]);
    for commit in [false, true] {
        let key = IdempotencyKey::new(format!("effect:{}:{commit}", Token::generate().as_str())).unwrap();
        let Claim::Started(claim) = idem.claim(&key, fp).await.unwrap() else { panic!("not started") };
        let completion = claim.into_completion().unwrap();
        let mut tx = store.pool().begin().await.unwrap();
        sqlx::query(&format!("INSERT INTO {table} VALUES (1)")).execute(&mut *tx).await.unwrap();
        assert!(store.complete_in(&mut *tx, &completion, &StoredResponse::new(201, "made")).await.unwrap());
        if commit {
            tx.commit().await.unwrap();
            assert!(matches!(idem.claim(&key, fp).await.unwrap(), Claim::Replay(r) if r.status == 201));
        } else {
            tx.rollback().await.unwrap();
            // Rolled back with the effect: the claim is still running, nothing replayed.
            assert!(matches!(idem.claim(&key, fp).await.unwrap(), Claim::InProgress { .. }));
        }
    }
    let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}")).fetch_one(store.pool()).await.unwrap();
    assert_eq!(rows, 1);
    sqlx::query(&format!("DROP TABLE {table}")).execute(store.pool()).await.unwrap();
}

/// The child side of [`killed_process_claim_lapses_after_its_lease`]. Returns at once
/// when run as an ordinary test.
#[tokio::test(flavor = "multi_thread")]
async fn child_entry_claims_on_postgres() {
    let Some(arg) = child::role_arg("idem-postgres-claimer") else { return };
    let (url, key) = arg.split_once(' ').expect("url and key");
    idempotency::claim_and_park(Arc::new(connect_url(url).await), key).await;
}

/// `kill -9` of a process in the middle of its operation: its claim lapses after the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_process_claim_lapses_after_its_lease() {
    let Some(url) = distlock_conformance::kit::postgres_url("idempotency kill -9") else { return };
    let key = format!("kill9:{}", Token::generate().as_str());
    let child = ChildProcess::spawn(
        "idempotency::child_entry_claims_on_postgres",
        "idem-postgres-claimer",
        &format!("{url} {key}"),
    );
    idempotency::killed_claimer_lapses_after_its_lease(store().await.unwrap(), child, &key).await;
}
