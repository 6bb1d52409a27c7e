//! `RedlockStore`: the Redlock algorithm over N independent Redis masters, each driven by
//! a single-node [`RedisLockStore`] (the same commands and scripts per master).

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use distlock_api::{
    Acquire, Capabilities, HeldLock, KeyPattern, ListCursor, ListPage, LockError, LockInfo, LockStore, QueueStore,
    StoreKey, Token, Ttl,
};
use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::aio::ConnectionManager;
use tokio::time::Instant;

use crate::builder::RedisLockStoreBuilder;
use crate::scripts::SCRIPTS;
use crate::store::RedisLockStore;
use crate::url::RedisUrl;

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
/// No lock groups and no fair queue (waiters barge); [`list`](LockStore::list) reads the
/// first master that answers.
#[derive(Clone)]
pub struct RedlockStore {
    masters: Arc<[RedisLockStore]>,
    fencing: bool,
    master_timeout: Duration,
    /// The number each held lock was granted, by lock key, for the release's raise.
    granted: Arc<Mutex<HashMap<String, (Token, u64)>>>,
}

impl fmt::Debug for RedlockStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockStore")
            .field("masters", &self.masters.len())
            .field("quorum", &self.quorum())
            .field("fencing", &self.fencing)
            .field("master_timeout", &self.master_timeout)
            .finish()
    }
}

/// What one master answered to one command.
enum Vote<T> {
    Answer(T),
    Failed(LockError),
}

impl RedlockStore {
    /// The name reported by [`LockStore::backend`] and in [`LockError::Store`].
    pub const BACKEND: &'static str = "redlock";
    /// The most masters one store takes.
    pub const MAX_MASTERS: usize = 15;
    /// The longest random pause added after a wait ends.
    pub const MAX_JITTER: Duration = Duration::from_millis(3);
    /// The default bound of one command on one master.
    pub const DEFAULT_MASTER_TIMEOUT: Duration = Duration::from_secs(1);

