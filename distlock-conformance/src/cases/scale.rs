use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DistributedLock, DynLockStore, LockManager, Token};
use tokio::task::JoinSet;

use super::{manager, Keys};

const ACQUISITIONS: usize = 10_000;
/// Tokens come from the manager, not the store: a thousand acquisitions through each
/// store check that the store hands back what the manager generated, and the generator's
/// own uniqueness is tested over 100,000 tokens from four threads in `distlock-api`.
const TOKEN_ACQUISITIONS: usize = 1_000;
const WORKERS: usize = 16;
/// Long enough that no lease of the batch expires before the batch is released, even on
/// a slow, loaded server (10,000 logged PostgreSQL writes can take half a minute).
const SCALE_TTL: Duration = Duration::from_secs(600);

/// Acquires `ACQUISITIONS` distinct keys with `WORKERS` concurrent tasks.
async fn acquire_many(locks: &LockManager, keys: &Keys, count: usize) -> Vec<DistributedLock> {
    let mut tasks = JoinSet::new();
    for worker in 0..WORKERS {
        let (locks, keys) = (locks.clone(), keys.clone());
        tasks.spawn(async move {
            let mut held = Vec::new();
            for i in (worker..count).step_by(WORKERS) {
                held.push(locks.lock(&keys.key(&i.to_string()), SCALE_TTL).await.unwrap());
            }
            held
        });
    }
    let mut all = Vec::with_capacity(count);
    while let Some(held) = tasks.join_next().await {
        all.extend(held.unwrap());
    }
    all
}

/// Releases every lock with `WORKERS` concurrent tasks, asserting each was still held.
async fn release_all(held: Vec<DistributedLock>) {
    let mut chunks: Vec<Vec<DistributedLock>> = (0..WORKERS).map(|_| Vec::new()).collect();
    for (i, lock) in held.into_iter().enumerate() {
        chunks[i % WORKERS].push(lock);
    }
    let mut tasks = JoinSet::new();
    for chunk in chunks {
        tasks.spawn(async move {
            for lock in chunk {
                assert!(lock.release().await.unwrap(), "a held lock was not released");
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
}

/// 1,000 concurrent acquisitions get 1,000 distinct, well-formed 36-character tokens.
pub async fn tokens_are_unique(store: Arc<DynLockStore>) {
    let keys = Keys::new("tokens");
    let locks = manager(&store);
    let held = acquire_many(&locks, &keys, TOKEN_ACQUISITIONS).await;
    let tokens: HashSet<&str> = held.iter().map(|lock| lock.token().as_str()).collect();
    assert_eq!(tokens.len(), TOKEN_ACQUISITIONS, "token collision");
    assert!(tokens.iter().all(|t| t.len() == Token::LEN && Token::parse(t).is_ok()));
    release_all(held).await;
}

/// 10,000 distinct keys held at once, each exclusive and with its own token, then all
/// released and free again.
pub async fn many_keys_held_at_once(store: Arc<DynLockStore>) {
    let keys = Keys::new("many");
    let locks = manager(&store);
    let held = acquire_many(&locks, &keys, ACQUISITIONS).await;
    assert_eq!(held.len(), ACQUISITIONS);
    let tokens: HashSet<&str> = held.iter().map(|lock| lock.token().as_str()).collect();
    assert_eq!(tokens.len(), ACQUISITIONS, "token collision");
    for i in (0..ACQUISITIONS).step_by(997) {
        let key = keys.key(&i.to_string());
        assert!(locks.try_lock(&key, SCALE_TTL).await.unwrap().is_none(), "{key} not held");
    }
    release_all(held).await;
    for i in (0..ACQUISITIONS).step_by(997) {
        assert!(store.inspect(&keys.store_key(&i.to_string())).await.unwrap().is_none(), "key {i} still held");
    }
}
