//! Fault and input tests against a real PostgreSQL: terminated backends, an unreachable
//! server, a network partition through a fault proxy, hostile identifiers, odd keys, and a
//! lock holder killed with `kill -9`.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{key, TestTable, TEST_SCHEMA};
use distlock_api::{LeaseValue, LockError, LockKey, LockManager, LockStore, Token, Ttl};
use distlock_conformance::kit::child::{self, ChildProcess};
use distlock_conformance::kit::faults::{self, StoredToken};
use distlock_conformance::kit::proxy::FaultProxy;
use distlock_conformance::kit::{self, postgres_server};
use distlock_postgres::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use distlock_postgres::{sqlx, PostgresLockStore};

const UNREACHABLE: &str = "postgres://postgres@127.0.0.1:1/x";

fn ttl(ms: u64) -> Ttl {
    Ttl::new(Duration::from_millis(ms)).unwrap()
}

fn assert_store_error(result: Result<impl std::fmt::Debug, LockError>, operation: &str) {
    match result {
        Err(LockError::Store { backend: "postgres", operation: op, cause: source, .. }) if op == operation => {
            assert!(!source.to_string().is_empty());
        }
        other => panic!("expected a postgres store error for {operation}, got {other:?}"),
    }
}

/// The token the table holds for `key` (whatever the lease's state), read on a separate
/// admin connection that the fault does not touch.
async fn stored_token(admin: &sqlx::PgPool, table: &str, key: &distlock_api::StoreKey) -> Option<String> {
    let sql = format!("SELECT token FROM {table} WHERE key = $1 AND expires_at > clock_timestamp()");
    sqlx::query_scalar(&sql).bind(key.as_str()).fetch_optional(admin).await.unwrap().flatten()
}

/// While eight workers run acquire/verify/release cycles, the pool's backends are
/// terminated three times. Every answer the store gives must be true (checked on an
/// untouched admin connection); errors are allowed, and afterwards every worker completes
/// more cycles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_backends_cause_errors_never_false_answers_and_operations_resume() {
    let Some(t) = TestTable::new("terminated_backends_cause_errors_never_false_answers").await else { return };
    let admin = PgPoolOptions::new().max_connections(2).connect(&t.url).await.unwrap();
    let (pool, table) = (admin.clone(), t.store.table_name());
    let stored: StoredToken = Arc::new(move |key| {
        let (admin, table) = (pool.clone(), table.clone());
        Box::pin(async move { stored_token(&admin, &table, &key).await })
    });
    let kill = || postgres_server::terminate_backends(&t.url, &t.application_name);
    faults::answers_stay_true_while_connections_are_killed(Arc::new(t.store.clone()), 8, stored, kill, 200).await;
    admin.close().await;
    t.drop().await;
}

/// Nothing listens on port 1: connecting fails with a store error within the connect
/// timeout, and so does every operation of a store over a lazy pool within the acquire
/// timeout — never a panic, never a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_database_gives_store_errors_within_bounded_time() {
    let started = Instant::now();
    let result = PostgresLockStore::builder().connect_timeout(Duration::from_secs(2)).connect(UNREACHABLE).await;
    assert_store_error(result, "connect");
    assert!(started.elapsed() < Duration::from_secs(10), "connect took {:?}", started.elapsed());

    // 192.0.2.1 (TEST-NET-1) is not routed: the connection attempt hangs or fails.
    for url in [UNREACHABLE, "postgres://postgres@192.0.2.1:5432/x"] {
        let pool = PgPoolOptions::new().acquire_timeout(Duration::from_secs(1)).connect_lazy(url).unwrap();
        let store = PostgresLockStore::builder().build(pool).unwrap();
        let (k, token) = (key("unreachable"), Token::generate());
        let started = Instant::now();
        assert_store_error(store.try_acquire(&k, &token, ttl(1_000)).await, "acquire");
        assert_store_error(store.release(&k, &token).await, "release");
        assert_store_error(store.extend(&k, &token, ttl(1_000)).await, "extend");
        assert_store_error(store.inspect(&k).await, "inspect");
        let values = store.values().expect("lease values");
        let value = LeaseValue::new("v").unwrap();
        assert_store_error(values.set_value(&k, &token, &value).await, "set_value");
        assert_store_error(values.inspect_value(&k).await, "inspect_value");
        assert_store_error(store.purge(Duration::ZERO).await, "purge");
        assert_store_error(store.ensure_schema().await, "ensure schema");
        let locks = LockManager::new(Arc::new(store));
        let err = locks.try_lock("a", Duration::from_secs(1)).await.unwrap_err();
        assert!(matches!(err, LockError::Store { .. }), "{err}");
        assert!(!err.to_string().contains(token.as_str()));
        assert!(started.elapsed() < Duration::from_secs(40), "{url}: took {:?}", started.elapsed());
    }
}

