//! One firing of a schedule, and what became of it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One firing of a job's schedule: the instant the schedule names, the same on every
/// instance of the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Firing {
    /// Whole seconds since the Unix epoch (cron's granularity).
    unix_seconds: u64,
}

impl Firing {
    /// The firing at `unix_seconds` seconds after the Unix epoch.
    pub fn from_unix_seconds(unix_seconds: u64) -> Self {
        Self { unix_seconds }
    }

    /// Seconds since the Unix epoch.
    pub fn unix_seconds(self) -> u64 {
        self.unix_seconds
    }

    /// The scheduled instant.
    pub fn instant(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.unix_seconds)
    }

    /// How long after the scheduled instant `now` is (zero when it is before).
    pub fn late_by(self, now: SystemTime) -> Duration {
        now.duration_since(self.instant()).unwrap_or_default()
    }
}

/// What a job's task is given for one run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct JobRun {
    /// The job's name.
    pub job: String,
    /// The firing this run is for.
    pub firing: Firing,
    /// The fencing number of the run's lock, on stores that fence: strictly greater than
    /// any earlier run's of this firing. Pass it to resources that can check it.
    pub fence: Option<u64>,
    /// Until when the store surely holds the firing's lock: `at_most` after the attempt
    /// that took it was sent, less an allowance for clock drift (the lock is not renewed).
    /// A run still going then is no longer protected: another instance could take the
    /// firing late (with [`catch_up`](crate::Job::catch_up)). Stop some margin before.
    pub safe_until: tokio::time::Instant,
}

/// What became of one firing on this instance.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// This instance ran the firing.
    Ran {
        /// How long the task took.
        took: Duration,
    },
    /// Another instance holds the firing's lock: it runs (or ran) it.
    RanElsewhere,
    /// This instance reached the firing later than its `late_start` (it was down, paused
    /// or overloaded) and found neither a run holding it nor a record of one: no instance
    /// ran it. It is not run late (unless the job [catches up](crate::Job::catch_up)).
    /// The first instance to find it records it as missed, logs it and counts it.
    Missed {
        /// How late this instance reached it.
        late_by: Duration,
    },
}

impl Outcome {
    /// The outcome's label in logs and metrics: `ran`, `ran_elsewhere`, `missed`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Ran { .. } => "ran",
            Self::RanElsewhere => "ran_elsewhere",
            Self::Missed { .. } => "missed",
        }
    }
}
