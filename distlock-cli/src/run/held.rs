//! What `run` holds: a plain lock (`--key`) or a lock group (`--read`, `--write`), behind
//! one interface, so that waiting, supervision and release do not care which.

use std::time::Duration;

use distlock::election::{Election, Leadership};
use distlock::{
    DistributedLock, GroupLock, GroupMember, LeaseValue, LockError, LockGroup, LockKey, LockManager, LockMode,
    LockOptions, LossReason, Token,
};
use tokio::time::Instant;

use crate::cli::RunArgs;
use crate::exit::Failure;

/// What `run` was asked to hold, validated before any I/O.
#[derive(Debug)]
pub(super) enum Wanted {
    /// A plain lock.
    Lock(LockKey),
    /// A group: every name in its mode, or none.
    Group(LockGroup),
    /// The lead of an election (its lock `election:NAME`), with this candidate's value.
    Lead {
        /// The election's name.
        name: String,
        /// The lock key, `election:NAME`.
        key: LockKey,
        /// The candidate's value.
        value: LeaseValue,
        /// The loss margin the command's supervision needs.
        loss_margin: Duration,
    },
}

impl Wanted {
    /// From `--key`, or `--read` / `--write` (and `--permits` for the shared members).
    pub(super) fn from_args(args: &RunArgs, loss_margin: Duration) -> Result<Self, Failure> {
        if let (Some((name, value)), Some(key)) = (&args.lead, &args.key) {
            let value = LeaseValue::new(value.as_str())?;
            return Ok(Self::Lead { name: name.clone(), key: key.clone(), value, loss_margin });
        }
        if let Some(key) = &args.key {
            return Ok(Self::Lock(key.clone()));
        }
        let members = args.members.iter().map(|(mode, key)| {
            let member = GroupMember { key: key.clone(), mode: *mode, permits: None };
            match (mode, args.permits) {
                (LockMode::Shared, Some(permits)) => member.with_permits(permits),
                _ => member,
            }
        });
        Ok(Self::Group(LockGroup::new(members)?))
    }

    /// The key, or the group's names in order.
    pub(super) fn names(&self) -> Vec<&str> {
        match self {
            Self::Lock(key) | Self::Lead { key, .. } => vec![key.as_str()],
            Self::Group(group) => group.members().iter().map(|member| member.key.as_str()).collect(),
        }
    }

    /// How messages name it: ``lock `k` `` or ``lock group `a` (shared), `b` (exclusive)``.
    pub(super) fn label(&self) -> String {
        match self {
            Self::Lock(key) => format!("lock `{key}`"),
            Self::Lead { name, .. } => format!("the lead of election `{name}`"),
            Self::Group(group) => {
                let members: Vec<String> =
                    group.members().iter().map(|member| format!("`{}` ({})", member.key, member.mode)).collect();
                format!("lock group {}", members.join(", "))
            }
        }
    }

    /// Why it was not acquired, for the line `run` prints.
    pub(super) fn conflict(&self) -> &'static str {
        match self {
            Self::Lock(_) => "it is held by another owner",
            Self::Lead { .. } => "another candidate leads",
            Self::Group(_) => "a name is held by another owner in a conflicting mode, or out of permits",
        }
    }

    /// One attempt; `None` when it is held elsewhere.
    pub(super) async fn try_take(
        &self,
        locks: &LockManager,
        ttl: Duration,
        options: &LockOptions,
    ) -> Result<Option<Held>, LockError> {
        Ok(match self {
            Self::Lock(key) => locks.try_lock_opts(key.as_str(), ttl, options).await?.map(Held::Lock),
            Self::Group(group) => locks.try_lock_group_opts(group, ttl, options).await?.map(Held::Group),
            Self::Lead { value, .. } => {
                self.election(locks, ttl)?.campaign_for(value.as_str(), Duration::ZERO).await?.map(Held::Lead)
            }
        })
    }

    /// Waits up to `options.wait` (unset: as long as it takes); `None` when it was still
    /// held elsewhere at the deadline.
    pub(super) async fn take(
        &self,
        locks: &LockManager,
        ttl: Duration,
        options: &LockOptions,
    ) -> Result<Option<Held>, LockError> {
        let taken = match self {
            Self::Lock(key) => locks.lock_opts(key.as_str(), ttl, options).await.map(Held::Lock),
            Self::Group(group) => locks.lock_group_opts(group, ttl, options).await.map(Held::Group),
            Self::Lead { value, .. } => {
                let election = self.election(locks, ttl)?;
                return match options.wait {
                    Some(wait) => Ok(election.campaign_for(value.as_str(), wait).await?.map(Held::Lead)),
                    None => election.campaign(value.as_str()).await.map(|lead| Some(Held::Lead(lead))),
                };
            }
        };
        match taken {
            Ok(held) => Ok(Some(held)),
            Err(error) if error.is_not_acquired() => Ok(None),
            Err(error) => Err(error),
        }
    }
}

