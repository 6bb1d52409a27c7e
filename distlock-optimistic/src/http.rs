//! `OptimisticError` as an axum response (feature `axum`), in the library's one
//! problem-details format (`distlock_api::http`).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use distlock_api::http::{Problem, ProblemType};
use serde_json::Value;

use crate::error::{OptimisticError, RowId};

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
    /// let err = OptimisticError::NotFound { table: "posts".into(), id: 7_i64.into() };
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

    /// This error as the problem its response carries.
    fn problem(&self) -> Problem {
        let problem = |kind, detail: &str| Problem::new(kind, self.status_code(), detail);
        let row = |problem: Problem, table: &str, id: &RowId| problem.with("table", table).with("id", id_value(id));
        match self {
            Self::Stale(stale) => row(
                problem(ProblemType::STALE_RECORD, "the record was changed since it was read; read it again"),
                &stale.table,
                &stale.id,
            )
            .with("expected_version", stale.expected_version)
            .with("actual_version", stale.actual_version),
            Self::FencedOut(fenced) => row(
                problem(ProblemType::FENCED_OUT, "the write's lock was lost and the record was written since"),
                &fenced.table,
                &fenced.id,
            ),
            Self::NotFound { table, id } => {
                row(problem(ProblemType::RECORD_NOT_FOUND, "no record has this id"), table, id)
            }
            Self::Database { .. } => problem(ProblemType::DATABASE_UNAVAILABLE, "the database is unavailable"),
            Self::Invalid { .. } | Self::VersionOverflow { .. } => {
                problem(ProblemType::UPDATE_FAILED, "the update could not be made")
            }
        }
    }
}

/// A row's key in JSON: a number for an integer key, else its text.
fn id_value(id: &RowId) -> Value {
    let number = id
        .as_integer()
        .and_then(|n| i64::try_from(n).map(Value::from).or_else(|_| u64::try_from(n).map(Value::from)).ok());
    number.unwrap_or_else(|| id.as_str().into())
}

/// A problem-details answer (`application/problem+json`, see `distlock::http`) with
/// [`OptimisticError::status_code`]: `stale-record` with `table`, `id`,
/// `expected_version` and `actual_version` (`null` when unknown); `fenced-out` and
/// `record-not-found` with `table` and `id` (a number for an integer key);
/// `database-unavailable` (with `Retry-After`) and `update-failed` with no details of the
/// server's error.
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl IntoResponse for OptimisticError {
    fn into_response(self) -> Response {
        self.problem().into_response()
    }
}

#[cfg(test)]
mod tests {
    use axum::http::header;

    use super::*;
    use crate::{FencedOut, StaleRecord};

    /// The status, `Retry-After`, body text and parsed body of `err`'s answer.
    fn answer(err: OptimisticError) -> (StatusCode, Option<String>, String, Value) {
        let text = err.problem().body();
        let response = err.into_response();
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/problem+json");
        let retry_after = response.headers().get(header::RETRY_AFTER).map(|v| v.to_str().unwrap().to_owned());
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["status"], response.status().as_u16());
        (response.status(), retry_after, text, body)
    }

    fn type_of(name: &str) -> String {
        format!("https://docs.rs/distlock-api/latest/distlock_api/http/#{name}")
    }

    #[test]
    fn stale_is_409_with_its_versions_and_a_numeric_id() {
        let stale =
            StaleRecord { table: "posts".into(), id: 7_i64.into(), expected_version: 3, actual_version: Some(4) };
        let (status, retry_after, _, body) = answer(OptimisticError::Stale(stale.clone()));
        assert_eq!((status, retry_after), (StatusCode::CONFLICT, None));
        assert_eq!(body["type"], type_of("stale-record"));
        assert_eq!(body["title"], "Stale record");
        assert_eq!((&body["table"], &body["id"]), (&Value::from("posts"), &Value::from(7)));
        assert_eq!((&body["expected_version"], &body["actual_version"]), (&Value::from(3), &Value::from(4)));

        let unknown = StaleRecord { id: "slug-7".into(), actual_version: None, ..stale };
        let (_, _, _, body) = answer(OptimisticError::Stale(unknown));
        assert_eq!((&body["id"], &body["actual_version"]), (&Value::from("slug-7"), &Value::Null));
    }

    #[test]
    fn fenced_out_and_not_found_name_the_row_without_fences() {
        let fenced = FencedOut { table: "posts".into(), id: 7_u64.into(), fence: 41, current_fence: Some(42) };
        let (status, _, text, body) = answer(OptimisticError::FencedOut(fenced));
        assert_eq!((status, body["type"].as_str()), (StatusCode::CONFLICT, Some(type_of("fenced-out").as_str())));
        assert_eq!((&body["table"], &body["id"]), (&Value::from("posts"), &Value::from(7)));
        assert!(!text.contains("41") && !text.contains("42"), "{text}");
        let (status, _, _, body) = answer(OptimisticError::NotFound { table: "posts".into(), id: "a=1, b=x".into() });
        assert_eq!(
            (status, body["type"].as_str()),
            (StatusCode::NOT_FOUND, Some(type_of("record-not-found").as_str()))
        );
        assert_eq!(body["id"], "a=1, b=x");
    }

    #[test]
    fn server_errors_carry_no_details() {
        let source = sqlx::Error::Configuration("postgres://user:pw@db/app".into());
        let (status, retry_after, text, body) = answer(OptimisticError::Database { table: "posts".into(), source });
        assert_eq!((status, retry_after.as_deref()), (StatusCode::SERVICE_UNAVAILABLE, Some("1")));
        assert_eq!(body["type"], type_of("database-unavailable"));
        assert!(!text.contains("pw") && !text.contains("posts"), "{text}");
        let (status, _, text, body) = answer(OptimisticError::Invalid { message: "secret column".into() });
        assert_eq!(
            (status, body["type"].as_str()),
            (StatusCode::INTERNAL_SERVER_ERROR, Some(type_of("update-failed").as_str()))
        );
        assert!(!text.contains("secret"), "{text}");
    }
}
