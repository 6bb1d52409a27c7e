//! The SQL text of every statement the store sends, built once per store.
//!
//! Only validated, double-quoted identifiers ([`Identifier`](crate::config::Identifier))
//! are spliced into the text; keys, tokens and durations always travel as bind
//! parameters. Every lock operation is **one** autocommit statement, timed by the
//! server's `clock_timestamp()`.
//!
//! # Why the fence is computed the way it is
//!
//! Fences come from one sequence, and each acquisition writes a value drawn **after** the
//! row it writes is locked, or on a row that did not exist:
//!
//! - *Take-over of an existing row* (the `DO UPDATE` branch): PostgreSQL evaluates the
//!   `SET` list only after it has locked the conflicting row and re-checked the `WHERE`
//!   (expired) condition on its latest version, so the `nextval` there is drawn while we
//!   hold the row, after the previous holder's statement — which drew its own fence —
//!   committed. Hence it is larger than the row's fence. A value drawn *before* the row
//!   lock (a `nextval` in `VALUES` applied with `SET fence = EXCLUDED.fence`) could be
//!   applied after a larger one when two acquirers race over an expired row: pitfall 1.
//!   `GREATEST(fence + 1, …)` keeps the order even if someone resets the sequence.
//! - *First insert of a key* (no conflict): there is no earlier fence for the key, so the
//!   `nextval` in `VALUES` is fine…
//! - …except after a purge deleted the key's row (pitfall 2: a per-key counter kept in
//!   the row dies with it). That is why the counter is a **sequence**, not the row: a
//!   re-created row draws a value larger than every value drawn before the statement
//!   started, including the purged row's fence — provided the purged fence was drawn
//!   before our statement started. The purge only deletes rows whose lease ended at least
//!   [`MIN_PURGE_HORIZON`](crate::MIN_PURGE_HORIZON) ago, so that can only fail for an
//!   acquire statement that ran longer than the horizon. The acquire statement therefore
//!   returns whether it finished within the horizon of its own start, and the store
//!   refuses (reports an error, never a fence) an acquisition that did not.
//!
//! Release never deletes the row: it clears the token and ends the lease *now*
//! (`expires_at = clock_timestamp()`), keeping the moment the lease ended for the purge.

use std::time::Duration;

use crate::config::Layout;
use crate::notify::channel_name;
use crate::purge::MIN_PURGE_HORIZON;

/// How many rows one purge statement deletes at most, so that it holds row locks (which
/// acquirers of those keys wait for) only briefly.
pub(crate) const PURGE_BATCH: i64 = 10_000;

/// A fixed key for `pg_advisory_xact_lock` that serialises concurrent `ensure_schema`
/// calls (`CREATE … IF NOT EXISTS` alone can fail with a unique violation in `pg_type`
/// when two sessions create the same table at once). ASCII "distlock".
pub(crate) const SCHEMA_LOCK_KEY: i64 = 0x6469_7374_6c6f_636b;

/// The exact SQL a [`PostgresLockStore`](crate::PostgresLockStore) sends, for review, for
/// DBAs, and for running the same statements by hand
/// ([`PostgresLockStore::statements`](crate::PostgresLockStore::statements)).
#[derive(Debug)]
pub struct Statements {
    /// `$1` key, `$2` token, `$3` TTL in ms → one row `(fence, finished_in_time)` when
    /// acquired, no row when the lease is held.
    pub(crate) acquire: String,
    /// `$1` key, `$2` token → one row: `count` 1 when released (and notified), else 0.
    pub(crate) release: String,
    /// The `LISTEN`/`pg_notify` channel of the table.
    pub(crate) channel: String,
    /// `$1` key, `$2` token, `$3` TTL in ms → 1 row affected when extended.
    pub(crate) extend: String,
    /// `$1` key → `(token, fence, micros_left)` of an unexpired lease, or no row.
    pub(crate) inspect: String,
    /// `$1` horizon in ms, `$2` batch size → rows affected.
    pub(crate) purge: String,
    /// `$1` schema, `$2` sequence, `$3` table names → `(schema exists, sequence exists,
    /// table relpersistence or NULL)`.
    pub(crate) schema_state: String,
    pub(crate) create_schema: String,
    pub(crate) create_sequence: String,
    pub(crate) create_table: String,
}

