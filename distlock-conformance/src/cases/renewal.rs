use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, LockError, LockOptions, LossReason};
use tokio::time::Instant;

use super::{manager, Keys, LONG_TTL, RETRY};

/// Renewal keeps a 1 s lease held for 3 s; nobody else gets it meanwhile.
pub async fn renewal_keeps_a_short_lease_alive(store: Arc<DynLockStore>) {
    let keys = Keys::new("renew");
    let locks = manager(&store);
    let key = keys.key("a");
    let options = LockOptions::new().auto_renew();
    let held = locks.lock_opts(&key, Duration::from_secs(1), &options).await.unwrap();
    assert!(held.is_renewing());
    let rival = manager(&store);
    let started = Instant::now();
    let err = rival
        .lock_opts(
            &key,
            LONG_TTL,
            &LockOptions::new().wait(Duration::from_secs(3)).retry_interval(Duration::from_millis(25)),
        )
        .await
        .unwrap_err();
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
    let held = locks.lock_opts(&key, Duration::from_secs(2), &LockOptions::new().renew_every(every)).await.unwrap();
    // An administrator force-releases the lock and another owner takes it.
    assert!(store.release(held.store_key(), held.token()).await.unwrap());
    let stolen_at = Instant::now();
    let thief = locks.lock(&key, LONG_TTL).await.unwrap();
    let reason = tokio::time::timeout(every + Duration::from_secs(1), held.lost()).await.expect("lost did not fire");
    assert_eq!(reason, LossReason::NotHeld);
    assert!(stolen_at.elapsed() < every + Duration::from_secs(1));
    assert!(held.is_lost());
    let info = store.inspect(thief.store_key()).await.unwrap().expect("the new holder is intact");
    assert_eq!(&info.token, thief.token(), "renewal touched the new holder's lease");
    assert!(!held.release().await.unwrap(), "a lost lease was released");
    assert!(thief.release().await.unwrap());
}

/// Without renewal, `lost` fires the loss margin before the lease's end — not before,
/// not much later — while the store still holds the lease; by default the margin is a
/// fifth of the TTL.
pub async fn lost_fires_at_the_deadline_without_renewal(store: Arc<DynLockStore>) {
    let keys = Keys::new("deadline-lost");
    let locks = manager(&store);
    let ttl = Duration::from_millis(800);
    for (name, options, margin) in [
        ("default", LockOptions::new(), ttl / 5),
        ("explicit", LockOptions::new().loss_margin(Duration::from_millis(300)), Duration::from_millis(300)),
    ] {
        let started = Instant::now();
        let held = locks.lock_opts(&keys.key(name), ttl, &options).await.unwrap();
        assert!(!held.is_renewing());
        assert!(held.safe_until() <= started + ttl, "{name}: safe until after the TTL");
        let reason = tokio::time::timeout(Duration::from_secs(5), held.lost()).await.expect("lost did not fire");
        let fired = started.elapsed();
        let on_store = store.inspect(held.store_key()).await.unwrap();
        assert_eq!(reason, LossReason::DeadlinePassed);
        let earliest = ttl - margin - ttl / 100 - Duration::from_millis(2);
        assert!(fired >= earliest, "{name}: fired after {fired:?}, before the margin {margin:?} of the {ttl:?} lease");
        assert!(
            fired < ttl - margin + Duration::from_secs(1),
            "{name}: fired after {fired:?}, long after its deadline"
        );
        if fired < ttl - Duration::from_millis(100) {
            assert!(
                on_store.is_some_and(|info| &info.token == held.token()),
                "{name}: the store let the lease go first"
            );
        }
        assert!(held.is_lost());
        assert_eq!(held.time_left(), Duration::ZERO);
    }
}

/// Dropping a handle while it renews frees the lock promptly and renewal stops.
pub async fn dropping_a_renewing_handle_is_safe(store: Arc<DynLockStore>) {
    let keys = Keys::new("drop-renewing");
    let locks = manager(&store);
    let key = keys.key("a");
    let held = locks.lock_opts(&key, Duration::from_millis(600), &LockOptions::new().auto_renew()).await.unwrap();
    let old_token = held.token().clone();
    drop(held);
    let next = locks
        .lock_opts(&key, LONG_TTL, &LockOptions::new().wait(Duration::from_secs(5)).retry_interval(RETRY))
        .await
        .expect("freed after the drop");
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
    let options = LockOptions::new().renew_every(Duration::from_millis(200));
    let (entered_tx, entered) = tokio::sync::oneshot::channel();
    let run = tokio::spawn({
        let (locks, key) = (locks.clone(), key.clone());
        async move {
            locks
                .with_lock_opts(&key, Duration::from_secs(2), &options, || async move {
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
/// [`FaultProxy`](crate::kit::proxy::FaultProxy)) fires `lost` at least the loss margin
/// before the store could free the lease: the holder gets that long to stop. A store
/// whose calls time out on their own fails three renewals in a row before that deadline
/// (`RenewalFailed`); one whose calls hang is cut off at it (`DeadlinePassed`).
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
    // A 10 s lease leaves a drift allowance of 102 ms between the handle's reckoning and
    // the server's expiry: room for a loaded machine's scheduling delays.
    let ttl = Duration::from_secs(10);
    let margin = Duration::from_secs(2);
    let options = LockOptions::new().renew_every(Duration::from_secs(1)).loss_margin(margin);
    let held = locks.lock_opts(&keys.key("a"), ttl, &options).await.unwrap();
    let token = held.token().clone();
    proxy.pause();
    let partitioned_at = Instant::now();
    let reason = tokio::time::timeout(ttl + Duration::from_secs(2), held.lost()).await.expect("lost did not fire");
    let fired_at = Instant::now();
    assert!(matches!(reason, LossReason::DeadlinePassed | LossReason::RenewalFailed), "{reason:?}");
    assert!(fired_at - partitioned_at <= ttl - margin, "lost fired {:?} into the partition", fired_at - partitioned_at);
    // The lease ends on the server no earlier than `asked_at + ttl_left` (the server
    // measured `ttl_left` after `asked_at`); PTTL-style answers round down to 1 ms.
    let asked_at = Instant::now();
    let on_server = direct.inspect(&keys.store_key("a")).await.unwrap();
    let info = on_server.expect("lost fired only after the server had let the lease go");
    assert_eq!(info.token, token, "the lease changed hands during the partition");
    let warning = (asked_at + info.ttl_left).saturating_duration_since(fired_at) + Duration::from_millis(2);
    assert!(
        warning >= margin,
        "lost fired only {warning:?} before the server could free the lease (margin {margin:?})"
    );
    proxy.resume();
    drop(held);
}
