//! `Problem`: the one problem-details (RFC 9457) shape every HTTP answer of the library
//! takes, and the list of its types. Imports nothing from the rest of the crate.

use std::fmt;
use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// The media type of every error answer.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The start of every problem type URI; the type's name follows.
pub const PROBLEM_TYPE_BASE: &str = "https://docs.rs/distlock-api/latest/distlock_api/http/#";

/// The `Retry-After` of every 503 answer: a store or database unavailable, a lease lost.
pub const UNAVAILABLE_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Members a problem's own fields fill; extensions never replace them.
const STANDARD_MEMBERS: [&str; 4] = ["type", "title", "status", "detail"];

/// One problem type: its name (the end of its `type` URI), its fixed `title`, and the
/// `Retry-After` its answers carry by default (see the [module](super) notes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProblemType {
    name: &'static str,
    title: &'static str,
    retry_after: Option<Duration>,
}

impl ProblemType {
    const fn new(name: &'static str, title: &'static str) -> Self {
        Self { name, title, retry_after: None }
    }

    const fn unavailable(name: &'static str, title: &'static str) -> Self {
        Self { name, title, retry_after: Some(UNAVAILABLE_RETRY_AFTER) }
    }

    /// A lock held by someone else.
    pub const LOCK_NOT_ACQUIRED: Self = Self::new("lock-not-acquired", "Lock not acquired");
    /// A lease lost while the request's work ran.
    pub const LOCK_LEASE_LOST: Self = Self::unavailable("lock-lease-lost", "Lock lease lost");
    /// The lock store failed.
    pub const LOCK_STORE_UNAVAILABLE: Self = Self::unavailable("lock-store-unavailable", "Lock store unavailable");
    /// A lock key built from the request is unusable.
    pub const INVALID_LOCK_KEY: Self = Self::new("invalid-lock-key", "Invalid lock key");
    /// A lock group built from the request is unusable.
    pub const INVALID_LOCK_GROUP: Self = Self::new("invalid-lock-group", "Invalid lock group");
    /// A lease value from the request is unusable.
    pub const INVALID_LEASE_VALUE: Self = Self::new("invalid-lease-value", "Invalid lease value");
    /// A lock token from the request is not one.
    pub const INVALID_LOCK_TOKEN: Self = Self::new("invalid-lock-token", "Invalid lock token");
    /// The service's locks are misconfigured.
    pub const LOCK_MISCONFIGURED: Self = Self::new("lock-misconfigured", "Lock misconfigured");
    /// A versioned update found the row changed since it was read.
    pub const STALE_RECORD: Self = Self::new("stale-record", "Stale record");
    /// A fenced write carried a lower fence than the row's.
    pub const FENCED_OUT: Self = Self::new("fenced-out", "Fenced out");
    /// No row has the key.
    pub const RECORD_NOT_FOUND: Self = Self::new("record-not-found", "Record not found");
    /// The database of a versioned update failed.
    pub const DATABASE_UNAVAILABLE: Self = Self::unavailable("database-unavailable", "Database unavailable");
    /// A versioned update was built wrong, or its version cannot grow.
    pub const UPDATE_FAILED: Self = Self::new("update-failed", "Update failed");
    /// No `Idempotency-Key` where one is required.
    pub const IDEMPOTENCY_KEY_MISSING: Self = Self::new("idempotency-key-missing", "Idempotency-Key missing");
    /// An `Idempotency-Key` that is not one key.
    pub const IDEMPOTENCY_KEY_MALFORMED: Self = Self::new("idempotency-key-malformed", "Idempotency-Key malformed");
    /// A request body over the idempotency layer's limit.
    pub const REQUEST_TOO_LARGE: Self = Self::new("request-too-large", "Request body too large");
    /// The key's first request is still running.
    pub const REQUEST_IN_PROGRESS: Self =
        Self { name: "request-in-progress", title: "Request in progress", retry_after: Some(Duration::from_secs(1)) };
    /// The key was sent with a different request.
    pub const IDEMPOTENCY_KEY_REUSED: Self = Self::new("idempotency-key-reused", "Idempotency-Key reused");
    /// The idempotency store failed; the request did not run.
    pub const IDEMPOTENCY_STORE_UNAVAILABLE: Self =
        Self::unavailable("idempotency-store-unavailable", "Idempotency store unavailable");
    /// A response the idempotency layer could not read whole (not stored).
    pub const RESPONSE_NOT_STORED: Self = Self::new("response-not-stored", "Response not stored");

    /// The type's name, the end of its URI: `lock-not-acquired`.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The `title` of its answers.
    pub const fn title(&self) -> &'static str {
        self.title
    }

    /// The `Retry-After` its answers carry unless [`Problem::retry_after`] says otherwise.
    pub const fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// Its `type` URI: [`PROBLEM_TYPE_BASE`] and the name.
    pub fn uri(&self) -> String {
        format!("{PROBLEM_TYPE_BASE}{}", self.name)
    }
}

