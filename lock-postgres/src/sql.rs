//! The SQL text of every statement the store sends, built once per store.
//!
//! Only validated, double-quoted identifiers (see
//! [`PostgresLockStoreBuilder`](crate::PostgresLockStoreBuilder)) are spliced into the text; keys, tokens and durations always travel as bind
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
//!
//! # Why release notifies only when someone may be waiting
//!
//! PostgreSQL serialises the commits of all notifying transactions (a cluster-wide lock
//! held through the commit's WAL flush), so a `pg_notify` in every release makes
//! concurrent releases on a logged table queue for their flushes one by one. The row
//! therefore carries a `waiting` flag, and a release notifies only if it is set:
//!
//! - **A waiter flags the lease** ([`Statements::wait`]) after it has registered with the
//!   store's `LISTEN`ing connection and before it sleeps: one statement that sets
//!   `waiting = true` on a row whose lease is live (`token IS NOT NULL AND expires_at >
//!   clock_timestamp()`) and does not have it yet, or, when the row already has it, only
//!   reads it. A row back means "held and flagged: sleep"; no row means "free (or not
//!   sure): return and retry at once".
//! - **Release reads the flag of the row version it updates** (`RETURNING waiting`;
//!   release does not change the flag, so the returned value is the one the row had) and
//!   calls `pg_notify` only for a row that had it, inside a `CASE` (evaluated lazily, and
//!   `pg_notify` is volatile, so it is never folded or hoisted). It still counts every
//!   released row, so release stays one autocommit statement with the same answer.
//! - **Acquire resets the flag** (`waiting = false` in `DO UPDATE`; an inserted row gets
//!   the default `false`): a new lease starts with no known waiters.
//!
//! No wake-up is missed, because a waiter only sleeps when the lease `L` it saw is
//! flagged in a committed row version, and then the release that ends `L` notifies after
//! the waiter registered:
//!
//! - *The waiter's `UPDATE` set the flag.* It holds the row lock until it commits, so a
//!   release `R` of `L` that comes later locks the row after that commit and (read
//!   committed: an `UPDATE` that waited for a row lock re-reads the row's latest version)
//!   returns `waiting = true`, notifies, and commits after the waiter registered. If `R`
//!   locked the row first, the waiter's `UPDATE` waits for it, re-checks its `WHERE` on
//!   `R`'s version (`token IS NULL`) and returns no row: the key is free, retry at once.
//!   If `R` committed before the statement started, its snapshot shows the key free.
//! - *The flag was already set* (the statement's snapshot shows `L` live and flagged, so
//!   nothing was written). The release of `L` has not committed before the snapshot, so
//!   it commits after the waiter registered (registration precedes the statement); the
//!   row version it updates is the snapshot's or a later one of the same lease (row
//!   versions form one chain; the flag is only cleared by an acquisition, i.e. by a new
//!   lease), so it sees `waiting = true` and notifies.
//! - *The flag is cleared by the next acquisition.* Every waiter that flagged `L` wakes
//!   when `L` ends — by `L`'s notification, or, when `L` expires instead, by its own timer
//!   at the lease end the statement returned — retries, and if someone else got the lock,
//!   waits again and flags the new lease. A lease extended after a waiter read its end
//!   wakes that waiter early; it re-flags (a no-op: already set) and sleeps again.
//! - *Waiters whose listener connection was lost* are woken by the listener's state
//!   change and poll until it is back (see [`notify`](crate::notify)); a flag they left
//!   costs at most one notification nobody needed.
//!
//! What it costs: the first waiter of a lease writes the flag (one row update and, on a
//! logged table, one commit with a WAL flush — off the hand-off path, while the holder
//! holds). Further waiters of the same lease only read. A waiter whose flag `UPDATE`
//! waited for another waiter's concurrent flag `UPDATE` cannot tell whether the row is
//! flagged (its snapshot predates that flag) and returns at once: a spurious retry, never
//! a missed wake-up. An uncontended release — no waiter — sends nothing and so takes no
//! cluster-wide lock. A cancelled wait may leave a flag nobody waits on: one spurious
//! notification at the release.
//!
//! With [`release_notifications(false)`](crate::PostgresLockStoreBuilder::release_notifications)
//! the statements do not touch the flag (and need no `waiting` column).
//!
//! # Why a retried acquisition is recognised
//!
//! The store runs a statement again on another connection when its connection turned out
//! to be dead (see `PostgresLockStore`'s retries). A dead connection almost always means
//! the statement never ran; but a backend that died between its commit and its answer
//! leaves a lease written for the token. So a *retried* acquisition uses
//! [`Statements::reacquire`]: it also takes the row when it holds the same token, keeping
//! the fence (and the `waiting` flag) that the first run wrote, so the fence is not
//! drawn twice for one acquisition and a waiter's flag is not lost.

