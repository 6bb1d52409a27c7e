//! Errors as HTTP responses (feature `axum`): one problem-details format (RFC 9457) for
//! every error the library answers — [`LockError`] here, `distlock-optimistic`'s stale
//! and fenced-out writes, and the idempotency layer of `distlock-idempotency`.
//!
//! Every answer is `Content-Type: application/problem+json` with the members
//!
//! | member | what it holds |
//! |---|---|
//! | `type` | the problem type: `https://docs.rs/distlock-api/latest/distlock_api/http/#` and the type's name (below); stable — match on it |
//! | `title` | fixed per type |
//! | `status` | the response's status code, a number |
//! | `detail` | one sentence for a person; never a token, a fingerprint, a driver error or a store URL |
//!
//! and, when the type has them, the extension members of the table, always under these
//! names: `key` (a lock key, without the store's namespace), `table` and `id` (a row: `id`
//! is a JSON number when the row's key is an integer column, else a string, and
//! `column=value` pairs joined by `, ` for a composite key), `expected_version` and
//! `actual_version` (numbers; `actual_version` is `null` when unknown), `existing_hash`.
//!
//! ```json
//! {
//!   "type": "https://docs.rs/distlock-api/latest/distlock_api/http/#lock-not-acquired",
//!   "title": "Lock not acquired",
//!   "status": 409,
//!   "detail": "the lock is held by another request; try again later",
//!   "key": "order:42"
//! }
//! ```
//!
//! The type URI is an identifier first (it never changes for a type), and resolves to this
//! table. Every type, from every crate:
//!
//! | `type` (after `#`) | status | members | `Retry-After` | answered for |
//! |---|---|---|---|---|
//! | <a id="lock-not-acquired"></a>`lock-not-acquired` | 409 (a setting, below) | `key` | — | [`LockError::NotAcquired`] |
//! | <a id="lock-lease-lost"></a>`lock-lease-lost` | 503 | `key` (a single lock's) | 1 s | [`LockError::LeaseLost`], [`LockError::GroupNotHeld`] |
//! | <a id="lock-store-unavailable"></a>`lock-store-unavailable` | 503 | — | 1 s | [`LockError::Store`] |
//! | <a id="invalid-lock-key"></a>`invalid-lock-key` | 400 | — | — | [`LockError::InvalidKey`] |
//! | <a id="invalid-lock-group"></a>`invalid-lock-group` | 400 | — | — | [`LockError::InvalidGroup`] |
//! | <a id="invalid-lease-value"></a>`invalid-lease-value` | 400 | — | — | [`LockError::InvalidValue`] |
//! | <a id="invalid-lock-token"></a>`invalid-lock-token` | 400 | — | — | [`LockError::InvalidToken`] |
//! | <a id="lock-misconfigured"></a>`lock-misconfigured` | 500 | — | — | [`LockError::InvalidOptions`], [`LockError::Config`], [`LockError::Unsupported`] |
//! | <a id="stale-record"></a>`stale-record` | 409 | `table`, `id`, `expected_version`, `actual_version` | — | `OptimisticError::Stale` |
//! | <a id="fenced-out"></a>`fenced-out` | 409 | `table`, `id` | — | `OptimisticError::FencedOut` |
//! | <a id="record-not-found"></a>`record-not-found` | 404 | `table`, `id` | — | `OptimisticError::NotFound` |
//! | <a id="database-unavailable"></a>`database-unavailable` | 503 | — | 1 s | `OptimisticError::Database` |
//! | <a id="update-failed"></a>`update-failed` | 500 | — | — | `OptimisticError::Invalid`, `OptimisticError::VersionOverflow` |
//! | <a id="idempotency-key-missing"></a>`idempotency-key-missing` | 400 | — | — | no `Idempotency-Key` where one is required |
//! | <a id="idempotency-key-malformed"></a>`idempotency-key-malformed` | 400 | — | — | an `Idempotency-Key` that is not one key of 1–255 visible characters |
//! | <a id="request-too-large"></a>`request-too-large` | 413 | — | — | a request body over the idempotency layer's limit |
//! | <a id="request-in-progress"></a>`request-in-progress` | 409 | — | 1 s (a setting of the layer) | a retry while the key's first request runs |
//! | <a id="idempotency-key-reused"></a>`idempotency-key-reused` | 422, or 409 | `existing_hash` (409 only) | — | the key sent with a different request |
//! | <a id="idempotency-store-unavailable"></a>`idempotency-store-unavailable` | 503 | — | 1 s | the idempotency store failed; the request did not run |
//! | <a id="response-not-stored"></a>`response-not-stored` | 500 | — | — | a response the idempotency layer could not read whole |
//!
//! `existing_hash` is the one member derived from a request, and only in the mode that
//! asks for it (`MismatchStatus::ConflictWithHash`): the hash the key's first request
//! stored, which the same caller can compute from its own body. No other body carries a
//! token, a fingerprint or a hash.
//!
//! # `Retry-After`
//!
//! Sent only where it says something the client can act on, in whole seconds (rounded
//! up, at least 1):
//!
//! - **503** (a store or database unavailable, a lease lost mid-way): [`UNAVAILABLE_RETRY_AFTER`],
//!   1 s — a short pause before one retry, not a promise that the store is back; clients
//!   back off further on repeated 503s.
//! - **`request-in-progress`**: the idempotency layer's `in_progress_retry_after` (1 s
//!   unless set), when the first request is likely done and a retry replays its answer —
//!   set it to the route's usual duration. Never more than the running claim's lease has
//!   left; it is not the lease's time left, which is how long a *crashed* first request
//!   blocks the key, not how long a running one takes.
//! - **`lock-not-acquired`**: none. The error does not know when the holder will release
//!   (a holder releases early, or renews past its lease), so any figure would be a guess.
//! - Everything else: none; retrying the same request gets the same answer.
//!
//! # Why these statuses
//!
//! A lost lease means the work was stopped half-way because the service could no longer
//! guarantee exclusion (the store was unreachable, or the lease expired and was taken) —
//! a transient server-side condition the client may retry, not a conflict the client
//! caused. An invalid key is built from request input (say a path segment with a control
//! character), so it is the client's fault; invalid options and configuration are the
//! service's. `Store` errors do not name the key. Log the error itself (its `Display` is
//! one line with the cause) for the details.
//!
//! The status of `NotAcquired` is a setting: 409 by default, or e.g. 423 Locked for the
//! whole service with [`set_not_acquired_status`], or for one response with
//! [`LockError::into_response_with`].
//!
//! ```
//! use distlock::http::{not_acquired_status, set_not_acquired_status};
//! use axum::http::StatusCode;
//!
//! set_not_acquired_status(StatusCode::LOCKED)?; // once, at start-up
//! assert_eq!(not_acquired_status(), StatusCode::LOCKED);
//! assert!(set_not_acquired_status(StatusCode::OK).is_err()); // "not acquired" is never a success
//! # set_not_acquired_status(StatusCode::CONFLICT)?;
//! # Ok::<(), distlock::LockError>(())
//! ```

