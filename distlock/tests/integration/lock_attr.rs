//! `#[distlock::lock]` at run time: key templates, NotAcquired, release on every path,
//! the function's own errors, waiting and renewal.
#![cfg(all(feature = "macros", feature = "memory"))]

use std::sync::Arc;
use std::time::Duration;

use distlock::{LockError, LockManager};
use tokio::sync::{oneshot, Notify};

fn manager() -> LockManager {
    LockManager::new(Arc::new(distlock::memory::MemoryLockStore::new()))
}

/// Whether someone holds `key` (a probe that got it releases it at once).
async fn is_held(locks: &LockManager, key: &str) -> bool {
    match locks.try_lock(key, Duration::from_secs(5)).await.unwrap() {
        Some(probe) => !probe.release().await.unwrap(),
        None => true,
    }
}

#[derive(Debug)]
enum AppError {
    Lock(LockError),
    Payment(&'static str),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        Self::Lock(err)
    }
}

/// Holds `order:{order_id}` until `go` is notified; tells `entered` when inside.
#[distlock::lock(key = "order:{order_id}", ttl = "15s", wait = "0s", retry = "50ms", manager = locks)]
async fn hold_order(
    locks: LockManager,
    order_id: u64,
    entered: oneshot::Sender<()>,
    go: Arc<Notify>,
) -> Result<u64, AppError> {
    let _ = entered.send(());
    go.notified().await;
    Ok(order_id * 2)
}

#[distlock::lock(key = "order:{order_id}", ttl = "15s", manager = locks)]
async fn pay(locks: LockManager, order_id: &str, fail: bool) -> Result<&'static str, AppError> {
    if fail {
        return Err(AppError::Payment("card declined"));
    }
    let amount: u32 = "12".parse().map_err(|_| AppError::Payment("bad amount"))?;
    assert_eq!(amount, 12);
    Ok("paid")
}

#[tokio::test]
async fn second_caller_gets_not_acquired_and_the_lock_is_released_after() {
    let locks = manager();
    let go = Arc::new(Notify::new());
    let (entered_tx, entered) = oneshot::channel();
    let first = tokio::spawn(hold_order(locks.clone(), 7, entered_tx, Arc::clone(&go)));
    entered.await.unwrap();
    assert!(is_held(&locks, "order:7").await, "the key template gives order:7");

    let (tx, _rx) = oneshot::channel();
    match hold_order(locks.clone(), 7, tx, Arc::new(Notify::new())).await {
        Err(AppError::Lock(LockError::NotAcquired { key })) => assert_eq!(key, "order:7"),
        other => panic!("expected NotAcquired, got {other:?}"),
    }
    // Another order is independent.
    assert!(matches!(pay(locks.clone(), "8", false).await, Ok("paid")));

    go.notify_one();
    assert_eq!(first.await.unwrap().unwrap(), 14);
    assert!(!is_held(&locks, "order:7").await, "released after Ok");
}

#[tokio::test]
async fn the_function_error_is_returned_unchanged_and_the_lock_released() {
    let locks = manager();
    assert!(matches!(pay(locks.clone(), "1", true).await, Err(AppError::Payment("card declined"))));
    assert!(!is_held(&locks, "order:1").await, "released after Err");
    assert!(matches!(pay(locks.clone(), "1", false).await, Ok("paid")));
}

struct Orders {
    locks: LockManager,
}

impl Orders {
    #[distlock::lock(key = "order:{id}:{{raw}}", ttl = "10s", manager = self.locks)]
    async fn ship(&self, id: u32) -> Result<String, LockError> {
        assert!(self.locks.try_lock(&format!("order:{id}:{{raw}}"), Duration::from_secs(1)).await?.is_none());
        Ok(format!("shipped {id}"))
    }

    #[distlock::lock(key = "panic:{id}", ttl = "10s", manager = self.locks)]
    async fn explode(&self, id: u32) -> Result<(), LockError> {
        panic!("boom {id}");
    }

