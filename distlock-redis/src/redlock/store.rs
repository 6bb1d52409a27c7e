//! `RedlockStore`: each operation sent to every master by the vote of `quorum.rs`, and
//! decided by the majority.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use distlock_api::{
    Acquire, Capabilities, HeldLock, KeyPattern, ListCursor, ListPage, LockError, LockInfo, LockStore, QueueStore,
    StoreKey, Token, Ttl,
};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use super::quorum::{
    drift, error, fan_out, fan_out_until, first_error, jitter, per_master_timeout, release_on, Vote, BACKEND,
    MAX_JITTER,
};
use crate::commands::Failure;
use crate::single::RedisLockStore;

/// A [`LockStore`] over N independent Redis masters following the published Redlock
/// algorithm (<https://redis.io/docs/latest/develop/use/patterns/distributed-locks/>):
///
/// * **acquire**: the single-node acquire (`SET NX PX`, or the fenced clock script) sent
///   to every master **in parallel**, each bounded by a short per-master timeout; the
///   lock is granted only when a majority (`N / 2 + 1`) answered "acquired" and the
///   validity left, `TTL − elapsed − drift` (drift = TTL / 100 + 2 ms), is positive.
///   Otherwise the token is released on **every** master (also those that did not
///   answer) and the answer is "held" — or an error when too few masters answered to
///   decide, so an unreachable majority fails cleanly and never grants;
/// * **early answers**: a renewal (extend) answers as soon as a majority decided the
///   outcome, without waiting for the slowest master; its command still runs to the end
///   in a background task (token-checked, so running late changes nothing that is not
///   its own). An acquisition and a release wait for every master: a late `SET` could
///   land after the release meant to remove it, and a late release could leave the key
///   held on a master that the caller's next acquisition needs;
/// * **release**: on every master in parallel; `true` when a majority released;
/// * **extend** (renewal): on every master in parallel; `true` only when a majority
///   extended within the new validity, so a lease kept by a minority fires the
///   manager's lost-lease signal;
/// * **waiting**: each master's release notifications; a wait ends when a majority of
///   masters report the key released (or free), followed by a random jitter of up to
///   [`MAX_JITTER`](Self::MAX_JITTER) so that competing clients do not split the vote
///   again in lock-step.
///
/// # Fencing
///
/// With fencing on, every master draws its number from its clock and its counter
/// ([`clock_fences`](crate::RedisLockStoreBuilder::clock_fences)), the lock's number is
/// the greatest of the majority's, and a release raises every master's counter to it
/// (`lua/redlock_release.lua`). Numbers then strictly increase across releases, expiry
/// take-overs, restarts of masters without persistence and changes of the majority, as
/// long as the masters' clocks do not go backwards and differ by less than the shortest
/// TTL (a take-over after expiry happens at least a TTL after the grant). See the crate
/// README, "Redlock", for what this does and does not give.
///
/// # Not provided
///
/// No lock groups, no fair queue (waiters barge) and no values attached to leases (see
/// [`values`](LockStore::values)); [`list`](LockStore::list) reads the first master that
/// answers.
#[derive(Clone)]
pub struct RedlockStore {
    pub(super) masters: Arc<[RedisLockStore]>,
    pub(super) fencing: bool,
    pub(super) response_timeout: Duration,
    /// The number each held lock was granted, by lock key, for the release's raise.
    pub(super) granted: Arc<Mutex<HashMap<String, (Token, u64)>>>,
}

impl fmt::Debug for RedlockStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockStore")
            .field("masters", &self.masters.len())
            .field("quorum", &self.quorum())
            .field("fencing", &self.fencing)
            .field("response_timeout", &self.response_timeout)
            .finish()
    }
}

