//! `Job`: a cron schedule whose every firing runs on at most one instance.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};
use croner::parser::{CronParser, Seconds};
use croner::{Cron, Direction};
use distlock_api::{LockError, LockKey, LockManager, Ttl};

use crate::error::JobError;
use crate::firing::{Firing, JobRun, Outcome};

/// A named job on a cron schedule (UTC) whose each firing runs on **at most one**
/// instance of a fleet that shares a lock store.
///
/// Every instance runs the same schedule ([`run`](Self::run)). At each firing, each
/// instance tries once, without waiting, to take the firing's lock —
/// `job:<name>:<unix seconds of the firing>`, the same on every instance — for
/// [`at_most`](Self::at_most); the one that gets it runs the task, the others skip the
/// firing. The lock is kept at least [`at_least`](Self::at_least) after the run started
/// (measured on the store's clock: the lease is extended to end then), so an instance
/// whose timer fires a little later finds it taken. An instance tries a firing only up to
/// [`late_start`](Self::late_start) after its scheduled instant; later (it was down,
/// paused or overloaded) the firing is [missed](Outcome::Missed) for it — logged and
/// counted, not run late, unless the job [catches up](Self::catch_up).
///
/// Each run leaves a **record** of its firing, and a firing that no instance ran is
/// recorded as missed by the first instance that finds it: one that reaches it too late,
/// or one that [starts](Self::run) after every instance was down — it looks back over
/// the firings since the last recorded one (at most [`LOOKBACK`](Self::LOOKBACK)).
/// A missed firing is logged and counted once across the fleet. Records are leases
/// (`job:<name>:<unix seconds>:ran` and `…:missed`) that expire
/// [`LOOKBACK`](Self::LOOKBACK) firings later (at most [`Ttl::MAX`](distlock_api::Ttl::MAX)).
///
/// **Guarantee:** when the instances' clocks differ by less than
/// `at_least − late_start` (default 5 s − 1 s = 4 s), no firing runs twice. A run that
/// crashes is not run again for its firing: its lock lasts `at_most`, past every
/// instance's `late_start`.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use distlock::jobs::{Firing, Job, Outcome};
/// use distlock::memory::MemoryLockStore;
/// use distlock::LockManager;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), distlock::jobs::JobError> {
/// let locks = LockManager::new(Arc::new(MemoryLockStore::new()));
/// // Every day at 03:00:00 UTC (a sixth, leading field gives seconds).
/// let job = Job::new("nightly-report", "0 0 3 * * *")?.at_most(Duration::from_secs(600));
/// let firing = job.next_firing(std::time::SystemTime::now())?;
/// // What each instance does at that firing (`run` does this for every firing):
/// let first = job.fire_at(&locks, firing, firing.instant(), |run| async move {
///     println!("report for {:?}", run.firing.instant());
/// }).await?;
/// assert!(matches!(first, Outcome::Ran { .. }));
/// let second = job.fire_at(&locks, firing, firing.instant(), |_| async {}).await?;
/// assert_eq!(second, Outcome::RanElsewhere);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Job {
    name: Arc<str>,
    pattern: Arc<str>,
    cron: Arc<Cron>,
    at_most: Duration,
    at_least: Duration,
    late_start: Duration,
    catch_up: bool,
}

impl Job {
    /// The default longest hold of a firing's lock: 10 minutes.
    pub const DEFAULT_AT_MOST: Duration = Duration::from_secs(600);
    /// The default shortest hold of a firing's lock after its run started: 5 s.
    pub const DEFAULT_AT_LEAST: Duration = Duration::from_secs(5);
    /// The default latest start of a firing after its scheduled instant: 1 s.
    pub const DEFAULT_LATE_START: Duration = Duration::from_secs(1);
    /// How many firings back an instance that starts looks for firings that every
    /// instance missed; a firing's record lasts until this many firings later.
    pub const LOOKBACK: usize = 100;

    /// The job `name` on the cron `schedule`: five fields (minute hour day month weekday)
    /// or six with seconds first, aliases such as `@hourly`, in UTC.
    ///
    /// # Errors
    ///
    /// [`JobError::Schedule`] for an expression that does not parse, [`JobError::Name`]
    /// for an empty name or one that does not make a lock key.
    pub fn new(name: &str, schedule: &str) -> Result<Self, JobError> {
        LockKey::new(name).and_then(|_| LockKey::new(format!("job:{name}:0:missed"))).map_err(JobError::Name)?;
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(schedule)
            .map_err(|err| JobError::Schedule { pattern: schedule.to_owned(), reason: err.to_string() })?;
        Ok(Self {
            name: name.into(),
            pattern: schedule.into(),
            cron: Arc::new(cron),
            at_most: Self::DEFAULT_AT_MOST,
            at_least: Self::DEFAULT_AT_LEAST,
            late_start: Self::DEFAULT_LATE_START,
            catch_up: false,
        })
    }

