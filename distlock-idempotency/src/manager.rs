//! `Idempotency`: claim → run → complete on any store, with validation, tokens, renewal,
//! the lost-claim signal and metrics done once for every backend.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use distlock_api::idempotency::{
    Completion, DynIdempotencyStore, Fingerprint, IdempotencyKey, StoreClaim, StoredResponse,
};
use distlock_api::{LeaseWatch, LockError, LossReason, Renewal, Token, Ttl};
use tokio::time::Instant;

use crate::observe;
use crate::renewals::{LateRenewal, Renewals};

/// What the lease of a claim is called in "lease lost" warnings (never the key).
const LEASE_LABEL: &str = "idempotency claim";

/// How claims are leased and results kept.
///
/// | setting | default |
/// |---|---|
/// | [`lease`](Self::lease) | 30 s |
/// | [`renew`](Self::renew) | on, every `max(1 s, min(10 s, lease / 3))` |
/// | [`retention`](Self::retention) | 24 h |
/// | [`loss_margin`](Self::loss_margin) | a fifth of the lease |
///
/// ```
/// use std::time::Duration;
/// use distlock::idempotency::IdempotencyOptions;
///
/// let options = IdempotencyOptions::new().lease(Duration::from_secs(10)).retention(Duration::from_secs(3600));
/// assert_eq!(options.get_retention(), Duration::from_secs(3600));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdempotencyOptions {
    lease: Duration,
    renew: bool,
    retention: Duration,
    loss_margin: Option<Duration>,
}

impl Default for IdempotencyOptions {
    fn default() -> Self {
        Self { lease: Duration::from_secs(30), renew: true, retention: Self::DEFAULT_RETENTION, loss_margin: None }
    }
}

impl IdempotencyOptions {
    /// How long completed results are kept by default: 24 hours.
    pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// The lease of a running claim (default 30 s): how long after a crash the next
    /// retry may run. Renewed while the operation runs unless [`renew`](Self::renew) is
    /// off. Sub-millisecond values round up to 1 ms.
    #[must_use]
    pub const fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Whether a background task renews running claims (default on), as a lock's
    /// [`Renewal::Auto`] renews its lease: every `max(1 s, min(10 s, lease / 3))`, at least
    /// twice before the loss margin, stopping after three failures in a row. A lease too
    /// short for that (under 25 ms with the default loss margin) is not renewed. The task
    /// starts only once the claim has run for half an interval, on the claim's own
    /// schedule: a claim completed sooner spawns none. Off, an
    /// operation must finish within the lease, or its completion is refused once another
    /// request took the key over.
    #[must_use]
    pub const fn renew(mut self, renew: bool) -> Self {
        self.renew = renew;
        self
    }

    /// How long a completed result is replayed (default 24 h, at most 365 days).
    #[must_use]
    pub const fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// How long before a claim's lease could end the lost signal fires when no renewal
    /// was confirmed (default a fifth of the lease).
    #[must_use]
    pub const fn loss_margin(mut self, margin: Duration) -> Self {
        self.loss_margin = Some(margin);
        self
    }

    /// The lease of running claims.
    pub const fn get_lease(&self) -> Duration {
        self.lease
    }

    /// How long completed results are kept.
    pub const fn get_retention(&self) -> Duration {
        self.retention
    }
}

/// Settings checked by [`Idempotency::with_options`] (converting them to [`Ttl`]s again
/// cannot fail).
#[derive(Debug, Clone, Copy)]
struct Settings {
    lease: Duration,
    retention: Duration,
    renew_every: Option<Duration>,
    loss_margin: Duration,
}

impl Settings {
    fn of(options: IdempotencyOptions) -> Result<Self, LockError> {
        let lease = Ttl::new(options.lease)?.as_duration();
        let retention = Ttl::new(options.retention)?.as_duration();
        let loss_margin = options.loss_margin.unwrap_or(lease / 5).min(lease);
        let renew_every = if options.renew { renew_every(lease, loss_margin) } else { None };
        Ok(Self { lease, retention, renew_every, loss_margin })
    }
}

/// How often a claim's lease is renewed: as a lock's [`Renewal::Auto`]; `None` when the
/// lease is too short to be renewed safely.
fn renew_every(lease: Duration, loss_margin: Duration) -> Option<Duration> {
    let lease = Ttl::new(lease).ok()?;
    Renewal::Auto.interval(lease, loss_margin).ok().flatten()
}

/// The answer to [`Idempotency::claim`]: exactly these four (match them exhaustively).
#[derive(Debug)]
pub enum Claim {
    /// The key is claimed for this request: run the operation, then
    /// [`complete`](ClaimHandle::complete) the claim with its result.
    Started(ClaimHandle),
    /// The operation ran before: here is its result.
    Replay(StoredResponse),
    /// Another request with this key is running; its claim lapses in `retry_after`
    /// unless renewed. HTTP: 409 Conflict, whose `Retry-After` the layer takes from its
    /// own hint (`IdempotencyLayer::in_progress_retry_after`), capped by this.
    InProgress {
        /// The time left on the running claim's lease: how long a first request that
        /// crashed would block the key, not when a running one will finish.
        retry_after: Duration,
    },
    /// The key was used for a different request (another fingerprint). HTTP: 422 (IETF
    /// draft) or 409 with the first request's hash (`MismatchStatus::ConflictWithHash`).
    Mismatch {
        /// The fingerprint the key was first used with.
        stored: Fingerprint,
    },
}