    #[distlock::lock(key = "consume:{id}", ttl = "10s", manager = self.locks)]
    async fn consume(self, id: u32) -> Result<LockManager, LockError> {
        Ok(self.locks)
    }
}

#[tokio::test]
async fn methods_use_self_fields_and_literal_braces() {
    let orders = Orders { locks: manager() };
    assert_eq!(orders.ship(3).await.unwrap(), "shipped 3");
    assert!(!is_held(&orders.locks, "order:3:{raw}").await);
    let locks = Orders { locks: orders.locks.clone() }.consume(1).await.unwrap();
    assert!(!is_held(&locks, "consume:1").await);
}

#[tokio::test]
async fn a_panicking_body_releases_the_lock() {
    let orders = Arc::new(Orders { locks: manager() });
    let task = tokio::spawn({
        let orders = Arc::clone(&orders);
        async move { orders.explode(5).await }
    });
    assert!(task.await.unwrap_err().is_panic());
    orders.locks.flush_releases().await;
    assert!(!is_held(&orders.locks, "panic:5").await, "released in the background after a panic");
}

#[distlock::lock(key = "job:{name}", ttl = "10s", wait = "2s", retry = "10ms", manager = locks)]
async fn waiting_job(locks: &LockManager, name: &str) -> Result<(), LockError> {
    Ok(())
}

#[tokio::test]
async fn wait_retries_until_the_holder_releases() {
    let locks = manager();
    let held = locks.lock("job:import", Duration::from_secs(10)).await.unwrap();
    let releaser = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        held.release().await.unwrap();
    });
    waiting_job(&locks, "import").await.unwrap();
    releaser.await.unwrap();
}

#[distlock::lock(key = "renewed:{id}", ttl = "200ms", renew, manager = locks)]
async fn long_job(locks: &LockManager, id: u8) -> Result<bool, LockError> {
    tokio::time::sleep(Duration::from_millis(700)).await;
    Ok(is_held(locks, &format!("renewed:{id}")).await)
}

#[distlock::lock(key = "unrenewed:{id}", ttl = "200ms", renew = false, manager = locks)]
async fn long_job_without_renewal(locks: &LockManager, id: u8) -> Result<bool, LockError> {
    tokio::time::sleep(Duration::from_millis(700)).await;
    Ok(is_held(locks, &format!("unrenewed:{id}")).await)
}

#[tokio::test]
async fn renew_keeps_the_lease_beyond_its_ttl() {
    let locks = manager();
    assert!(long_job(&locks, 1).await.unwrap(), "renewed lease still held after 3.5 TTLs");
    assert!(!long_job_without_renewal(&locks, 1).await.unwrap(), "without renewal the lease expired");
}

#[tokio::test]
async fn attributed_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let locks = manager();
    let future = pay(locks, "9", false);
    assert_send(&future);
    drop(future);
}

/// Without `ttl`, the lease is 10 s.
#[distlock::lock(key = "report:{day}", manager = locks)]
async fn report(locks: &LockManager, day: u32) -> Result<Duration, LockError> {
    let key = distlock::LockKey::new(format!("report:{day}"))?.to_store_key();
    let holder = locks.store().inspect(&key).await?.expect("held while the body runs");
    Ok(holder.ttl_left)
}

#[tokio::test]
async fn the_default_ttl_is_ten_seconds() {
    let locks = manager();
    let left = report(&locks, 7).await.unwrap();
    assert!(left > Duration::from_secs(9) && left <= Duration::from_secs(10), "{left:?} left of the default lease");
    assert!(!is_held(&locks, "report:7").await, "released after the body");
}

/// A locked method that calls another locked method on the same key: with `reentrant`
/// the inner call shares the outer lock; the lock is freed when the outer call ends.
struct Accounts {
    locks: LockManager,
}

impl Accounts {
    #[distlock::lock(key = "account:{id}", ttl = "15s", manager = self.locks, reentrant)]
    async fn transfer(&self, id: u64, amount: i64) -> Result<i64, AppError> {
        let balance = self.debit(id, amount).await?;
        // (A `try_lock` probe would re-enter the scope; ask the store.)
        let key = distlock::LockKey::new(format!("account:{id}"))?.to_store_key();
        assert!(self.locks.store().inspect(&key).await?.is_some(), "the inner call released the outer lock");
        Ok(balance)
    }

