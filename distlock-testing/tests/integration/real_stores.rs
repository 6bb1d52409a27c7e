//! The faults on real servers (`DISTLOCK_REDIS_URL`, `DISTLOCK_POSTGRES_URL`; a missing
//! one skips the test, unless `DISTLOCK_REQUIRE_SERVICES=1` makes it fail): the wrapper
//! works through the `LockStore` trait alone, so it behaves the same on every store.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, LockError, LockKey, LockManager, LockOptions, LockStore, LossReason, Token};
use distlock_testing::{Faults, FaultyStore, InjectedFault, Op};
use tokio::time::{timeout, Instant};

const TTL: Duration = Duration::from_secs(30);
/// Generous bounds: these tests share two cores with others.
const PATIENCE: Duration = Duration::from_secs(20);

/// A key no other test uses.
fn unique_key(name: &str) -> String {
    format!("faulty:{name}:{}", Token::generate().as_str())
}

fn setup(inner: &Arc<DynLockStore>) -> (LockManager, Faults) {
    let store = FaultyStore::new(Arc::clone(inner));
    let faults = store.faults();
    (LockManager::new(Arc::new(store)), faults)
}

async fn held(inner: &Arc<DynLockStore>, key: &str) -> Option<Token> {
    let key = LockKey::new(key).unwrap().to_store_key();
    inner.inspect(&key).await.unwrap().map(|info| info.token)
}

async fn stolen_lease_fires_lost(inner: Arc<DynLockStore>) {
    let (locks, faults) = setup(&inner);
    let key = unique_key("stolen");
    let every = Duration::from_millis(200);
    let lock = locks.lock_opts(&key, Duration::from_secs(10), &LockOptions::new().renew_every(every)).await.unwrap();
    timeout(PATIENCE, faults.wait_for_calls(Op::Extend, 1)).await.expect("no renewal");
    let stolen_at = Instant::now();
    let thief = faults.steal(&key).await.unwrap().expect("the key was held");
    if inner.capabilities().fencing {
        assert!(thief.fence > lock.fence(), "{:?} after {:?}", thief.fence, lock.fence());
    }
    let reason = timeout(PATIENCE, lock.lost()).await.expect("lost did not fire");
    assert_eq!(reason, LossReason::NotHeld);
    assert!(stolen_at.elapsed() < every + Duration::from_secs(5), "noticed after {:?}", stolen_at.elapsed());
    assert_eq!(held(&inner, &key).await, Some(thief.token.clone()), "renewal touched the new owner's lease");
    assert!(!lock.release().await.unwrap());
    assert!(inner.release(&LockKey::new(key).unwrap().to_store_key(), &thief.token).await.unwrap());
}

async fn fail_next_acquire_twice(inner: Arc<DynLockStore>) {
    let (locks, faults) = setup(&inner);
    let key = unique_key("acquire");
    faults.fail_next(Op::Acquire, 2);
    for _ in 0..2 {
        let err = locks.try_lock(&key, TTL).await.unwrap_err();
        assert!(matches!(&err, LockError::Store { operation: "acquire", .. }), "{err}");
        assert_eq!(err.to_string().split(' ').next(), Some(inner.backend()), "{err}");
        assert!(InjectedFault::of(&err).is_some_and(|fault| !fault.reached_store()), "{err}");
    }
    let lock = locks.try_lock(&key, TTL).await.unwrap().expect("the third attempt acquires");
    locks.flush_releases().await;
    assert_eq!(held(&inner, &key).await.as_ref(), Some(lock.token()));
    assert!(lock.release().await.unwrap());
}

async fn lost_acquire_reply_is_cleaned_up(inner: Arc<DynLockStore>) {
    let (locks, faults) = setup(&inner);
    let key = unique_key("orphan");
    faults.lose_next_replies(Op::Acquire, 1);
    let err = locks.try_lock(&key, TTL).await.unwrap_err();
    assert!(InjectedFault::of(&err).is_some_and(InjectedFault::reached_store), "{err}");
    locks.flush_releases().await;
    assert_eq!(held(&inner, &key).await, None, "the orphaned lease was not released");
}

async fn background_release_after_failed_release(inner: Arc<DynLockStore>) {
    let (locks, faults) = setup(&inner);
    let key = unique_key("release");
    let lock = locks.try_lock(&key, TTL).await.unwrap().unwrap();
    faults.fail_next(Op::Release, 1);
    let err = lock.release().await.unwrap_err();
    assert!(matches!(&err, LockError::Store { operation: "release", .. }), "{err}");
    locks.flush_releases().await;
    assert_eq!(faults.calls(Op::Release), 2);
    assert_eq!(held(&inner, &key).await, None, "the background release did not free the lock");
}

