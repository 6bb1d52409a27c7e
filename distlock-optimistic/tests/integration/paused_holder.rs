//! Kleppmann's scenario with real processes: a child takes a lock, is stopped (`SIGSTOP`)
//! past its lease, the parent takes the lock and writes, the child is resumed
//! (`SIGCONT`) and writes with its old fence — and is refused, on PostgreSQL
//! (`VersionedUpdate::fenced`) and on Redis (`fenced_set`), in every trial.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use distlock_api::LockManager;
use distlock_conformance::kit::child::{self, ChildProcess};
use distlock_conformance::kit::postgres_server::random_identifier;
use distlock_optimistic::{OptimisticError, VersionedUpdate};
use distlock_postgres::PostgresLockStore;
use distlock_redis::{fenced_set, FencedSet, RedisLockStore};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

const TRIALS: usize = 5;
/// The child's lease: short, so that the parent waits little for it to expire.
const CHILD_TTL: Duration = Duration::from_millis(400);
const LINE_TIMEOUT: Duration = Duration::from_secs(60);

fn signal(child: &ChildProcess, signal: &str) {
    let status = Command::new("kill").args([signal, &child.id().to_string()]).status().expect("run kill");
    assert!(status.success(), "kill {signal} failed");
}

fn wait_for_line(child: &mut ChildProcess, prefix: &str) -> String {
    tokio::task::block_in_place(|| child.wait_for_line(prefix, LINE_TIMEOUT))
}

/// Waits (polling) until the parent creates `go`: the child is stopped before that.
async fn wait_for_go(go: &Path) {
    while !go.exists() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn go_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("{name}.go"))
}

/// What the paused holder sees, for the parent: `REFUSED` or `WRITTEN`.
fn outcome(refused: bool) -> &'static str {
    if refused {
        "REFUSED"
    } else {
        "WRITTEN"
    }
}

/// One trial with a child that announced `ACQUIRED <fence>`: stops it, takes `key` once its
/// lease has expired, lets `write` write with the new fence, resumes the child and waits
/// for its verdict on its own late write, which must be `REFUSED`.
async fn trial_run<F, Fut>(mut holder: ChildProcess, locks: &LockManager, key: &str, go: &Path, write: F)
where
    F: FnOnce(u64) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let acquired = wait_for_line(&mut holder, "ACQUIRED ");
    let old_fence: u64 = acquired["ACQUIRED ".len()..].trim().parse().expect("fence");
    signal(&holder, "-STOP");
    let lock = locks.lock(key, Duration::from_secs(30)).await.expect("lock after the child's lease");
    let fence = lock.fence().expect("fence");
    assert!(fence > old_fence, "{key}: fences increase");
    write(fence).await;
    std::fs::write(go, b"").expect("go file");
    signal(&holder, "-CONT");
    assert_eq!(wait_for_line(&mut holder, "REFUSED"), "REFUSED", "{key}");
    holder.kill9();
    let _ = std::fs::remove_file(go);
    assert!(lock.release().await.expect("release"));
}

async fn pg_locks(pool: &PgPool, lock_table: &str) -> LockManager {
    let store = PostgresLockStore::builder().table(lock_table).build(pool.clone()).expect("store");
    store.ensure_schema().await.expect("ensure schema");
    LockManager::new(Arc::new(store))
}

async fn pg_write(pool: &PgPool, table: &str, fence: u64, counter: i64) -> Result<i64, OptimisticError> {
    VersionedUpdate::table(table)
        .key("id", 1_i64)
        .version("version", 0)
        .force()
        .fenced("fence", fence)
        .set("counter", counter)
        .execute(pool)
        .await
}