impl fmt::Display for ProblemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PROBLEM_TYPE_BASE}{}", self.name)
    }
}

/// An answer in the library's problem-details format (see the [module](super) notes):
/// `type`, `title`, `status`, `detail` and the type's extension members, as
/// `application/problem+json`, with the type's `Retry-After`.
///
/// ```
/// use axum::http::StatusCode;
/// use axum::response::IntoResponse;
/// use distlock::http::{Problem, ProblemType};
///
/// let problem = Problem::new(ProblemType::LOCK_NOT_ACQUIRED, StatusCode::CONFLICT, "the lock is held")
///     .with("key", "order:42");
/// let body: serde_json::Value = serde_json::from_str(&problem.body())?;
/// assert_eq!(body["type"], "https://docs.rs/distlock-api/latest/distlock_api/http/#lock-not-acquired");
/// assert_eq!((body["status"].as_u64(), body["key"].as_str()), (Some(409), Some("order:42")));
/// let response = problem.into_response();
/// assert_eq!(response.headers()["content-type"], "application/problem+json");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    kind: ProblemType,
    status: StatusCode,
    detail: String,
    members: Vec<(&'static str, Value)>,
    retry_after: Option<Duration>,
}

impl Problem {
    /// A problem of type `kind` answered with `status`; `detail` is for a person and must
    /// not hold a token, a fingerprint, a driver error or a URL.
    pub fn new(kind: ProblemType, status: StatusCode, detail: impl Into<String>) -> Self {
        Self { kind, status, detail: detail.into(), members: Vec::new(), retry_after: kind.retry_after }
    }

    /// Adds the extension member `name` (one of the names of the module's table). The
    /// standard members (`type`, `title`, `status`, `detail`) cannot be replaced: such a
    /// name is ignored.
    #[must_use]
    pub fn with(mut self, name: &'static str, value: impl Into<Value>) -> Self {
        if !STANDARD_MEMBERS.contains(&name) {
            self.members.retain(|(existing, _)| *existing != name);
            self.members.push((name, value.into()));
        }
        self
    }

    /// Replaces the type's `Retry-After` (`None`: no header).
    #[must_use]
    pub fn retry_after(mut self, after: Option<Duration>) -> Self {
        self.retry_after = after;
        self
    }

    /// The problem's type.
    pub fn kind(&self) -> ProblemType {
        self.kind
    }

    /// The response's status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The `Retry-After` header's value in seconds: the duration rounded up, at least 1.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after.map(|after| (after.as_secs() + u64::from(after.subsec_nanos() > 0)).max(1))
    }

    /// The JSON body: the standard members in this order, then the extensions in the
    /// order they were added.
    pub fn body(&self) -> String {
        let standard = [
            ("type", Value::from(self.kind.uri())),
            ("title", Value::from(self.kind.title)),
            ("status", Value::from(self.status.as_u16())),
            ("detail", Value::from(self.detail.as_str())),
        ];
        let members =
            standard.iter().chain(&self.members).map(|(name, value)| format!("{}:{value}", Value::from(*name)));
        format!("{{{}}}", members.collect::<Vec<_>>().join(","))
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let mut response = (self.status, self.body()).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(seconds) = self.retry_after_secs() {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_members_come_first_and_cannot_be_replaced() {
        let problem = Problem::new(ProblemType::STALE_RECORD, StatusCode::CONFLICT, "changed")
            .with("table", "posts")
            .with("id", 7)
            .with("type", "about:blank")
            .with("status", 200);
        let text = problem.body();
        assert!(text.starts_with(r#"{"type":"https://docs.rs/"#), "{text}");
        assert!(text.ends_with(r#""table":"posts","id":7}"#), "{text}");
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["type"], format!("{PROBLEM_TYPE_BASE}stale-record"));
        assert_eq!(body["title"], "Stale record");
        assert_eq!(body["status"], 409);
        assert_eq!(body["id"], 7);
        assert_eq!(body.as_object().unwrap().len(), 6, "{body}");
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        let problem =
            |after| Problem::new(ProblemType::REQUEST_IN_PROGRESS, StatusCode::CONFLICT, "").retry_after(after);
        assert_eq!(problem(Some(Duration::from_millis(300))).retry_after_secs(), Some(1));
        assert_eq!(problem(Some(Duration::ZERO)).retry_after_secs(), Some(1));
        assert_eq!(problem(Some(Duration::from_millis(2001))).retry_after_secs(), Some(3));
        assert_eq!(problem(None).retry_after_secs(), None);
        let unavailable = Problem::new(ProblemType::LOCK_STORE_UNAVAILABLE, StatusCode::SERVICE_UNAVAILABLE, "");
        assert_eq!(unavailable.retry_after_secs(), Some(1));
        let response = unavailable.into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        assert_eq!(response.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
        assert_eq!(Problem::new(ProblemType::LOCK_NOT_ACQUIRED, StatusCode::CONFLICT, "").retry_after_secs(), None);
    }
}