/// Idempotent operations on an [`IdempotencyStore`](crate::IdempotencyStore): each key
/// runs once; retries get the first result.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock::LockError> {
/// use std::sync::Arc;
/// use distlock::idempotency::{Claim, Fingerprint, Idempotency, IdempotencyKey, StoredResponse};
/// use distlock::memory::MemoryIdempotencyStore;
///
/// let idem = Idempotency::new(Arc::new(MemoryIdempotencyStore::new()));
/// let key = IdempotencyKey::new("user:7:charge:8e03978e")?;
/// let fingerprint = Fingerprint::of_json(&serde_json::json!({"amount": 100}));
///
/// match idem.claim(&key, fingerprint).await? {
///     Claim::Started(claim) => {
///         let response = StoredResponse::new(201, "charged");
///         assert!(claim.complete(&response).await?); // stored for 24 h
///     }
///     other => unreachable!("{other:?}"),
/// }
/// // A retry gets the stored result without running again.
/// assert!(matches!(idem.claim(&key, fingerprint).await?, Claim::Replay(r) if r.status == 201));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Idempotency {
    store: Arc<DynIdempotencyStore>,
    settings: Settings,
    /// The claims waiting for their renewal task, when claims are renewed.
    renewals: Option<Arc<Renewals>>,
}

impl fmt::Debug for Idempotency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idempotency").field("store", &self.store).field("settings", &self.settings).finish()
    }
}

impl Idempotency {
    /// Idempotent operations on `store` with the default [`IdempotencyOptions`].
    pub fn new(store: Arc<DynIdempotencyStore>) -> Self {
        let lease = Duration::from_secs(30);
        let settings = Settings {
            lease,
            retention: IdempotencyOptions::DEFAULT_RETENTION,
            renew_every: renew_every(lease, lease / 5),
            loss_margin: lease / 5,
        };
        Self::of(store, settings)
    }

    fn of(store: Arc<DynIdempotencyStore>, settings: Settings) -> Self {
        let renewals = settings.renew_every.map(|every| Arc::new(Renewals::new(every)));
        Self { store, settings, renewals }
    }

    /// Idempotent operations on `store` with `options`.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidOptions`] when the lease or the retention is zero or longer
    /// than 365 days; before any I/O.
    pub fn with_options(store: Arc<DynIdempotencyStore>, options: IdempotencyOptions) -> Result<Self, LockError> {
        Ok(Self::of(store, Settings::of(options)?))
    }

    /// The store.
    pub fn store(&self) -> &Arc<DynIdempotencyStore> {
        &self.store
    }

    /// The lease of running claims.
    pub fn lease(&self) -> Duration {
        self.settings.lease
    }

    /// How long completed results are kept.
    pub fn retention(&self) -> Duration {
        self.settings.retention
    }

    /// Claims `key` for a request with `fingerprint`: one atomic step on the store.
    ///
    /// `Started` comes with a [`ClaimHandle`] whose lease is renewed in the background
    /// (unless turned off) and whose [`lost`](ClaimHandle::lost) fires when it can no
    /// longer be assumed held.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when the store fails; whether the key was claimed is then
    /// unknown (a claim that was written lapses after its lease).
    ///
    /// # Cancel safety
    ///
    /// A claim cancelled after the store wrote it lapses after its lease.
    pub async fn claim(&self, key: &IdempotencyKey, fingerprint: Fingerprint) -> Result<Claim, LockError> {
        let backend = self.store.backend();
        let token = Token::generate();
        let lease = Ttl::new(self.settings.lease)?;
        let sent_at = Instant::now();
        let answer = self.store.claim(key, &fingerprint, &token, lease).await;
        let outcome = match &answer {
            Ok(StoreClaim::Started) => "started",
            Ok(StoreClaim::Replay(_)) => "replayed",
            Ok(StoreClaim::InProgress { .. }) => "in_progress",
            Ok(StoreClaim::Mismatch { .. }) => "mismatch",
            Err(_) => "error",
        };
        observe::claim(backend, outcome);
        tracing::debug!(backend, outcome, "idempotency claim");
        Ok(match answer? {
            StoreClaim::Started => Claim::Started(self.started(key.clone(), token, lease, sent_at)),
            StoreClaim::Replay(response) => Claim::Replay(response),
            StoreClaim::InProgress { retry_after } => Claim::InProgress { retry_after },
            StoreClaim::Mismatch { stored } => Claim::Mismatch { stored },
        })
    }

