//! The idempotency suite on a real MariaDB server, the purge, the table's names, and a
//! claimer killed with `kill -9`.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::idempotency::{DynIdempotencyStore, Fingerprint, IdempotencyKey, IdempotencyStore, StoredResponse};
use distlock_api::{LockError, Token, Ttl};
use distlock_conformance::idempotency;
use distlock_conformance::kit::child::{self, ChildProcess};
use distlock_mysql::{sqlx, MysqlIdempotencyStore, MysqlLockStore};

async fn connect_url(url: &str) -> MysqlIdempotencyStore {
    let store = MysqlIdempotencyStore::connect(url).await.expect("connect");
    store.ensure_schema().await.expect("ensure schema");
    store
}

async fn store() -> Option<Arc<DynIdempotencyStore>> {
    let url = distlock_conformance::kit::mysql_url("idempotency on mysql")?;
    Some(Arc::new(connect_url(&url).await))
}

distlock_conformance::idempotency_suite!(store);

/// Its own table, created by the library; expired records purged, live ones kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_deletes_only_expired_records() {
    let Some(url) = distlock_conformance::kit::mysql_url("idempotency purge on mysql") else { return };
    let locks = MysqlLockStore::connect(&url).await.unwrap();
    let table = format!("idem_purge_{}", std::process::id());
    let store = MysqlIdempotencyStore::with_table(&locks, &table).unwrap();
    let err = MysqlIdempotencyStore::with_table(&locks, "x; DROP TABLE y").unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err}");
    store.ensure_schema().await.unwrap();
    store.ensure_schema().await.unwrap();
    assert!(store.ddl().starts_with(&format!("CREATE TABLE IF NOT EXISTS `{table}`")), "{}", store.ddl());
    let fp = Fingerprint::of_parts(&[b"a"]);
    let (short, long) = (Ttl::new(Duration::from_millis(50)).unwrap(), Ttl::new(Duration::from_secs(60)).unwrap());
    for i in 0..30 {
        let key = IdempotencyKey::new(format!("k{i}")).unwrap();
        let token = Token::generate();
        store.claim(&key, &fp, &token, if i < 5 { short } else { long }).await.unwrap();
        if i >= 5 {
            let retention = if i < 20 { short } else { long };
            assert!(store.complete(&key, &token, &StoredResponse::new(200, "x"), retention).await.unwrap());
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(store.purge().await.unwrap(), 20);
    assert_eq!(store.purge().await.unwrap(), 0);
    let left: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {}", store.table_name()))
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(left, 10);
    sqlx::query(&format!("DROP TABLE {}", store.table_name())).execute(store.pool()).await.unwrap();
}

/// The child side of [`killed_process_claim_lapses_after_its_lease`]. Returns at once
/// when run as an ordinary test.
#[tokio::test(flavor = "multi_thread")]
async fn child_entry_claims_on_mysql() {
    let Some(arg) = child::role_arg("idem-mysql-claimer") else { return };
    let (url, key) = arg.split_once(' ').expect("url and key");
    idempotency::claim_and_park(Arc::new(connect_url(url).await), key).await;
}

/// `kill -9` of a process in the middle of its operation: its claim lapses after the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_process_claim_lapses_after_its_lease() {
    let Some(url) = distlock_conformance::kit::mysql_url("idempotency kill -9 on mysql") else { return };
    let key = format!("kill9:{}", Token::generate().as_str());
    let child =
        ChildProcess::spawn("idempotency::child_entry_claims_on_mysql", "idem-mysql-claimer", &format!("{url} {key}"));
    idempotency::killed_claimer_lapses_after_its_lease(Arc::new(connect_url(&url).await), child, &key).await;
}