impl Statements {
    /// Acquire: `$1` key (`text`), `$2` token (`text`), `$3` TTL in ms (`int8`). Returns one
    /// row `(fence int8, finished_within_purge_horizon bool)` when acquired, no row when
    /// another lease holds the key.
    pub fn acquire(&self) -> &str {
        &self.acquire
    }

    /// Release: `$1` key, `$2` token; one row `(count int8)`, 1 when released. A release
    /// also sends `pg_notify(<channel>, key)`, delivered when it commits.
    pub fn release(&self) -> &str {
        &self.release
    }

    /// The notification channel releases are announced on (payload: the store key,
    /// `lock:<key>`): `distlock:<schema>.<table>`, or `distlock:<hash>` when that would
    /// exceed PostgreSQL's 63 bytes. `LISTEN` needs it double-quoted.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// Extend: `$1` key, `$2` token, `$3` TTL in ms; one row affected when extended.
    pub fn extend(&self) -> &str {
        &self.extend
    }

    /// Inspect: `$1` key; one row `(token, fence, microseconds left)` while held.
    pub fn inspect(&self) -> &str {
        &self.inspect
    }

    /// One purge batch: `$1` horizon in ms, `$2` batch size; rows affected.
    pub fn purge(&self) -> &str {
        &self.purge
    }

    /// The DDL of [`ensure_schema`](crate::PostgresLockStore::ensure_schema), in order
    /// (it runs them in one transaction under `pg_advisory_xact_lock`, skipping `CREATE
    /// SCHEMA` when the schema exists).
    pub fn ddl(&self) -> [&str; 3] {
        [&self.create_schema, &self.create_sequence, &self.create_table]
    }

    pub(crate) fn new(layout: &Layout) -> Self {
        let schema = layout.schema.quoted();
        let table = format!("{schema}.{}", layout.table.quoted());
        // Inside a string literal; identifiers never contain quotes or backslashes.
        let sequence = format!("{schema}.{}", layout.sequence.quoted());
        let horizon_ms = millis(MIN_PURGE_HORIZON);
        let unlogged = if layout.unlogged { "UNLOGGED " } else { "" };
        // Also inside a string literal: only `[A-Za-z0-9_:.]`.
        let channel = channel_name(layout);
        Self {
            acquire: format!(
                "INSERT INTO {table} AS held (key, token, fence, expires_at) \
                 VALUES ($1, $2, nextval('{sequence}'), clock_timestamp() + $3 * interval '1 millisecond') \
                 ON CONFLICT (key) DO UPDATE \
                 SET token = EXCLUDED.token, \
                     fence = GREATEST(held.fence + 1, nextval('{sequence}')), \
                     expires_at = clock_timestamp() + $3 * interval '1 millisecond' \
                 WHERE held.expires_at <= clock_timestamp() \
                 RETURNING held.fence, \
                     clock_timestamp() - statement_timestamp() < {horizon_ms} * interval '1 millisecond'"
            ),
            // pg_notify in FROM runs once per released row (never when nothing was
            // released); the notification is delivered when the statement commits.
            release: if layout.notify {
                format!(
                    "WITH released AS ( \
                         UPDATE {table} SET token = NULL, expires_at = clock_timestamp() \
                         WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp() \
                         RETURNING key) \
                     SELECT count(*) FROM released, pg_notify('{channel}', released.key)"
                )
            } else {
                format!(
                    "WITH released AS ( \
                         UPDATE {table} SET token = NULL, expires_at = clock_timestamp() \
                         WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp() \
                         RETURNING key) \
                     SELECT count(*) FROM released"
                )
            },
            extend: format!(
                "UPDATE {table} SET expires_at = clock_timestamp() + $3 * interval '1 millisecond' \
                 WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()"
            ),
            inspect: format!(
                "SELECT token, fence, \
                     GREATEST((extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint, 1) \
                 FROM {table} WHERE key = $1 AND expires_at > clock_timestamp()"
            ),
            purge: format!(
                "DELETE FROM {table} WHERE key = ANY(ARRAY( \
                     SELECT key FROM {table} \
                     WHERE expires_at < statement_timestamp() - $1 * interval '1 millisecond' \
                     LIMIT $2)) \
                 AND expires_at < statement_timestamp() - $1 * interval '1 millisecond'"
            ),
            channel,
            schema_state: "SELECT \
                     EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1), \
                     EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                             WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind = 'S'), \
                     (SELECT c.relpersistence::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                      WHERE n.nspname = $1 AND c.relname = $3 AND c.relkind IN ('r', 'p'))"
                .to_owned(),
            create_schema: format!("CREATE SCHEMA IF NOT EXISTS {schema}"),
            // CACHE 1: with a per-session cache, values handed out by different sessions
            // would not increase in the order they are drawn. Always logged, also for an
            // UNLOGGED table, so fences survive a crash that empties the table.
            create_sequence: format!("CREATE SEQUENCE IF NOT EXISTS {sequence} AS bigint MINVALUE 1 NO CYCLE CACHE 1"),
            // COLLATE "C": keys compare byte for byte (and faster). No index on
            // expires_at, so lease updates stay HOT; fillfactor leaves room for them.
            create_table: format!(
                "CREATE {unlogged}TABLE IF NOT EXISTS {table} ( \
                     key text COLLATE \"C\" PRIMARY KEY, \
                     token text, \
                     fence bigint NOT NULL, \
                     expires_at timestamptz NOT NULL \
                 ) WITH (fillfactor = 80)"
            ),
        }
    }
}

