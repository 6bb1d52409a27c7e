//! Fault tests against real MariaDB servers: a private server stopped and restarted,
//! connections killed with `KILL <id>`, and a lock holder killed with `kill -9`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_api::{Acquire, LockError, LockKey, LockManager, LockOptions, LockStore, StoreKey, Token, Ttl};
use distlock_conformance::kit::child::{self, ChildProcess};
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

/// Releases with `token` until the store answers (the outcome of an acquisition was
/// unknown).
async fn release_until_answered(store: &MysqlLockStore, key: &StoreKey, token: &Token, errors: &AtomicU64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.release(key, token).await.is_err() {
        errors.fetch_add(1, Ordering::Relaxed);
        assert!(Instant::now() < deadline, "the store never answered a release again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
    let cycles = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (store, admin) = (store.clone(), admin.clone());
            let (cycles, errors, stop) = (Arc::clone(&cycles), Arc::clone(&errors), Arc::clone(&stop));
            tokio::spawn(async move {
                let k = key("worker");
                while !stop.load(Ordering::Relaxed) {
                    let token = Token::generate();
                    match store.try_acquire(&k, &token, ttl(30_000)).await {
                        Ok(Acquire::Acquired { .. }) => {
                            let held = stored_token(&admin, &k).await;
                            assert_eq!(held.as_deref(), Some(token.as_str()), "false \"acquired\"");
                        }
                        Ok(other) => panic!("the worker's own key was not free: {other:?}"),
                        Err(LockError::Store { .. }) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            release_until_answered(&store, &k, &token, &errors).await;
                            assert_eq!(stored_token(&admin, &k).await, None, "left behind");
                            continue;
                        }
                        Err(other) => panic!("unexpected error {other}"),
                    }
                    match store.release(&k, &token).await {
                        Ok(true) => {}
                        Ok(false) => panic!("false \"not released\": the worker held the key"),
                        Err(LockError::Store { .. }) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            release_until_answered(&store, &k, &token, &errors).await;
                        }
                        Err(other) => panic!("unexpected error {other}"),
                    }
                    assert_eq!(stored_token(&admin, &k).await, None, "false \"released\"");
                    cycles.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let wait_for_cycles = |target: u64| {
        let cycles = Arc::clone(&cycles);
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            while cycles.load(Ordering::Relaxed) < target {
                assert!(Instant::now() < deadline, "workers stalled below {target} cycles");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    for _ in 0..3 {
        let before = cycles.load(Ordering::Relaxed);
        wait_for_cycles(before + 50).await;
        let killed = mysql_server::kill_connections(&server.url(), "distlock_app").await;
        assert!(killed > 0, "no connection of the pool was killed");
    }
    let before = cycles.load(Ordering::Relaxed);
    wait_for_cycles(before + 100).await;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.unwrap();
    }
    eprintln!("cycles: {}, store errors: {}", cycles.load(Ordering::Relaxed), errors.load(Ordering::Relaxed));
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
    let mut holder = ChildProcess::spawn("child_entry_holds_lock", "mysql-holder", &name);
    let line = holder.wait_for_line("ACQUIRED ", Duration::from_secs(60));
    let child_fence: u64 = line["ACQUIRED ".len()..].trim().parse().unwrap();
    let store_key = LockKey::new(name.as_str()).unwrap().to_store_key();
    let info = store.inspect(&store_key).await.unwrap().expect("the child holds the lock");
    let lease_ends = Instant::now() + info.ttl_left;
    holder.kill9();
    let killed_at = Instant::now();
    assert!(lease_ends > killed_at, "the lease ran out before the kill; nothing left to test");

    let locks = LockManager::new(Arc::new(store.clone()));
    if Instant::now() + Duration::from_millis(100) < lease_ends {
        let early = locks.try_lock(&name, Duration::from_secs(5)).await.unwrap();
        assert!(early.is_none(), "acquired before the killed holder's TTL ran out");
    }
    let lock = locks
        .lock_opts(
            &name,
            Duration::from_secs(5),
            &LockOptions::new().wait(Duration::from_secs(5)).retry_interval(Duration::from_millis(20)),
        )
        .await
        .unwrap();
    let acquired_at = Instant::now();
    assert!(acquired_at + Duration::from_millis(100) >= lease_ends, "acquired {:?} early", lease_ends - acquired_at);
    assert!(acquired_at <= killed_at + Duration::from_secs(2 + 3), "took {:?} after the kill", acquired_at - killed_at);
    assert!(lock.fence().unwrap() > child_fence);
    assert!(lock.release().await.unwrap());
}
