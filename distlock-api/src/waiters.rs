//! Waking waiters on release: the part of [`LockStore::wait_for_release`] that every
//! store with release notifications shares.
//!
//! A store that learns about releases from its server (Redis pub/sub, PostgreSQL
//! `LISTEN`, …) runs one *listener* (a background task on its own connection) and one
//! [`WaiterRegistry`]. The listener only does three things:
//!
//! - calls [`WaiterRegistry::wake`] with the key named by each release notification;
//! - calls [`WaiterRegistry::set_listening`]`(true)` once it receives notifications, and
//!   `set_listening(false)` as soon as it may miss some (connection lost, task ending);
//! - reconnects in the background.
//!
//! The store's `wait_for_release` then calls [`WaiterRegistry::wait`] with a check of
//! the key on the server, and the registry keeps the promises of the contract:
//!
//! - **No lost wake-up.** The waiter registers for its key *before* the check runs, and
//!   the check runs only while the listener is listening: a release before the check is
//!   seen by the check, a release after it is delivered to the registered waiter. If the
//!   listener goes down (or comes back) meanwhile, a notification may have been missed,
//!   so the wait ends at once and the caller looks again.
//! - **Polling while the listener is down.** Until the listener is listening, a wait is a
//!   plain sleep until its deadline (cut short when the listener comes up): the caller
//!   polls, never busy-loops.
//! - **Bounded memory.** The map holds a key exactly as long as someone waits on it; a
//!   dropped (or cancelled) wait removes its registration.
//! - **Any `max`.** Deadlines saturate ([`deadline_after`]): `Duration::MAX` means
//!   "no deadline", never an overflow.
//!
//! ```
//! use std::time::Duration;
//! use distlock::waiters::{KeyState, WaiterRegistry, Woken};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), distlock::LockError> {
//! let waiters = WaiterRegistry::new();
//! // What the listener does once it is subscribed:
//! waiters.set_listening(true);
//! // What `wait_for_release` does (the check asks the server whether the key is held):
//! let woken = waiters.wait("lock:job", Duration::MAX, || async { Ok(KeyState::Free) }).await?;
//! assert_eq!(woken, Woken::AlreadyFree);
//! # Ok(()) }
//! ```
//!
//! [`LockStore::wait_for_release`]: crate::LockStore::wait_for_release

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Poll;
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::error::LockError;

/// Far enough ahead to never come in a process's lifetime (tokio's own choice for
/// `sleep(Duration::MAX)`).
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// The instant `max` from now, saturated: a `max` too large to add (such as
/// [`Duration::MAX`]) gives an instant decades ahead instead of panicking.
pub fn deadline_after(max: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(max).or_else(|| now.checked_add(FAR_FUTURE)).unwrap_or(now)
}

/// The waiters of one store, per key, and the state of the store's listener.
///
/// Cloning is cheap; clones share the registry (the store keeps one, its listener task
/// another).
#[derive(Clone)]
pub struct WaiterRegistry {
    inner: Arc<Inner>,
}

struct Inner {
    keys: Mutex<HashMap<String, Slot>>,
    /// `true` while the listener receives notifications; every change wakes the waiters.
    listening: watch::Sender<bool>,
}

struct Slot {
    notify: Arc<Notify>,
    /// How many times the key was woken while someone waited on it.
    wakes: Arc<AtomicU64>,
    waiters: usize,
}

impl Inner {
    /// Every update is a single map operation, so a poisoned map is still consistent.
    fn keys(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for WaiterRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for WaiterRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaiterRegistry")
            .field("listening", &self.is_listening())
            .field("waited_keys", &self.waited_keys())
            .finish()
    }
}

/// What a store's check found about a key, after the waiter registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    /// The key is free (released, expired or never taken): the wait ends at once.
    Free,
    /// The key is held. `expires_in`, when the store knows it, is when the lease runs out
    /// on its own (a store may add a small margin for clock granularity): expiry is not
    /// notified, so the wait ends then at the latest.
    Held {
        /// Time left on the lease, if known.
        expires_in: Option<Duration>,
    },
}

/// Why [`WaiterRegistry::wait`] returned (for tracing and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Woken {
    /// A release of the key was notified.
    Notified,
    /// The check found the key free.
    AlreadyFree,
    /// The lease reported by the check ran out.
    LeaseEnded,
    /// The listener went down or came back: a notification may have been missed.
    ListenerChanged,
    /// The deadline passed (also when the listener never came up: a plain sleep).
    TimedOut,
}

