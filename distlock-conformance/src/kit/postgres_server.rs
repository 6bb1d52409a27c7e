//! PostgreSQL fault hooks: terminating a pool's backends, and small admin helpers.
//!
//! Fault tests share the server behind `DISTLOCK_POSTGRES_URL` with every other test, so
//! they never stop it: they give their pool a unique `application_name`
//! ([`random_identifier`]) and terminate only the backends carrying that name.
//!
//! ```no_run
//! use distlock_conformance::kit::postgres_server::{random_identifier, terminate_backends};
//!
//! # async fn demo(admin_url: &str) {
//! let app = random_identifier("dl_fault");
//! // … connect the store's pool with `application_name = app`, run operations, then:
//! let killed = terminate_backends(admin_url, &app).await;
//! assert!(killed > 0);
//! # }
//! ```

use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};

/// How long the hooks wait for the server (connecting, or for terminated backends to go).
const ADMIN_TIMEOUT: Duration = Duration::from_secs(15);

/// A fresh, random, valid SQL identifier (also usable as an `application_name`):
/// `prefix` followed by `_` and 16 hex digits. `prefix` must itself be a plain
/// identifier of at most 40 bytes.
pub fn random_identifier(prefix: &str) -> String {
    assert!(prefix.len() <= 40, "prefix {prefix:?} is too long");
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}_{}", &random[..16])
}

/// Opens one admin connection to `admin_url`.
///
/// # Panics
///
/// When no connection can be made within 15 s.
pub async fn admin_connection(admin_url: &str) -> PgConnection {
    tokio::time::timeout(ADMIN_TIMEOUT, PgConnection::connect(admin_url))
        .await
        .expect("admin connection timed out")
        .expect("admin connection to PostgreSQL")
}

/// Runs one statement on a fresh admin connection (e.g. `DROP SCHEMA … CASCADE`) and
/// returns the number of rows it affected.
///
/// # Panics
///
/// When the statement fails.
pub async fn execute(admin_url: &str, sql: &str) -> u64 {
    let mut conn = admin_connection(admin_url).await;
    let affected = sqlx::raw_sql(sql).execute(&mut conn).await.unwrap_or_else(|e| panic!("{sql}: {e}")).rows_affected();
    let _ = conn.close().await;
    affected
}

/// The number of server backends whose `application_name` is `application_name`.
pub async fn backend_count(admin_url: &str, application_name: &str) -> u64 {
    let mut conn = admin_connection(admin_url).await;
    let count = count_on(&mut conn, application_name).await;
    let _ = conn.close().await;
    count
}

async fn count_on(conn: &mut PgConnection, application_name: &str) -> u64 {
    let count: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()",
    )
    .bind(application_name)
    .fetch_one(&mut *conn)
    .await
    .expect("count backends");
    u64::try_from(count).expect("a count is never negative")
}

/// Terminates (`pg_terminate_backend`) every backend whose `application_name` is
/// `application_name`, waits until those backends have exited, and returns how many were
/// terminated. Clients of those backends get an error on their next use of the
/// connection — the server side of a dropped connection. (A pool still in use opens new
/// backends with the same name at once; those are not waited for.)
///
/// # Panics
///
/// When the server refuses, or a terminated backend is still there after 15 s.
pub async fn terminate_backends(admin_url: &str, application_name: &str) -> u64 {
    terminate_where(admin_url, application_name, None).await
}

/// The process ids of the backends named `application_name` whose latest statement was a
/// `LISTEN` — the connections a store listens for notifications on.
pub async fn listener_backends(admin_url: &str, application_name: &str) -> Vec<i32> {
    let mut conn = admin_connection(admin_url).await;
    let pids: Vec<i32> = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity \
         WHERE application_name = $1 AND pid <> pg_backend_pid() AND query LIKE 'LISTEN %' ORDER BY pid",
    )
    .bind(application_name)
    .fetch_all(&mut conn)
    .await
    .expect("list listener backends");
    let _ = conn.close().await;
    pids
}

/// Like [`terminate_backends`], but only the backends named `application_name` whose
/// latest statement was a `LISTEN` (see [`listener_backends`]).
///
/// # Panics
///
/// As [`terminate_backends`].
pub async fn terminate_listeners(admin_url: &str, application_name: &str) -> u64 {
    terminate_where(admin_url, application_name, Some("LISTEN %")).await
}

async fn terminate_where(admin_url: &str, application_name: &str, query_like: Option<&str>) -> u64 {
    let mut conn = admin_connection(admin_url).await;
    let terminated: Vec<i32> = sqlx::query_scalar(
        // MATERIALIZED: the filter must run before pg_terminate_backend; in one WHERE
        // clause the planner may evaluate the two in either order.
        "WITH victims AS MATERIALIZED ( \
             SELECT pid FROM pg_stat_activity \
             WHERE application_name = $1 AND pid <> pg_backend_pid() AND ($2::text IS NULL OR query LIKE $2)) \
         SELECT pid FROM victims WHERE pg_terminate_backend(pid)",
    )
    .bind(application_name)
    .bind(query_like)
    .fetch_all(&mut conn)
    .await
    .expect("pg_terminate_backend");
    let deadline = Instant::now() + ADMIN_TIMEOUT;
    // Termination is asynchronous: the backends exit shortly after the signal.
    loop {
        let alive: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)")
            .bind(&terminated)
            .fetch_one(&mut conn)
            .await
            .expect("look for terminated backends");
        if alive == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "backends of {application_name:?} survived pg_terminate_backend");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = conn.close().await;
    u64::try_from(terminated.len()).expect("fits")
}
