//! The lock-group state of a memory store: holders, places (intents) and permits per
//! name, and the grant rule applied to them.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use distlock_api::{grant, LockMode, OwnerId, Token};
use tokio::sync::Notify;
use tokio::time::Instant;

/// One holder of a name.
pub(crate) struct Holder {
    pub(crate) mode: LockMode,
    pub(crate) owner: OwnerId,
    pub(crate) fence: u64,
    pub(crate) expires_at: Instant,
}

/// A waiting group's place (intent) on a name.
pub(crate) struct Intent {
    pub(crate) mode: LockMode,
    pub(crate) ticket: u64,
    /// When the group first took the place.
    pub(crate) since: Instant,
    pub(crate) expires_at: Instant,
}

#[derive(Default)]
pub(crate) struct Name {
    pub(crate) holders: HashMap<Token, Holder>,
    pub(crate) intents: HashMap<Token, Intent>,
    pub(crate) shared_permits: Option<u32>,
    pub(crate) exclusive_permits: Option<u32>,
}

impl Name {
    pub(crate) fn purge(&mut self, now: Instant) {
        self.holders.retain(|_, holder| holder.expires_at > now);
        self.intents.retain(|_, intent| intent.expires_at > now);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.holders.is_empty()
            && self.intents.is_empty()
            && self.shared_permits.is_none()
            && self.exclusive_permits.is_none()
    }

    pub(crate) fn recorded_permits(&self, mode: LockMode) -> Option<u32> {
        match mode {
            LockMode::Shared => self.shared_permits,
            _ => self.exclusive_permits,
        }
    }

    /// The [grant rule](distlock_api::grant::decide) for `mode` of `token` at `now`, whose
    /// group has `ticket` (`None`: its first attempt). Holders and places expired by `now`
    /// do not count.
    pub(crate) fn grants(
        &self,
        now: Instant,
        mode: LockMode,
        default_permits: Option<u32>,
        token: &Token,
        ticket: Option<u64>,
    ) -> bool {
        let request = grant::Request {
            token: token.as_str(),
            mode,
            ticket,
            permits: self.recorded_permits(mode).or(default_permits),
        };
        let holders = self
            .holders
            .iter()
            .filter(|(_, holder)| holder.expires_at > now)
            .map(|(token, holder)| grant::Holder { token: token.as_str(), mode: holder.mode });
        let places = self
            .intents
            .iter()
            .filter(|(_, intent)| intent.expires_at > now)
            .map(|(token, intent)| grant::Place { token: token.as_str(), mode: intent.mode, ticket: intent.ticket });
        grant::decide(&request, holders, places).is_grant()
    }
}

/// The group state of a memory store.
#[derive(Default)]
pub(crate) struct Groups {
    pub(crate) names: Mutex<HashMap<String, Name>>,
    pub(crate) changed: Notify,
    /// The origin of tickets (milliseconds on tokio's clock).
    pub(crate) epoch: std::sync::OnceLock<Instant>,
    /// The last ticket given (written under the `names` lock).
    pub(crate) last_ticket: std::sync::atomic::AtomicU64,
}

impl Groups {
    pub(crate) fn names(&self) -> MutexGuard<'_, HashMap<String, Name>> {
        // Every update is a handful of map operations that cannot panic half-way.
        self.names.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn now_ms(&self, now: Instant) -> u64 {
        let epoch = *self.epoch.get_or_init(|| now);
        u64::try_from(now.saturating_duration_since(epoch).as_millis()).unwrap_or(u64::MAX)
    }

    /// A first attempt's ticket: the time in ms, or one more than the last ticket given
    /// when that is larger, so that tickets are unique and a group that comes after
    /// another (even within one millisecond) stays behind it at every later attempt.
    /// Called under the `names` lock.
    pub(crate) fn next_ticket(&self, now: Instant) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        let ticket = self.now_ms(now).max(self.last_ticket.load(Relaxed).saturating_add(1));
        self.last_ticket.store(ticket, Relaxed);
        ticket
    }
}