    fn started(&self, key: IdempotencyKey, token: Token, ttl: Ttl, sent_at: Instant) -> ClaimHandle {
        let Settings { renew_every, loss_margin, .. } = self.settings;
        let lease = LeaseWatch::new(sent_at, ttl, loss_margin, self.store.backend(), LEASE_LABEL);
        // Listed, not started: the task starts only if the claim runs for about half a
        // renewal interval (see `Renewals`), on the lease's own schedule.
        let renewal = renew_every.zip(self.renewals.as_ref()).and_then(|(every, renewals)| {
            let (store, key, token, watch) = (Arc::clone(&self.store), key.clone(), token.clone(), lease.clone());
            let renewal = renewals.add(Box::new(move || {
                let renew = move || {
                    let (store, key, token) = (Arc::clone(&store), key.clone(), token.clone());
                    async move { store.renew(&key, &token, ttl).await }
                };
                watch
                    .spawn_renewal_from(sent_at + every, ttl, every, renew)
                    .inspect_err(|error| {
                        tracing::warn!(error = error as &dyn std::error::Error, "idempotency claim not renewed");
                    })
                    .ok()
            }));
            if renewal.is_none() {
                tracing::warn!("idempotency claim not renewed: lease renewal must be started inside a tokio runtime");
            }
            renewal
        });
        ClaimHandle { idempotency: self.clone(), key, token, lease, renewal }
    }
}

/// A running claim: the caller runs the operation, then [`complete`](Self::complete)s
/// the claim with the result.
///
/// Dropping the handle stops renewal and leaves the claim to lapse after its lease, so
/// that a request that crashed or was cancelled half-way — whose effects are unknown — is
/// retried only after the lease, never concurrently with a straggler.
/// [`abandon`](Self::abandon) frees the key at once when the operation surely had no
/// effect.
#[must_use = "a claim that is neither completed nor abandoned blocks its key until its lease lapses"]
pub struct ClaimHandle {
    idempotency: Idempotency,
    key: IdempotencyKey,
    token: Token,
    lease: LeaseWatch,
    renewal: Option<Arc<LateRenewal>>,
}

impl ClaimHandle {
    /// The claimed key.
    pub fn key(&self) -> &IdempotencyKey {
        &self.key
    }

    /// The claim's token (a fresh UUID v4 per claim).
    pub fn token(&self) -> &Token {
        &self.token
    }

    /// Whether the claim's lease is lost (see [`lost`](Self::lost)).
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// Resolves when the claim's lease is lost: renewal found the key no longer claimed
    /// by this token (it lapsed and another request took it over), or no renewal was
    /// confirmed by the loss margin before the lease could end. An operation that sees
    /// this should stop: its completion will be refused.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes the lease.
    pub async fn lost(&self) -> LossReason {
        self.lease.lost().await
    }

    /// Until when the store surely holds the claim, unless renewed.
    pub fn safe_until(&self) -> Instant {
        self.lease.safe_until()
    }

    fn stop_renewal(&self) {
        if let Some(renewal) = &self.renewal {
            renewal.stop();
        }
    }

    /// Stores `response` as the key's result, replayed to retries for the retention
    /// time; one token-checked atomic step. Returns `false`, storing nothing, when the
    /// claim had lapsed — the key may already belong to a newer request, whose result is
    /// never overwritten.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when the store fails; the claim then lapses after its lease.
    pub async fn complete(self, response: &StoredResponse) -> Result<bool, LockError> {
        self.stop_renewal();
        let store = &self.idempotency.store;
        let backend = store.backend();
        let retention = Ttl::new(self.idempotency.settings.retention)?;
        let result = store.complete(&self.key, &self.token, response, retention).await;
        match &result {
            Ok(true) => observe::completion(backend, "stored"),
            Ok(false) => {
                observe::completion(backend, "lost");
                self.lease.mark_lost(LossReason::NotHeld);
                tracing::warn!(backend, "idempotency claim lapsed before completion; its result was not stored");
            }
            Err(_) => observe::completion(backend, "error"),
        }
        result
    }

    /// Stops renewal and hands the claim over for completion elsewhere — inside a
    /// transaction of the operation's own database, see `PostgresIdempotencyStore::complete_in`
    /// (crate `distlock-postgres`) — which must then happen within the lease.
    ///
    /// # Errors
    ///
    /// Never in practice: the retention was checked when the [`Idempotency`] was made.
    pub fn into_completion(self) -> Result<Completion, LockError> {
        self.stop_renewal();
        let retention = Ttl::new(self.idempotency.settings.retention)?;
        Ok(Completion::new(self.key.clone(), self.token.clone(), retention))
    }

    /// Deletes the claim so that the next retry runs at once; for an operation that
    /// surely had no effect (it failed before doing anything). Returns `false` when the
    /// claim had lapsed already.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when the store fails; the claim then lapses after its lease.
    pub async fn abandon(self) -> Result<bool, LockError> {
        self.stop_renewal();
        self.idempotency.store.abandon(&self.key, &self.token).await
    }
}

impl Drop for ClaimHandle {
    fn drop(&mut self) {
        self.stop_renewal();
    }
}

impl fmt::Debug for ClaimHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClaimHandle").field("token", &self.token).field("lease", &self.lease).finish_non_exhaustive()
    }
}
