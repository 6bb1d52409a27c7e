//! Every fault on the in-memory store in paused time: what an application's own tests do.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{
    InvalidOptions, KeyPattern, LockError, LockKey, LockManager, LockOptions, LockStore, LossReason, Renewal, StoreKey,
    Token, Ttl,
};
use distlock_memory::MemoryLockStore;
use distlock_testing::{Faults, FaultyStore, InjectedFault, Op};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(30);
/// Generous: paused time only advances when every task waits, so no real bound is at risk.
const PATIENCE: Duration = Duration::from_secs(600);

/// A manager over a faulty memory store, the faults handle, and the memory store itself
/// (a clone sharing its state) to look behind the faults' back.
fn setup() -> (LockManager, Faults, MemoryLockStore) {
    let memory = MemoryLockStore::new();
    let store = FaultyStore::new(memory.clone());
    let faults = store.faults();
    (LockManager::new(Arc::new(store)), faults, memory)
}

fn store_key(key: &str) -> StoreKey {
    LockKey::new(key).unwrap().to_store_key()
}

/// Asserts that `err` is an injected store failure of `op` on `key`.
#[track_caller]
fn assert_injected(err: &LockError, op: Op, key: Option<&str>, reached_store: bool) {
    match err {
        LockError::Store { backend, operation, key: got, .. } => {
            assert_eq!(*backend, "memory", "{err}");
            assert_eq!(*operation, op.as_str(), "{err}");
            assert_eq!(got.as_deref(), key, "{err}");
        }
        other => panic!("not a store error: {other}"),
    }
    let fault = InjectedFault::of(err).expect("an injected fault");
    assert_eq!(fault.op(), op);
    assert_eq!(fault.reached_store(), reached_store);
    assert!(err.report().to_string().contains("injected fault"), "{}", err.report());
}

#[tokio::test(start_paused = true)]
async fn without_faults_every_call_is_forwarded() {
    let (locks, faults, memory) = setup();
    let lock = locks.try_lock("plain", TTL).await.unwrap().expect("free");
    assert!(memory.inspect(lock.store_key()).await.unwrap().is_some());
    assert!(lock.extend(TTL).await.unwrap());
    assert!(locks.store().inspect(lock.store_key()).await.unwrap().is_some());
    let page = locks.store().list(&KeyPattern::all(), None, 100).await.unwrap();
    assert_eq!(page.locks.len(), 1);
    assert!(lock.release().await.unwrap());
    assert_eq!(locks.store().backend(), "memory");
    assert_eq!(locks.store().capabilities(), memory.capabilities());
    for (op, n) in [(Op::Acquire, 1), (Op::Extend, 1), (Op::Inspect, 1), (Op::List, 1), (Op::Release, 1)] {
        assert_eq!(faults.calls(op), n, "{op}");
    }
    assert_eq!(faults.calls(Op::WaitForRelease), 0);
}

#[tokio::test(start_paused = true)]
async fn fail_next_acquire_twice_then_the_third_attempt_succeeds() {
    let (locks, faults, memory) = setup();
    faults.fail_next(Op::Acquire, 2);
    for _ in 0..2 {
        let err = locks.try_lock("job", TTL).await.unwrap_err();
        assert_injected(&err, Op::Acquire, Some("job"), false);
    }
    let lock = locks.try_lock("job", TTL).await.unwrap().expect("the third attempt acquires");
    assert_eq!(faults.calls(Op::Acquire), 3);
    // The manager released each failed attempt's possible lease in the background; none
    // existed, and the held lock is untouched.
    locks.flush_releases().await;
    assert_eq!(faults.calls(Op::Release), 2);
    assert_eq!(memory.inspect(lock.store_key()).await.unwrap().expect("held").token, *lock.token());
    assert!(lock.release().await.unwrap());
}