async fn waiters_poll_without_notifications(inner: Arc<DynLockStore>) {
    let (locks, faults) = setup(&inner);
    let key = unique_key("poll");
    faults.drop_release_notifications(true);
    assert!(!locks.store().capabilities().release_notifications);
    let holder = locks.lock(&key, TTL).await.unwrap();
    let waiter = tokio::spawn({
        let (locks, key) = (locks.clone(), key.clone());
        async move {
            let options = LockOptions::new().wait(PATIENCE).retry_interval(Duration::from_millis(100));
            locks.lock_opts(&key, TTL, &options).await
        }
    });
    timeout(PATIENCE, faults.wait_for_calls(Op::WaitForRelease, 2)).await.expect("the waiter does not poll");
    assert!(holder.release().await.unwrap());
    let lock = timeout(PATIENCE, waiter).await.expect("the waiter did not get the lock").unwrap().unwrap();
    assert!(lock.release().await.unwrap());
}

async fn delayed_operations(inner: Arc<DynLockStore>) {
    let (locks, faults) = setup(&inner);
    let key = unique_key("slow");
    let latency = Duration::from_millis(300);
    faults.delay(Op::Acquire, latency);
    let started = Instant::now();
    let lock = locks.try_lock(&key, TTL).await.unwrap().unwrap();
    assert!(started.elapsed() >= latency, "{:?}", started.elapsed());
    assert!(faults.expire(&key).await.unwrap());
    assert_eq!(held(&inner, &key).await, None);
    assert!(!lock.release().await.unwrap());
}

macro_rules! scenarios {
    ($store:path; $($scenario:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $scenario() {
            let Some(store) = $store(stringify!($scenario)).await else { return };
            super::$scenario(store.inner()).await;
            store.finish().await;
        }
    )*};
}

macro_rules! every_scenario {
    ($store:path) => {
        scenarios!($store;
            stolen_lease_fires_lost,
            fail_next_acquire_twice,
            lost_acquire_reply_is_cleaned_up,
            background_release_after_failed_release,
            waiters_poll_without_notifications,
            delayed_operations,
        );
    };
}

mod redis {
    use super::*;
    use distlock_redis::RedisLockStore;

    pub(super) struct TestStore(Arc<DynLockStore>);

    impl TestStore {
        pub(super) fn inner(&self) -> Arc<DynLockStore> {
            Arc::clone(&self.0)
        }

        /// Every key of these tests is released or expires with its lease.
        pub(super) async fn finish(self) {}
    }

    /// A store on `DISTLOCK_REDIS_URL` under a key prefix of its own.
    pub(super) async fn store(test: &str) -> Option<TestStore> {
        let url = distlock_conformance::kit::redis_url(test)?;
        let prefix = format!("dltest-faulty-{}", Token::generate().as_str());
        let store = RedisLockStore::builder().key_prefix(prefix).connect(&url).await.expect("connect");
        Some(TestStore(Arc::new(store)))
    }

    every_scenario!(store);
}

mod postgres {
    use super::*;
    use distlock_conformance::kit::postgres_server;
    use distlock_postgres::PostgresLockStore;

    pub(super) struct TestStore {
        store: Arc<PostgresLockStore>,
        url: String,
    }

    impl TestStore {
        pub(super) fn inner(&self) -> Arc<DynLockStore> {
            self.store.clone()
        }

        pub(super) async fn finish(self) {
            self.store.pool().close().await;
            postgres_server::execute(&self.url, &format!("DROP TABLE IF EXISTS {}", self.store.table_name())).await;
        }
    }

    /// A store on `DISTLOCK_POSTGRES_URL` on a new table of its own.
    pub(super) async fn store(test: &str) -> Option<TestStore> {
        let url = distlock_conformance::kit::postgres_url(test)?;
        let store = PostgresLockStore::builder()
            .schema("distlock_testing")
            .table(postgres_server::random_identifier("t"))
            .max_connections(4)
            .connect(&url)
            .await
            .expect("connect");
        store.ensure_schema().await.expect("ensure_schema");
        Some(TestStore { store: Arc::new(store), url })
    }

    every_scenario!(store);
}
