//! The contract every idempotency store implements.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use super::fingerprint::Fingerprint;
use super::key::IdempotencyKey;
use super::response::StoredResponse;
use crate::{LockError, Token, Ttl};
use async_trait::async_trait;

/// What a store answers to [`IdempotencyStore::claim`]: exactly these four, so that the
/// manager's exhaustive match fails to compile when the contract gains an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreClaim {
    /// The key was free (never used, or its record expired, or its claim lapsed): it is
    /// now claimed for the caller's token, for the lease asked for. Run the operation.
    Started,
    /// The operation completed earlier with this result (for the same fingerprint).
    Replay(StoredResponse),
    /// Another claim on the key is running; it lapses in `retry_after` unless renewed.
    InProgress {
        /// The time left on the running claim's lease, by the store's clock.
        retry_after: Duration,
    },
    /// The key is in use (running or completed) for a request with another fingerprint.
    Mismatch {
        /// The fingerprint the key was first claimed with.
        stored: Fingerprint,
    },
}

/// A store of idempotency records: the atomic primitives, one per method.
///
/// Users work through `Idempotency` (crate `distlock-idempotency`), which validates
/// input, generates tokens, renews claims, tracks their loss and records metrics; a store
/// only implements these primitives.
///
/// # Contract
///
/// A record is keyed by an [`IdempotencyKey`] and holds the fingerprint it was claimed
/// with and either a *running claim* (a token and a lease) or a *completed result* (a
/// [`StoredResponse`] kept for a retention time). Every method is **one atomic step on
/// the server** (one Lua script, one SQL statement, one critical section) timed by the
/// store's own clock:
///
/// - [`claim`](Self::claim): no live record (none, its retention ended, or its claim's
///   lease ended) → writes a running claim for `token` → `Started`. A live record with
///   another fingerprint → `Mismatch`. A completed record → `Replay`. A running claim →
///   `InProgress` with its time left — except a running claim of the *same token*, which
///   is `Started` again (a claim retried after a lost answer).
/// - [`renew`](Self::renew): resets the lease of `token`'s running, unexpired claim;
///   `false` when the key is not (any more) claimed by `token`.
/// - [`complete`](Self::complete): turns `token`'s running, unexpired claim into a
///   completed record kept for `retention`; `false` — and nothing written — when the
///   claim lapsed (and perhaps was taken over by a newer request, whose result must win).
/// - [`abandon`](Self::abandon): deletes `token`'s running claim, so the next retry runs
///   at once; `false` when there was none.
///
/// Expired records are removed without unbounded growth (key expiry on Redis, a bounded
/// purge on PostgreSQL, a bounded sweep in memory).
#[async_trait]
pub trait IdempotencyStore: Debug + Send + Sync + 'static {
    /// The backend's name, `"memory"`, `"redis"`, `"postgres"`: the `backend` label of
    /// metrics and the backend of [`LockError::Store`].
    fn backend(&self) -> &'static str;

    /// Claims `key` for `token` with a lease of `lease`, or reports what holds it.
    async fn claim(
        &self,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        token: &Token,
        lease: Ttl,
    ) -> Result<StoreClaim, LockError>;

    /// Resets the lease of `token`'s running claim on `key` to `lease`.
    async fn renew(&self, key: &IdempotencyKey, token: &Token, lease: Ttl) -> Result<bool, LockError>;

    /// Stores `response` as `key`'s result for `retention`, if `token` still holds the
    /// claim.
    async fn complete(
        &self,
        key: &IdempotencyKey,
        token: &Token,
        response: &StoredResponse,
        retention: Ttl,
    ) -> Result<bool, LockError>;

    /// Deletes `token`'s running claim on `key`.
    async fn abandon(&self, key: &IdempotencyKey, token: &Token) -> Result<bool, LockError>;
}

/// An idempotency store behind a pointer: `Arc<DynIdempotencyStore>`.
pub type DynIdempotencyStore = dyn IdempotencyStore;

#[async_trait]
impl<T: IdempotencyStore + ?Sized> IdempotencyStore for Arc<T> {
    fn backend(&self) -> &'static str {
        (**self).backend()
    }

    async fn claim(
        &self,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        token: &Token,
        lease: Ttl,
    ) -> Result<StoreClaim, LockError> {
        (**self).claim(key, fingerprint, token, lease).await
    }

    async fn renew(&self, key: &IdempotencyKey, token: &Token, lease: Ttl) -> Result<bool, LockError> {
        (**self).renew(key, token, lease).await
    }

    async fn complete(
        &self,
        key: &IdempotencyKey,
        token: &Token,
        response: &StoredResponse,
        retention: Ttl,
    ) -> Result<bool, LockError> {
        (**self).complete(key, token, response, retention).await
    }

    async fn abandon(&self, key: &IdempotencyKey, token: &Token) -> Result<bool, LockError> {
        (**self).abandon(key, token).await
    }
}

/// A running claim handed over for completion outside [`IdempotencyStore::complete`],
/// e.g. inside the operation's own database transaction (the PostgreSQL store's
/// `complete_in`), which writes the result only if `token` still holds the claim on `key`.
///
/// `ClaimHandle::into_completion` of `distlock-idempotency` makes one from a started
/// claim.
#[derive(Debug, Clone)]
pub struct Completion {
    key: IdempotencyKey,
    token: Token,
    retention: Ttl,
}

impl Completion {
    /// The claim of `token` on `key`, whose result is to be kept for `retention`.
    pub fn new(key: IdempotencyKey, token: Token, retention: Ttl) -> Self {
        Self { key, token, retention }
    }

    /// The claimed key.
    pub fn key(&self) -> &IdempotencyKey {
        &self.key
    }

    /// The claim's token, which the completion must match.
    pub fn token(&self) -> &Token {
        &self.token
    }

    /// How long the result is to be kept.
    pub fn retention(&self) -> Duration {
        self.retention.as_duration()
    }
}