use std::time::Duration;

use crate::config::{Layout, MIN_PURGE_HORIZON};
use crate::group_sql::GroupStatements;
use crate::notify::channel_name;
use crate::queue::QueueStatements;

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
    /// `acquire` that also recognises a live lease of the same token as acquired.
    pub(crate) reacquire: String,
    /// `$1` key, `$2` token → one row: `count` 1 when released (and notified if flagged),
    /// else 0.
    pub(crate) release: String,
    /// `$1` key → one row `micros_left` when the lease is live and flagged as waited for
    /// (flagging it), no row when free (or when a concurrent flag makes it uncertain).
    pub(crate) wait: String,
    /// The `LISTEN`/`pg_notify` channel of the table.
    pub(crate) channel: String,
    /// `$1` key, `$2` token, `$3` TTL in ms → 1 row affected when extended.
    pub(crate) extend: String,
    /// `$1` key → `(token, fence, micros_left)` of an unexpired lease, or no row.
    pub(crate) inspect: String,
    /// `$1` lower bound, `$2` cursor, `$3` upper bound, `$4` page size, `$5` LIKE pattern
    /// → see [`Statements::list`].
    pub(crate) list: String,
    /// `$1` horizon in ms, `$2` batch size → rows affected.
    pub(crate) purge: String,
    /// `$1` schema, `$2` sequence, `$3` table names, `$4` required columns → see
    /// [`SchemaState`].
    pub(crate) schema_state: String,
    pub(crate) create_schema: String,
    pub(crate) create_sequence: String,
    pub(crate) create_table: String,
    /// The columns the statements use.
    pub(crate) columns: Vec<&'static str>,
    pub(crate) groups: GroupStatements,
    pub(crate) queue: QueueStatements,
}

/// What the catalog says about a store's layout, as the `schema_state` statement returns
/// it: `(schema exists, schema usable, sequence exists, sequence usable, table
/// relpersistence, required columns missing, table privileges missing)`.
pub(crate) type SchemaState = (bool, Option<bool>, bool, Option<bool>, Option<String>, Vec<String>, Vec<String>);

impl Statements {
    /// Acquire: `$1` key (`text`), `$2` token (`text`), `$3` TTL in ms (`int8`). Returns one
    /// row `(fence int8, finished_within_purge_horizon bool)` when acquired, no row when
    /// another lease holds the key.
    pub fn acquire(&self) -> &str {
        &self.acquire
    }

    /// Acquire again after a lost connection: like [`acquire`](Self::acquire), but a live
    /// lease already held by the same token `$2` counts as acquired, returning its fence
    /// unchanged. Used only by the store's internal retry; an application's second
    /// acquisition always has a new token.
    pub fn reacquire(&self) -> &str {
        &self.reacquire
    }

    /// Release: `$1` key, `$2` token; one row `(count int8)`, 1 when released. A release
    /// of a lease a waiter flagged (`waiting`) also sends `pg_notify(<channel>, key)`,
    /// delivered when it commits; an uncontended release sends nothing.
    pub fn release(&self) -> &str {
        &self.release
    }

