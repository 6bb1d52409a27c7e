//! `Leadership`: what a candidate holds while it leads, and the campaigns that win it.

use std::time::Duration;

use distlock_api::{DistributedLock, LeaseValue, LockError, LossReason};

use crate::election::Election;

/// The lead of an [`Election`], held by the candidate whose campaign won.
///
/// Its lease renews itself while the handle lives. Do the leader's work while
/// [`lost`](Self::lost) has not resolved, passing [`term`](Self::term) to every resource
/// that can check it. [`resign`](Self::resign) hands the lead to the next candidate at
/// once; dropping the handle does the same in the background.
#[derive(Debug)]
#[must_use = "the lead is resigned as soon as the Leadership is dropped"]
pub struct Leadership {
    election: Election,
    lock: DistributedLock,
    value: LeaseValue,
}

impl Election {
    /// Campaigns with `value` (this candidate's identity or address) and waits, as long as
    /// it takes, until this candidate leads. Bound the wait with
    /// [`campaign_for`](Self::campaign_for) or `tokio::time::timeout` (cancel safe: a
    /// cancelled campaign leaves the queue and holds nothing).
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidValue`] / [`LockError::InvalidOptions`] before any I/O;
    /// [`LockError::Unsupported`] (operation `"election"`) when the store keeps no values
    /// with its leases, [`LockError::Config`] when it does not fence; [`LockError::Store`]
    /// when the store fails; [`LockError::LeaseLost`] when the lead was lost before its
    /// value could be published.
    pub async fn campaign(&self, value: &str) -> Result<Leadership, LockError> {
        let value = LeaseValue::new(value)?;
        let options = self.options();
        options.validate(self.lease_ttl())?;
        self.check()?;
        let lock = self.locks().lock_opts(self.key().as_str(), self.lease_ttl(), &options).await?;
        Leadership::publish(self.clone(), lock, value).await
    }

    /// As [`campaign`](Self::campaign), waiting at most `wait` (zero: one attempt);
    /// `Ok(None)` when another candidate still led then.
    ///
    /// # Errors
    ///
    /// As [`campaign`](Self::campaign).
    pub async fn campaign_for(&self, value: &str, wait: Duration) -> Result<Option<Leadership>, LockError> {
        let value = LeaseValue::new(value)?;
        let options = self.options().wait(wait);
        options.validate(self.lease_ttl())?;
        self.check()?;
        match self.locks().try_lock_opts(self.key().as_str(), self.lease_ttl(), &options).await? {
            Some(lock) => Leadership::publish(self.clone(), lock, value).await.map(Some),
            None => Ok(None),
        }
    }
}

impl Leadership {
    /// Publishes `value` on the lease just taken; a lease gone already is `LeaseLost`.
    async fn publish(election: Election, lock: DistributedLock, value: LeaseValue) -> Result<Self, LockError> {
        let mut leadership = Self { election, lock, value: LeaseValue::default() };
        leadership.proclaim(value.as_str()).await?;
        tracing::info!(election = %leadership.election.name(), term = leadership.term(), value = %leadership.value, "leading");
        Ok(leadership)
    }

    /// This leader's term: its lock's fencing number, strictly greater than every earlier
    /// leader's of this election.
    pub fn term(&self) -> u64 {
        // An election checks that its store fences before it campaigns.
        self.lock.fence().unwrap_or_default()
    }

    /// The value this leader published last.
    pub fn value(&self) -> &LeaseValue {
        &self.value
    }

    /// The election.
    pub fn election(&self) -> &Election {
        &self.election
    }

    /// The lock behind the lead (key `election:<name>`), e.g. for its token or time left.
    pub fn lock(&self) -> &DistributedLock {
        &self.lock
    }

    /// Resolves when the lead is lost: the lease could not be renewed in time, or the
    /// store no longer holds it. Resolves before another candidate can lead, by the
    /// lease's loss margin (a fifth of the TTL), so the leader has that long to stop.
    pub async fn lost(&self) -> LossReason {
        self.lock.lost().await
    }

    /// Whether the lead is lost (see [`lost`](Self::lost)).
    pub fn is_lost(&self) -> bool {
        self.lock.is_lost()
    }

    /// How long the lead is safe at least: the lease left, less the loss margin.
    pub fn time_left(&self) -> Duration {
        self.lock.time_left()
    }

    /// Changes this leader's value without giving up the lead; readers and observers see
    /// the new value with the same term.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidValue`] before any I/O; [`LockError::LeaseLost`] when this
    /// candidate no longer leads; [`LockError::Store`] when the store fails (the value
    /// may or may not have changed).
    pub async fn proclaim(&mut self, value: &str) -> Result<(), LockError> {
        let value = LeaseValue::new(value)?;
        let values = self.election.check()?;
        if values.set_value(self.lock.store_key(), self.lock.token(), &value).await? {
            self.value = value;
            Ok(())
        } else {
            Err(LockError::LeaseLost { key: self.lock.key().as_str().to_owned(), reason: LossReason::NotHeld })
        }
    }

    /// Gives up the lead: the next candidate in line leads at once. Returns whether this
    /// candidate still led (`false`: the lead was lost already).
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when the store fails; the lease then ends at its TTL.
    pub async fn resign(self) -> Result<bool, LockError> {
        let name = self.election.name().to_owned();
        let term = self.term();
        let resigned = self.lock.release().await?;
        tracing::info!(election = %name, term, "resigned");
        Ok(resigned)
    }
}
