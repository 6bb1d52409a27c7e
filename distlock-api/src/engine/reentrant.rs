//! Reentrant scopes: within one task (or request chain), taking a key the scope already
//! holds shares the held lease instead of deadlocking on it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};

use super::hold::Hold;
use crate::key::StoreKey;
use crate::store::DynLockStore;

tokio::task_local! {
    static SCOPE: Scope;
}

/// The leases a scope holds, by store and key.
#[derive(Default)]
struct Scope {
    held: Mutex<HashMap<(usize, StoreKey), Weak<Hold>>>,
}

/// The size at which a scope's registry is next pruned of ended holds.
const PRUNE_AT: usize = 64;

/// Runs `future` in a reentrant scope: while it runs, a lock taken through any
/// [`LockManager`](crate::LockManager) call on a key this scope already holds succeeds at
/// once, without a round trip to the store, and returns another handle on the same lease.
///
/// - **Counted.** Each such acquisition adds a holder
///   ([`DistributedLock::hold_count`](crate::DistributedLock::hold_count)); the lease is
///   released in the store when the last holder releases or is dropped — with proper
///   nesting, when the outermost one does. Releasing an inner handle only ends its hold.
/// - **One lease.** The holders share the outermost acquisition's token, fence, TTL,
///   renewal and [lost-lease signal](crate::DistributedLock::lost); a nested call's own
///   TTL and options are not applied. A lease that was lost or [leaked](crate::DistributedLock::leak)
///   is not shared: the next acquisition goes to the store like any other.
/// - **This task only.** The scope is a tokio task-local: futures awaited (or joined)
///   inside `future` share it, but a task spawned from it does not, so sibling tasks stay
///   mutually excluded. Outside any scope, locks are not reentrant: a second acquisition
///   of a held key waits or fails, as the [`LockStore`](crate::LockStore) contract says.
/// - **Nested scopes join.** Calling `reentrant_scope` inside a scope runs `future` in
///   the enclosing one.
///
/// `#[distlock::lock(…, reentrant)]` runs the function in a scope, so a locked method
/// that calls another locked method on the same key does not deadlock on itself.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// # use distlock::LockManager;
/// # async fn demo(locks: LockManager) -> Result<(), distlock::LockError> {
/// let ttl = Duration::from_secs(10);
/// distlock::reentrant_scope(async {
///     let outer = locks.lock("account:7", ttl).await?;
///     // Would wait forever outside a scope; here it shares `outer`'s lease.
///     let inner = locks.lock("account:7", ttl).await?;
///     assert_eq!(inner.hold_count(), 2);
///     inner.release().await?; // no round trip: `outer` still holds the lock
///     outer.release().await?; // releases it in the store
///     Ok(())
/// })
/// .await
/// # }
/// ```
pub async fn reentrant_scope<F: Future>(future: F) -> F::Output {
    if in_reentrant_scope() {
        future.await
    } else {
        SCOPE.scope(Scope::default(), future).await
    }
}

/// Whether the calling code runs inside a [`reentrant_scope`].
pub fn in_reentrant_scope() -> bool {
    SCOPE.try_with(|_| ()).is_ok()
}

/// The identity of a store, for the scope's registry.
pub(crate) fn store_id(store: &Arc<DynLockStore>) -> usize {
    Arc::as_ptr(store).cast::<()>() as usize
}

/// The scope's live hold of `key` on the store, when there is one to join.
pub(crate) fn joinable(store: usize, key: &StoreKey) -> Option<Arc<Hold>> {
    SCOPE
        .try_with(|scope| {
            let held = scope.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            held.get(&(store, key.clone())).and_then(Weak::upgrade).filter(|hold| hold.is_joinable())
        })
        .ok()
        .flatten()
}

/// Records a new hold of `key` in the scope, if there is one.
pub(crate) fn register(store: usize, key: &StoreKey, hold: &Arc<Hold>) {
    let _ = SCOPE.try_with(|scope| {
        let mut held = scope.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if held.len() >= PRUNE_AT && held.len().is_power_of_two() {
            held.retain(|_, hold| hold.strong_count() > 0);
        }
        held.insert((store, key.clone()), Arc::downgrade(hold));
    });
}