    /// Flag a lease as waited for, run by a waiter after it registered for notifications:
    /// `$1` key; one row `(microseconds left int8)` when the lease is live and flagged
    /// (the waiter sleeps until notified or the lease ends), no row when the key is free
    /// (the waiter retries at once). Sets `waiting = true` only when it is not set yet.
    /// (Unused with release notifications off.)
    pub fn wait(&self) -> &str {
        &self.wait
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

    /// One page of a listing. `$1` the lowest key (`lock:` and the pattern's literal
    /// prefix, inclusive), `$2` the cursor (the last key examined by the previous page,
    /// exclusive; `''` on the first page), `$3` the key after every key with that prefix
    /// (exclusive), `$4` how many keys to examine, `$5` the `LIKE` pattern (escape `\`).
    ///
    /// It examines the next `$4` rows of the range in key order (an index range scan on
    /// the primary key, bounded by `$4` whatever matches) and returns one row per held
    /// key among them that matches `$5`, each with `(last key examined, rows examined,
    /// key, token, fence, µs left)`; when none is held, one row with only the first two.
    /// Fewer rows examined than `$4` means the range is exhausted.
    pub fn list(&self) -> &str {
        &self.list
    }

    /// One purge batch: `$1` horizon in ms, `$2` batch size; rows affected.
    pub fn purge(&self) -> &str {
        &self.purge
    }

    /// The DDL of [`ensure_schema`](crate::PostgresLockStore::ensure_schema), in order:
    /// the schema, the fence sequence, the lease table, then the lock groups' tables and
    /// function ([`GroupStatements::ddl`]). It runs them in one transaction under
    /// `pg_advisory_xact_lock`, skipping `CREATE SCHEMA` when the schema exists and the
    /// function when it exists. A DBA can run them by hand for a store configured with
    /// [`create_schema(false)`](crate::PostgresLockStoreBuilder::create_schema).
    pub fn ddl(&self) -> Vec<&str> {
        let mut ddl = vec![self.create_schema.as_str(), &self.create_sequence, &self.create_table];
        ddl.extend(self.groups.ddl());
        ddl
    }

    /// The statements that create the queue of fair waiting (`<table>_queue` and its
    /// index): run on the first waiting acquisition when the store creates its schema;
    /// run them by hand for a store that does not.
    pub fn queue_ddl(&self) -> Vec<&str> {
        self.queue.create.iter().map(String::as_str).collect()
    }

    /// The queue table of fair waiting, qualified and quoted, e.g.
    /// `"public"."distribute_lock_queue"`.
    pub fn queue_table(&self) -> &str {
        &self.queue.table
    }

    /// The statements of lock groups ([`GroupLockStore`](distlock_api::GroupLockStore)).
    pub fn groups(&self) -> &GroupStatements {
        &self.groups
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
        let ttl_from_now = "clock_timestamp() + $3 * interval '1 millisecond'";
        let returning = format!(
            "RETURNING held.fence, clock_timestamp() - statement_timestamp() < {horizon_ms} * interval '1 millisecond'"
        );
        let same_lease = "held.token = EXCLUDED.token AND held.expires_at > clock_timestamp()";
        let queue = QueueStatements::new(layout, &channel);
        Self {
            reacquire: format!(
                "INSERT INTO {table} AS held (key, token, fence, expires_at) \
                 VALUES ($1, $2, nextval('{sequence}'), {ttl_from_now}) \
                 ON CONFLICT (key) DO UPDATE \
                 SET token = EXCLUDED.token, \
                     fence = CASE WHEN {same_lease} THEN held.fence \
                                  ELSE GREATEST(held.fence + 1, nextval('{sequence}')) END, \
                     expires_at = {ttl_from_now}{keep_waiting} \
                 WHERE held.expires_at <= clock_timestamp() OR held.token = EXCLUDED.token \
                 {returning}",
                keep_waiting = if layout.notify {
                    format!(", waiting = CASE WHEN {same_lease} THEN held.waiting ELSE false END")
                } else {
                    String::new()
                },
            ),
            acquire: format!(
                "INSERT INTO {table} AS held (key, token, fence, expires_at) \
                 VALUES ($1, $2, nextval('{sequence}'), clock_timestamp() + $3 * interval '1 millisecond') \
                 ON CONFLICT (key) DO UPDATE \
                 SET token = EXCLUDED.token, \
                     fence = GREATEST(held.fence + 1, nextval('{sequence}')), \
                     expires_at = clock_timestamp() + $3 * interval '1 millisecond'{reset_waiting} \
                 WHERE held.expires_at <= clock_timestamp() \
                 RETURNING held.fence, \
                     clock_timestamp() - statement_timestamp() < {horizon_ms} * interval '1 millisecond'",
                reset_waiting = if layout.notify { ", waiting = false" } else { "" },
            ),
            // `waiting` is returned as the row had it (release leaves it alone); the CASE
            // calls pg_notify (volatile, so never pre-evaluated) only for a flagged row,
            // and count() counts every released row ('' is not NULL). The notification is
            // delivered when the statement commits.
            release: if layout.notify {
                format!(
                    "WITH released AS ( \
                         UPDATE {table} SET token = NULL, expires_at = clock_timestamp() \
                         WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp() \
                         RETURNING key, waiting) \
                     SELECT count(CASE WHEN released.waiting \
                                  THEN pg_notify('{channel}', released.key)::text ELSE '' END) \
                     FROM released"
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
            // Both parts see the statement's snapshot: the UPDATE flags a live, unflagged
            // lease (re-checking its WHERE on the latest version if it waited for a row
            // lock); the SELECT finds a live lease that was already flagged. At most one
            // row. See the module documentation for why sleeping on a row is safe.
            wait: format!(
                "WITH flagged AS ( \
                     UPDATE {table} SET waiting = true \
                     WHERE key = $1 AND token IS NOT NULL AND NOT waiting AND expires_at > clock_timestamp() \
                     RETURNING expires_at) \
                 SELECT GREATEST((extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint, 1) \
                 FROM flagged \
                 UNION ALL \
                 SELECT GREATEST((extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint, 1) \
                 FROM {table} \
                 WHERE key = $1 AND token IS NOT NULL AND waiting AND expires_at > clock_timestamp()"
            ),
            extend: format!(
                "UPDATE {table} SET expires_at = clock_timestamp() + $3 * interval '1 millisecond' \
                 WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()"
            ),
            inspect: format!(
                "SELECT token, fence, \
                     GREATEST((extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint, 1) \
                 FROM {table} WHERE key = $1 AND expires_at > clock_timestamp()"
            ),
            // MATERIALIZED: the page is read once, by the index range scan; both the
            // aggregate and the join use that snapshot of at most $4 rows. E'\\' is one
            // backslash whatever standard_conforming_strings says.
            list: format!(
                "WITH page AS MATERIALIZED ( \
                     SELECT key, token, fence, expires_at FROM {table} \
                     WHERE key >= $1 AND key > $2 AND key < $3 \
                     ORDER BY key LIMIT $4) \
                 SELECT examined.last, examined.count, held.key, held.token, held.fence, \
                     GREATEST((extract(epoch FROM held.expires_at - clock_timestamp()) * 1000000)::bigint, 1) \
                 FROM (SELECT max(key) AS last, count(*) AS count FROM page) AS examined \
                 LEFT JOIN page AS held \
                     ON held.key LIKE $5 ESCAPE E'\\\\' AND held.token IS NOT NULL \
                        AND held.expires_at > clock_timestamp() \
                 ORDER BY held.key"
            ),
            purge: format!(
                "DELETE FROM {table} WHERE key = ANY(ARRAY( \
                     SELECT key FROM {table} \
                     WHERE expires_at < statement_timestamp() - $1 * interval '1 millisecond' \
                     LIMIT $2)) \
                 AND expires_at < statement_timestamp() - $1 * interval '1 millisecond'"
            ),
            channel,
            // Catalog reads only (no lookups that fail on a missing name or a missing
            // privilege), so it can describe what is missing.
            schema_state: "WITH s AS (SELECT oid FROM pg_namespace WHERE nspname = $1), \
                     q AS (SELECT c.oid FROM pg_class c JOIN s ON s.oid = c.relnamespace \
                           WHERE c.relname = $2 AND c.relkind = 'S'), \
                     t AS (SELECT c.oid, c.relpersistence FROM pg_class c JOIN s ON s.oid = c.relnamespace \
                           WHERE c.relname = $3 AND c.relkind IN ('r', 'p')) \
                 SELECT EXISTS (SELECT 1 FROM s), \
                     (SELECT has_schema_privilege(oid, 'USAGE') FROM s), \
                     EXISTS (SELECT 1 FROM q), \
                     (SELECT has_sequence_privilege(oid, 'USAGE') OR has_sequence_privilege(oid, 'UPDATE') FROM q), \
                     (SELECT relpersistence::text FROM t), \
                     ARRAY(SELECT wanted FROM unnest($4::text[]) AS wanted, t \
                           WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a \
                                             WHERE a.attrelid = t.oid AND a.attname = wanted AND NOT a.attisdropped)), \
                     ARRAY(SELECT wanted FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE']) AS wanted, t \
                           WHERE NOT has_table_privilege(t.oid, wanted))"
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
                     expires_at timestamptz NOT NULL, \
                     waiting boolean NOT NULL DEFAULT false \
                 ) WITH (fillfactor = 80)"
            ),
            columns: if layout.notify {
                vec!["key", "token", "fence", "expires_at", "waiting"]
            } else {
                vec!["key", "token", "fence", "expires_at"]
            },
            groups: GroupStatements::new(layout),
            queue,
        }
    }
}

/// The least string greater than every string that starts with `prefix`, in byte (code
/// point) order, as `COLLATE "C"` compares: `prefix` with its last character incremented
/// (dropping trailing `char::MAX`es, skipping the surrogate gap). `None` when every
/// character is `char::MAX` (or `prefix` is empty): there is no such string.
pub(crate) fn prefix_successor(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = (u32::from(last) + 1..=u32::from(char::MAX)).find_map(char::from_u32);
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
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
        assert!(
            sql.release.contains("CASE WHEN released.waiting THEN pg_notify('distlock:s.t', released.key)"),
            "{}",
            sql.release
        );
        assert!(
            !sql.release.contains("SET waiting") && sql.release.contains("RETURNING key, waiting"),
            "{}",
            sql.release
        );
        assert!(sql.acquire.contains(", waiting = false WHERE held.expires_at"), "{}", sql.acquire);
        assert!(sql.wait.contains("SET waiting = true") && sql.wait.contains("AND NOT waiting"), "{}", sql.wait);
        let silent = Statements::new(&Layout { notify: false, ..layout(false) });
        assert!(!silent.release.contains("pg_notify") && silent.release.contains("token = $2"), "{}", silent.release);
        assert!(!silent.release.contains("waiting") && !silent.acquire.contains("waiting"), "{}", silent.acquire);
        assert!(sql.create_table.contains("waiting boolean NOT NULL DEFAULT false"), "{}", sql.create_table);
        assert!(sql.ddl().iter().all(|ddl| !ddl.contains("ALTER")), "no upgrade paths");
        assert!(sql.reacquire.contains("OR held.token = EXCLUDED.token"), "{}", sql.reacquire);
        assert!(sql.reacquire.contains("THEN held.fence ELSE GREATEST(held.fence + 1, nextval("), "{}", sql.reacquire);
        assert!(sql.reacquire.contains("waiting = CASE WHEN held.token"), "{}", sql.reacquire);
        assert!(!silent.reacquire.contains("waiting"), "{}", silent.reacquire);
        assert!(sql.create_table.starts_with("CREATE TABLE IF NOT EXISTS \"s\".\"t\""), "{}", sql.create_table);
        let unlogged = Statements::new(&layout(true));
        assert!(unlogged.create_table.starts_with("CREATE UNLOGGED TABLE"), "{}", unlogged.create_table);
        assert!(!unlogged.create_sequence.contains("UNLOGGED"), "{}", unlogged.create_sequence);
    }

