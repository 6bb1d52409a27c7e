//! The idempotency suite on SQLite database files, across processes (a claimer killed
//! with `kill -9`, duplicates claimed by several processes at once), the purge, and
//! claims of another boot.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use distlock_api::idempotency::{
    DynIdempotencyStore, Fingerprint, IdempotencyKey, IdempotencyStore, StoreClaim, StoredResponse,
};
use distlock_api::{Token, Ttl};
use distlock_conformance::idempotency;
use distlock_conformance::kit::child::{self, ChildProcess};
use distlock_sqlite::{sqlx, SqliteIdempotencyStore, SqliteLockStore};

/// A database URL of its own for one test.
fn fresh_url(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("distlock-sqlite-idem-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    let path: PathBuf = dir.join(format!("{name}-{}.db", Token::generate().short()));
    format!("sqlite://{}", path.display())
}

async fn connect(url: &str) -> SqliteIdempotencyStore {
    let store = SqliteIdempotencyStore::connect(url).await.expect("connect");
    store.ensure_schema().await.expect("ensure schema");
    store
}

async fn store() -> Option<Arc<DynIdempotencyStore>> {
    Some(Arc::new(connect(&fresh_url("suite")).await))
}

distlock_conformance::idempotency_suite!(store);

fn fingerprint() -> Fingerprint {
    Fingerprint::of_parts(&[b"a"])
}

fn ttl(duration: Duration) -> Ttl {
    Ttl::new(duration).unwrap()
}

/// The child side of [`killed_process_claim_lapses_after_its_lease`]. Returns at once
/// when run as an ordinary test.
#[tokio::test(flavor = "multi_thread")]
async fn child_entry_claims_on_sqlite() {
    let Some(arg) = child::role_arg("idem-sqlite-claimer") else { return };
    let (url, key) = arg.split_once(' ').expect("url and key");
    idempotency::claim_and_park(Arc::new(connect(url).await), key).await;
}

/// `kill -9` of another process in the middle of its operation: its claim lapses after
/// the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_process_claim_lapses_after_its_lease() {
    let url = fresh_url("kill9");
    let key = format!("kill9:{}", Token::generate().as_str());
    let child = ChildProcess::spawn(
        "idempotency::child_entry_claims_on_sqlite",
        "idem-sqlite-claimer",
        &format!("{url} {key}"),
    );
    idempotency::killed_claimer_lapses_after_its_lease(Arc::new(connect(&url).await), child, &key).await;
}

/// How many keys each process of [`duplicates_in_several_processes_run_once`] claims.
const DUPLICATED_KEYS: usize = 200;

/// The child side of [`duplicates_in_several_processes_run_once`]: claims every key once
/// and reports how many claims started.
#[tokio::test(flavor = "multi_thread")]
async fn child_entry_claims_every_key() {
    let Some(arg) = child::role_arg("idem-sqlite-duplicate") else { return };
    let (url, prefix) = arg.split_once(' ').expect("url and key prefix");
    let store = connect(url).await;
    let token = Token::generate();
    let mut started = 0;
    for i in 0..DUPLICATED_KEYS {
        let key = IdempotencyKey::new(format!("{prefix}:{i}")).unwrap();
        let claim = store.claim(&key, &fingerprint(), &token, ttl(Duration::from_secs(60))).await.unwrap();
        started += usize::from(claim == StoreClaim::Started);
    }
    child::announce(&format!("STARTED {started}"));
    child::park().await;
}

/// Several processes claim the same keys in one file at once: each key starts exactly
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_in_several_processes_run_once() {
    let url = fresh_url("duplicates");
    connect(&url).await;
    let prefix = format!("dup:{}", Token::generate().short());
    let mut children: Vec<ChildProcess> = (0..4)
        .map(|_| {
            ChildProcess::spawn(
                "idempotency::child_entry_claims_every_key",
                "idem-sqlite-duplicate",
                &format!("{url} {prefix}"),
            )
        })
        .collect();
    let mut started = 0;
    for child in &mut children {
        let line = child.wait_for_line("STARTED ", Duration::from_secs(120));
        started += line["STARTED ".len()..].trim().parse::<usize>().unwrap();
    }
    assert_eq!(started, DUPLICATED_KEYS, "each key starts in exactly one process");
}

/// Records whose claim lapsed or whose retention ended are purged; live ones are kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_deletes_only_expired_records() {
    let url = fresh_url("purge");
    let locks = SqliteLockStore::connect(&url).await.unwrap();
    let store = SqliteIdempotencyStore::with_table(&locks, "records").unwrap();
    assert!(SqliteIdempotencyStore::with_table(&locks, "x; DROP TABLE y").is_err());
    let (short, long) = (ttl(Duration::from_millis(50)), ttl(Duration::from_secs(60)));
    for i in 0..30 {
        let key = IdempotencyKey::new(format!("k{i}")).unwrap();
        let token = Token::generate();
        let lease = if i < 5 { short } else { long };
        assert_eq!(store.claim(&key, &fingerprint(), &token, lease).await.unwrap(), StoreClaim::Started);
        if i >= 5 {
            let retention = if i < 20 { short } else { long };
            assert!(store.complete(&key, &token, &StoredResponse::new(200, "x"), retention).await.unwrap());
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(store.purge().await.unwrap(), 20);
    assert_eq!(store.purge().await.unwrap(), 0);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM records").fetch_one(locks.pool()).await.unwrap();
    assert_eq!(left, 10);
}

/// A claim written under another boot has lapsed; a result is kept across boots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_another_boot_has_lapsed_and_a_result_outlives_it() {
    let url = fresh_url("boot");
    let store = connect(&url).await;
    let locks = SqliteLockStore::connect(&url).await.unwrap();
    let (running, done) = (IdempotencyKey::new("running").unwrap(), IdempotencyKey::new("done").unwrap());
    let (first, second) = (Token::generate(), Token::generate());
    let long = ttl(Duration::from_secs(60));
    store.claim(&running, &fingerprint(), &first, long).await.unwrap();
    store.claim(&done, &fingerprint(), &first, long).await.unwrap();
    assert!(store.complete(&done, &first, &StoredResponse::new(201, "made"), long).await.unwrap());
    assert!(matches!(
        store.claim(&running, &fingerprint(), &second, long).await.unwrap(),
        StoreClaim::InProgress { .. }
    ));
    sqlx::query("UPDATE distlock_idempotency SET boot = '00000000-0000-4000-8000-000000000000'")
        .execute(locks.pool())
        .await
        .unwrap();
    assert!(!store.renew(&running, &first, long).await.unwrap(), "the old boot's claim cannot be renewed");
    assert_eq!(store.claim(&running, &fingerprint(), &second, long).await.unwrap(), StoreClaim::Started);
    assert!(
        matches!(store.claim(&done, &fingerprint(), &second, long).await.unwrap(), StoreClaim::Replay(r) if r.status == 201)
    );
}
