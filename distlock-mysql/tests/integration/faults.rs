//! Fault tests against real MariaDB servers: a private server stopped and restarted,
//! connections killed with `KILL <id>`, and a lock holder killed with `kill -9`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_api::{Acquire, LockError, LockKey, LockManager, LockStore, StoreKey, Token, Ttl};
use distlock_conformance::kit::child::{self, ChildProcess};
use distlock_conformance::kit::faults::{self, StoredToken};
use distlock_conformance::kit::mysql_server::{self, MysqlServer};
use distlock_conformance::kit::{self};
use distlock_mysql::sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use distlock_mysql::{sqlx, MysqlLockStore};

fn ttl(ms: u64) -> Ttl {
    Ttl::new(Duration::from_millis(ms)).unwrap()
}

/// A key of its own for each run, so runs and tests never share state.
fn key(name: &str) -> StoreKey {
    LockKey::new(format!("faults:{}:{name}", Token::generate().short())).unwrap().to_store_key()
}

/// The live token the table holds for `key`, read on an admin pool the faults do not
/// touch.
async fn stored_token(admin: &MySqlPool, key: &StoreKey) -> Option<String> {
    let token: Option<Option<Vec<u8>>> = sqlx::query_scalar(
        "SELECT token FROM distribute_lock \
         WHERE lock_key = ? AND expires_at > CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)",
    )
    .bind(key.as_str())
    .fetch_optional(admin)
    .await
    .unwrap();
    token.flatten().map(|token| String::from_utf8(token).unwrap())
}

/// While four workers run acquire/verify/release cycles, every connection of the
/// store's user is killed (`KILL <id>`) three times. Every answer the store gives must be
/// true (checked on an admin pool of another user); errors are allowed, and afterwards
/// every worker completes more cycles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connections_cause_errors_never_false_answers_and_operations_resume() {
    let Some(server) = MysqlServer::start_or_skip("killed connections") else { return };
    let app_url = server.create_user("distlock_app").await;
    let store = MysqlLockStore::builder().max_connections(4).connect(&app_url).await.unwrap();
    store.ensure_schema().await.unwrap();
    let admin = MySqlPoolOptions::new().max_connections(2).connect(&server.url()).await.unwrap();
    let stored: StoredToken = Arc::new(move |key| {
        let admin = admin.clone();
        Box::pin(async move { stored_token(&admin, &key).await })
    });
    let admin_url = server.url();
    let kill = || mysql_server::kill_connections(&admin_url, "distlock_app");
    faults::answers_stay_true_while_connections_are_killed(Arc::new(store), 4, stored, kill, 100).await;
}

/// The server is shut down while a lease is held: operations fail with a store error
/// within the pool's timeout (never a false answer); after the restart the lease is
/// still there (it committed), the same pool works again, and fences keep increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_and_restarted_server() {
    let Some(mut server) = MysqlServer::start_or_skip("stopped and restarted server") else { return };
    let store = MysqlLockStore::builder()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(1))
        .connect(&server.url())
        .await
        .unwrap();
    store.ensure_schema().await.unwrap();
    let (k, token) = (key("restart"), Token::generate());
    let Acquire::Acquired { fence: Some(first) } = store.try_acquire(&k, &token, ttl(60_000)).await.unwrap() else {
        panic!("a fresh key was not free");
    };

    server.stop();
    let started = Instant::now();
    let other = Token::generate();
    for result in [
        store.try_acquire(&k, &other, ttl(1_000)).await.map(|_| ()),
        store.release(&k, &token).await.map(|_| ()),
        store.inspect(&k).await.map(|_| ()),
    ] {
        assert!(matches!(result, Err(LockError::Store { backend: "mysql", .. })), "{result:?}");
    }
    assert!(started.elapsed() < Duration::from_secs(10), "errors took {:?}", started.elapsed());

    server.restart();
    let holder = store.inspect(&k).await.unwrap().expect("the committed lease survived the restart");
    assert_eq!(holder.token, token);
    assert!(store.try_acquire(&k, &other, ttl(1_000)).await.unwrap() == Acquire::Held { ttl_left: None });
    assert!(store.release(&k, &token).await.unwrap());
    let Acquire::Acquired { fence: Some(next) } = store.try_acquire(&k, &other, ttl(1_000)).await.unwrap() else {
        panic!("the released key was not free");
    };
    assert!(next > first, "fence {next} after {first}");
    assert!(store.release(&k, &other).await.unwrap());
}

/// Run by `killed_holder_frees_the_lock_after_its_ttl` as a child process: takes the lock
/// named by its argument with a 2 s TTL, announces its fence, and waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_entry_holds_lock() {
    let Some(name) = child::role_arg("mysql-holder") else { return };
    let url = kit::mysql_url("child_entry_holds_lock").expect("the parent has a URL");
    let store = MysqlLockStore::connect(&url).await.unwrap();
    let locks = LockManager::new(Arc::new(store));
    let lock = locks.try_lock(&name, Duration::from_secs(2)).await.unwrap().expect("the child takes the lock");
    child::announce(&format!("ACQUIRED {}", lock.fence().unwrap()));
    std::mem::forget(lock);
    child::park().await;
}

/// A holder killed with `kill -9` never releases: the key stays held until the lease's
/// TTL runs out on the server's clock, then a waiter takes it with a greater fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_frees_the_lock_after_its_ttl() {
    let Some(url) = kit::mysql_url("killed holder") else { return };
    let store = MysqlLockStore::connect(&url).await.unwrap();
    store.ensure_schema().await.unwrap();
    let name = format!("faults:{}:killed-holder", Token::generate().short());
    let holder = ChildProcess::spawn("faults::child_entry_holds_lock", "mysql-holder", &name);
    faults::killed_holder_frees_the_lock_after_its_ttl(Arc::new(store), &name, holder).await;
}
