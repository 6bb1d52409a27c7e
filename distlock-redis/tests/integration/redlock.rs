//! The whole conformance suite on Redlock over 3 private masters. Redlock has no lock
//! groups and no fair queue (see the README's "Redlock"): those cases check that it
//! refuses groups (`Unsupported`) and that its waiters barge. Five masters run the fault
//! tests (`redlock_faults.rs`: a stopped minority and majority of 3 and of 5) and the
//! benchmark; the suite itself runs once, to keep the test run short.

use crate::scale_kit;

mod three_masters_fenced {
    async fn store() -> Option<std::sync::Arc<distlock_api::DynLockStore>> {
        super::scale_kit::redlock_store(3, "?fencing=true&prefix=c3").await
    }
    distlock_conformance::conformance_suite!(store);
}

/// `build(clients)` on the application's clients: nothing sent until used, the prefix's
/// settings checked on demand on every master, and a waiter woken by the release
/// notifications the builder asked for.
#[tokio::test(flavor = "multi_thread")]
async fn a_store_built_on_the_applications_clients_works_like_a_connected_one() {
    use std::sync::Arc;
    use std::time::Duration;

    use distlock_api::{LockError, LockManager, LockStore};
    use distlock_redis::{redis, RedlockStore};

    let Some(servers) = tokio::task::block_in_place(|| scale_kit::masters(3, "redlock build")) else { return };
    let clients =
        || servers.iter().map(|server| redis::Client::open(format!("redis://127.0.0.1:{}", server.port())).unwrap());
    let builder = RedlockStore::builder().key_prefix("built").fencing(true).release_notifications(true);
    let store = builder.clone().build(clients()).unwrap();
    assert_eq!(store.masters().len(), 3);
    assert!(store.capabilities().release_notifications);
    store.check_shared_settings().await.unwrap();
    // A client of the prefix with other settings is refused, by the check and by `connect`.
    let other = RedlockStore::builder().key_prefix("built").fencing(true).build(clients()).unwrap();
    let err = other.check_shared_settings().await.unwrap_err();
    assert!(matches!(err, LockError::Config { .. }) && err.to_string().contains("lock-settings"), "{err}");
    assert!(RedlockStore::connect(&scale_kit::redlock_url(&servers, "?prefix=built&fencing=true")).await.is_err());

    let locks = LockManager::new(Arc::new(store));
    let held = locks.try_lock("n", Duration::from_secs(30)).await.unwrap().expect("free");
    assert!(held.fence().is_some());
    crate::common::release_wakes_the_waiter(&locks, held, "n").await;
}