impl Wanted {
    /// The election of [`Wanted::Lead`].
    fn election(&self, locks: &LockManager, ttl: Duration) -> Result<Election, LockError> {
        match self {
            Self::Lead { name, loss_margin, .. } => Ok(Election::new(locks, name)?.ttl(ttl).loss_margin(*loss_margin)),
            _ => Err(LockError::Config { message: "not an election".into() }),
        }
    }
}

/// A held plain lock or group: one token, one fence, one lease.
#[derive(Debug)]
pub(crate) enum Held {
    /// A plain lock.
    Lock(DistributedLock),
    /// A group.
    Group(GroupLock),
    /// The lead of an election.
    Lead(Leadership),
    /// A scheduled job's firing: its lock is taken, kept and freed by the job, not renewed.
    Firing {
        /// The fencing number of the firing's lock.
        fence: Option<u64>,
        /// Until when the store surely holds the firing's lock (`--at-most` after it was
        /// taken, less clock drift).
        safe_until: Instant,
        /// How long before `safe_until` the command is stopped.
        loss_margin: Duration,
    },
}

impl Held {
    /// The token, which the command gets as DISTLOCK_TOKEN; a firing's is the job's own.
    pub(super) fn token(&self) -> Option<&Token> {
        match self {
            Self::Lock(lock) => Some(lock.token()),
            Self::Group(group) => Some(group.token()),
            Self::Lead(lead) => Some(lead.lock().token()),
            Self::Firing { .. } => None,
        }
    }

    /// The fencing number: a group's stamp.
    pub(super) fn fence(&self) -> Option<u64> {
        match self {
            Self::Lock(lock) => lock.fence(),
            Self::Group(group) => group.stamp(),
            Self::Lead(lead) => Some(lead.term()),
            Self::Firing { fence, .. } => *fence,
        }
    }

    pub(super) fn safe_until(&self) -> Instant {
        match self {
            Self::Lock(lock) => lock.safe_until(),
            Self::Group(group) => group.safe_until(),
            Self::Lead(lead) => lead.lock().safe_until(),
            Self::Firing { safe_until, .. } => *safe_until,
        }
    }

    /// Resolves when the lease is lost (a group's: any member's; a firing's: when it
    /// stops being safe, as it is not renewed).
    pub(super) async fn lost(&self) -> LossReason {
        match self {
            Self::Lock(lock) => lock.lost().await,
            Self::Group(group) => group.lost().await,
            Self::Lead(lead) => lead.lost().await,
            Self::Firing { safe_until, loss_margin, .. } => {
                tokio::time::sleep_until(safe_until.checked_sub(*loss_margin).unwrap_or(*safe_until)).await;
                LossReason::DeadlinePassed
            }
        }
    }

    pub(super) fn is_lost(&self) -> bool {
        match self {
            Self::Lock(lock) => lock.is_lost(),
            Self::Group(group) => group.is_lost(),
            Self::Lead(lead) => lead.is_lost(),
            Self::Firing { safe_until, loss_margin, .. } => Instant::now() + *loss_margin >= *safe_until,
        }
    }

    /// Releases it (a group in one operation); `false` when it was no longer held. A
    /// firing's lock is the job's to free: nothing to do.
    pub(super) async fn release(self) -> Result<bool, LockError> {
        match self {
            Self::Lock(lock) => lock.release().await,
            Self::Lead(lead) => lead.resign().await,
            Self::Firing { .. } => Ok(true),
            Self::Group(group) => match group.release().await {
                Ok(()) => Ok(true),
                Err(LockError::GroupNotHeld { .. }) => Ok(false),
                Err(error) => Err(error),
            },
        }
    }
}