mod problem;

use std::sync::atomic::{AtomicU16, Ordering};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::error::LockError;

pub use problem::{Problem, ProblemType, PROBLEM_JSON, PROBLEM_TYPE_BASE, UNAVAILABLE_RETRY_AFTER};

/// The status `NotAcquired` maps to, as a number; 409 unless set.
static NOT_ACQUIRED_STATUS: AtomicU16 = AtomicU16::new(409);

/// Sets the status every [`LockError::NotAcquired`] response gets from now on, in the
/// whole process (the planned `failCode` of the v1 specification): 409 Conflict by
/// default; 423 Locked and 429 Too Many Requests are common choices. Call it once at
/// start-up. The body stays the `lock-not-acquired` problem.
///
/// # Errors
///
/// [`LockError::Config`] when `status` is not a client or server error (4xx or 5xx): a
/// lock that was not acquired must not look like a success or a redirect. The setting is
/// then unchanged.
pub fn set_not_acquired_status(status: StatusCode) -> Result<(), LockError> {
    check_not_acquired_status(status)?;
    NOT_ACQUIRED_STATUS.store(status.as_u16(), Ordering::Relaxed);
    Ok(())
}

/// The status [`LockError::NotAcquired`] responses get (see [`set_not_acquired_status`]).
pub fn not_acquired_status() -> StatusCode {
    StatusCode::from_u16(NOT_ACQUIRED_STATUS.load(Ordering::Relaxed)).unwrap_or(StatusCode::CONFLICT)
}

fn check_not_acquired_status(status: StatusCode) -> Result<(), LockError> {
    if status.is_client_error() || status.is_server_error() {
        Ok(())
    } else {
        Err(LockError::Config {
            message: format!(
                "the status for a lock not acquired must be a client or server error (4xx or 5xx), not {status}"
            ),
        })
    }
}

