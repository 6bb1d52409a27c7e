use std::sync::Arc;
use std::time::Duration;

use distlock_api::{reentrant_scope, DynLockStore, LockError, LockOptions};

use super::{manager, Keys, LONG_TTL};
use crate::counting::CountingStore;

/// In a reentrant scope, nested acquisitions of a held key share its lease (same token,
/// counted), without a store round trip; inner releases keep the lock, the outermost
/// frees it. Outside a scope the same calls do not re-enter.
pub async fn reentrant_scope_nests_and_counts(store: Arc<DynLockStore>) {
    let keys = Keys::new("reentrant-nested");
    let counting = CountingStore::new(Arc::clone(&store));
    let counted: Arc<DynLockStore> = counting.clone();
    let locks = manager(&counted);
    let key = keys.key("a");
    let store_key = keys.store_key("a");
    reentrant_scope(async {
        let outer = locks.lock(&key, LONG_TTL).await.unwrap();
        assert_eq!(outer.hold_count(), 1);
        let calls = counting.total();
        // `lock` would wait forever on a key held elsewhere; here it returns at once.
        let second = tokio::time::timeout(Duration::from_secs(5), locks.lock(&key, LONG_TTL))
            .await
            .expect("a nested `lock` waited on its own scope")
            .unwrap();
        let third = locks.try_lock(&key, LONG_TTL).await.unwrap().expect("a nested `try_lock` failed");
        assert_eq!((outer.hold_count(), second.hold_count(), third.hold_count()), (3, 3, 3));
        assert_eq!(second.token(), outer.token(), "a nested acquisition took a new lease");
        assert_eq!(third.fence(), outer.fence());
        // Another manager over the same store is the same store: still the scope's lock.
        let fourth = manager(&counted).try_lock(&key, LONG_TTL).await.unwrap().expect("same store, same scope");
        assert_eq!(fourth.token(), outer.token());
        drop(fourth);

        assert!(third.release().await.unwrap(), "an inner release reported a lost lease");
        assert!(second.release().await.unwrap());
        assert_eq!(counting.total(), calls, "nested acquisitions or releases went to the store");
        let info = store.inspect(&store_key).await.unwrap().expect("an inner release freed the lock");
        assert_eq!(&info.token, outer.token());
        assert_eq!(outer.hold_count(), 1);
        assert!(outer.release().await.unwrap(), "the outermost release did not free the lock");
    })
    .await;
    assert!(store.inspect(&store_key).await.unwrap().is_none(), "still held after the outermost release");

    // Outside a scope, locks are not reentrant.
    let held = locks.lock(&key, LONG_TTL).await.unwrap();
    assert!(locks.try_lock(&key, LONG_TTL).await.unwrap().is_none(), "reentrant outside a scope");
    assert!(held.release().await.unwrap());
}

/// A task spawned inside a scope does not share it: it is excluded like any other owner,
/// and gets the lock once the scope releases it.
pub async fn reentrant_scope_is_not_shared_with_spawned_tasks(store: Arc<DynLockStore>) {
    let keys = Keys::new("reentrant-siblings");
    let locks = manager(&store);
    let key = keys.key("a");
    reentrant_scope(async {
        let outer = locks.lock(&key, LONG_TTL).await.unwrap();
        let (tried, tried_rx) = tokio::sync::oneshot::channel();
        let sibling = tokio::spawn({
            let (locks, key) = (locks.clone(), key.clone());
            async move {
                assert!(!distlock_api::in_reentrant_scope());
                let first = locks.try_lock(&key, LONG_TTL).await.unwrap();
                assert!(first.is_none(), "a spawned task entered its parent's scope");
                let _ = tried.send(());
                // Waits for the parent's release like any other owner.
                let waiting = LockOptions::new().wait(Duration::from_secs(20));
                let lock = locks.lock_opts(&key, LONG_TTL, &waiting).await.unwrap();
                lock.token().clone()
            }
        });
        // A scope inside the spawned task would be its own; the parent still holds here.
        let nested = locks.try_lock(&key, LONG_TTL).await.unwrap().expect("the scope lost its key");
        drop(nested);
        // The sibling has tried (and failed) while the parent held the lock.
        if tried_rx.await.is_err() {
            panic!("the sibling task failed: {:?}", sibling.await);
        }
        let parent_token = outer.token().clone();
        assert!(outer.release().await.unwrap());
        let sibling_token = sibling.await.unwrap();
        assert_ne!(sibling_token, parent_token, "the sibling shared the parent's lease");
    })
    .await;
}