    /// Sets the longest a firing's lock is held (default 10 minutes): the lease it is
    /// taken with. A run that takes longer keeps running, unprotected.
    #[must_use]
    pub fn at_most(mut self, at_most: Duration) -> Self {
        self.at_most = at_most;
        self
    }

    /// Sets the shortest a firing's lock is held after its run started (default 5 s):
    /// more than the instances' clocks may differ plus [`late_start`](Self::late_start).
    #[must_use]
    pub fn at_least(mut self, at_least: Duration) -> Self {
        self.at_least = at_least;
        self
    }

    /// Sets how late after its scheduled instant an instance may still start a firing
    /// (default 1 s); later, the firing is missed for that instance.
    #[must_use]
    pub fn late_start(mut self, late_start: Duration) -> Self {
        self.late_start = late_start;
        self
    }

    /// Runs firings this instance reached too late anyway, if nobody holds their lock
    /// (default `false`). A late run can repeat a firing whose run ended more than
    /// `at_least` before.
    #[must_use]
    pub fn catch_up(mut self, catch_up: bool) -> Self {
        self.catch_up = catch_up;
        self
    }

    /// The job's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The schedule as given.
    pub fn schedule(&self) -> &str {
        &self.pattern
    }

    /// The lock key of `firing`: `job:<name>:<unix seconds>`.
    pub fn key(&self, firing: Firing) -> String {
        format!("job:{}:{}", self.name, firing.unix_seconds())
    }

    /// The key of `firing`'s record of a run: `job:<name>:<unix seconds>:ran`.
    pub fn ran_key(&self, firing: Firing) -> String {
        format!("{}:ran", self.key(firing))
    }

    /// The key of `firing`'s record of having been missed by every instance:
    /// `job:<name>:<unix seconds>:missed`.
    pub fn missed_key(&self, firing: Firing) -> String {
        format!("{}:missed", self.key(firing))
    }

    /// The first firing strictly after `after`.
    ///
    /// # Errors
    ///
    /// [`JobError::Exhausted`] when the schedule has none.
    pub fn next_firing(&self, after: SystemTime) -> Result<Firing, JobError> {
        let since = after.duration_since(UNIX_EPOCH).unwrap_or_default();
        let exhausted = || JobError::Exhausted { pattern: self.pattern.to_string(), after: since };
        let start: DateTime<Utc> = after.into();
        let next = self.cron.find_next_occurrence(&start, false).map_err(|_| exhausted())?;
        let seconds = u64::try_from(next.timestamp()).map_err(|_| exhausted())?;
        Ok(Firing::from_unix_seconds(seconds))
    }

    /// Checks the durations, as every firing does before any I/O: `at_most` and
    /// `at_least` non-zero, `late_start < at_least < at_most`.
    ///
    /// # Errors
    ///
    /// [`JobError::Durations`] saying which does not hold.
    pub fn validate(&self) -> Result<(), JobError> {
        let Self { at_most, at_least, late_start, .. } = *self;
        if at_most.is_zero() || at_least.is_zero() {
            return Err(JobError::Durations("`at_most` and `at_least` must be greater than zero".into()));
        }
        if at_least >= at_most {
            return Err(JobError::Durations(format!(
                "`at_least` ({at_least:?}) must be shorter than `at_most` ({at_most:?})"
            )));
        }
        if late_start >= at_least {
            return Err(JobError::Durations(format!(
                "`late_start` ({late_start:?}) must be shorter than `at_least` ({at_least:?}): their difference is how far the instances' clocks may differ"
            )));
        }
        Ok(())
    }

