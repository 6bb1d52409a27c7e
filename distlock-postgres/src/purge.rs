//! Bounded growth: deleting rows whose lease ended long ago, by hand or in the background.
//!
//! Release and expiry leave a key's row in place (it is re-used by the key's next
//! acquisition), so without a purge the table grows with the number of distinct keys
//! ever locked. A purge deletes rows whose lease ended — by release or expiry — at least
//! a *horizon* ago.
//!
//! # Why a purge cannot break fencing
//!
//! Fences come from a sequence, not from the row, so a key whose row was deleted and is
//! acquired again draws a value larger than every value drawn before that acquisition's
//! statement started — including the deleted row's fence, which was drawn before its
//! lease began, and so at least the horizon before the purge. The only way to get a
//! smaller fence would be an acquire statement that started before the purged fence
//! was drawn and inserted after the purge: a statement running longer than the horizon.
//! The horizon is therefore at least [`MIN_PURGE_HORIZON`], and the store refuses any
//! acquisition whose statement ran that long (it returns [`LockError::Store`] instead of
//! a fence; the manager then releases the lease). This relies on the server's clock not
//! jumping by more than the horizon, as leases themselves rely on it.

use std::fmt;
use std::time::Duration;

use distlock_api::LockError;
use tokio::task::JoinHandle;

use crate::config::MIN_PURGE_HORIZON;
use crate::error::BACKEND;
use crate::sql::{millis, PURGE_BATCH};
use crate::store::PostgresLockStore;

/// A horizon far beyond any lease, still well inside PostgreSQL's timestamp range.
const MAX_PURGE_HORIZON: Duration = Duration::from_secs(1_000 * 366 * 24 * 60 * 60);
/// The shortest pause between two background purges.
const MIN_PURGE_EVERY: Duration = Duration::from_millis(1);
/// The longest pause between two background purges.
const MAX_PURGE_EVERY: Duration = Duration::from_secs(366 * 24 * 60 * 60);

/// When [`PostgresLockStore::spawn_purger`] purges, and what.
///
/// ```
/// use std::time::Duration;
/// use distlock_postgres::PurgeOptions;
///
/// let options = PurgeOptions::new().every(Duration::from_secs(60)).older_than(Duration::from_secs(24 * 3600));
/// assert_eq!(options.get_every(), Duration::from_secs(60));
/// assert_eq!(PurgeOptions::default().get_older_than(), Duration::from_secs(3600));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PurgeOptions {
    every: Duration,
    older_than: Duration,
}

impl Default for PurgeOptions {
    fn default() -> Self {
        Self { every: Duration::from_secs(5 * 60), older_than: Duration::from_secs(3600) }
    }
}

impl PurgeOptions {
    /// The defaults: purge every 5 minutes the rows whose lease ended over an hour ago.
    pub fn new() -> Self {
        Self::default()
    }

    /// The pause between two purges (default 5 minutes; the first purge runs at once).
    /// Saturates to 1 ms ..= 366 days.
    #[must_use]
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every.clamp(MIN_PURGE_EVERY, MAX_PURGE_EVERY);
        self
    }

    /// Purge rows whose lease ended at least this long ago (default 1 hour). Saturates
    /// to [`MIN_PURGE_HORIZON`] ..= 1 000 years, as [`PostgresLockStore::purge`] does.
    #[must_use]
    pub fn older_than(mut self, older_than: Duration) -> Self {
        self.older_than = older_than.clamp(MIN_PURGE_HORIZON, MAX_PURGE_HORIZON);
        self
    }

    /// The pause between two purges.
    pub fn get_every(&self) -> Duration {
        self.every
    }

    /// The purge horizon.
    pub fn get_older_than(&self) -> Duration {
        self.older_than
    }
}