/// Holders may end in any order: dropping the outer handle first keeps the lease for the
/// inner one; the lock is freed (in the background) when the last holder goes.
pub async fn reentrant_scope_survives_any_drop_order(store: Arc<DynLockStore>) {
    let keys = Keys::new("reentrant-drop-order");
    let locks = manager(&store);
    let key = keys.key("a");
    let store_key = keys.store_key("a");
    reentrant_scope(async {
        let outer = locks.lock(&key, LONG_TTL).await.unwrap();
        let inner = locks.lock(&key, LONG_TTL).await.unwrap();
        let token = outer.token().clone();
        drop(outer);
        locks.flush_releases().await;
        let info = store.inspect(&store_key).await.unwrap().expect("dropping the outer handle freed the inner's lock");
        assert_eq!(info.token, token);
        assert_eq!(inner.hold_count(), 1);
        drop(inner);
        locks.flush_releases().await;
        assert!(store.inspect(&store_key).await.unwrap().is_none(), "the last holder's drop did not free the lock");
        // Once released, the key is taken afresh, with a new lease.
        let again = locks.lock(&key, LONG_TTL).await.unwrap();
        assert_ne!(again.token(), &token);
        assert_eq!(again.hold_count(), 1);
        assert!(again.release().await.unwrap());
    })
    .await;
}

/// A panic in a nested holder ends its hold only; the outer holder keeps the lock. A
/// panic that ends the whole scope frees it.
pub async fn reentrant_scope_and_panics(store: Arc<DynLockStore>) {
    let keys = Keys::new("reentrant-panic");
    let locks = manager(&store);
    let key = keys.key("a");
    let store_key = keys.store_key("a");
    let scope = tokio::spawn({
        let (locks, key, store, store_key) = (locks.clone(), key.clone(), Arc::clone(&store), store_key.clone());
        reentrant_scope(async move {
            let outer = locks.lock(&key, LONG_TTL).await.unwrap();
            let nested = std::panic::AssertUnwindSafe(locks.with_lock(&key, LONG_TTL, || async {
                panic!("nested block failed");
                #[allow(unreachable_code)]
                Ok::<(), LockError>(())
            }));
            let caught = futures_util::FutureExt::catch_unwind(nested).await;
            assert!(caught.is_err());
            assert_eq!(outer.hold_count(), 1, "the panicking holder still counts");
            let info = store.inspect(&store_key).await.unwrap().expect("a nested panic freed the outer lock");
            assert_eq!(&info.token, outer.token());
            let _still_held = outer;
            panic!("the whole scope fails");
        })
    });
    assert!(scope.await.unwrap_err().is_panic());
    locks.flush_releases().await;
    assert!(store.inspect(&store_key).await.unwrap().is_none(), "a panicking scope left its lock behind");
}

/// Nested holders share the outer lease's renewal and its lost signal: a short renewed
/// lease outlives its TTL while only an inner handle remains, and a stolen lease is not
/// re-entered — the next acquisition goes to the store.
pub async fn reentrant_scope_shares_renewal_and_loss(store: Arc<DynLockStore>) {
    let keys = Keys::new("reentrant-renewal");
    let locks = manager(&store);
    let key = keys.key("a");
    let store_key = keys.store_key("a");
    reentrant_scope(async {
        let ttl = Duration::from_secs(1);
        let outer = locks.lock_opts(&key, ttl, &LockOptions::new().auto_renew()).await.unwrap();
        let inner = locks.lock(&key, LONG_TTL).await.unwrap();
        assert!(inner.is_renewing(), "the inner handle does not share the renewal");
        drop(outer);
        // Three TTLs later the lease is still held, renewed for the remaining holder.
        tokio::time::sleep(ttl * 3).await;
        assert!(!inner.is_lost());
        let info = store.inspect(&store_key).await.unwrap().expect("renewal stopped with the outer handle");
        assert_eq!(&info.token, inner.token());

        // Stolen: the loss reaches the shared handle and the scope stops re-entering.
        assert!(store.release(&store_key, inner.token()).await.unwrap());
        let reason = tokio::time::timeout(Duration::from_secs(5), inner.lost()).await.expect("lost did not fire");
        assert_eq!(reason, distlock_api::LossReason::NotHeld);
        let fresh = locks.try_lock(&key, LONG_TTL).await.unwrap().expect("the free key was not taken afresh");
        assert_ne!(fresh.token(), inner.token(), "a lost lease was re-entered");
        assert_eq!(fresh.hold_count(), 1);
        assert!(!inner.release().await.unwrap());
        assert!(fresh.release().await.unwrap());
    })
    .await;
}
