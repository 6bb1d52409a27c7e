use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, LockError, LockOptions};

use super::{manager, Keys, LONG_TTL, RETRY};

#[derive(Debug, PartialEq)]
enum AppError {
    Lock(String),
    Business(&'static str),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        match err {
            LockError::NotAcquired { key } => Self::Lock(key),
            other => panic!("unexpected lock error: {other}"),
        }
    }
}

/// `with_lock` runs the block under the lock and releases it after an `Ok`.
pub async fn with_lock_releases_on_ok(store: Arc<DynLockStore>) {
    let keys = Keys::new("with-ok");
    let locks = manager(&store);
    let key = keys.key("a");
    let value = locks
        .with_lock(&key, LONG_TTL, || async {
            let inside = locks.try_lock(&key, LONG_TTL).await?;
            assert!(inside.is_none(), "the block ran without holding the lock");
            Ok::<_, LockError>(42)
        })
        .await
        .unwrap();
    assert_eq!(value, 42);
    assert!(store.inspect(&keys.store_key("a")).await.unwrap().is_none(), "not released after Ok");
}

/// `with_lock` returns the block's own error, unchanged, and releases the lock.
pub async fn with_lock_releases_on_err(store: Arc<DynLockStore>) {
    let keys = Keys::new("with-err");
    let locks = manager(&store);
    let key = keys.key("a");
    let outcome: Result<(), AppError> =
        locks.with_lock(&key, LONG_TTL, || async { Err(AppError::Business("declined")) }).await;
    assert_eq!(outcome, Err(AppError::Business("declined")));
    assert!(store.inspect(&keys.store_key("a")).await.unwrap().is_none(), "not released after Err");
}

/// A panicking block still frees the lock, promptly (long before the TTL).
pub async fn with_lock_releases_on_panic(store: Arc<DynLockStore>) {
    let keys = Keys::new("with-panic");
    let locks = manager(&store);
    let key = keys.key("a");
    let task = tokio::spawn({
        let (locks, key) = (locks.clone(), key.clone());
        async move {
            locks
                .with_lock(&key, LONG_TTL, || async {
                    if !key.is_empty() {
                        panic!("the block panics");
                    }
                    Ok::<_, LockError>(())
                })
                .await
        }
    });
    assert!(task.await.unwrap_err().is_panic());
    let again = locks
        .lock_opts(&key, LONG_TTL, &LockOptions::new().wait(Duration::from_secs(5)).retry_interval(RETRY))
        .await
        .expect("freed after the panic");
    assert!(again.release().await.unwrap());
}

/// A busy key with `wait = 0` gives `NotAcquired { key }` and does not run the block.
pub async fn with_lock_not_acquired_when_busy(store: Arc<DynLockStore>) {
    let keys = Keys::new("with-busy");
    let locks = manager(&store);
    let key = keys.key("a");
    let held = locks.lock(&key, LONG_TTL).await.unwrap();
    let mut ran = false;
    let outcome: Result<(), AppError> = locks
        .with_lock(&key, LONG_TTL, || {
            ran = true;
            async { Ok(()) }
        })
        .await;
    assert_eq!(outcome, Err(AppError::Lock(key.clone())));
    assert!(!ran, "the block ran without the lock");
    let info = store.inspect(held.store_key()).await.unwrap().expect("the holder is untouched");
    assert_eq!(&info.token, held.token());
    assert!(held.release().await.unwrap());
}