const HOSTILE: [&str; 8] = [
    "x; DROP TABLE y",
    "a\"b",
    "a'b",
    "",
    "1abc",
    "schema.table",
    "ünï",
    "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn",
];

/// Bad schema, table and sequence names are rejected with `LockError::Config` before any
/// I/O: against an address where any connection attempt would take the full 5 s acquire
/// timeout, the error comes at once; against the real server, a canary table survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_identifiers_are_rejected_before_any_query() {
    assert_eq!(HOSTILE[7].len(), 64);
    let lazy = PgPoolOptions::new().connect_lazy(UNREACHABLE).unwrap();
    for name in HOSTILE {
        let builders = [
            PostgresLockStore::builder().schema(name),
            PostgresLockStore::builder().table(name),
            PostgresLockStore::builder().sequence(name),
        ];
        for builder in builders {
            let err = builder.clone().build(lazy.clone()).unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{name:?}: {err}");
            let started = Instant::now();
            let err = builder.connect(UNREACHABLE).await.unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{name:?}: {err}");
            assert!(started.elapsed() < Duration::from_secs(1), "{name:?}: I/O before rejecting");
        }
    }
    assert_eq!(lazy.size(), 0, "the lazy pool never connected");

    let Some(url) = kit::postgres_url("hostile_identifiers_are_rejected_before_any_query") else { return };
    // Its own schema: the test depends on nothing other tests create.
    let schema = postgres_server::random_identifier("hostile");
    let canary = postgres_server::random_identifier("canary");
    postgres_server::execute(&url, &format!("CREATE SCHEMA \"{schema}\"")).await;
    postgres_server::execute(&url, &format!("CREATE TABLE \"{schema}\".\"{canary}\" (x int)")).await;
    for name in [format!("x; DROP TABLE \"{schema}\".\"{canary}\"; --"), format!("{canary}\" CASCADE; --")] {
        let err = PostgresLockStore::builder().schema(&schema).table(&name).connect(&url).await.unwrap_err();
        assert!(matches!(err, LockError::Config { .. }), "{name:?}: {err}");
        let in_url = format!("{url}{}table={}", if url.contains('?') { '&' } else { '?' }, encode(&name));
        let err = PostgresLockStore::builder().schema(&schema).connect(&in_url).await.unwrap_err();
        assert!(matches!(err, LockError::Config { .. }), "{name:?} in the URL: {err}");
    }
    let exists = postgres_server::execute(&url, &format!("SELECT 1 FROM \"{schema}\".\"{canary}\"")).await;
    assert_eq!(exists, 0, "the canary table is still there (and empty)");
    postgres_server::execute(&url, &format!("DROP SCHEMA \"{schema}\" CASCADE")).await;
}

/// Percent-encodes everything but ASCII letters and digits.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}

/// Keys with quotes, backslashes, SQL wildcards and non-ASCII text are stored byte for
/// byte as `lock:<key>` and matched exactly (no case folding, no normalisation, no LIKE).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_keys_are_stored_and_matched_verbatim() {
    let Some(t) = TestTable::new("odd_keys_are_stored_and_matched_verbatim").await else { return };
    let prefix = postgres_server::random_identifier("odd");
    let names = [
        "it's \"quoted\"",
        "back\\slash\\\\",
        "%_wild*?[x]",
        "订单:42",
        "e\u{301}", // e + combining acute
        "\u{e9}",   // precomposed é: a different key
        "emoji 🔒",
        "'); DROP TABLE x; --",
        "Case",
        "case",
    ];
    let mut held = Vec::new();
    for name in names {
        let store_key = LockKey::new(format!("{prefix}:{name}")).unwrap().to_store_key();
        let token = Token::generate();
        assert!(t.store.try_acquire(&store_key, &token, ttl(30_000)).await.unwrap().is_acquired(), "{name}");
        held.push((store_key, token));
    }
    let sql = format!("SELECT key, octet_length(key) FROM {} WHERE key LIKE $1 ORDER BY key", t.store.table_name());
    let rows: Vec<(String, i32)> =
        sqlx::query_as(&sql).bind(format!("lock:{prefix}:%")).fetch_all(t.store.pool()).await.unwrap();
    assert_eq!(rows.len(), names.len(), "every key is its own row: {rows:?}");
    for (store_key, token) in &held {
        let (stored, octets) = rows.iter().find(|(k, _)| k == store_key.as_str()).expect("stored verbatim");
        assert_eq!(usize::try_from(*octets).unwrap(), store_key.as_str().len(), "{stored}");
        let info = t.store.inspect(store_key).await.unwrap().expect("held");
        assert_eq!(&info.token, token);
    }
    for (store_key, token) in held {
        assert!(t.store.release(&store_key, &token).await.unwrap(), "{store_key}");
    }
    t.drop().await;
}