impl LockError {
    /// The HTTP status this error maps to (see [`IntoResponse`] for `LockError`);
    /// `NotAcquired` gets [`not_acquired_status`].
    #[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
    pub fn status_code(&self) -> StatusCode {
        match self {
            Self::NotAcquired { .. } => not_acquired_status(),
            Self::LeaseLost { .. } | Self::GroupNotHeld { .. } | Self::Store { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::InvalidKey { .. } | Self::InvalidGroup { .. } | Self::InvalidValue { .. } | Self::InvalidToken => {
                StatusCode::BAD_REQUEST
            }
            Self::InvalidOptions { .. } | Self::Config { .. } | Self::Unsupported { .. } => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    /// This error as a problem answered with `status` (see the module's table).
    fn problem(&self, status: StatusCode) -> Problem {
        let problem = |kind, detail: &str| Problem::new(kind, status, detail);
        match self {
            Self::NotAcquired { key } => {
                problem(ProblemType::LOCK_NOT_ACQUIRED, "the lock is held by another request; try again later")
                    .with("key", key.as_str())
            }
            Self::LeaseLost { key, .. } => problem(
                ProblemType::LOCK_LEASE_LOST,
                "the lock's lease was lost while the request ran; its work may be incomplete",
            )
            .with("key", key.as_str()),
            Self::GroupNotHeld { .. } => problem(
                ProblemType::LOCK_LEASE_LOST,
                "the lock group's leases were lost while the request ran; its work may be incomplete",
            ),
            Self::Store { .. } => problem(ProblemType::LOCK_STORE_UNAVAILABLE, "the lock store is unavailable"),
            Self::InvalidKey { .. } => {
                problem(ProblemType::INVALID_LOCK_KEY, "the lock key made from this request is not usable")
            }
            Self::InvalidGroup { .. } => {
                problem(ProblemType::INVALID_LOCK_GROUP, "the lock group made from this request is not usable")
            }
            Self::InvalidValue { .. } => {
                problem(ProblemType::INVALID_LEASE_VALUE, "the lease value made from this request is not usable")
            }
            Self::InvalidToken => problem(ProblemType::INVALID_LOCK_TOKEN, "the lock token is not a UUID v4"),
            Self::InvalidOptions { .. } | Self::Config { .. } | Self::Unsupported { .. } => {
                problem(ProblemType::LOCK_MISCONFIGURED, "the service's locks are misconfigured")
            }
        }
    }
}

/// A [`Problem`]: `NotAcquired` → 409 Conflict, `lock-not-acquired` with the `key`; see
/// the table of the [module](self): lease lost and store failures → 503 with
/// `Retry-After`, invalid key or token → 400, invalid options or configuration → 500. The
/// body never holds a token. A 5xx answer is logged at `error` (500: the service is misconfigured) or
/// `warn` (503: the store is unavailable or a lease was lost), with the whole error, since
/// the body leaves the details out.
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl IntoResponse for LockError {
    fn into_response(self) -> Response {
        let status = self.status_code();
        self.respond(status)
    }
}

impl LockError {
    /// The response for this error, as [`IntoResponse`] makes it, except that
    /// `NotAcquired` gets `not_acquired` (e.g. 423 Locked for one route) instead of the
    /// process-wide [`not_acquired_status`].
    ///
    /// ```
    /// use axum::http::StatusCode;
    /// use distlock::LockError;
    ///
    /// let busy = LockError::NotAcquired { key: "report:daily".into() };
    /// assert_eq!(busy.into_response_with(StatusCode::LOCKED).status(), StatusCode::LOCKED);
    /// ```
    ///
    /// A `not_acquired` that is not a 4xx or 5xx status is not used: such a response
    /// gets the process-wide status, so a lock that was not acquired never looks like a
    /// success.
    #[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
    pub fn into_response_with(self, not_acquired: StatusCode) -> Response {
        let status = match self {
            Self::NotAcquired { .. } if check_not_acquired_status(not_acquired).is_ok() => not_acquired,
            _ => self.status_code(),
        };
        self.respond(status)
    }

    fn respond(self, status: StatusCode) -> Response {
        // Contention is normal, whatever status it is given: not logged.
        let contention = self.is_not_acquired();
        if status == StatusCode::INTERNAL_SERVER_ERROR && !contention {
            tracing::error!(error = %self.report(), status = status.as_u16(), "lock error answered with 500");
        } else if status.is_server_error() && !contention {
            tracing::warn!(error = %self.report(), status = status.as_u16(), "lock error answered with {status}");
        }
        self.problem(status).into_response()
    }
}

#[cfg(test)]
mod tests {
    use axum::http::header;
    use serde_json::Value;

    use super::*;
    use crate::error::LossReason;

    /// The status, the parsed body, the body's text and the `Retry-After` of `err`'s answer.
    fn answer(err: LockError) -> (StatusCode, Value, String, Option<String>) {
        let status = err.status_code();
        let text = err.problem(status).body();
        let response = err.into_response();
        assert_eq!(response.status(), status);
        assert_eq!(response.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
        let retry_after = response.headers().get(header::RETRY_AFTER).map(|v| v.to_str().unwrap().to_owned());
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["status"], status.as_u16(), "{body}");
        assert!(body["title"].is_string() && body["detail"].is_string(), "{body}");
        (status, body, text, retry_after)
    }

    fn type_of(name: &str) -> String {
        format!("https://docs.rs/distlock-api/latest/distlock_api/http/#{name}")
    }

    #[test]
    fn not_acquired_is_409_naming_the_key_without_retry_after() {
        let (status, body, text, retry_after) = answer(LockError::NotAcquired { key: "order:\"42\"".into() });
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(body["type"], type_of("lock-not-acquired"));
        assert_eq!(body["title"], "Lock not acquired");
        assert_eq!(body["key"], "order:\"42\"");
        assert!(text.starts_with(r#"{"type":"#), "{text}");
        assert_eq!(retry_after, None, "when the holder releases is not known");
    }

    #[test]
    fn not_acquired_status_can_be_chosen_per_response() {
        let busy = || LockError::NotAcquired { key: "report".into() };
        let response = busy().into_response_with(StatusCode::LOCKED);
        assert_eq!(response.status(), StatusCode::LOCKED);
        assert_eq!(response.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
        // Never a success or a redirect: those fall back to the process-wide status.
        for bad in [StatusCode::OK, StatusCode::FOUND, StatusCode::CONTINUE] {
            assert_eq!(busy().into_response_with(bad).status(), not_acquired_status());
        }
        // Other errors keep their own status.
        assert_eq!(LockError::InvalidToken.into_response_with(StatusCode::LOCKED).status(), StatusCode::BAD_REQUEST);
        assert!(matches!(set_not_acquired_status(StatusCode::NO_CONTENT), Err(LockError::Config { .. })));
    }

    #[test]
    fn every_error_answers_its_problem_type_without_details() {
        let secret = "0b6c0c4e-5d1f-4b7e-9d3a-1f2e3d4c5b6a";
        let store =
            LockError::store("redis", "release", Some("order:1"), std::io::Error::other(format!("token {secret}")));
        let lost = LockError::LeaseLost { key: "job".into(), reason: LossReason::NotHeld };
        let cases = [
            (store, StatusCode::SERVICE_UNAVAILABLE, "lock-store-unavailable", Some("1")),
            (lost, StatusCode::SERVICE_UNAVAILABLE, "lock-lease-lost", Some("1")),
            (LockError::GroupNotHeld { stamp: 7 }, StatusCode::SERVICE_UNAVAILABLE, "lock-lease-lost", Some("1")),
            (crate::LockKey::new("").unwrap_err(), StatusCode::BAD_REQUEST, "invalid-lock-key", None),
            (LockError::InvalidToken, StatusCode::BAD_REQUEST, "invalid-lock-token", None),
            (
                LockError::Config { message: format!("redis://user:pw@host/{secret}") },
                StatusCode::INTERNAL_SERVER_ERROR,
                "lock-misconfigured",
                None,
            ),
        ];
        for (err, status, name, retry) in cases {
            let (answered, body, text, retry_after) = answer(err);
            assert_eq!((answered, body["type"].as_str()), (status, Some(type_of(name).as_str())), "{text}");
            assert_eq!(retry_after.as_deref(), retry, "{text}");
            for leak in [secret, "pw@", "redis://", "order:1"] {
                assert!(!text.contains(leak), "{leak} in {text}");
            }
        }
        let (_, body, _, _) = answer(LockError::LeaseLost { key: "job".into(), reason: LossReason::NotHeld });
        assert_eq!(body["key"], "job");
        let (_, body, _, _) = answer(LockError::GroupNotHeld { stamp: 7 });
        assert!(body.get("key").is_none(), "{body}");
    }
}