/// `fail_all` fails every operation, with the operation's own name and key, until `heal`.
#[tokio::test(start_paused = true)]
async fn fail_all_fails_each_operation_until_healed() {
    let (locks, faults, _) = setup();
    let store = Arc::clone(locks.store());
    let key = store_key("outage");
    let token = Token::generate();
    let ttl = Ttl::new(TTL).unwrap();
    for &op in Op::ALL {
        faults.fail_all(op);
    }
    for round in 0..3 {
        let errors = [
            (Op::Acquire, store.try_acquire(&key, &token, ttl).await.unwrap_err()),
            (Op::Release, store.release(&key, &token).await.unwrap_err()),
            (Op::Extend, store.extend(&key, &token, ttl).await.unwrap_err()),
            (Op::Inspect, store.inspect(&key).await.unwrap_err()),
            (Op::WaitForRelease, store.wait_for_release(&key, TTL).await.unwrap_err()),
            (Op::List, store.list(&KeyPattern::all(), None, 10).await.unwrap_err()),
        ];
        for (op, err) in &errors {
            let key = (*op != Op::List).then_some("outage");
            assert_injected(err, *op, key, false);
            assert_eq!(faults.calls(*op), round + 1);
        }
    }
    faults.heal();
    assert!(store.try_acquire(&key, &token, ttl).await.unwrap().is_acquired());
    assert!(store.extend(&key, &token, ttl).await.unwrap());
    assert!(store.inspect(&key).await.unwrap().is_some());
    assert_eq!(store.list(&KeyPattern::all(), None, 10).await.unwrap().locks.len(), 1);
    assert!(store.release(&key, &token).await.unwrap());
    store.wait_for_release(&key, TTL).await.unwrap();
}

/// A lost reply: the store acquired, the caller saw an error, and the manager's
/// background clean-up freed the orphaned lease.
#[tokio::test(start_paused = true)]
async fn a_lost_acquire_reply_is_an_error_and_its_lease_is_cleaned_up() {
    let (locks, faults, memory) = setup();
    faults.lose_next_replies(Op::Acquire, 1);
    let err = locks.try_lock("orphan", TTL).await.unwrap_err();
    assert_injected(&err, Op::Acquire, Some("orphan"), true);
    locks.flush_releases().await;
    assert!(memory.inspect(&store_key("orphan")).await.unwrap().is_none(), "the orphaned lease was not released");
    assert!(locks.try_lock("orphan", TTL).await.unwrap().is_some());
}

#[tokio::test(start_paused = true)]
async fn a_lost_release_reply_freed_the_lock_anyway() {
    let (locks, faults, memory) = setup();
    let lock = locks.try_lock("freed", TTL).await.unwrap().unwrap();
    let key = lock.store_key().clone();
    faults.lose_next_replies(Op::Release, 1);
    let err = lock.release().await.unwrap_err();
    assert_injected(&err, Op::Release, Some("freed"), true);
    assert!(memory.inspect(&key).await.unwrap().is_none());
    // The handle's background retry finds nothing left to release.
    locks.flush_releases().await;
    assert_eq!(faults.calls(Op::Release), 2);
}

/// `release()` fails once; the dropped handle's background release frees the lock.
#[tokio::test(start_paused = true)]
async fn background_release_after_a_failed_release_frees_the_lock() {
    let (locks, faults, memory) = setup();
    let lock = locks.try_lock("retry", TTL).await.unwrap().unwrap();
    let key = lock.store_key().clone();
    faults.fail_next(Op::Release, 1);
    let err = lock.release().await.unwrap_err();
    assert_injected(&err, Op::Release, Some("retry"), false);
    locks.flush_releases().await;
    assert_eq!(faults.calls(Op::Release), 2);
    assert!(memory.inspect(&key).await.unwrap().is_none(), "the lock is still held");
    assert!(locks.try_lock("retry", TTL).await.unwrap().is_some());
}

