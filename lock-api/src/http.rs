//! `LockError` as an HTTP response (feature `axum`).
//!
//! | error | status | body |
//! |---|---|---|
//! | [`NotAcquired`](LockError::NotAcquired) | 409 Conflict | `{"error":"lock_not_acquired","key":"order:42"}` |
//! | [`LeaseLost`](LockError::LeaseLost) | 503 Service Unavailable | `{"error":"lock_lease_lost","key":"order:42"}` |
//! | [`Store`](LockError::Store) | 503 Service Unavailable | `{"error":"lock_store_unavailable"}` |
//! | [`InvalidKey`](LockError::InvalidKey) | 400 Bad Request | `{"error":"invalid_lock_key"}` |
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

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::error::LockError;

impl LockError {
    /// The HTTP status this error maps to (see [`IntoResponse`] for `LockError`).
    #[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
    pub fn status_code(&self) -> StatusCode {
        match self {
            Self::NotAcquired { .. } => StatusCode::CONFLICT,
            Self::LeaseLost { .. } | Self::Store { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::InvalidKey { .. } | Self::InvalidToken => StatusCode::BAD_REQUEST,
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
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(error = %self, status = status.as_u16(), "lock error answered with 500");
        } else if status.is_server_error() {
            tracing::warn!(error = %self, status = status.as_u16(), "lock error answered with 503");
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