/// A duration in whole milliseconds as a bind parameter, saturating (durations beyond
/// `i64::MAX` ms are ~292 million years).
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Identifier;

    fn layout(unlogged: bool) -> Layout {
        Layout {
            schema: Identifier::new("schema", "s").unwrap(),
            table: Identifier::new("table", "t").unwrap(),
            sequence: Identifier::new("sequence", "q").unwrap(),
            unlogged,
            notify: true,
        }
    }

    #[test]
    fn statements_quote_identifiers_and_bind_everything_else() {
        let sql = Statements::new(&layout(false));
        assert!(sql.acquire.starts_with("INSERT INTO \"s\".\"t\" AS held"), "{}", sql.acquire);
        assert!(sql.acquire.contains("nextval('\"s\".\"q\"')"), "{}", sql.acquire);
        assert!(sql.acquire.contains("WHERE held.expires_at <= clock_timestamp()"), "{}", sql.acquire);
        assert!(!sql.acquire.contains("EXCLUDED.fence"), "the fence must be drawn after the row lock");
        assert!(sql.release.contains("token = $2") && !sql.release.contains("DELETE"), "{}", sql.release);
        assert!(sql.release.contains("pg_notify('distlock:s.t', released.key)"), "{}", sql.release);
        let silent = Statements::new(&Layout { notify: false, ..layout(false) });
        assert!(!silent.release.contains("pg_notify") && silent.release.contains("token = $2"), "{}", silent.release);
        assert!(sql.create_table.starts_with("CREATE TABLE IF NOT EXISTS \"s\".\"t\""), "{}", sql.create_table);
        let unlogged = Statements::new(&layout(true));
        assert!(unlogged.create_table.starts_with("CREATE UNLOGGED TABLE"), "{}", unlogged.create_table);
        assert!(!unlogged.create_sequence.contains("UNLOGGED"), "{}", unlogged.create_sequence);
    }

    #[test]
    fn millis_saturates() {
        assert_eq!(millis(Duration::from_millis(1500)), 1500);
        assert_eq!(millis(Duration::MAX), i64::MAX);
    }
}
