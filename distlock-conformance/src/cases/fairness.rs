//! Fair waiting: a key's waiters are served in arrival order, through a queue kept on the
//! server; a waiter that crashes, is cancelled or gives up leaves it without stalling
//! the others; a non-waiting attempt never queues.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_api::{Acquire, DynLockStore, LockManager, LockOptions, QueueStore, QueuedAttempt, Token, Ttl};
use tokio::time::Instant;

use super::{count_reaches, manager, Keys, LONG_TTL, RETRY};

/// How long a condition polled through the store may take to become true.
const SETTLE: Duration = Duration::from_secs(10);

/// The store's queue of waiters, if it keeps one (and then it says so in its
/// capabilities). A store without one (a Redis store on the plain single-node wire, the
/// default) is held to what it promises instead: waiters that ask for fair waiting
/// barge, and are all served.
async fn fair_queue(store: &Arc<DynLockStore>) -> Option<&dyn QueueStore> {
    let queue = store.queue();
    assert_eq!(queue.is_some(), store.capabilities().fair_queue, "queue() and capabilities().fair_queue agree");
    if queue.is_none() {
        waiters_barge_without_a_queue(store).await;
    }
    queue
}

async fn waiters_barge_without_a_queue(store: &Arc<DynLockStore>) {
    let keys = Keys::new("barge");
    let locks = manager(store);
    let key = keys.key("k");
    let held = locks.lock(&key, LONG_TTL).await.unwrap();
    let counting = crate::counting::CountingStore::new(Arc::clone(store));
    let waiters = LockManager::new(counting.clone());
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let (waiters, key) = (waiters.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let lock = waiters.lock_opts(&key, LONG_TTL, &waiting(RETRY)).await.expect("every waiter is served");
            assert!(lock.release().await.unwrap());
        }));
    }
    // Every waiter has tried at least twice: each is past its first attempt, retrying.
    counting.wait_for_acquires(6).await;
    assert!(held.release().await.unwrap());
    for task in tasks {
        tokio::time::timeout(SETTLE, task).await.expect("every waiter is served").unwrap();
    }
    assert!(store.inspect(&keys.store_key("k")).await.unwrap().is_none(), "the key is free at the end");
}

/// Waits until the key's queue has `len` live places (a store-side signal, polled).
async fn queue_reaches(queue: &dyn QueueStore, keys: &Keys, name: &str, len: usize) {
    let key = keys.store_key(name);
    let what = format!("the queue of {name}");
    count_reaches(&what, len, || async { queue.queue_len(&key).await.expect("queue_len") }).await;
}

fn waiting(retry: Duration) -> LockOptions {
    LockOptions::new().wait(Duration::from_secs(30)).retry_interval(retry)
}

/// Waiters that arrived in a known order get the key in that order, whatever the
/// timing of their retries and wake-ups.
pub async fn fair_waiters_are_served_in_arrival_order(store: Arc<DynLockStore>) {
    let Some(queue) = fair_queue(&store).await else { return };
    let keys = Keys::new("fair_order");
    let locks = manager(&store);
    let key = keys.key("k");
    let held = locks.lock(&key, LONG_TTL).await.unwrap();
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0u32..6 {
        // Retry intervals differ, so polling order alone would not give arrival order.
        let retry = RETRY * (6 - i);
        tasks.push(tokio::spawn({
            let (locks, key, served) = (locks.clone(), key.clone(), Arc::clone(&served));
            async move {
                let lock = locks.lock_opts(&key, LONG_TTL, &waiting(retry)).await.expect("the waiter's turn");
                served.lock().unwrap().push(i);
                tokio::time::sleep(Duration::from_millis(10)).await;
                assert!(lock.release().await.unwrap());
            }
        }));
        queue_reaches(queue, &keys, "k", usize::try_from(i).unwrap() + 1).await;
    }
    assert!(held.release().await.unwrap());
    for task in tasks {
        tokio::time::timeout(SETTLE, task).await.expect("every waiter is served").unwrap();
    }
    assert_eq!(*served.lock().unwrap(), [0, 1, 2, 3, 4, 5], "served in arrival order");
    assert_eq!(queue.queue_len(&keys.store_key("k")).await.unwrap(), 0, "the queue is empty at the end");
}