/// Run by `killed_holder_frees_the_lock_after_its_ttl` as a child process: takes the lock
/// named by the role argument (`table|key`) for 2 s, says so, and waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_entry_holds_lock() {
    let Some(arg) = child::role_arg("postgres-holder") else { return };
    let (table, name) = arg.split_once('|').expect("table|key");
    let url = kit::postgres_url("child_entry_holds_lock").expect("the parent has a URL");
    let store = PostgresLockStore::builder().schema(TEST_SCHEMA).table(table).connect(&url).await.unwrap();
    let locks = LockManager::new(Arc::new(store));
    let lock = locks.lock(name, Duration::from_secs(2)).await.unwrap();
    child::announce(&format!("ACQUIRED {}", lock.fence().unwrap()));
    let _lock = lock;
    child::park().await;
}

/// A process holding a 2 s lock is killed with `kill -9`: it releases nothing, so
/// another process cannot take the lock ~0.5 s later, and gets it once the lease ran out
/// on the server's clock — not before, and within TTL + 3 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_frees_the_lock_after_its_ttl() {
    let Some(t) = TestTable::new("killed_holder_frees_the_lock_after_its_ttl").await else { return };
    let name = postgres_server::random_identifier("killed");
    let table = t.store.table_name();
    let table = table.rsplit('.').next().unwrap().trim_matches('"').to_owned();
    let holder = ChildProcess::spawn("faults::child_entry_holds_lock", "postgres-holder", &format!("{table}|{name}"));
    faults::killed_holder_frees_the_lock_after_its_ttl(Arc::new(t.store.clone()), &name, holder).await;
    t.drop().await;
}

/// The store's pool (and its listener) connect through a [`FaultProxy`]; the proxy is
/// paused while a renewed 3 s lease is held: `lost` fires before the TTL runs out, while
/// the server (read directly) still holds the lease. Nothing panics in the paused pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_fires_lost_before_the_ttl() {
    let Some(t) = TestTable::new("partition_fires_lost_before_the_ttl").await else { return };
    let options: PgConnectOptions = t.url.parse().unwrap();
    let upstream = format!("{}:{}", options.get_host(), options.get_port());
    let upstream_addr = tokio::net::lookup_host(&upstream).await.unwrap().next().expect("an address");
    let proxy = FaultProxy::start(upstream_addr).await.unwrap();
    let proxied_url = t.url.replacen(&upstream, &proxy.addr().to_string(), 1);
    assert_ne!(proxied_url, t.url, "the URL names {upstream} literally");
    let table = t.store.table_name();
    let table = table.rsplit('.').next().unwrap().trim_matches('"').to_owned();
    let via_proxy = PostgresLockStore::builder()
        .schema(TEST_SCHEMA)
        .table(table)
        .application_name(&t.application_name)
        .acquire_timeout(Duration::from_secs(1))
        .connect(&proxied_url)
        .await
        .unwrap();
    // Start the listener through the proxy too, so the partition cuts it off as well.
    via_proxy.wait_for_release(&key("warm-up"), Duration::from_secs(5)).await.unwrap();
    let via_proxy = Arc::new(via_proxy);
    distlock_conformance::cases::partition_fires_lost_before_the_ttl(
        via_proxy.clone(),
        &proxy,
        Arc::new(t.store.clone()),
    )
    .await;

    // Partitioned again: waiting is bounded by `max`, operations fail within the pool's
    // timeout or hang until the caller's own timeout — never a panic.
    proxy.pause();
    let k = key("partitioned");
    let started = Instant::now();
    let waited =
        tokio::time::timeout(Duration::from_secs(10), via_proxy.wait_for_release(&k, Duration::from_millis(500)))
            .await
            .expect("wait_for_release past its max");
    assert!(waited.is_ok() || matches!(waited, Err(LockError::Store { .. })), "{waited:?}");
    assert!(started.elapsed() < Duration::from_secs(3), "waited {:?}", started.elapsed());
    let acquired =
        tokio::time::timeout(Duration::from_secs(3), via_proxy.try_acquire(&k, &Token::generate(), ttl(1_000))).await;
    if let Ok(result) = acquired {
        assert_store_error(result, "acquire");
    }
    proxy.resume();
    drop(via_proxy);
    drop(proxy);
    t.drop().await;
}

/// With no server to listen to, `wait_for_release` sleeps `max` (the caller polls): not
/// much less, not more, and without an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_release_without_a_server_sleeps_max() {
    let pool = PgPoolOptions::new().acquire_timeout(Duration::from_millis(300)).connect_lazy(UNREACHABLE).unwrap();
    let store = PostgresLockStore::builder().build(pool).unwrap();
    let k = key("unreachable-wait");
    for max in [Duration::from_millis(200), Duration::from_millis(800)] {
        let started = Instant::now();
        store.wait_for_release(&k, max).await.unwrap();
        let waited = started.elapsed();
        assert!(
            waited + Duration::from_millis(10) >= max && waited < max + Duration::from_secs(1),
            "{max:?}: {waited:?}"
        );
    }
}