impl WaiterRegistry {
    /// An empty registry whose listener is not listening yet.
    pub fn new() -> Self {
        let inner = Inner { keys: Mutex::default(), listening: watch::channel(false).0 };
        Self { inner: Arc::new(inner) }
    }

    /// For the listener: wakes every waiter registered for `key`, and says whether one
    /// was. A key nobody waits for is ignored.
    pub fn wake(&self, key: &str) -> bool {
        let keys = self.inner.keys();
        let Some(slot) = keys.get(key) else {
            return false;
        };
        // Counted first: a waiter woken by this call sees it in `wakes`.
        slot.wakes.fetch_add(1, Ordering::SeqCst);
        slot.notify.notify_waiters();
        true
    }

    /// For the listener: whether it receives notifications now. Call `false` as soon as
    /// notifications may be missed (lost connection, task ending). A change wakes every
    /// registered waiter, which then checks its key again.
    pub fn set_listening(&self, listening: bool) {
        self.inner.listening.send_if_modified(|state| std::mem::replace(state, listening) != listening);
    }

    /// Whether the listener says it is listening.
    pub fn is_listening(&self) -> bool {
        *self.inner.listening.borrow()
    }

    /// The listener's state, to wait for changes (each change is seen by
    /// [`watch::Receiver::changed`]).
    pub fn listening(&self) -> watch::Receiver<bool> {
        self.inner.listening.subscribe()
    }

    /// How many keys have waiters registered (it never exceeds the number of live
    /// registrations).
    pub fn waited_keys(&self) -> usize {
        self.inner.keys().len()
    }

    /// Registers interest in `key`: from now on [`wake`](Self::wake)`(key)` completes the
    /// registration's [`notified`](Registration::notified) futures. Dropping the
    /// registration unregisters. [`wait`](Self::wait) does this for you.
    pub fn register(&self, key: &str) -> Registration {
        let (notify, wakes) = {
            let mut keys = self.inner.keys();
            let slot = keys.entry(key.to_owned()).or_insert_with(|| Slot {
                notify: Arc::default(),
                wakes: Arc::default(),
                waiters: 0,
            });
            slot.waiters += 1;
            (Arc::clone(&slot.notify), Arc::clone(&slot.wakes))
        };
        Registration { inner: Arc::clone(&self.inner), key: key.to_owned(), notify, wakes }
    }

    /// Waits until `key` is released, at most `max` (any `Duration`, saturated).
    ///
    /// In order: registers for `key`; waits (until the deadline) for the listener to be
    /// listening; runs `check` once (bounded by the deadline) to see whether the key is
    /// still held; then sleeps until a release of `key` is [woken](Self::wake), the lease
    /// reported by `check` runs out, the listener's state changes, or the deadline —
    /// whichever comes first. The caller then tries to acquire again; spurious returns
    /// are allowed by the contract.
    ///
    /// # Errors
    ///
    /// The error of `check`, unchanged.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future unregisters the waiter.
    pub async fn wait<F, Fut>(&self, key: &str, max: Duration, check: F) -> Result<Woken, LockError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<KeyState, LockError>>,
    {
        self.wait_any(&[key], max, check).await
    }

    /// As [`wait`](Self::wait) for several keys at once (a lock group's names): registers
    /// for every key, then `check` reports on them together — [`KeyState::Free`] when the
    /// wait should end at once, [`KeyState::Held`] otherwise — and a release of any of
    /// them ends the wait.
    ///
    /// # Errors
    ///
    /// The error of `check`, unchanged.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future unregisters the waiter.
    pub async fn wait_any<F, Fut>(&self, keys: &[&str], max: Duration, check: F) -> Result<Woken, LockError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<KeyState, LockError>>,
    {
        let deadline = deadline_after(max);
        let registrations: Vec<Registration> = keys.iter().map(|key| self.register(key)).collect();
        let mut released: Vec<Pin<Box<Notified<'_>>>> =
            registrations.iter().map(|registration| Box::pin(registration.notified())).collect();
        for release in &mut released {
            release.as_mut().enable();
        }

        let mut listening = self.listening();
        // Until the listener listens no release would reach this waiter: the wait is a
        // plain sleep (the caller polls), cut short if the listener comes up.
        if !matches!(tokio::time::timeout_at(deadline, listening.wait_for(|up| *up)).await, Ok(Ok(_))) {
            tokio::time::sleep_until(deadline).await;
            return Ok(Woken::TimedOut);
        }
        let wake_at = match tokio::time::timeout_at(deadline, check()).await {
            Err(_) => return Ok(Woken::TimedOut),
            Ok(state) => match state? {
                KeyState::Free => return Ok(Woken::AlreadyFree),
                KeyState::Held { expires_in: Some(left) } => deadline.min(deadline_after(left)),
                KeyState::Held { expires_in: None } => deadline,
            },
        };
        Ok(first_wake(&mut released, &mut listening, wake_at, deadline).await)
    }
}