    #[distlock::lock(key = "account:{id}", ttl = "15s", manager = self.locks, reentrant)]
    async fn debit(&self, id: u64, amount: i64) -> Result<i64, AppError> {
        Ok(100 - amount)
    }

    /// The same nesting without `reentrant`: the inner call finds its own lock held.
    #[distlock::lock(key = "account:{id}", ttl = "15s", manager = self.locks)]
    async fn transfer_plain(&self, id: u64) -> Result<i64, AppError> {
        self.debit_plain(id).await
    }

    #[distlock::lock(key = "account:{id}", ttl = "15s", manager = self.locks)]
    async fn debit_plain(&self, id: u64) -> Result<i64, AppError> {
        Ok(id as i64)
    }
}

#[tokio::test]
async fn reentrant_methods_share_the_callers_lock() {
    let accounts = Accounts { locks: manager() };
    assert_eq!(accounts.transfer(7, 30).await.unwrap(), 70);
    assert!(!is_held(&accounts.locks, "account:7").await, "not released after the outer call");
    // Called on its own, the reentrant method still locks (and excludes others).
    let held = accounts.locks.lock("account:8", Duration::from_secs(5)).await.unwrap();
    assert!(matches!(accounts.debit(8, 1).await, Err(AppError::Lock(LockError::NotAcquired { .. }))));
    assert!(held.release().await.unwrap());
    // Without `reentrant`, the nested call deadlocks on itself (here: NotAcquired at once).
    match accounts.transfer_plain(9).await {
        Err(AppError::Lock(LockError::NotAcquired { key })) => assert_eq!(key, "account:9"),
        other => panic!("expected NotAcquired, got {other:?}"),
    }
    assert!(!distlock::in_reentrant_scope());
}

/// `read` and `write`: readers of a document run together, a writer alone.
struct Docs {
    locks: LockManager,
}

impl Docs {
    #[distlock::lock(key = "doc:{id}", ttl = "15s", manager = self.locks, read)]
    async fn read(
        &self,
        id: u64,
        inside: oneshot::Sender<()>,
        go: Arc<tokio::sync::Semaphore>,
    ) -> Result<u64, AppError> {
        let _ = inside.send(());
        go.acquire().await.expect("the gate stays open").forget();
        Ok(id)
    }

    #[distlock::lock(key = "doc:{id}", ttl = "15s", manager = self.locks, write)]
    async fn write(&self, id: u64) -> Result<&'static str, AppError> {
        Ok("written")
    }
}

#[tokio::test]
async fn read_and_write_attributes_take_group_locks() {
    let docs = Arc::new(Docs { locks: manager() });
    let go = Arc::new(tokio::sync::Semaphore::new(0));
    let mut readers = Vec::new();
    for _ in 0..2 {
        let (inside_tx, inside) = oneshot::channel();
        let (docs, go) = (Arc::clone(&docs), Arc::clone(&go));
        readers.push(tokio::spawn(async move { docs.read(1, inside_tx, go).await }));
        inside.await.expect("two readers are inside at once");
    }
    let holders = docs.locks.holders("doc:1").await.unwrap();
    assert_eq!(holders.len(), 2);
    assert!(holders.iter().all(|holder| holder.mode == distlock::LockMode::Shared));
    match docs.write(1).await {
        Err(AppError::Lock(LockError::NotAcquired { key })) => assert_eq!(key, "doc:1"),
        other => panic!("a writer got in beside readers: {other:?}"),
    }
    go.add_permits(2);
    for reader in readers {
        assert_eq!(reader.await.unwrap().unwrap(), 1);
    }
    assert_eq!(docs.write(1).await.unwrap(), "written");
    assert!(docs.locks.holders("doc:1").await.unwrap().is_empty());
}
