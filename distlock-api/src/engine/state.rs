//! What a manager and its handles share: the store, the group settings, and the
//! background releases in flight.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;
use tracing::Instrument;

use super::target::Target;
use crate::group::{OwnerId, Permits};
use crate::observe::{self, ReleaseOutcome};
use crate::store::DynLockStore;
use crate::token::Token;

/// Why a lease is released in the background.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cleanup {
    /// A handle was dropped (or its release failed): the user held this lock.
    DroppedHandle,
    /// An acquisition failed, was cancelled while its outcome was unknown, or ended
    /// without the lock while it had a place in the store's queue: the lease may not
    /// exist at all, so failing to free it is not news for the user.
    UnknownAcquire,
}

/// The engine's state, shared by a manager, its clones and its handles.
#[derive(Debug)]
pub(crate) struct Engine {
    pub(crate) store: Arc<DynLockStore>,
    /// The owner recorded with group holds.
    pub(crate) owner: OwnerId,
    /// Group members' permits when neither the member nor the store's table has any.
    pub(crate) permits: Permits,
    pending_releases: AtomicUsize,
    releases_done: Notify,
}

impl Engine {
    pub(crate) fn new(store: Arc<DynLockStore>, owner: OwnerId, permits: Permits) -> Self {
        Self { store, owner, permits, pending_releases: AtomicUsize::new(0), releases_done: Notify::new() }
    }

    pub(crate) fn pending_releases(&self) -> usize {
        self.pending_releases.load(Ordering::Acquire)
    }

    /// Resolves once no background release is in flight.
    pub(crate) async fn flush_releases(&self) {
        loop {
            let done = self.releases_done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if self.pending_releases() == 0 {
                return;
            }
            done.await;
        }
    }

    /// Hands `target`/`token` to a background task that releases it. Never does I/O itself
    /// and never panics: without a runtime the lease is left to expire.
    pub(crate) fn release_in_background(self: &Arc<Self>, target: Target, token: Token, why: Cleanup) {
        let backend = self.store.backend();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                lock.key = %target.log_key(),
                backend,
                "lock dropped outside a tokio runtime; it will be freed when its TTL expires"
            );
            return;
        };
        self.pending_releases.fetch_add(1, Ordering::AcqRel);
        let engine = Arc::clone(self);
        let span = tracing::debug_span!(parent: None, "distlock.release", lock.key = %target.log_key(), backend, background = true);
        let release = async move {
            let result = target.release(&*engine.store, &token).await;
            let key = target.log_key();
            match (&result, why) {
                (Ok(released), Cleanup::DroppedHandle) => {
                    observe::release(backend, ReleaseOutcome::of(&result));
                    tracing::debug!(lock.key = %key, backend, released, "dropped lock released in the background");
                }
                (Err(error), Cleanup::DroppedHandle) => {
                    observe::release(backend, ReleaseOutcome::of(&result));
                    tracing::warn!(
                        lock.key = %key,
                        backend,
                        error = %error.report(),
                        "background release failed; the lock will be freed when its TTL expires"
                    );
                }
                (Ok(released), Cleanup::UnknownAcquire) => tracing::debug!(
                    lock.key = %key,
                    backend,
                    released,
                    "cleaned up an acquisition whose outcome was unknown"
                ),
                (Err(error), Cleanup::UnknownAcquire) => tracing::debug!(
                    lock.key = %key,
                    backend,
                    error = %error.report(),
                    "could not clean up an acquisition whose outcome was unknown; a lease it may have taken expires with its TTL"
                ),
            }
            if engine.pending_releases.fetch_sub(1, Ordering::AcqRel) == 1 {
                engine.releases_done.notify_waiters();
            }
        };
        runtime.spawn(release.instrument(span));
    }
}

/// A strong reference to an [`Engine`] with a reference count of its own, on cache lines
/// of its own.
///
/// Every hold keeps its engine alive. Were they all clones of one `Arc<Engine>`, tasks on
/// different cores taking locks through one manager would all count on that one counter,
/// and its cache line would travel between the cores at every acquisition and release. A
/// manager keeps a few of these instead ([`EngineRefs`]), and a hold clones the one of
/// the thread it is taken on.
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct EngineRef(Arc<Engine>);

impl EngineRef {
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.0
    }
}

/// A manager's [`EngineRef`]s, one per thread slot.
#[derive(Debug)]
pub(crate) struct EngineRefs(Box<[Arc<EngineRef>]>);

impl EngineRefs {
    /// More slots than most machines' worker threads share a manager between; threads
    /// beyond that share slots, which is only slower.
    const SLOTS: usize = 8;

    pub(crate) fn new(engine: &Arc<Engine>) -> Self {
        Self((0..Self::SLOTS).map(|_| Arc::new(EngineRef(Arc::clone(engine)))).collect())
    }

    /// The engine the references are of.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        self.current().engine()
    }

    /// The reference of the calling thread's slot.
    pub(crate) fn current(&self) -> &Arc<EngineRef> {
        &self.0[thread_number() % self.0.len()]
    }
}

/// The calling thread's number: threads are numbered in the order they first ask.
fn thread_number() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static NUMBER: Cell<Option<usize>> = const { Cell::new(None) };
    }
    NUMBER.get().unwrap_or_else(|| {
        let number = NEXT.fetch_add(1, Ordering::Relaxed);
        NUMBER.set(Some(number));
        number
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_keeps_its_number_and_no_two_threads_share_one() {
        let here = thread_number();
        assert_eq!(thread_number(), here);
        let there: Vec<usize> = (0..3).map(|_| std::thread::spawn(thread_number).join().expect("thread")).collect();
        let mut seen = vec![here];
        for number in there {
            assert!(!seen.contains(&number), "thread number {number} given twice");
            seen.push(number);
        }
    }
}