#[tokio::test(start_paused = true)]
async fn latency_costs_tokio_time_not_real_time() {
    let (locks, faults, _) = setup();
    faults.delay(Op::Acquire, Duration::from_secs(5));
    let real = std::time::Instant::now();
    let started = Instant::now();
    let lock = locks.try_lock("slow", TTL).await.unwrap().unwrap();
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert!(real.elapsed() < Duration::from_secs(5), "paused time slept for real");

    // Failing calls are delayed too.
    faults.fail_next(Op::Acquire, 1);
    let started = Instant::now();
    assert!(locks.try_lock("slow2", TTL).await.is_err());
    assert_eq!(started.elapsed(), Duration::from_secs(5));

    // Duration::ZERO removes the delay; Duration::MAX hangs the call until the caller gives up.
    faults.delay(Op::Acquire, Duration::ZERO);
    faults.delay(Op::Inspect, Duration::MAX);
    let started = Instant::now();
    assert!(locks.try_lock("fast", TTL).await.unwrap().is_some());
    assert_eq!(started.elapsed(), Duration::ZERO);
    let hung = tokio::time::timeout(Duration::from_secs(60), locks.store().inspect(lock.store_key())).await;
    assert!(hung.is_err(), "a Duration::MAX delay returned");
    assert_eq!(faults.calls(Op::Inspect), 0, "a call dropped before returning was counted");
}

/// A renewal slower than the lease: the renewal deadline gives up on it and `lost()`
/// fires with `DeadlinePassed`, the loss margin before the store could free the lease.
#[tokio::test(start_paused = true)]
async fn slow_renewals_lose_the_lease_at_the_deadline() {
    let (locks, faults, _) = setup();
    let options = LockOptions::new().auto_renew();
    let lock = locks.lock_opts("slow-renew", TTL, &options).await.unwrap();
    faults.delay(Op::Extend, Duration::MAX);
    let reason = tokio::time::timeout(PATIENCE, lock.lost()).await.expect("lost did not fire");
    assert_eq!(reason, LossReason::DeadlinePassed);
    assert!(Instant::now() < lock.safe_until(), "signalled after the lease's end");
}

