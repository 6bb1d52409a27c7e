use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, LockError, LockOptions, LossReason};
use tokio::time::Instant;

use super::{manager, Keys, LONG_TTL, RETRY};

/// Renewal keeps a 300 ms lease held for 3 s; nobody else gets it meanwhile.
pub async fn renewal_keeps_a_short_lease_alive(store: Arc<DynLockStore>) {
    let keys = Keys::new("renew");
    let locks = manager(&store);
    let key = keys.key("a");
    let options = LockOptions::new(Duration::from_millis(300)).auto_renew();
    let held = locks.lock_with(&key, &options).await.unwrap();
    assert!(held.is_renewing());
    let rival = manager(&store);
    let started = Instant::now();
    let err = rival.lock(&key, LONG_TTL, Duration::from_secs(3), Duration::from_millis(25)).await.unwrap_err();
    assert!(err.is_not_acquired(), "{err}");
    assert!(started.elapsed() >= Duration::from_secs(3));
    assert!(!held.is_lost(), "lost while renewing");
    assert!(held.time_left() > Duration::ZERO);
    assert!(held.release().await.unwrap(), "the renewed lease was not held at release");
}

/// A lease taken away from a renewing holder fires `lost` within the renewal interval
/// plus a second, and renewal stops (it never re-acquires).
pub async fn stolen_lease_fires_lost(store: Arc<DynLockStore>) {
    let keys = Keys::new("stolen");
    let locks = manager(&store);
    let key = keys.key("a");
    let every = Duration::from_millis(200);
    let held = locks.lock_with(&key, &LockOptions::new(Duration::from_secs(2)).renew_every(every)).await.unwrap();
    // An administrator force-releases the lock and another owner takes it.
    assert!(store.release(held.store_key(), held.token()).await.unwrap());
    let stolen_at = Instant::now();
    let thief = locks.lock(&key, LONG_TTL, Duration::ZERO, RETRY).await.unwrap();
    let reason = tokio::time::timeout(every + Duration::from_secs(1), held.lost()).await.expect("lost did not fire");
    assert_eq!(reason, LossReason::NotHeld);
    assert!(stolen_at.elapsed() < every + Duration::from_secs(1));
    assert!(held.is_lost());
    let info = store.inspect(thief.store_key()).await.unwrap().expect("the new holder is intact");
    assert_eq!(&info.token, thief.token(), "renewal touched the new holder's lease");
    assert!(!held.release().await.unwrap(), "a lost lease was released");
    assert!(thief.release().await.unwrap());
}

/// Without renewal, `lost` fires at the lease's deadline, not before and not much later.
pub async fn lost_fires_at_the_deadline_without_renewal(store: Arc<DynLockStore>) {
    let keys = Keys::new("deadline-lost");
    let locks = manager(&store);
    let ttl = Duration::from_millis(400);
    let started = Instant::now();
    let held = locks.lock(&keys.key("a"), ttl, Duration::ZERO, RETRY).await.unwrap();
    assert!(!held.is_renewing());
    let reason = tokio::time::timeout(Duration::from_secs(5), held.lost()).await.expect("lost did not fire");
    let fired = started.elapsed();
    assert_eq!(reason, LossReason::DeadlinePassed);
    assert!(fired >= ttl - Duration::from_millis(50), "fired after {fired:?}, before the {ttl:?} lease ended");
    assert!(fired < ttl + Duration::from_secs(1), "fired after {fired:?}, long after the {ttl:?} lease ended");
    assert!(held.is_lost());
}

/// Dropping a handle while it renews frees the lock promptly and renewal stops.
pub async fn dropping_a_renewing_handle_is_safe(store: Arc<DynLockStore>) {
    let keys = Keys::new("drop-renewing");
    let locks = manager(&store);
    let key = keys.key("a");
    let held = locks.lock_with(&key, &LockOptions::new(Duration::from_millis(600)).auto_renew()).await.unwrap();
    let old_token = held.token().clone();
    drop(held);
    let next = locks.lock(&key, LONG_TTL, Duration::from_secs(5), RETRY).await.expect("freed after the drop");
    // Give a stray renewal every chance to run (several renewal intervals).
    tokio::time::sleep(Duration::from_millis(700)).await;
    let info = store.inspect(next.store_key()).await.unwrap().expect("held by the new owner");
    assert_eq!(&info.token, next.token());
    assert!(!store.extend(next.store_key(), &old_token, distlock_api::Ttl::new(LONG_TTL).unwrap()).await.unwrap());
    assert!(next.release().await.unwrap());
}

/// `with_lock` with renewal stops the block and returns `LeaseLost` when the lease is
/// lost, instead of letting the block run on unprotected.
pub async fn with_lock_stops_the_block_when_the_lease_is_lost(store: Arc<DynLockStore>) {
    let keys = Keys::new("with-lost");
    let locks = manager(&store);
    let key = keys.key("a");
    let options = LockOptions::new(Duration::from_secs(2)).renew_every(Duration::from_millis(200));
    let (entered_tx, entered) = tokio::sync::oneshot::channel();
    let run = tokio::spawn({
        let (locks, key) = (locks.clone(), key.clone());
        async move {
            locks
                .with_lock_options(&key, &options, || async move {
                    let _ = entered_tx.send(());
                    std::future::pending::<()>().await;
                    Ok::<_, LockError>(())
                })
                .await
        }
    });
    entered.await.unwrap();
    let holder = store.inspect(&keys.store_key("a")).await.unwrap().expect("held by the block");
    assert!(store.release(&keys.store_key("a"), &holder.token).await.unwrap());
    let outcome = tokio::time::timeout(Duration::from_secs(3), run).await.expect("the block was not stopped").unwrap();
    assert!(
        matches!(&outcome, Err(LockError::LeaseLost { key: k, reason: LossReason::NotHeld }) if *k == key),
        "{outcome:?}"
    );
}

/// A network partition between a renewing holder and its store (through the kit's
/// [`FaultProxy`](crate::kit::proxy::FaultProxy)) fires `lost` before the lease expires on
/// the server and no later than one TTL after the partition began.
///
/// `via_proxy` reaches the server through `proxy`; `direct` reaches the same server
/// without it. Not applicable to in-process stores.
pub async fn partition_fires_lost_before_the_ttl(
    via_proxy: Arc<DynLockStore>,
    proxy: &crate::kit::proxy::FaultProxy,
    direct: Arc<DynLockStore>,
) {
    let keys = Keys::new("partition");
    let locks = manager(&via_proxy);
    // A 10 s lease leaves a drift allowance of 102 ms between the handle's deadline and the
    // server's expiry: room for a loaded machine's scheduling delays.
    let ttl = Duration::from_secs(10);
    let options = LockOptions::new(ttl).renew_every(Duration::from_secs(1));
    let held = locks.lock_with(&keys.key("a"), &options).await.unwrap();
    let token = held.token().clone();
    proxy.pause();
    let partitioned_at = Instant::now();
    let reason = tokio::time::timeout(ttl + Duration::from_secs(2), held.lost()).await.expect("lost did not fire");
    let fired_after = partitioned_at.elapsed();
    let on_server = direct.inspect(&keys.store_key("a")).await.unwrap();
    assert_eq!(reason, LossReason::DeadlinePassed);
    assert!(fired_after <= ttl, "lost fired {fired_after:?} into the partition, later than the {ttl:?} TTL");
    assert!(
        on_server.as_ref().is_some_and(|info| info.token == token),
        "lost fired only after the server had let the lease go ({fired_after:?} into the partition)"
    );
    proxy.resume();
    drop(held);
}