impl PostgresLockStore {
    /// Deletes the rows of free keys whose lease ended (by release or expiry) at least
    /// `older_than` ago, the group holds and intents that expired that long ago, the
    /// places of waiters that lapsed that long ago, and the values attached to leases that
    /// were written that long ago and whose lease has not been live since, and returns
    /// how many. `older_than` saturates to [`MIN_PURGE_HORIZON`] ..= 1 000 years (so
    /// `Duration::ZERO` means the minimum and `Duration::MAX` deletes nothing).
    ///
    /// Held keys are never touched, and fencing stays strictly increasing for purged keys
    /// (see [`MIN_PURGE_HORIZON`] and the crate documentation). The purge is a sequential
    /// scan of the table, deleting at most 10 000 rows per statement so that an acquirer
    /// of a purged key waits only briefly; run it every few minutes or hours, not per
    /// operation, or let [`spawn_purger`](Self::spawn_purger) do it.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] (operation `"purge"`) when the server fails; rows deleted by
    /// earlier batches stay deleted.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: each batch is one atomic statement; a cancelled purge has deleted
    /// some eligible rows, which is harmless.
    pub async fn purge(&self, older_than: Duration) -> Result<u64, LockError> {
        let horizon = millis(older_than.clamp(MIN_PURGE_HORIZON, MAX_PURGE_HORIZON));
        let mut purged = self.purge_batches(&self.statements().purge, horizon).await?;
        // Slots of lock groups whose lease ended (released, withdrawn or expired), unless
        // the store's schema has no group tables (made by a version without groups).
        if self.has_group_tables().await.map_err(|error| LockError::store(BACKEND, "purge", None, error))? {
            purged += self.purge_batches(&self.statements().groups.purge, horizon).await?;
        }
        // Places of waiters that stopped waiting without leaving the queue.
        if self.queue_ready("purge").await? {
            purged += self.purge_batches(&self.statements().queue.purge, horizon).await?;
        }
        // Values of leases that ended, unless the table of values was never made.
        if self.has_values_table().await.map_err(|error| LockError::store(BACKEND, "purge", None, error))? {
            purged += self.purge_batches(&self.statements().values.purge, horizon).await?;
        }
        tracing::debug!(table = %self.table_name(), purged, "purged lock rows");
        Ok(purged)
    }

    /// Runs a purge statement (`$1` horizon in ms, `$2` batch size) until a batch deletes
    /// fewer rows than the batch size; returns how many it deleted.
    async fn purge_batches(&self, statement: &str, horizon: i64) -> Result<u64, LockError> {
        let mut purged = 0;
        loop {
            let batch = self
                .retrying("purge", || sqlx::query(statement).bind(horizon).bind(PURGE_BATCH).execute(self.pool()))
                .await
                .map_err(|error| LockError::store(BACKEND, "purge", None, error))?
                .rows_affected();
            purged += batch;
            if batch < PURGE_BATCH.unsigned_abs() {
                return Ok(purged);
            }
        }
    }

    /// Starts a background task on the current tokio runtime that calls
    /// [`purge`](Self::purge) with [`options.get_older_than()`](PurgeOptions::get_older_than)
    /// now and then every [`options.get_every()`](PurgeOptions::get_every), logging
    /// failures with `tracing` and carrying on. The task stops when the returned handle is
    /// dropped or [stopped](PurgerHandle::stop).
    ///
    /// ```no_run
    /// # async fn demo(store: distlock_postgres::PostgresLockStore) -> Result<(), distlock_api::LockError> {
    /// use std::time::Duration;
    /// use distlock_postgres::PurgeOptions;
    ///
    /// let purger = store.spawn_purger(PurgeOptions::new().every(Duration::from_secs(600)))?;
    /// # drop(purger); Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] when called outside a tokio runtime.
    pub fn spawn_purger(&self, options: PurgeOptions) -> Result<PurgerHandle, LockError> {
        let PurgeOptions { every, older_than } = options;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| LockError::Config {
            message: "spawn_purger must be called inside a tokio runtime".to_owned(),
        })?;
        let store = self.clone();
        let task = runtime.spawn(async move {
            let mut ticks = tokio::time::interval(every.clamp(MIN_PURGE_EVERY, MAX_PURGE_EVERY));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                if let Err(error) = store.purge(older_than).await {
                    tracing::warn!(
                        table = %store.table_name(),
                        error = &error as &dyn std::error::Error,
                        "background purge failed; retrying at the next interval"
                    );
                }
            }
        });
        Ok(PurgerHandle { task })
    }
}

/// The background purge task of [`PostgresLockStore::spawn_purger`]; dropping the handle
/// stops the task (a purge statement in flight completes or not, atomically).
#[must_use = "the background purge stops when its handle is dropped"]
pub struct PurgerHandle {
    task: JoinHandle<()>,
}

impl PurgerHandle {
    /// Stops the task and waits until it has stopped.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the task is aborted either way.
    pub async fn stop(mut self) {
        self.task.abort();
        // An aborted task ends with a cancellation error, which is what we asked for.
        let _ = (&mut self.task).await;
    }
}

impl fmt::Debug for PurgerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PurgerHandle").field("finished", &self.task.is_finished()).finish()
    }
}

impl Drop for PurgerHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}