/// The end of a wait whose waiter registered and checked: the first of `released` to be
/// notified ([`Woken::Notified`]), a change of the listener ([`Woken::ListenerChanged`]),
/// or `wake_at` ([`Woken::LeaseEnded`] when it is before `deadline`, else
/// [`Woken::TimedOut`]). For a store that waits as
/// [`WaiterRegistry::wait_any`] does but registers and checks its own way.
///
/// # Cancel safety
///
/// Cancel safe: it only waits.
pub async fn first_wake(
    released: &mut [Pin<Box<Notified<'_>>>],
    listening: &mut watch::Receiver<bool>,
    wake_at: Instant,
    deadline: Instant,
) -> Woken {
    // Until one is ready, every registration is polled, so each keeps this waker.
    let any_released = poll_fn(|cx| {
        if released.iter_mut().any(|r| r.as_mut().poll(cx).is_ready()) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    });
    tokio::select! {
        () = any_released => Woken::Notified,
        _ = listening.changed() => Woken::ListenerChanged,
        () = tokio::time::sleep_until(wake_at) => {
            if wake_at < deadline { Woken::LeaseEnded } else { Woken::TimedOut }
        }
    }
}

/// The sum of [`Registration::wakes`] over `registrations`: take it before the check,
/// and pass it to [`wakes_reach`] as `since`.
pub fn wakes_of<'a>(registrations: impl IntoIterator<Item = &'a Registration>) -> u64 {
    registrations.into_iter().fold(0, |sum, registration| sum.wrapping_add(registration.wakes()))
}

/// As [`first_wake`], except that notifications end the wait only once the keys of
/// `registrations` were woken `needed` times in all since `since` (their
/// [`wakes_of`] taken before the check): a waiter that the check found blocked by
/// `needed` holders, each of which notifies its release, sleeps through all but the last
/// of those releases instead of looking again after each. Other wakes of the keys count
/// too (the waiter then looks early, as after any spurious wake-up); a holder that ends
/// without a release is covered by `wake_at`, as in [`first_wake`].
///
/// # Cancel safety
///
/// Cancel safe: it only waits.
pub async fn wakes_reach(
    registrations: &[&Registration],
    since: u64,
    needed: u64,
    listening: &mut watch::Receiver<bool>,
    wake_at: Instant,
    deadline: Instant,
) -> Woken {
    loop {
        // Armed before counting: a wake after the count completes one of these.
        let mut released: Vec<Pin<Box<Notified<'_>>>> =
            registrations.iter().map(|registration| Box::pin(registration.notified())).collect();
        for release in &mut released {
            release.as_mut().enable();
        }
        if wakes_of(registrations.iter().copied()).wrapping_sub(since) >= needed {
            return Woken::Notified;
        }
        match first_wake(&mut released, listening, wake_at, deadline).await {
            Woken::Notified => {}
            other => return other,
        }
    }
}

/// One waiter's interest in one key; dropping it unregisters (the key's entry goes with
/// its last waiter).
pub struct Registration {
    inner: Arc<Inner>,
    key: String,
    notify: Arc<Notify>,
    wakes: Arc<AtomicU64>,
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration").field("key", &self.key).finish_non_exhaustive()
    }
}