    /// Connects to `redlock://host1:port1,host2:port2,host3:port3[/db][?prefix=…&fencing=…]`
    /// (see [`RedlockStoreBuilder::connect`]).
    ///
    /// # Errors
    ///
    /// As [`RedlockStoreBuilder::connect`].
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        RedlockStoreBuilder::new().connect(url).await
    }

    /// A builder (timeouts, layout).
    pub fn builder() -> RedlockStoreBuilder {
        RedlockStoreBuilder::new()
    }

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

    fn error(operation: &'static str, key: Option<&StoreKey>, err: impl Into<distlock_api::BoxError>) -> LockError {
        LockError::store(Self::BACKEND, operation, key.map(StoreKey::lock_key), err)
    }

    /// Runs `op` on every master in parallel, each bounded by `timeout`.
    async fn fan_out<'a, T, F, Fut>(&'a self, timeout: Duration, op: F) -> Vec<Vote<T>>
    where
        F: Fn(&'a RedisLockStore) -> Fut,
        Fut: std::future::Future<Output = Result<T, LockError>> + 'a,
    {
        let calls = self.masters.iter().map(|master| Self::vote(timeout, op(master)));
        futures_util::future::join_all(calls).await
    }

    /// One master's answer to `call`, bounded by `timeout`.
    async fn vote<T>(timeout: Duration, call: impl std::future::Future<Output = Result<T, LockError>>) -> Vote<T> {
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(answer)) => Vote::Answer(answer),
            Ok(Err(err)) => Vote::Failed(err),
            Err(_) => {
                Vote::Failed(Self::error("master", None, QuorumError("the master did not answer in time".into())))
            }
        }
    }

    /// Runs `op(master index)` on every master in parallel, each bounded by `timeout`, and
    /// returns the votes in the order they came as soon as `decided(votes so far, still
    /// outstanding)` says the outcome can no longer change — once a majority agreed —
    /// without waiting for the slowest masters. Their calls are **not** dropped (a
    /// dropped call may never be sent): they run to the end in a background task, so
    /// every master still gets the command. Only for token-checked commands whose late
    /// run is harmless (release, extend).
    async fn fan_out_until<T, F, Fut>(
        &self,
        timeout: Duration,
        op: F,
        decided: impl Fn(&[Vote<T>], usize) -> bool,
    ) -> Vec<Vote<T>>
    where
        T: Send + 'static,
        F: Fn(usize) -> Fut,
        Fut: std::future::Future<Output = Result<T, LockError>> + Send + 'static,
    {
        let mut calls: FuturesUnordered<_> =
            (0..self.masters.len()).map(|index| Self::vote(timeout, op(index))).collect();
        let mut votes = Vec::with_capacity(self.masters.len());
        while let Some(vote) = calls.next().await {
            votes.push(vote);
            if !calls.is_empty() && decided(&votes, calls.len()) {
                tokio::spawn(async move { while calls.next().await.is_some() {} });
                break;
            }
        }
        votes
    }

    fn per_master_timeout(&self, ttl: Ttl) -> Duration {
        self.master_timeout.min(ttl.as_duration() / 2).max(Duration::from_millis(1))
    }

    /// Releases `token` on one master: the raise-and-delete script when a fence was
    /// granted, the single-node release otherwise.
    async fn release_on(
        master: &RedisLockStore,
        key: &StoreKey,
        token: &Token,
        fence: Option<u64>,
    ) -> Result<bool, LockError> {
        let Some(fence) = fence else { return master.release(key, token).await };
        let (redis_key, counter) = (master.redis_key(key), master.fence_counter_key());
        let mut conn: ConnectionManager = master.connection_manager().clone();
        let args = |cmd: &mut redis::Cmd| {
            cmd.arg(2).arg(&redis_key).arg(&counter).arg(token.as_str()).arg(fence);
        };
        let deleted: i64 = match master.release_channel() {
            Some(channel) => {
                let mut publish = redis::cmd("PUBLISH");
                publish.arg(channel).arg(&redis_key);
                SCRIPTS.redlock_release.run_then(&mut conn, args, &publish).await.map(|(deleted, _)| deleted)
            }
            None => SCRIPTS.redlock_release.run(&mut conn, args).await,
        }
        .map_err(|err| Self::error("release", Some(key), err))?;
        Ok(deleted == 1)
    }

    /// Releases `token` on every master, for a failed acquisition (errors ignored: the
    /// leases expire).
    async fn release_everywhere(&self, key: &StoreKey, token: &Token, ttl: Ttl) {
        let _ = self.fan_out(self.per_master_timeout(ttl), |master| Self::release_on(master, key, token, None)).await;
    }

    fn jitter(&self) -> Duration {
        let random = RandomState::new().build_hasher().finish();
        let max = u64::try_from(Self::MAX_JITTER.as_micros()).unwrap_or(1).max(1);
        Duration::from_micros(random % max)
    }

    fn granted(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Token, u64)>> {
        self.granted.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Why a quorum operation failed.
#[derive(Debug)]
struct QuorumError(String);

impl fmt::Display for QuorumError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for QuorumError {}

/// The drift allowance of the published algorithm: 1 % of the TTL plus 2 ms.
fn drift(ttl: Ttl) -> Duration {
    ttl.as_duration() / 100 + Duration::from_millis(2)
}

fn first_error<T>(votes: Vec<Vote<T>>) -> Option<LockError> {
    votes.into_iter().find_map(|vote| match vote {
        Vote::Failed(err) => Some(err),
        Vote::Answer(_) => None,
    })
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
        let votes = self.fan_out(self.per_master_timeout(ttl), |master| master.try_acquire(key, token, ttl)).await;
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
        Err(Self::error(
            "acquire",
            Some(key),
            QuorumError(format!(
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
        let timeout = self.master_timeout;
        // Every master's answer is awaited, as for an acquisition: a release answered at
        // the majority could leave the token on a slower master for a moment (its script
        // may still be on its way, e.g. loaded again after NOSCRIPT), and the caller's
        // next acquisition with a master down would then find no majority.
        let votes = self.fan_out(timeout, |master| Self::release_on(master, key, token, fence)).await;
        let released = votes.iter().filter(|vote| matches!(vote, Vote::Answer(true))).count();
        let failed = votes.iter().filter(|vote| matches!(vote, Vote::Failed(_))).count();
        if released >= self.quorum() || released + failed < self.quorum() {
            let mut granted = self.granted();
            if granted.get(key.as_str()).is_some_and(|(holder, _)| holder == token) {
                granted.remove(key.as_str());
            }
            return Ok(released >= self.quorum());
        }
        Err(first_error(votes).unwrap_or_else(|| Self::error("release", Some(key), QuorumError("no majority".into()))))
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
        let votes = self.fan_out_until(self.per_master_timeout(ttl), op, decided).await;
        let extended = votes.iter().filter(|vote| matches!(vote, Vote::Answer(true))).count();
        let refused = votes.iter().filter(|vote| matches!(vote, Vote::Answer(false))).count();
        let in_time = ttl.as_duration().checked_sub(started.elapsed() + drift(ttl)).is_some();
        if extended >= self.quorum() {
            return Ok(in_time);
        }
        if refused + extended >= self.quorum() {
            return Ok(false);
        }
        Err(first_error(votes).unwrap_or_else(|| Self::error("extend", Some(key), QuorumError("no majority".into()))))
    }

    /// The token a majority of masters report, with the time until fewer than a majority
    /// hold it and the greatest of their numbers; `None` when no token has a majority.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when too few masters answered to decide.
    async fn inspect(&self, key: &StoreKey) -> Result<Option<LockInfo>, LockError> {
        let votes = self.fan_out(self.master_timeout, |master| master.inspect(key)).await;
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
        Err(first_err.unwrap_or_else(|| Self::error("inspect", Some(key), QuorumError("no majority".into()))))
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
        let jitter = self.jitter().min(deadline.saturating_duration_since(Instant::now()));
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
        Err(last.unwrap_or_else(|| Self::error("list", None, QuorumError("no master".into()))))
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

/// Builds a [`RedlockStore`]: the masters' layout and timeouts.
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock_api::LockError> {
/// let store = distlock_redis::RedlockStore::builder()
///     .fencing(true)
///     .connect("redlock://10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379?prefix=app")
///     .await?;
/// # let _ = store; Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `connect` is called"]
pub struct RedlockStoreBuilder {
    node: RedisLockStoreBuilder,
    fencing: Option<bool>,
    master_timeout: Duration,
}

impl Default for RedlockStoreBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl RedlockStoreBuilder {
    /// The defaults: prefix `distlock`, no fencing, notifications on, 1 s per master.
    pub fn new() -> Self {
        Self { node: RedisLockStoreBuilder::new(), fencing: None, master_timeout: RedlockStore::DEFAULT_MASTER_TIMEOUT }
    }

    /// The key prefix on every master (as [`RedisLockStoreBuilder::key_prefix`]).
    pub fn key_prefix(mut self, key_prefix: impl Into<String>) -> Self {
        self.node = self.node.key_prefix(key_prefix);
        self
    }

    /// Fencing numbers (off by default; `?fencing=true`), always drawn from the masters'
    /// clocks (see [`RedlockStore`]).
    pub fn fencing(mut self, fencing: bool) -> Self {
        self.fencing = Some(fencing);
        self
    }

    /// Release notifications on every master (on by default; `?notifications=`).
    pub fn release_notifications(mut self, enabled: bool) -> Self {
        self.node = self.node.release_notifications(enabled);
        self
    }

    /// The bound of one command on one master (default 1 s; for acquire and extend also
    /// at most half the TTL). A master that does not answer in time counts as failed.
    pub fn master_timeout(mut self, timeout: Duration) -> Self {
        self.master_timeout = timeout;
        self
    }

    /// How long to wait for one connection attempt to a master (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.node = self.node.connect_timeout(timeout);
        self
    }

    /// Connects to a `redlock://` URL:
    ///
    /// ```text
    /// redlock://[[user]:password@]host1[:port1],host2[:port2],…[/db][?prefix=…&fencing=…&notifications=…&fences=clock]
    /// ```
    ///
    /// Every master gets the same credentials, database and layout parameters (those of
    /// a single-node `redis://` URL; `fences` may only be `clock`). 1 to
    /// [`MAX_MASTERS`](RedlockStore::MAX_MASTERS) masters, distinct; an odd number is
    /// usual (3 or 5).
    ///
    /// Connecting needs a majority of the masters reachable; the others are connected
    /// lazily and join as soon as they answer.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] (before any I/O) for a malformed URL; [`LockError::Store`]
    /// with operation `"connect"` when fewer than a majority of masters can be reached.
    pub async fn connect(self, url: &str) -> Result<RedlockStore, LockError> {
        let urls = split_redlock_url(url)?;
        self.connect_masters(&urls).await
    }

    /// Connects to the masters given as single-node `redis://` URLs (each may carry the
    /// same layout parameters).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub(crate) async fn connect_masters(self, urls: &[String]) -> Result<RedlockStore, LockError> {
        if urls.is_empty() || urls.len() > RedlockStore::MAX_MASTERS {
            return Err(LockError::Config {
                message: format!("Redlock needs 1 to {} masters, not {}", RedlockStore::MAX_MASTERS, urls.len()),
            });
        }
        if self.master_timeout.is_zero() {
            return Err(LockError::Config { message: "the Redlock `master_timeout` must be greater than zero".into() });
        }
        let parsed = urls.iter().map(|url| RedisUrl::parse(url)).collect::<Result<Vec<_>, _>>()?;
        let mut fencing = self.fencing;
        for url in &parsed {
            if url.fair_queue() == Some(true) {
                return Err(LockError::Config {
                    message: "Redlock has no fair queue (one queue per master gives no one order across them): \
                              `fair` may only be `false`"
                        .into(),
                });
            }
            if url.clock_fences() == Some(false) {
                return Err(LockError::Config {
                    message: "Redlock fences are always clock fences: `fences` may only be `clock`".into(),
                });
            }
            match (fencing, url.fencing()) {
                (Some(a), Some(b)) if a != b => {
                    return Err(LockError::Config {
                        message: format!("the URL's `fencing` ({b}) contradicts the builder's `fencing` ({a})"),
                    })
                }
                (None, given) => fencing = given,
                _ => {}
            }
        }
        let fencing = fencing.unwrap_or(false);
        let node = self.node.clone().fencing(fencing).clock_fences(true).fair_queue(false);
        let quorum = parsed.len() / 2 + 1;
        let connects = parsed.iter().map(|url| node.clone().connect_url(url));
        let results = futures_util::future::join_all(connects).await;
        let reachable = results.iter().filter(|result| result.is_ok()).count();
        if reachable < quorum {
            let cause = results.into_iter().find_map(Result::err).map_or_else(String::new, |err| err.to_string());
            return Err(LockError::store(
                RedlockStore::BACKEND,
                "connect",
                None,
                QuorumError(format!(
                    "only {reachable} of {} masters reachable, {quorum} needed: {cause}",
                    parsed.len()
                )),
            ));
        }
        let mut masters = Vec::with_capacity(parsed.len());
        for (result, url) in results.into_iter().zip(&parsed) {
            match result {
                Ok(master) => masters.push(master),
                Err(LockError::Config { message }) => return Err(LockError::Config { message }),
                Err(_) => {
                    let client = url.client().clone();
                    let conn =
                        ConnectionManager::new_lazy_with_config(client.clone(), node.connection_manager_config())
                            .map_err(|err| LockError::store(RedlockStore::BACKEND, "connect", None, err))?;
                    masters.push(node.clone().build_lazy(url, client, conn)?);
                }
            }
        }
        Ok(RedlockStore {
            masters: masters.into(),
            fencing,
            master_timeout: self.master_timeout,
            granted: Arc::default(),
        })
    }
}

/// `redlock://auth@h1,h2,h3/db?query` → `redis://auth@h1/db?query`, … (no I/O).
pub(crate) fn split_redlock_url(url: &str) -> Result<Vec<String>, LockError> {
    let config = |message: String| LockError::Config { message: format!("Redlock URL: {message}") };
    let Some(rest) = url.strip_prefix("redlock://") else {
        return Err(config("expected redlock://host1:port1,host2:port2,…".to_owned()));
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (auth, hosts) = match authority.rsplit_once('@') {
        Some((auth, hosts)) => (format!("{auth}@"), hosts),
        None => (String::new(), authority),
    };
    let hosts: Vec<&str> = hosts.split(',').collect();
    if hosts.iter().any(|host| host.is_empty()) {
        return Err(config("an empty host in the list of masters".to_owned()));
    }
    let mut seen = Vec::new();
    for host in &hosts {
        if seen.contains(host) {
            return Err(config(format!("the master `{host}` is listed twice")));
        }
        seen.push(host);
    }
    Ok(hosts.into_iter().map(|host| format!("redis://{auth}{host}{tail}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_masters() {
        assert_eq!(
            split_redlock_url("redlock://:pw@a:1,b:2,c/3?prefix=x").unwrap(),
            ["redis://:pw@a:1/3?prefix=x", "redis://:pw@b:2/3?prefix=x", "redis://:pw@c/3?prefix=x"]
        );
        assert_eq!(
            split_redlock_url("redlock://a,b?fencing=true").unwrap(),
            ["redis://a?fencing=true", "redis://b?fencing=true"]
        );
        for bad in ["redis://a", "redlock://a,,b", "redlock://a,a", "redlock://"] {
            assert!(matches!(split_redlock_url(bad), Err(LockError::Config { .. })), "{bad}");
        }
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift(Ttl::new(Duration::from_secs(10)).unwrap()), Duration::from_millis(102));
    }

    #[test]
    fn the_release_script_keeps_seed_000s_check_first() {
        let second_line = SCRIPTS.redlock_release.code().lines().nth(1).unwrap();
        assert!(second_line.contains(r#"redis.call("get", KEYS[1]) == ARGV[1]"#));
    }
}