/// A release hands the key to the oldest waiter even when that waiter has crashed: the
/// key is held by its token for the rest of its place's lease, then the next waiter gets
/// it — the queue is stalled no longer than the dead waiter's place.
pub async fn a_crashed_waiter_stalls_the_queue_only_for_its_place(store: Arc<DynLockStore>) {
    let Some(queue) = fair_queue(&store).await else { return };
    let keys = Keys::new("fair_crash");
    let locks = manager(&store);
    let key = keys.key("k");
    let held = locks.lock(&key, LONG_TTL).await.unwrap();
    // The crashed waiter: one queued attempt with a 400 ms place, never followed up.
    let (dead, place) = (Token::generate(), Ttl::new(Duration::from_millis(400)).unwrap());
    let ttl = Ttl::new(LONG_TTL).unwrap();
    let key_k = keys.store_key("k");
    let attempt = queue.try_acquire_queued(QueuedAttempt { key: &key_k, token: &dead, ttl, place }).await.unwrap();
    assert!(matches!(attempt, Acquire::Held { .. }), "{attempt:?}");
    let live = tokio::spawn({
        let (locks, key) = (locks.clone(), key.clone());
        async move {
            let lock = locks.lock_opts(&key, LONG_TTL, &waiting(RETRY)).await.expect("the live waiter's turn");
            let at = Instant::now();
            assert!(lock.release().await.unwrap());
            at
        }
    });
    queue_reaches(queue, &keys, "k", 2).await;
    let released_at = Instant::now();
    assert!(held.release().await.unwrap());
    let holder = store.inspect(&keys.store_key("k")).await.unwrap();
    // The dead waiter's place may already have lapsed on a slow machine; if not, it holds the key.
    if let Some(holder) = holder {
        assert!(holder.token == dead || released_at.elapsed() >= Duration::from_millis(400), "{holder:?}");
    }
    let acquired_at = tokio::time::timeout(SETTLE, live).await.expect("the live waiter is served").unwrap();
    let stalled = acquired_at - released_at;
    assert!(stalled < Duration::from_secs(5), "the dead waiter stalled the queue for {stalled:?}");
}

/// A waiter whose wait is cancelled leaves the queue at once (not only when its place
/// expires): the next waiter is served right after the release.
pub async fn a_cancelled_waiter_leaves_the_queue(store: Arc<DynLockStore>) {
    let Some(queue) = fair_queue(&store).await else { return };
    let keys = Keys::new("fair_cancel");
    let locks = manager(&store);
    let key = keys.key("k");
    let held = locks.lock(&key, LONG_TTL).await.unwrap();
    // A 5 s retry interval gives the cancelled waiter a place of more than 15 s.
    let slow = waiting(Duration::from_secs(5));
    let cancelled = tokio::spawn({
        let (locks, key) = (locks.clone(), key.clone());
        async move { locks.lock_opts(&key, LONG_TTL, &slow).await }
    });
    queue_reaches(queue, &keys, "k", 1).await;
    let next = tokio::spawn({
        let (locks, key) = (locks.clone(), key.clone());
        async move {
            let lock = locks.lock_opts(&key, LONG_TTL, &waiting(RETRY)).await.expect("the next waiter's turn");
            let at = Instant::now();
            assert!(lock.release().await.unwrap());
            at
        }
    });
    queue_reaches(queue, &keys, "k", 2).await;
    cancelled.abort();
    assert!(cancelled.await.unwrap_err().is_cancelled());
    queue_reaches(queue, &keys, "k", 1).await;
    let released_at = Instant::now();
    assert!(held.release().await.unwrap());
    let acquired_at = tokio::time::timeout(SETTLE, next).await.expect("the next waiter is served").unwrap();
    let waited = acquired_at - released_at;
    assert!(waited < Duration::from_secs(3), "served {waited:?} after the release (the cancelled place: > 15 s)");
}

/// A waiter that gives up at its deadline leaves the queue before its call returns, and
/// a non-waiting attempt or a barging waiter never takes a place.
pub async fn only_fair_waiters_queue(store: Arc<DynLockStore>) {
    let Some(queue) = fair_queue(&store).await else { return };
    let keys = Keys::new("fair_try");
    let locks: LockManager = manager(&store);
    let key = keys.key("k");
    let held = locks.lock(&key, LONG_TTL).await.unwrap();
    assert!(locks.try_lock(&key, LONG_TTL).await.unwrap().is_none());
    assert_eq!(queue.queue_len(&keys.store_key("k")).await.unwrap(), 0, "try_lock does not queue");
    let barging = LockOptions::new().wait(Duration::from_millis(300)).retry_interval(RETRY).barging();
    assert!(locks.try_lock_opts(&key, LONG_TTL, &barging).await.unwrap().is_none());
    assert_eq!(queue.queue_len(&keys.store_key("k")).await.unwrap(), 0, "a barging waiter does not queue");
    let fair = LockOptions::new().wait(Duration::from_millis(300)).retry_interval(Duration::from_secs(5));
    assert!(locks.try_lock_opts(&key, LONG_TTL, &fair).await.unwrap().is_none());
    let left = queue.queue_len(&keys.store_key("k")).await.unwrap();
    assert_eq!(left, 0, "a waiter that gives up has left the queue when the call returns");
    assert!(held.release().await.unwrap());
    assert!(store.inspect(&keys.store_key("k")).await.unwrap().is_none(), "nobody waits: the key is free");
}
