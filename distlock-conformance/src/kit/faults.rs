//! Fault scenarios the stores' fault tests share: a real store, a real fault
//! (connections killed on the server, a holder process killed with `kill -9`), and the
//! checks every store must pass under it.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_api::{Acquire, DynLockStore, LockError, LockKey, LockManager, LockOptions, StoreKey, Token, Ttl};
use futures_util::future::BoxFuture;

use super::child::ChildProcess;

/// Reads the live token the store's table holds for a key, on a connection the fault
/// does not touch (an admin pool): what the store's answers are checked against.
pub type StoredToken = Arc<dyn Fn(StoreKey) -> BoxFuture<'static, Option<String>> + Send + Sync>;

/// While `workers` workers run acquire/verify/release cycles on keys of their own,
/// `kill` (which kills the store's connections on the server and returns how many) runs
/// three times, 50 cycles apart. Every answer the store gives must be true, checked with
/// `stored_token`: an acquisition it reports is in the table, a release it reports is gone
/// from it. Errors are allowed (an unknown outcome is released with the same token until
/// the store answers); afterwards the workers complete `cycles_after` more cycles.
///
/// # Panics
///
/// On a false answer, a kill that killed nothing, or workers that stall for 60 s.
pub async fn answers_stay_true_while_connections_are_killed<K, KF>(
    store: Arc<DynLockStore>,
    workers: usize,
    stored_token: StoredToken,
    mut kill: K,
    cycles_after: u64,
) where
    K: FnMut() -> KF,
    KF: Future<Output = u64>,
{
    let cycles = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..workers)
        .map(|_| {
            let (store, stored_token) = (Arc::clone(&store), Arc::clone(&stored_token));
            let (cycles, errors, stop) = (Arc::clone(&cycles), Arc::clone(&errors), Arc::clone(&stop));
            tokio::spawn(async move {
                let key = LockKey::new(format!("faults:{}:worker", Token::generate().short())).unwrap().to_store_key();
                while !stop.load(Ordering::Relaxed) {
                    let token = Token::generate();
                    match store.try_acquire(&key, &token, ttl(30_000)).await {
                        Ok(Acquire::Acquired { .. }) => {
                            let held = stored_token(key.clone()).await;
                            assert_eq!(held.as_deref(), Some(token.as_str()), "false \"acquired\"");
                        }
                        Ok(other) => panic!("the worker's own key was not free: {other:?}"),
                        Err(LockError::Store { .. }) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            release_until_answered(&*store, &key, &token, &errors).await;
                            assert_eq!(stored_token(key.clone()).await, None, "left behind");
                            continue;
                        }
                        Err(other) => panic!("unexpected error {other}"),
                    }
                    match store.release(&key, &token).await {
                        Ok(true) => {}
                        Ok(false) => panic!("false \"not released\": the worker held the key"),
                        Err(LockError::Store { .. }) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            release_until_answered(&*store, &key, &token, &errors).await;
                        }
                        Err(other) => panic!("unexpected error {other}"),
                    }
                    assert_eq!(stored_token(key.clone()).await, None, "false \"released\"");
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
        wait_for_cycles(cycles.load(Ordering::Relaxed) + 50).await;
        assert!(kill().await > 0, "no connection of the store was killed");
    }
    wait_for_cycles(cycles.load(Ordering::Relaxed) + cycles_after).await;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        tokio::time::timeout(Duration::from_secs(30), worker).await.expect("worker stopped").unwrap();
    }
    eprintln!("cycles: {}, store errors seen: {}", cycles.load(Ordering::Relaxed), errors.load(Ordering::Relaxed));
}

/// Releases with `token` until the store answers (the outcome of an operation was
/// unknown), counting the errors.
async fn release_until_answered(store: &DynLockStore, key: &StoreKey, token: &Token, errors: &AtomicU64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.release(key, token).await.is_err() {
        errors.fetch_add(1, Ordering::Relaxed);
        assert!(Instant::now() < deadline, "the store never answered a release again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `holder` is a child process that takes the lock `name` with a 2 s TTL and announces
/// `ACQUIRED <fence>`. Once it has, it is killed with `kill -9`: it releases nothing, so
/// `store` cannot take the lock half a second later, and takes it once the lease ran out
/// on the store's clock — not before, within TTL + 3 s, with a greater fence.
///
/// # Panics
///
/// When any of that does not hold.
pub async fn killed_holder_frees_the_lock_after_its_ttl(
    store: Arc<DynLockStore>,
    name: &str,
    mut holder: ChildProcess,
) {
    let line = tokio::task::block_in_place(|| holder.wait_for_line("ACQUIRED ", Duration::from_secs(60)));
    let child_fence: u64 = line["ACQUIRED ".len()..].trim().parse().unwrap();
    let store_key = LockKey::new(name).unwrap().to_store_key();
    let info = store.inspect(&store_key).await.unwrap().expect("the child holds the lock");
    let lease_ends = Instant::now() + info.ttl_left;
    holder.kill9();
    let killed_at = Instant::now();
    assert!(lease_ends > killed_at, "the lease ran out before the kill; nothing left to test");

    let locks = LockManager::new(store);
    tokio::time::sleep_until((killed_at + Duration::from_millis(500)).into()).await;
    if Instant::now() + Duration::from_millis(50) < lease_ends {
        let early = locks.try_lock(name, Duration::from_secs(5)).await.unwrap();
        assert!(early.is_none(), "acquired before the killed holder's TTL ran out");
    }
    let options = LockOptions::new().wait(Duration::from_secs(5)).retry_interval(Duration::from_millis(20));
    let lock = locks.lock_opts(name, Duration::from_secs(5), &options).await.unwrap();
    let acquired_at = Instant::now();
    // The store's clock decides; allow for the two clocks' reading of "now" differing by
    // the round trip of the inspect above.
    assert!(acquired_at + Duration::from_millis(100) >= lease_ends, "acquired {:?} early", lease_ends - acquired_at);
    assert!(acquired_at <= killed_at + Duration::from_secs(2 + 3), "took {:?} after the kill", acquired_at - killed_at);
    assert!(lock.fence().unwrap() > child_fence);
    assert!(lock.release().await.unwrap());
}

fn ttl(ms: u64) -> Ttl {
    Ttl::new(Duration::from_millis(ms)).unwrap()
}