    #[test]
    fn prefix_successors_bound_every_key_with_the_prefix() {
        assert_eq!(prefix_successor("lock:").as_deref(), Some("lock;"));
        assert_eq!(prefix_successor("lock:ab").as_deref(), Some("lock:ac"));
        assert_eq!(prefix_successor("a\u{D7FF}").as_deref(), Some("a\u{E000}"));
        assert_eq!(prefix_successor("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(prefix_successor("\u{10FFFF}"), None);
        assert_eq!(prefix_successor(""), None);
        let (prefix, next) = ("lock:é", prefix_successor("lock:é").unwrap());
        for key in ["lock:é", "lock:é\u{10FFFF}", "lock:éz:1"] {
            assert!(key.starts_with(prefix) && key < next.as_str(), "{key}");
        }
        assert!("lock:ê" >= next.as_str());
    }

    #[test]
    fn the_listing_reads_a_bounded_key_range() {
        let sql = Statements::new(&layout(false));
        assert!(sql.list.contains("WHERE key >= $1 AND key > $2 AND key < $3 ORDER BY key LIMIT $4"), "{}", sql.list);
        assert!(sql.list.contains("LIKE $5 ESCAPE E'\\\\'"), "{}", sql.list);
        assert!(sql.list.contains("FROM \"s\".\"t\""), "{}", sql.list);
    }

    #[test]
    fn millis_saturates() {
        assert_eq!(millis(Duration::from_millis(1500)), 1500);
        assert_eq!(millis(Duration::MAX), i64::MAX);
    }
}