#[tokio::test]
async fn child_entry_pg_paused_holder() {
    let Some(arg) = child::role_arg("pg-paused-holder") else { return };
    let parts: Vec<&str> = arg.split(' ').collect();
    let [url, table, lock_table, key, go] = parts[..] else { panic!("bad role arg {arg:?}") };
    let pool = PgPoolOptions::new().max_connections(2).connect(url).await.expect("connect");
    let locks = pg_locks(&pool, lock_table).await;
    let lock = locks.try_lock(key, CHILD_TTL).await.expect("try_lock").expect("the key is free");
    let fence = lock.fence().expect("fence");
    child::announce(&format!("ACQUIRED {fence}"));
    wait_for_go(Path::new(go)).await;
    let refused = match pg_write(&pool, table, fence, -1).await {
        Ok(_) => false,
        Err(OptimisticError::FencedOut(_)) => true,
        Err(other) => panic!("unexpected error: {other}"),
    };
    child::announce(outcome(refused));
    child::park().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holder_is_fenced_out_on_postgres() {
    let Some(url) = distlock_conformance::kit::postgres_url("paused holder, postgres") else { return };
    let pool = PgPoolOptions::new().max_connections(4).connect(&url).await.expect("connect");
    let table = random_identifier("opt_paused");
    let lock_table = random_identifier("opt_paused_locks");
    sqlx::query(&format!(
        "CREATE TABLE {table} (id bigint PRIMARY KEY, counter bigint NOT NULL, version bigint NOT NULL, fence bigint)"
    ))
    .execute(&pool)
    .await
    .expect("create table");
    sqlx::query(&format!("INSERT INTO {table} VALUES (1, 0, 0, NULL)")).execute(&pool).await.expect("insert");
    let locks = pg_locks(&pool, &lock_table).await;
    for trial in 0..TRIALS {
        let key = format!("{table}:{trial}");
        let go = go_file(&format!("{table}_{trial}"));
        let arg = format!("{url} {table} {lock_table} {key} {}", go.display());
        let holder = ChildProcess::spawn("paused_holder::child_entry_pg_paused_holder", "pg-paused-holder", &arg);
        let counter = i64::try_from(trial).expect("small");
        let (pool_ref, table_ref) = (&pool, table.as_str());
        trial_run(holder, &locks, &key, &go, |fence| async move {
            pg_write(pool_ref, table_ref, fence, counter).await.expect("the current holder writes");
        })
        .await;
        let stored: i64 = sqlx::query_scalar(&format!("SELECT counter FROM {table}")).fetch_one(&pool).await.unwrap();
        assert_eq!(stored, counter, "trial {trial}: the paused holder's write changed nothing");
    }
    for name in [&table, &lock_table] {
        sqlx::query(&format!("DROP TABLE {name}")).execute(&pool).await.expect("drop table");
    }
}

async fn redis_locks(url: &str, prefix: &str) -> (LockManager, distlock_redis::redis::aio::ConnectionManager) {
    let store = RedisLockStore::builder().key_prefix(prefix).fencing(true).connect(url).await.expect("connect");
    let conn = store.connection_manager().clone();
    (LockManager::new(Arc::new(store)), conn)
}

#[tokio::test]
async fn child_entry_redis_paused_holder() {
    let Some(arg) = child::role_arg("redis-paused-holder") else { return };
    let parts: Vec<&str> = arg.split(' ').collect();
    let [url, prefix, key, go] = parts[..] else { panic!("bad role arg {arg:?}") };
    let (locks, mut conn) = redis_locks(url, prefix).await;
    let lock = locks.try_lock(key, CHILD_TTL).await.expect("try_lock").expect("the key is free");
    let fence = lock.fence().expect("fence");
    child::announce(&format!("ACQUIRED {fence}"));
    wait_for_go(Path::new(go)).await;
    let written = fenced_set(&mut conn, &format!("{prefix}:resource"), fence, "late").await.expect("fenced_set");
    child::announce(outcome(written != FencedSet::Written));
    child::park().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holder_is_fenced_out_on_redis() {
    let Some(url) = distlock_conformance::kit::redis_url("paused holder, redis") else { return };
    let prefix = random_identifier("opt_paused");
    let (locks, mut conn) = redis_locks(&url, &prefix).await;
    let resource = format!("{prefix}:resource");
    for trial in 0..TRIALS {
        let key = format!("k{trial}");
        let go = go_file(&format!("{prefix}_{trial}"));
        let arg = format!("{url} {prefix} {key} {}", go.display());
        let holder = ChildProcess::spawn("paused_holder::child_entry_redis_paused_holder", "redis-paused-holder", &arg);
        let value = format!("trial {trial}");
        let (mut writer, resource_key, written) = (conn.clone(), resource.clone(), value.clone());
        trial_run(holder, &locks, &key, &go, |fence| async move {
            assert_eq!(fenced_set(&mut writer, &resource_key, fence, &written).await.unwrap(), FencedSet::Written);
        })
        .await;
        let stored: String = distlock_redis::redis::AsyncCommands::hget(&mut conn, &resource, "value").await.unwrap();
        assert_eq!(stored, value, "trial {trial}: the paused holder's write changed nothing");
    }
    let _: () = distlock_redis::redis::AsyncCommands::del(&mut conn, &resource).await.unwrap();
}