impl Registration {
    /// The key waited for.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// A future completing at the next [`WaiterRegistry::wake`] of the key. Call
    /// [`Notified::enable`] on it *before* checking the key on the server, so that a wake
    /// arriving in between is not lost.
    pub fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }

    /// How many times the key was [woken](WaiterRegistry::wake) since it was first
    /// registered (by this or another waiter still registered). Only differences mean
    /// something: take it before a check and compare later, as [`wakes_reach`] does. Unlike
    /// a [`notified`](Self::notified) future, the count misses no wake that comes while
    /// the waiter is busy.
    pub fn wakes(&self) -> u64 {
        self.wakes.load(Ordering::SeqCst)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut keys = self.inner.keys();
        if let Entry::Occupied(mut slot) = keys.entry(std::mem::take(&mut self.key)) {
            slot.get_mut().waiters -= 1;
            if slot.get().waiters == 0 {
                slot.remove();
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::future::poll_fn;
    use std::pin::pin;
    use std::task::Poll;

    use super::*;

    const HELD: KeyState = KeyState::Held { expires_in: None };

    /// Whether `future` is ready when polled once.
    async fn is_ready<F: Future>(future: std::pin::Pin<&mut F>) -> bool {
        let mut future = future;
        poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx).is_ready())).await
    }

    #[tokio::test]
    async fn a_wake_reaches_every_waiter_of_its_key_and_no_other() {
        let waiters = WaiterRegistry::new();
        let (a1, a2, b) = (waiters.register("a"), waiters.register("a"), waiters.register("b"));
        assert_eq!(waiters.waited_keys(), 2);
        let (mut w1, mut w2, mut wb) = (pin!(a1.notified()), pin!(a2.notified()), pin!(b.notified()));
        for w in [w1.as_mut(), w2.as_mut(), wb.as_mut()] {
            w.enable();
        }
        assert!(waiters.wake("a"));
        assert!(!waiters.wake("unknown"), "nobody waits for it");
        assert!(is_ready(w1.as_mut()).await && is_ready(w2.as_mut()).await, "both waiters of a");
        assert!(!is_ready(wb.as_mut()).await, "b was not released");
        waiters.wake("b");
        assert!(is_ready(wb.as_mut()).await);
    }

    #[test]
    fn registrations_leave_the_map_with_their_last_waiter() {
        let waiters = WaiterRegistry::new();
        let (a1, a2, b) = (waiters.register("a"), waiters.register("a"), waiters.register("b"));
        drop(a1);
        assert_eq!(waiters.waited_keys(), 2, "a still has a waiter");
        drop((a2, b));
        assert_eq!(waiters.waited_keys(), 0);
    }

    #[test]
    fn concurrent_leaves_never_leak_entries() {
        let waiters = WaiterRegistry::new();
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let waiters = waiters.clone();
                std::thread::spawn(move || {
                    for _ in 0..2_000 {
                        drop(waiters.register("hot"));
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(waiters.waited_keys(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_ends_on_a_wake_of_its_key_and_unregisters() {
        let waiters = WaiterRegistry::new();
        waiters.set_listening(true);
        let waiting = tokio::spawn({
            let waiters = waiters.clone();
            async move { waiters.wait("a", Duration::MAX, || async { Ok(HELD) }).await }
        });
        while waiters.waited_keys() == 0 {
            tokio::task::yield_now().await;
        }
        // The check has run once the waiter is parked; a wake of another key does nothing.
        tokio::time::sleep(Duration::from_secs(60)).await;
        waiters.wake("b");
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!waiting.is_finished());
        waiters.wake("a");
        assert_eq!(waiting.await.unwrap().unwrap(), Woken::Notified);
        assert_eq!(waiters.waited_keys(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn wakes_reach_ends_after_the_needed_wakes_counting_those_that_came_back_to_back() {
        let waiters = WaiterRegistry::new();
        waiters.set_listening(true);
        let (a, b) = (waiters.register("a"), waiters.register("b"));
        let since = wakes_of([&a, &b]);
        // Two wakes before the wait starts (while the waiter checks) count.
        waiters.wake("a");
        waiters.wake("a");
        let mut listening = waiters.listening();
        let deadline = deadline_after(Duration::from_secs(3_600));
        let both = [&a, &b];
        let mut wait = pin!(wakes_reach(&both, since, 4, &mut listening, deadline, deadline));
        assert!(!is_ready(wait.as_mut()).await, "2 of 4");
        // Back to back, with no poll of the waiter in between: both count.
        waiters.wake("b");
        waiters.wake("unknown");
        waiters.wake("a");
        assert_eq!(wait.await, Woken::Notified);
        assert_eq!(a.wakes(), 3);
        assert_eq!(b.wakes(), 1);

        // Without enough wakes, the wait ends at `wake_at` (a holder ended without a release).
        let since = wakes_of([&a, &b]);
        let mut listening = waiters.listening();
        let wake_at = deadline_after(Duration::from_secs(5));
        let started = Instant::now();
        waiters.wake("b");
        let woken = wakes_reach(&both, since, 2, &mut listening, wake_at, deadline).await;
        assert_eq!(woken, Woken::LeaseEnded);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_during_the_check_is_not_lost() {
        let waiters = WaiterRegistry::new();
        waiters.set_listening(true);
        // The release lands after the server said "held" but before the waiter sleeps.
        let check = || async {
            waiters.wake("a");
            Ok(HELD)
        };
        let woken = tokio::time::timeout(Duration::from_secs(1), waiters.wait("a", Duration::MAX, check)).await;
        assert_eq!(woken.expect("not slept through").unwrap(), Woken::Notified);
    }

    #[tokio::test(start_paused = true)]
    async fn a_free_key_or_an_ending_lease_ends_the_wait() {
        let waiters = WaiterRegistry::new();
        waiters.set_listening(true);
        let started = Instant::now();
        let free = waiters.wait("a", Duration::MAX, || async { Ok(KeyState::Free) }).await.unwrap();
        assert_eq!((free, started.elapsed()), (Woken::AlreadyFree, Duration::ZERO));
        let expiring = KeyState::Held { expires_in: Some(Duration::from_secs(3)) };
        let ended = waiters.wait("a", Duration::MAX, || async move { Ok(expiring) }).await.unwrap();
        assert_eq!((ended, started.elapsed()), (Woken::LeaseEnded, Duration::from_secs(3)));
        let capped = waiters.wait("a", Duration::from_secs(1), || async move { Ok(expiring) }).await.unwrap();
        assert_eq!((capped, started.elapsed()), (Woken::TimedOut, Duration::from_secs(4)));
    }

    #[tokio::test(start_paused = true)]
    async fn while_the_listener_is_down_a_wait_is_a_plain_sleep_of_max() {
        let waiters = WaiterRegistry::new();
        let started = Instant::now();
        let woken = waiters.wait("a", Duration::from_secs(3), || async { panic!("never checked") }).await;
        assert_eq!(woken.unwrap(), Woken::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(3), "neither early nor late");
        assert_eq!(waiters.waited_keys(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_listener_going_down_tells_waiters_to_poll_and_coming_up_releases_sleepers() {
        let waiters = WaiterRegistry::new();
        waiters.set_listening(true);
        let parked = tokio::spawn({
            let waiters = waiters.clone();
            async move { waiters.wait("a", Duration::MAX, || async { Ok(HELD) }).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!parked.is_finished());
        waiters.set_listening(false);
        assert_eq!(parked.await.unwrap().unwrap(), Woken::ListenerChanged);
        assert!(!waiters.is_listening());

        // Down: a wait sleeps (polling) until the listener is back, then checks.
        let sleeping = tokio::spawn({
            let waiters = waiters.clone();
            async move { waiters.wait("a", Duration::MAX, || async { Ok(KeyState::Free) }).await }
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!sleeping.is_finished());
        waiters.set_listening(true);
        assert_eq!(sleeping.await.unwrap().unwrap(), Woken::AlreadyFree);
    }

    #[tokio::test]
    async fn check_errors_are_returned_and_unregister() {
        let waiters = WaiterRegistry::new();
        waiters.set_listening(true);
        let failing = || async { Err(LockError::store("test", "wait for release", Some("a"), "boom")) };
        let error = waiters.wait("a", Duration::MAX, failing).await.unwrap_err();
        assert!(matches!(error, LockError::Store { .. }), "{error}");
        assert_eq!(waiters.waited_keys(), 0);
    }

    #[test]
    fn deadlines_saturate() {
        let now = Instant::now();
        assert!(deadline_after(Duration::MAX) >= now + FAR_FUTURE);
        assert!(deadline_after(Duration::from_secs(1)) >= now + Duration::from_secs(1));
    }
}
