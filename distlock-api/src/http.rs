//! `LockError` as an HTTP response (feature `axum`).
//!
//! | error | status | body |
//! |---|---|---|
//! | [`NotAcquired`](LockError::NotAcquired) | 409 Conflict | `{"error":"lock_not_acquired","key":"order:42"}` |
//! | [`LeaseLost`](LockError::LeaseLost) | 503 Service Unavailable | `{"error":"lock_lease_lost","key":"order:42"}` |
//! | [`Store`](LockError::Store) | 503 Service Unavailable | `{"error":"lock_store_unavailable"}` |
//! | [`GroupNotHeld`](LockError::GroupNotHeld) | 503 Service Unavailable | `{"error":"lock_lease_lost"}` |
//! | [`InvalidKey`](LockError::InvalidKey) | 400 Bad Request | `{"error":"invalid_lock_key"}` |
//! | [`InvalidGroup`](LockError::InvalidGroup) | 400 Bad Request | `{"error":"invalid_lock_group"}` |
//! | [`InvalidToken`](LockError::InvalidToken) | 400 Bad Request | `{"error":"invalid_lock_token"}` |
//! | [`InvalidOptions`](LockError::InvalidOptions), [`Config`](LockError::Config), [`Unsupported`](LockError::Unsupported) | 500 Internal Server Error | `{"error":"lock_misconfigured"}` |
//!
//! Why: a lost lease means the work was stopped half-way because the service could no
//! longer guarantee exclusion (the store was unreachable, or the lease expired and was
//! taken) — a transient server-side condition the client may retry, not a conflict the
//! client caused. An invalid key is built from request input (say a path segment with a
//! control character), so it is the client's fault; invalid options and configuration
//! are the service's.
//!
//! Bodies never contain a token, a driver error or a store URL; `Store` errors do not
//! even name the key, which carries the store's namespace. Log the error itself
//! (its `Display` is one line with the cause) for the details.
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

use std::sync::atomic::{AtomicU16, Ordering};

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::error::LockError;

/// The status `NotAcquired` maps to, as a number; 409 unless set.
static NOT_ACQUIRED_STATUS: AtomicU16 = AtomicU16::new(409);

/// Sets the status every [`LockError::NotAcquired`] response gets from now on, in the
/// whole process (the planned `failCode` of the v1 specification): 409 Conflict by
/// default; 423 Locked and 429 Too Many Requests are common choices. Call it once at
/// start-up. The body stays `{"error":"lock_not_acquired","key":"…"}`.
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

    fn json_body(&self) -> String {
        let (code, key) = match self {
            Self::NotAcquired { key } => ("lock_not_acquired", Some(key)),
            Self::LeaseLost { key, .. } => ("lock_lease_lost", Some(key)),
            Self::Store { .. } => ("lock_store_unavailable", None),
            Self::InvalidKey { .. } => ("invalid_lock_key", None),
            Self::InvalidGroup { .. } => ("invalid_lock_group", None),
            Self::InvalidValue { .. } => ("invalid_lease_value", None),
            Self::GroupNotHeld { .. } => ("lock_lease_lost", None),
            Self::InvalidToken => ("invalid_lock_token", None),
            Self::InvalidOptions { .. } | Self::Config { .. } | Self::Unsupported { .. } => {
                ("lock_misconfigured", None)
            }
        };
        let mut body = serde_json::Map::new();
        body.insert("error".to_owned(), code.into());
        if let Some(key) = key {
            body.insert("key".to_owned(), key.as_str().into());
        }
        serde_json::Value::Object(body).to_string()
    }
}

/// `NotAcquired` → 409 Conflict with `{"error":"lock_not_acquired","key":"…"}`; see the
/// table in the crate's `http` notes: lease lost and store failures → 503, invalid key or
/// token → 400, invalid options or configuration → 500. The body is JSON and never holds
/// a token. A 5xx answer is logged at `error` (500: the service is misconfigured) or
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
        let mut response = (status, self.json_body()).into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::LossReason;

    fn body_of(err: LockError) -> (StatusCode, String, String) {
        let status = err.status_code();
        let body = err.json_body();
        let response = err.into_response();
        assert_eq!(response.status(), status);
        let content_type = response.headers()[header::CONTENT_TYPE].to_str().unwrap().to_owned();
        (status, body, content_type)
    }

    #[test]
    fn not_acquired_is_409_naming_the_key() {
        let (status, body, content_type) = body_of(LockError::NotAcquired { key: "order:\"42\"".into() });
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(body, r#"{"error":"lock_not_acquired","key":"order:\"42\""}"#);
        assert_eq!(content_type, "application/json");
    }

    #[test]
    fn not_acquired_status_can_be_chosen_per_response() {
        let busy = || LockError::NotAcquired { key: "report".into() };
        let response = busy().into_response_with(StatusCode::LOCKED);
        assert_eq!(response.status(), StatusCode::LOCKED);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        // Never a success or a redirect: those fall back to the process-wide status.
        for bad in [StatusCode::OK, StatusCode::FOUND, StatusCode::CONTINUE] {
            assert_eq!(busy().into_response_with(bad).status(), not_acquired_status());
        }
        // Other errors keep their own status.
        assert_eq!(LockError::InvalidToken.into_response_with(StatusCode::LOCKED).status(), StatusCode::BAD_REQUEST);
        assert!(matches!(set_not_acquired_status(StatusCode::NO_CONTENT), Err(LockError::Config { .. })));
    }

    #[test]
    fn other_errors_map_to_documented_statuses_without_details() {
        let cause = std::io::Error::other("token 0b6c0c4e-secret");
        let (status, body, _) = body_of(LockError::store("redis", "release", Some("order:1"), cause));
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, r#"{"error":"lock_store_unavailable"}"#);
        let (status, body, _) = body_of(LockError::LeaseLost { key: "job".into(), reason: LossReason::NotHeld });
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, r#"{"error":"lock_lease_lost","key":"job"}"#)
        );
        let (status, _, _) = body_of(crate::LockKey::new("").unwrap_err());
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let (status, _, _) = body_of(LockError::InvalidToken);
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let (status, body, _) = body_of(LockError::Config { message: "redis://user:pw@host".into() });
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!body.contains("pw"), "{body}");
    }
}