    /// Handles one firing on this instance as [`run`](Self::run) does when its timer
    /// fires at `now` (wall clock): runs `task` if this instance takes the firing's lock.
    ///
    /// # Errors
    ///
    /// [`JobError::Durations`] before any I/O; [`JobError::Lock`] when the store fails
    /// (the task did not run).
    pub async fn fire_at<F, Fut>(
        &self,
        locks: &LockManager,
        firing: Firing,
        now: SystemTime,
        task: F,
    ) -> Result<Outcome, JobError>
    where
        F: FnOnce(JobRun) -> Fut,
        Fut: Future<Output = ()>,
    {
        self.validate()?;
        let key = self.key(firing);
        let late_by = firing.late_by(now);
        if late_by > self.late_start && !self.catch_up {
            if self.is_held(locks, &key).await? || self.is_held(locks, &self.ran_key(firing)).await? {
                return Ok(self.record(firing, Outcome::RanElsewhere));
            }
            self.report_missed(locks, firing, now).await?;
            return Ok(Outcome::Missed { late_by });
        }
        let Some(lock) = locks.try_lock(&key, self.at_most).await? else {
            return Ok(self.record(firing, Outcome::RanElsewhere));
        };
        let started = tokio::time::Instant::now();
        if let Err(err) = self.keep_record(locks, &self.ran_key(firing), firing, now).await {
            tracing::warn!(job = %self.name, firing = firing.unix_seconds(), error = %err.report(), "could not record the run; it runs anyway");
        }
        tracing::info!(job = %self.name, firing = firing.unix_seconds(), fence = lock.fence(), "running");
        task(JobRun { job: self.name.to_string(), firing, fence: lock.fence(), safe_until: lock.safe_until() }).await;
        let took = started.elapsed();
        if let Some(rest) = self.at_least.checked_sub(took).filter(|rest| !rest.is_zero()) {
            // Keep the firing taken until `at_least` after the start, then let it expire.
            match lock.extend(rest).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(job = %self.name, firing = firing.unix_seconds(), "the firing's lock was gone when its run ended")
                }
                Err(err) => {
                    tracing::warn!(job = %self.name, firing = firing.unix_seconds(), error = %err.report(), "could not keep the firing's lock for `at_least`; it expires at `at_most`")
                }
            }
            let _ = lock.leak();
        } else if !lock.release().await? {
            tracing::warn!(job = %self.name, firing = firing.unix_seconds(), ?took, "the run outlived its lock (`at_most`)");
        }
        Ok(self.record(firing, Outcome::Ran { took }))
    }

    /// Runs the schedule on this instance, forever: at each firing, [`fire_at`](Self::fire_at)
    /// in a task of its own (a slow run does not delay the next firing). Firings up to
    /// `late_start` before the call are handled as if the timer had fired now; earlier
    /// ones that no instance ran are [reported missed](Self::missed_before) (and run, if
    /// the job [catches up](Self::catch_up)). Store failures are logged and the schedule
    /// goes on.
    ///
    /// # Errors
    ///
    /// [`JobError::Durations`] before anything runs; [`JobError::Exhausted`] when the
    /// schedule has no firing left.
    pub async fn run<F, Fut>(&self, locks: &LockManager, task: F) -> Result<Infallible, JobError>
    where
        F: Fn(JobRun) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.validate()?;
        let task = Arc::new(task);
        let now = SystemTime::now();
        // Firings up to `late_start` ago may still start here; earlier ones are looked up.
        let mut after = now.checked_sub(self.late_start).unwrap_or(UNIX_EPOCH);
        match self.missed_before(locks, now).await {
            Ok(missed) if self.catch_up => {
                for firing in missed {
                    let (job, locks, task) = (self.clone(), locks.clone(), task.clone());
                    tokio::spawn(async move {
                        if let Err(err) = job.fire_at(&locks, firing, SystemTime::now(), |run| task(run)).await {
                            tracing::warn!(job = %job.name, firing = firing.unix_seconds(), error = %err, "firing not caught up");
                        }
                    });
                }
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(job = %self.name, error = %err, "could not look for firings missed while every instance was down")
            }
        }
        loop {
            let firing = self.next_firing(after)?;
            while let Ok(wait) = firing.instant().duration_since(SystemTime::now()) {
                if wait.is_zero() {
                    break;
                }
                // Re-read the wall clock at least every minute: it may be stepped.
                tokio::time::sleep(wait.min(Duration::from_secs(60))).await;
            }
            after = firing.instant();
            let (job, locks, task) = (self.clone(), locks.clone(), task.clone());
            tokio::spawn(async move {
                let now = SystemTime::now();
                if let Err(err) = job.fire_at(&locks, firing, now, |run| task(run)).await {
                    tracing::warn!(job = %job.name, firing = firing.unix_seconds(), error = %err, "firing not handled");
                }
            });
        }
    }

    /// Finds and reports the firings before `now` that no instance ran: those since the
    /// newest recorded firing (run or missed), looking back at most
    /// [`LOOKBACK`](Self::LOOKBACK) firings; firings within `late_start` of `now` are left
    /// to the instances' timers. [`run`](Self::run) calls it when it starts (and with
    /// [`catch_up`](Self::catch_up) then runs what it found); each firing found is recorded
    /// as missed, logged and counted here, once across the fleet: an instance that
    /// starts later does not find it again. Returns the firings this call reported, oldest
    /// first.
    ///
    /// When no firing of the look-back has a record (a new job, or every instance was
    /// down longer than `LOOKBACK` firings) nothing is reported: a new job has missed
    /// nothing.
    ///
    /// # Errors
    ///
    /// [`JobError::Durations`] before any I/O; [`JobError::Lock`] when the store fails.
    pub async fn missed_before(&self, locks: &LockManager, now: SystemTime) -> Result<Vec<Firing>, JobError> {
        self.validate()?;
        let until: DateTime<Utc> = now.checked_sub(self.late_start).unwrap_or(UNIX_EPOCH).into();
        let mut unrecorded = Vec::new();
        let mut found_record = false;
        for instant in self.cron.iter_from(until, Direction::Backward).take(Self::LOOKBACK) {
            let Ok(seconds) = u64::try_from(instant.timestamp()) else { break };
            let firing = Firing::from_unix_seconds(seconds);
            if self.is_held(locks, &self.ran_key(firing)).await?
                || self.is_held(locks, &self.missed_key(firing)).await?
                || self.is_held(locks, &self.key(firing)).await?
            {
                found_record = true;
                break;
            }
            unrecorded.push(firing);
        }
        if !found_record {
            if !unrecorded.is_empty() {
                tracing::debug!(job = %self.name, lookback = unrecorded.len(), "no record of an earlier firing: nothing to report as missed");
            }
            return Ok(Vec::new());
        }
        let mut reported = Vec::new();
        for firing in unrecorded.into_iter().rev() {
            if self.report_missed(locks, firing, now).await? {
                reported.push(firing);
            }
        }
        Ok(reported)
    }

    /// Records `firing`, which has no record of a run, as missed; logs and counts it when
    /// this call recorded it (`true`), not when another instance already had.
    async fn report_missed(&self, locks: &LockManager, firing: Firing, now: SystemTime) -> Result<bool, JobError> {
        if !self.keep_record(locks, &self.missed_key(firing), firing, now).await? {
            tracing::debug!(job = %self.name, firing = firing.unix_seconds(), "missed; already reported by another instance");
            return Ok(false);
        }
        self.record(firing, Outcome::Missed { late_by: firing.late_by(now) });
        Ok(true)
    }

    /// Takes `key` as a record of `firing` that lasts [`LOOKBACK`](Self::LOOKBACK)
    /// firings; `false` when it already exists.
    async fn keep_record(
        &self,
        locks: &LockManager,
        key: &str,
        firing: Firing,
        now: SystemTime,
    ) -> Result<bool, LockError> {
        let mut last = firing;
        for _ in 0..Self::LOOKBACK {
            match self.next_firing(last.instant()) {
                Ok(next) => last = next,
                Err(_) => break,
            }
        }
        let ttl = last.instant().duration_since(now).unwrap_or_default().saturating_add(self.at_most);
        Ok(match locks.try_lock(key, ttl.min(Ttl::MAX)).await? {
            Some(record) => {
                let _ = record.leak();
                true
            }
            None => false,
        })
    }

    async fn is_held(&self, locks: &LockManager, key: &str) -> Result<bool, JobError> {
        let store_key = LockKey::new(key).map_err(JobError::Name)?.to_store_key();
        Ok(locks.store().inspect(&store_key).await?.is_some())
    }

    fn record(&self, firing: Firing, outcome: Outcome) -> Outcome {
        match &outcome {
            Outcome::Ran { took } => tracing::info!(job = %self.name, firing = firing.unix_seconds(), ?took, "ran"),
            Outcome::RanElsewhere => tracing::debug!(job = %self.name, firing = firing.unix_seconds(), "ran elsewhere"),
            Outcome::Missed { late_by } => {
                tracing::warn!(job = %self.name, firing = firing.unix_seconds(), ?late_by, "missed: no instance ran it");
            }
        }
        #[cfg(feature = "metrics")]
        metrics::counter!("distlock_job_firings_total", "job" => self.name.to_string(), "outcome" => outcome.as_str())
            .increment(1);
        outcome
    }
}