/// A renewing lock whose lease is stolen finds out at its next renewal: `NotHeld`.
#[tokio::test(start_paused = true)]
async fn a_stolen_lease_fires_lost_with_not_held() {
    let (locks, faults, memory) = setup();
    let every = Duration::from_secs(10);
    let lock = locks.lock_opts("stolen", TTL, &LockOptions::new().renew_every(every)).await.unwrap();
    faults.wait_for_calls(Op::Extend, 1).await; // one renewal went through
    let stolen_at = Instant::now();
    let thief = faults.steal("stolen").await.unwrap().expect("the key was held");
    assert_ne!(&thief.token, lock.token());
    assert!(thief.fence > lock.fence(), "the new owner's fence is not greater");
    assert!(thief.ttl > Duration::ZERO && thief.ttl <= TTL, "{:?}", thief.ttl);

    let reason = tokio::time::timeout(PATIENCE, lock.lost()).await.expect("lost did not fire");
    assert_eq!(reason, LossReason::NotHeld);
    assert!(stolen_at.elapsed() <= every, "noticed {:?} after the theft", stolen_at.elapsed());
    assert!(lock.is_lost());
    let holder = memory.inspect(lock.store_key()).await.unwrap().expect("the new owner holds the key");
    assert_eq!(holder.token, thief.token, "renewal touched the new owner's lease");
    assert!(!lock.release().await.unwrap(), "a stolen lease was released");
    assert!(locks.try_lock("stolen", TTL).await.unwrap().is_none(), "the new owner lost the key");
    assert!(memory.release(&store_key("stolen"), &thief.token).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn an_expired_lease_is_gone_and_the_holder_finds_out() {
    let (locks, faults, memory) = setup();
    let lock = locks.try_lock("expired", TTL).await.unwrap().unwrap();
    assert!(faults.expire("expired").await.unwrap());
    assert!(memory.inspect(lock.store_key()).await.unwrap().is_none());
    assert!(!faults.expire("expired").await.unwrap(), "a free key had a lease to end");
    assert!(faults.steal("expired").await.unwrap().is_none(), "a free key was stolen");
    assert!(!lock.extend(TTL).await.unwrap());
    assert_eq!(lock.lost().await, LossReason::NotHeld);
    let other = locks.try_lock("expired", TTL).await.unwrap().expect("the key is free");
    assert!(!lock.release().await.unwrap());
    assert!(other.release().await.unwrap());
}

/// `steal` and `expire` check keys before any I/O and are neither counted nor faulted.
#[tokio::test(start_paused = true)]
async fn steal_and_expire_go_around_the_faults() {
    let (locks, faults, _) = setup();
    assert!(matches!(faults.expire("").await, Err(LockError::InvalidKey { .. })));
    assert!(matches!(faults.steal("bad\nkey").await, Err(LockError::InvalidKey { .. })));
    let lock = locks.try_lock("around", TTL).await.unwrap().unwrap();
    for &op in Op::ALL {
        faults.fail_all(op);
    }
    let counts = || Op::ALL.iter().map(|&op| faults.calls(op)).collect::<Vec<_>>();
    let before = counts();
    assert!(faults.steal("around").await.unwrap().is_some());
    assert!(faults.expire("around").await.unwrap());
    assert_eq!(counts(), before);
    faults.heal();
    assert!(!lock.release().await.unwrap());
}

/// Without release notifications a waiter polls: it gets the lock at its next retry
/// after the release instead of at the release itself.
#[tokio::test(start_paused = true)]
async fn dropped_release_notifications_make_waiters_poll() {
    let retry = Duration::from_millis(500);
    for dropped in [false, true] {
        let (locks, faults, memory) = setup();
        faults.drop_release_notifications(dropped);
        assert_eq!(locks.store().capabilities().release_notifications, !dropped);
        assert!(memory.capabilities().release_notifications);
        let held = locks.lock("hand-off", TTL).await.unwrap();
        let waiter = tokio::spawn({
            let locks = locks.clone();
            async move {
                let options = LockOptions::new().wait(PATIENCE).retry_interval(retry);
                let lock = locks.lock_opts("hand-off", TTL, &options).await;
                (Instant::now(), lock)
            }
        });
        // The waiter tried once and is parked between two attempts.
        faults.wait_for_calls(Op::Acquire, 2).await;
        tokio::time::sleep(retry / 5).await;
        let released_at = Instant::now();
        assert!(held.release().await.unwrap());
        let (acquired_at, lock) = waiter.await.unwrap();
        assert!(lock.is_ok(), "dropped = {dropped}: {lock:?}");
        let hand_off = acquired_at - released_at;
        if dropped {
            assert!(hand_off > Duration::ZERO && hand_off <= retry, "polled after {hand_off:?}");
            assert!(faults.calls(Op::WaitForRelease) >= 1);
        } else {
            assert_eq!(hand_off, Duration::ZERO, "not woken by the release");
        }
    }
}

/// A failing wait for a release: the manager sleeps instead and still gets the lock.
#[tokio::test(start_paused = true)]
async fn a_failing_wait_for_release_becomes_a_sleep() {
    let (locks, faults, _) = setup();
    faults.fail_all(Op::WaitForRelease);
    let _crashed = locks.lock("crashed", Duration::from_secs(2)).await.unwrap().leak();
    let started = Instant::now();
    let options = LockOptions::new().wait(PATIENCE).retry_interval(Duration::from_millis(100));
    let lock = locks.lock_opts("crashed", TTL, &options).await.unwrap();
    assert!(started.elapsed() >= Duration::from_secs(2) - Duration::from_millis(100));
    assert!(faults.calls(Op::WaitForRelease) >= 1);
    drop(lock);
}

/// Waits until `n` calls of `op` have returned, and fails the test if they never come
/// (instead of hanging).
async fn calls_reach(faults: &Faults, op: Op, n: usize) {
    if tokio::time::timeout(PATIENCE, faults.wait_for_calls(op, n)).await.is_err() {
        panic!("{op}: {} calls, never {n}", faults.calls(op));
    }
}

/// The moment a renewing lock's loss is signalled when no renewal since its acquisition
/// at `acquired` was confirmed: the loss margin (a fifth) before the lease's end, less
/// the drift allowance (1 % + 2 ms).
fn loss_deadline(acquired: Instant, ttl: Duration) -> Instant {
    acquired + ttl - ttl / 100 - Duration::from_millis(2) - ttl / 5
}

/// A store outage during renewal: the first renewal fails, and the two retries are
/// spread over the time left before the loss deadline; the third failure in a row stops
/// renewal and fires `lost()` with `RenewalFailed`, before that deadline. No renewal is
/// sent after it.
#[tokio::test(start_paused = true)]
async fn three_failed_renewals_in_a_row_lose_the_lease() {
    let (locks, faults, memory) = setup();
    let acquired = Instant::now();
    let lock = locks.lock_opts("outage", TTL, &LockOptions::new().auto_renew()).await.unwrap();
    faults.fail_all(Op::Extend);
    // Every 10 s; after a failure, the attempts left spread over what is left of the
    // 23.698 s before the loss deadline: 13.698 s / 3, then 9.132 s / 2.
    let deadline = loss_deadline(acquired, TTL);
    let retry = Duration::from_millis(4_566);
    for (n, at) in
        [(1, Duration::from_secs(10)), (2, Duration::from_secs(10) + retry), (3, Duration::from_secs(10) + retry * 2)]
    {
        calls_reach(&faults, Op::Extend, n).await;
        assert_eq!(acquired.elapsed(), at, "renewal {n}");
        assert_eq!(lock.is_lost(), n == 3, "after {n} failed renewals");
    }
    let reason = tokio::time::timeout(PATIENCE, lock.lost()).await.expect("lost did not fire");
    assert_eq!(reason, LossReason::RenewalFailed);
    assert_eq!(acquired.elapsed(), Duration::from_secs(10) + retry * 2, "lost() came later than the third failure");
    assert!(Instant::now() < deadline, "signalled after the loss deadline");
    assert_eq!(faults.calls(Op::Extend), 3);

    // Renewal stopped: nothing more is sent, however long the handle lives.
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(faults.calls(Op::Extend), 3, "renewed after the loss");
    assert!(memory.inspect(lock.store_key()).await.unwrap().is_none(), "the lease ran out on the store");
    assert!(!lock.release().await.unwrap());
}

/// A confirmed renewal resets the count: failures that never reach three in a row keep
/// the lease, however many there are in all.
#[tokio::test(start_paused = true)]
async fn a_confirmed_renewal_resets_the_failure_count() {
    let (locks, faults, memory) = setup();
    let lock = locks.lock_opts("flaky", TTL, &LockOptions::new().auto_renew()).await.unwrap();
    let mut calls = 0;
    for round in 1..=3 {
        faults.fail_next(Op::Extend, 2);
        calls += 3; // two failures, then a renewal that goes through
        calls_reach(&faults, Op::Extend, calls).await;
        assert!(!lock.is_lost(), "round {round}: {} failures in all lost the lease", round * 2);
        let info = memory.inspect(lock.store_key()).await.unwrap().expect("held");
        assert_eq!(info.ttl_left, TTL, "round {round}: the last renewal did not go through");
    }
    // Six failures so far, never three in a row. Three in a row now end it.
    faults.fail_all(Op::Extend);
    let reason = tokio::time::timeout(PATIENCE, lock.lost()).await.expect("lost did not fire");
    assert_eq!(reason, LossReason::RenewalFailed);
    assert_eq!(faults.calls(Op::Extend), calls + 3);
}

/// Failures whose answers come late never push the loss past the deadline at which it
/// is signalled without any renewal: the second attempt is cut off there, after one
/// failure, with `DeadlinePassed`.
#[tokio::test(start_paused = true)]
async fn slow_failures_lose_the_lease_at_the_deadline() {
    let (locks, faults, _) = setup();
    let acquired = Instant::now();
    let lock = locks.lock_opts("slow-outage", TTL, &LockOptions::new().auto_renew()).await.unwrap();
    faults.fail_all(Op::Extend);
    faults.delay(Op::Extend, Duration::from_secs(6));
    let reason = tokio::time::timeout(PATIENCE, lock.lost()).await.expect("lost did not fire");
    assert_eq!(reason, LossReason::DeadlinePassed);
    assert_eq!(Instant::now(), loss_deadline(acquired, TTL));
    assert_eq!(faults.calls(Op::Extend), 1, "the attempt cut off at the deadline was counted");
}

/// Automatic renewal runs every `max(1 s, min(10 s, TTL / 3))`; `renew_at_half_ttl()`
/// every half of the TTL.
#[tokio::test(start_paused = true)]
async fn renewal_intervals_follow_the_ttl() {
    let (s, ms) = (Duration::from_secs, Duration::from_millis);
    let auto = LockOptions::new().auto_renew();
    let half = LockOptions::new().renew_at_half_ttl();
    for (options, ttl, every) in [
        (auto, s(3), s(1)),
        (auto, s(9), s(3)),
        (auto, s(30), s(10)),
        (auto, s(60), s(10)),
        (auto, s(3600), s(10)),
        // Below 2.5 s the floor would leave no second renewal before the loss margin.
        (auto, s(2), ms(800)),
        (half, s(30), s(15)),
        (half, s(4), s(2)),
    ] {
        let (locks, faults, _) = setup();
        let started = Instant::now();
        let lock = locks.lock_opts("interval", ttl, &options).await.unwrap();
        for n in 1..=3 {
            calls_reach(&faults, Op::Extend, n).await;
            assert_eq!(started.elapsed(), every * n as u32, "{:?}, TTL {ttl:?}: renewal {n}", options.renewal);
        }
        assert!(!lock.is_lost());
        assert!(lock.release().await.unwrap());
    }
}

/// A renewal interval below `Renewal::MIN_INTERVAL` (10 ms) is refused before any I/O.
#[tokio::test(start_paused = true)]
async fn a_renewal_interval_below_the_floor_is_refused_before_any_io() {
    let (locks, faults, _) = setup();
    for every in [Duration::from_nanos(1), Duration::from_millis(9)] {
        let err = locks.lock_opts("floor", TTL, &LockOptions::new().renew_every(every)).await.unwrap_err();
        assert!(
            matches!(
                err,
                LockError::InvalidOptions {
                    reason: InvalidOptions::RenewIntervalTooShort { interval, min }
                } if interval == every && min == Renewal::MIN_INTERVAL
            ),
            "{err}"
        );
    }
    let lock = locks.lock_opts("floor", TTL, &LockOptions::new().renew_every(Renewal::MIN_INTERVAL)).await.unwrap();
    assert_eq!(faults.calls(Op::Acquire), 1, "a refused call reached the store");
    calls_reach(&faults, Op::Extend, 100).await;
    assert!(lock.release().await.unwrap());
}

/// `wait_for_calls` lets a test follow background work without sleeping.
#[tokio::test(start_paused = true)]
async fn wait_for_calls_follows_renewals() {
    let (locks, faults, _) = setup();
    let every = Duration::from_secs(10);
    let started = Instant::now();
    let lock = locks.lock_opts("renewed", TTL, &LockOptions::new().renew_every(every)).await.unwrap();
    faults.wait_for_calls(Op::Extend, 3).await;
    assert_eq!(started.elapsed(), every * 3);
    assert_eq!(faults.calls(Op::Extend), 3);
    assert!(lock.release().await.unwrap());
    // Already reached: returns at once.
    faults.wait_for_calls(Op::Extend, 1).await;
}

#[test]
fn store_and_handle_are_send_sync_and_usable_as_dyn() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<FaultyStore<MemoryLockStore>>();
    assert_send_sync::<Faults>();
    let erased: Arc<dyn LockStore> = Arc::new(MemoryLockStore::new());
    let store: Arc<dyn LockStore> = Arc::new(FaultyStore::new(erased));
    assert_eq!(store.backend(), "memory");
    let faults = FaultyStore::new(MemoryLockStore::new()).faults();
    faults.fail_next(Op::Extend, 2);
    let debug = format!("{faults:?}");
    assert!(debug.contains("extend: OpFaults") && debug.contains("\"acquire\": 0"), "{debug}");
}