impl RedlockStore {
    /// The name reported by [`LockStore::backend`] and in [`LockError::Store`].
    pub const BACKEND: &'static str = BACKEND;
    /// The most masters one store takes.
    pub const MAX_MASTERS: usize = 15;
    /// The longest random pause added after a wait ends.
    pub const MAX_JITTER: Duration = MAX_JITTER;
    /// The default bound of one command on one master:
    /// [`RedlockStoreBuilder::response_timeout`](crate::RedlockStoreBuilder::response_timeout).
    pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);

    /// How many masters must agree: `N / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.masters.len() / 2 + 1
    }

    /// The single-node store of each master, in URL order.
    pub fn masters(&self) -> &[RedisLockStore] {
        &self.masters
    }

    /// Whether acquisitions return fencing numbers.
    pub fn fencing(&self) -> bool {
        self.fencing
    }

    /// Releases `token` on every master, for a failed acquisition (errors ignored: the
    /// leases expire).
    async fn release_everywhere(&self, key: &StoreKey, token: &Token, ttl: Ttl) {
        let timeout = per_master_timeout(self.response_timeout, ttl);
        let _ = fan_out(&self.masters, timeout, |master| release_on(master, key, token, None)).await;
    }

    fn granted(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Token, u64)>> {
        self.granted.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl LockStore for RedlockStore {
    fn backend(&self) -> &'static str {
        Self::BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
            .with_fencing(self.fencing)
            .with_release_notifications(self.masters.iter().all(RedisLockStore::notified_waits))
    }

    /// None: a queue would have to be kept in agreement by a majority of masters, and
    /// Redlock refuses `fair=true` (waiting on it is barging).
    fn queue(&self) -> Option<&dyn QueueStore> {
        None
    }

    /// None: a group would need one atomic grant across a majority of independent
    /// masters; group calls are refused with [`LockError::Unsupported`].
    fn groups(&self) -> Option<&dyn distlock_api::GroupLockStore> {
        None
    }

    /// None: a holder and its value cannot be read in one atomic step across independent
    /// masters. Each master can check the holder and write the value atomically, but a
    /// value that reached only part of the masters (one failed, timed out or restarted
    /// without persistence) leaves them disagreeing on the value of one lease, and a
    /// reader taking the majority's answer could see a value change back or vanish while
    /// the lease lasts. Leader election (which needs values) is refused with
    /// [`LockError::Unsupported`]; run it on one server, Sentinel or Cluster.
    fn values(&self) -> Option<&dyn distlock_api::LeaseValueStore> {
        None
    }

    /// The single-node acquire on every master in parallel; granted on a majority within
    /// the validity time, otherwise released everywhere.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when fewer than a majority of masters answered and the
    /// answers did not show the key held (nothing is granted then).
    async fn try_acquire(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<Acquire, LockError> {
        let started = Instant::now();
        // Every master's answer is awaited: a refused or cancelled acquisition releases
        // its token everywhere, and a release must not overtake a `SET` still waiting
        // for its master's connection (it would leave the token on that master).
        let votes = fan_out(&self.masters, per_master_timeout(self.response_timeout, ttl), |master| {
            master.try_acquire(key, token, ttl)
        })
        .await;
        let (mut acquired, mut held, mut fence, mut ttl_left) = (0, 0, None::<u64>, None::<Duration>);
        for vote in &votes {
            match vote {
                Vote::Answer(Acquire::Acquired { fence: number }) => {
                    acquired += 1;
                    fence = fence.max(*number);
                }
                Vote::Answer(Acquire::Held { ttl_left: left }) => {
                    held += 1;
                    ttl_left = ttl_left.max(*left);
                }
                Vote::Answer(_) | Vote::Failed(_) => {}
            }
        }
        let validity = ttl.as_duration().checked_sub(started.elapsed() + drift(ttl));
        if acquired >= self.quorum() && validity.is_some() {
            if let (true, Some(fence)) = (self.fencing, fence) {
                self.granted().insert(key.as_str().to_owned(), (token.clone(), fence));
            }
            return Ok(Acquire::Acquired { fence: if self.fencing { fence } else { None } });
        }
        self.release_everywhere(key, token, ttl).await;
        // Enough answers to know the key is held (or the vote split): the caller may wait.
        if acquired + held >= self.quorum() {
            return Ok(Acquire::Held { ttl_left });
        }
        let answered = acquired + held;
        let cause = first_error(votes).map_or_else(|| "no error".to_owned(), |err| err.to_string());
        Err(error(
            "acquire",
            Some(key),
            Failure(format!(
                "only {answered} of {} masters answered ({acquired} acquired, {held} held), {} needed; first error: {cause}",
                self.masters.len(),
                self.quorum()
            )),
        ))
    }

    /// Releases on every master in parallel; `true` when a majority released.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when fewer than a majority released and too many masters
    /// failed to say whether they held it.
    async fn release(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
        let fence = {
            let granted = self.granted();
            granted.get(key.as_str()).filter(|(holder, _)| holder == token).map(|(_, fence)| *fence)
        };
        let timeout = self.response_timeout;
        // Every master's answer is awaited, as for an acquisition: a release answered at
        // the majority could leave the token on a slower master for a moment (its script
        // may still be on its way, e.g. loaded again after NOSCRIPT), and the caller's
        // next acquisition with a master down would then find no majority.
        let votes = fan_out(&self.masters, timeout, |master| release_on(master, key, token, fence)).await;
        let released = votes.iter().filter(|vote| matches!(vote, Vote::Answer(true))).count();
        let failed = votes.iter().filter(|vote| matches!(vote, Vote::Failed(_))).count();
        if released >= self.quorum() || released + failed < self.quorum() {
            let mut granted = self.granted();
            if granted.get(key.as_str()).is_some_and(|(holder, _)| holder == token) {
                granted.remove(key.as_str());
            }
            return Ok(released >= self.quorum());
        }
        Err(first_error(votes).unwrap_or_else(|| error("release", Some(key), Failure("no majority".into()))))
    }

    /// Extends on every master in parallel; `true` when a majority extended within the
    /// new validity time.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when too few masters answered to decide.
    async fn extend(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<bool, LockError> {
        let started = Instant::now();
        let quorum = self.quorum();
        // Decided once a majority extended, or when a majority can no longer extend and
        // enough answered to say so.
        let decided = |votes: &[Vote<bool>], outstanding: usize| {
            let extended = votes.iter().filter(|vote| matches!(vote, Vote::Answer(true))).count();
            let refused = votes.iter().filter(|vote| matches!(vote, Vote::Answer(false))).count();
            extended >= quorum || (extended + outstanding < quorum && refused + extended >= quorum)
        };
        let call = Arc::new((Arc::clone(&self.masters), key.clone(), token.clone()));
        let op = |index: usize| {
            let call = Arc::clone(&call);
            async move {
                let (masters, key, token) = &*call;
                masters[index].extend(key, token, ttl).await
            }
        };
        let votes =
            fan_out_until(self.masters.len(), per_master_timeout(self.response_timeout, ttl), op, decided).await;
        let extended = votes.iter().filter(|vote| matches!(vote, Vote::Answer(true))).count();
        let refused = votes.iter().filter(|vote| matches!(vote, Vote::Answer(false))).count();
        let in_time = ttl.as_duration().checked_sub(started.elapsed() + drift(ttl)).is_some();
        if extended >= self.quorum() {
            return Ok(in_time);
        }
        if refused + extended >= self.quorum() {
            return Ok(false);
        }
        Err(first_error(votes).unwrap_or_else(|| error("extend", Some(key), Failure("no majority".into()))))
    }

    /// The token a majority of masters report, with the time until fewer than a majority
    /// hold it and the greatest of their numbers; `None` when no token has a majority.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when too few masters answered to decide.
    async fn inspect(&self, key: &StoreKey) -> Result<Option<LockInfo>, LockError> {
        let votes = fan_out(&self.masters, self.response_timeout, |master| master.inspect(key)).await;
        let mut answered = 0;
        let mut holders: HashMap<Token, Vec<(Duration, Option<u64>)>> = HashMap::new();
        let mut first_err = None;
        for vote in votes {
            match vote {
                Vote::Answer(info) => {
                    answered += 1;
                    if let Some(info) = info {
                        holders.entry(info.token).or_default().push((info.ttl_left, info.fence));
                    }
                }
                Vote::Failed(err) => {
                    first_err.get_or_insert(err);
                }
            }
        }
        for (token, mut reports) in holders {
            if reports.len() >= self.quorum() {
                reports.sort_by_key(|report| std::cmp::Reverse(report.0));
                let ttl_left = reports[self.quorum() - 1].0;
                let fence = reports.iter().filter_map(|report| report.1).max();
                return Ok(Some(LockInfo::new(token, fence, ttl_left)));
            }
        }
        if answered >= self.quorum() {
            return Ok(None);
        }
        Err(first_err.unwrap_or_else(|| error("inspect", Some(key), Failure("no majority".into()))))
    }

    /// Waits on every master's release notifications; ends when a majority of them saw
    /// the key released or free (or `max` ran out), then pauses a random jitter.
    async fn wait_for_release(&self, key: &StoreKey, max: Duration) -> Result<(), LockError> {
        let deadline = Instant::now() + max.min(RedisLockStore::MAX_WAIT);
        let mut waits: FuturesUnordered<_> =
            self.masters.iter().map(|master| master.wait_for_release(key, max)).collect();
        let (mut woken, mut failed) = (0, None);
        while let Some(result) = waits.next().await {
            match result {
                Ok(()) => woken += 1,
                Err(err) => {
                    failed.get_or_insert(err);
                }
            }
            if woken >= self.quorum() {
                break;
            }
        }
        if woken < self.quorum() {
            if let Some(err) = failed {
                return Err(err);
            }
        }
        let jitter = jitter().min(deadline.saturating_duration_since(Instant::now()));
        tokio::time::sleep(jitter).await;
        Ok(())
    }

    /// One page of the first master that answers (its `SCAN` cursor), each lock on it
    /// then read on every master as [`inspect`](LockStore::inspect) does: a lock is
    /// listed with the token, time left and fence of its majority, or not at all.
    async fn list(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        let mut last = None;
        for master in self.masters.iter() {
            match master.list(pattern, cursor, limit).await {
                Ok(page) => return self.quorum_page(page).await,
                Err(err @ LockError::Config { .. }) => return Err(err),
                Err(err) => last = Some(err),
            }
        }
        Err(last.unwrap_or_else(|| error("list", None, Failure("no master".into()))))
    }
}

impl RedlockStore {
    /// `page` (one master's) with every lock replaced by what a majority reports.
    async fn quorum_page(&self, page: ListPage) -> Result<ListPage, LockError> {
        let next = page.next.clone();
        let reads = page.locks.into_iter().map(|held| async move {
            let key = held.key.to_store_key();
            let info = self.inspect(&key).await?;
            Ok::<_, LockError>(info.map(|info| HeldLock::new(held.key, vec![info])))
        });
        let locks = futures_util::future::join_all(reads).await.into_iter().collect::<Result<Vec<_>, _>>()?;
        Ok(ListPage::new(locks.into_iter().flatten().collect(), next))
    }
}
