//! Claims' renewal tasks, started late and in batches.
//!
//! A claim's first renewal is due a renewal interval after it was taken, and most claims
//! are completed long before. So a claim does not start its renewal task when it is
//! taken: it is put on a list that one ticker task per [`Idempotency`](crate::Idempotency)
//! goes through every half interval, starting the task of each claim still running. A
//! claim completed before that costs no task at all — a spawned task wakes another
//! worker thread, which costs more than the rest of a request's work on the client.

use std::fmt;
use std::mem;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::task::AbortHandle;

/// The length from which `add` first drops the entries of claims already gone (those
/// completed between two ticks), at every power of two: the list stays about twice the
/// running claims under any request rate, for O(1) amortised work per claim.
const PRUNE_AT: usize = 1024;

/// Starts a claim's renewal task; `None` when it could not be started.
type Start = Box<dyn FnOnce() -> Option<AbortHandle> + Send>;

/// The claims of one `Idempotency` (and its clones) waiting for their renewal task.
pub(crate) struct Renewals {
    shared: Arc<Mutex<Pending>>,
    /// How often the ticker goes through the list: half the renewal interval, so that a
    /// task starts at least half an interval before its first renewal is due.
    period: Duration,
}

#[derive(Default)]
struct Pending {
    claims: Vec<Weak<LateRenewal>>,
    /// The ticker, while one runs (one that ended with its runtime is started again).
    ticker: Option<AbortHandle>,
}

/// One claim's renewal: not started yet, running, or stopped.
pub(crate) struct LateRenewal(Mutex<State>);

enum State {
    Waiting(Start),
    Running(AbortHandle),
    Stopped,
}

impl Renewals {
    /// The renewals of claims renewed every `every`.
    pub(crate) fn new(every: Duration) -> Self {
        Self { shared: Arc::default(), period: every / 2 }
    }

    /// Lists a claim whose renewal task `start` starts: the ticker starts it within half
    /// a renewal interval unless the claim stops it first. Must be called inside a tokio
    /// runtime (for the ticker); `None` otherwise, with nothing listed.
    pub(crate) fn add(&self, start: Start) -> Option<Arc<LateRenewal>> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let renewal = Arc::new(LateRenewal(Mutex::new(State::Waiting(start))));
        let mut pending = lock(&self.shared);
        if pending.claims.len() >= PRUNE_AT && pending.claims.len().is_power_of_two() {
            pending.claims.retain(|claim| claim.strong_count() > 0);
        }
        pending.claims.push(Arc::downgrade(&renewal));
        if pending.ticker.as_ref().is_none_or(AbortHandle::is_finished) {
            let ticker = tick(Arc::downgrade(&self.shared), self.period);
            pending.ticker = Some(runtime.spawn(ticker).abort_handle());
        }
        Some(renewal)
    }
}

impl Drop for Renewals {
    fn drop(&mut self) {
        if let Some(ticker) = lock(&self.shared).ticker.take() {
            ticker.abort();
        }
    }
}

impl fmt::Debug for Renewals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Renewals").field("period", &self.period).finish_non_exhaustive()
    }
}

impl LateRenewal {
    /// Stops the renewal: it never starts, or its task is aborted.
    pub(crate) fn stop(&self) {
        if let State::Running(task) = mem::replace(&mut *lock(&self.0), State::Stopped) {
            task.abort();
        }
    }

    fn start(&self) {
        let mut state = lock(&self.0);
        if let State::Waiting(_) = *state {
            if let State::Waiting(start) = mem::replace(&mut *state, State::Stopped) {
                if let Some(task) = start() {
                    *state = State::Running(task);
                }
            }
        }
    }
}

/// Every `period`, starts the renewal of each listed claim still running; ends when the
/// list is found empty (the next claim starts a ticker again) or the claims' `Renewals`
/// is dropped.
async fn tick(shared: Weak<Mutex<Pending>>, period: Duration) {
    loop {
        tokio::time::sleep(period).await;
        let Some(shared) = shared.upgrade() else { return };
        let claims = {
            let mut pending = lock(&shared);
            if pending.claims.is_empty() {
                pending.ticker = None;
                return;
            }
            mem::take(&mut pending.claims)
        };
        for renewal in claims.iter().filter_map(Weak::upgrade) {
            renewal.start();
        }
    }
}

/// The lists are left consistent by every step (a push, a take, a swap), so a poisoned
/// lock is still usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_list_keeps_about_twice_the_running_claims() {
        let renewals = Renewals::new(Duration::from_secs(10));
        let running: Vec<Arc<LateRenewal>> =
            (0..10).map(|_| renewals.add(Box::new(|| None)).expect("in a runtime")).collect();
        for _ in 0..5_000 {
            drop(renewals.add(Box::new(|| None)));
        }
        let pending = lock(&renewals.shared);
        assert!(pending.claims.len() < 2 * PRUNE_AT, "{} claims listed", pending.claims.len());
        let live = pending.claims.iter().filter(|claim| claim.strong_count() > 0).count();
        assert_eq!(live, running.len(), "every running claim stays listed");
    }
}
