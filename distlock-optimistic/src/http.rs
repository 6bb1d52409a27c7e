//! `OptimisticError` as an axum response (feature `axum`).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::error::OptimisticError;

impl OptimisticError {
    /// The HTTP status this error maps to: 409 Conflict for [`Stale`](Self::Stale) and
    /// [`FencedOut`](Self::FencedOut), 404 Not Found for [`NotFound`](Self::NotFound),
    /// 500 for the rest (a bug or a misconfiguration: [`Invalid`](Self::Invalid),
    /// [`VersionOverflow`](Self::VersionOverflow)), 503 for [`Database`](Self::Database).
    ///
    /// ```
    /// use axum::http::StatusCode;
    /// use distlock_optimistic::{OptimisticError, StaleRecord};
    ///
    /// let err = OptimisticError::NotFound { table: "posts".into(), id: "7".into() };
    /// assert_eq!(err.status_code(), StatusCode::NOT_FOUND);
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
    pub fn status_code(&self) -> StatusCode {
        match self {
            Self::Stale(_) | Self::FencedOut(_) => StatusCode::CONFLICT,
            Self::NotFound { .. } => StatusCode::NOT_FOUND,
            Self::Database { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Invalid { .. } | Self::VersionOverflow { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// [`OptimisticError::status_code`] with a JSON body: `{"error":"stale_record",
/// "table":…,"id":…,"expected_version":…,"actual_version":…}` for a stale record,
/// `{"error":"fenced_out",…}`, `{"error":"not_found",…}`, or `{"error":"internal"}` /
/// `{"error":"unavailable"}` (no details of server errors leave the service).
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl IntoResponse for OptimisticError {
    fn into_response(self) -> Response {
        let status = self.status_code();
        let body = match &self {
            Self::Stale(stale) => serde_json::json!({
                "error": "stale_record",
                "table": stale.table,
                "id": stale.id,
                "expected_version": stale.expected_version,
                "actual_version": stale.actual_version,
            }),
            Self::FencedOut(fenced) => {
                serde_json::json!({"error": "fenced_out", "table": fenced.table, "id": fenced.id})
            }
            Self::NotFound { table, id } => serde_json::json!({"error": "not_found", "table": table, "id": id}),
            Self::Database { .. } => serde_json::json!({"error": "unavailable"}),
            Self::Invalid { .. } | Self::VersionOverflow { .. } => serde_json::json!({"error": "internal"}),
        }
        .to_string();
        (status, [(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StaleRecord;

    #[test]
    fn stale_is_409_with_its_versions() {
        let err = OptimisticError::Stale(StaleRecord {
            table: "posts".into(),
            id: "7".into(),
            expected_version: 3,
            actual_version: Some(4),
        });
        assert_eq!(err.status_code(), StatusCode::CONFLICT);
        assert_eq!(err.into_response().status(), StatusCode::CONFLICT);
    }
}
