//! The statements of the lease table, rendered once per store from the `.sql` files
//! under `src/sql/` (see `template.rs`).
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
//! - **A waiter flags the lease** (`lease/wait.sql`) after it has registered with the
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
//! `lease/reacquire.sql`: it also takes the row when it holds the same token, keeping
//! the fence (and the `waiting` flag) that the first run wrote, so the fence is not
//! drawn twice for one acquisition and a waiter's flag is not lost.

use std::time::Duration;

use crate::config::Layout;
use crate::group_sql::GroupStatements;
use crate::template::{lease, queue, values, Names};

/// How many rows one purge statement deletes at most, so that it holds row locks (which
/// acquirers of those keys wait for) only briefly.
pub(crate) const PURGE_BATCH: i64 = 10_000;

/// A fixed key for `pg_advisory_xact_lock` that serialises concurrent `ensure_schema`
/// calls (`CREATE … IF NOT EXISTS` alone can fail with a unique violation in `pg_type`
/// when two sessions create the same table at once). ASCII "distlock".
pub(crate) const SCHEMA_LOCK_KEY: i64 = 0x6469_7374_6c6f_636b;

/// The statements of a [`PostgresLockStore`](crate::PostgresLockStore) that are useful
/// outside it: the DDL, for DBAs who create the layout by hand, and the acquire and
/// release statements, for raw baselines that measure the store against them
/// ([`PostgresLockStore::statements`](crate::PostgresLockStore::statements)).
#[derive(Debug)]
pub struct Statements {
    pub(crate) acquire: String,
    /// [`acquire`](Self::acquire) that also recognises a live lease of the same token as
    /// acquired, returning its fence unchanged: the store's retry after a lost connection.
    pub(crate) reacquire: String,
    pub(crate) release: String,
    /// `$1` key → one row `micros_left` when the lease is live and flagged as waited for
    /// (flagging it), no row when free (or when a concurrent flag makes it uncertain).
    pub(crate) wait: String,
    pub(crate) channel: String,
    /// `$1` key, `$2` token, `$3` TTL in ms → 1 row affected when extended.
    pub(crate) extend: String,
    /// `$1` key → `(token, fence, micros_left)` of an unexpired lease, or no row.
    pub(crate) inspect: String,
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
    pub(crate) list: String,
    /// `$1` horizon in ms, `$2` batch size → rows affected.
    pub(crate) purge: String,
    /// `$1` schema, `$2` sequence, `$3` table names, `$4` required columns → see
    /// [`SchemaState`].
    pub(crate) schema_state: String,
    /// `$1` [`SCHEMA_LOCK_KEY`]: takes the transaction's schema lock.
    pub(crate) lock_schema: String,
    pub(crate) create_schema: String,
    pub(crate) create_sequence: String,
    pub(crate) create_table: String,
    /// The columns the statements use.
    pub(crate) columns: Vec<&'static str>,
    pub(crate) groups: GroupStatements,
    pub(crate) queue: QueueStatements,
    pub(crate) values: ValueStatements,
}

/// What the catalog says about a store's layout, as the `schema_state` statement returns
/// it: `(schema exists, schema usable, sequence exists, sequence usable, table
/// relpersistence, required columns missing, table privileges missing)`.
pub(crate) type SchemaState = (bool, Option<bool>, bool, Option<bool>, Option<String>, Vec<String>, Vec<String>);

impl Statements {
    /// Acquire: `$1` key (`text`), `$2` token (`text`), `$3` TTL in ms (`int8`). Returns one
    /// row `(fence int8, finished_within_purge_horizon bool)` when acquired, no row when
    /// another lease holds the key.
    #[doc(hidden)] // Sent as-is by distlock's benchmarks' raw baselines; not part of the API.
    pub fn acquire(&self) -> &str {
        &self.acquire
    }

    /// Release: `$1` key, `$2` token; one row `(count int8)`, 1 when released. A release
    /// of a lease a waiter flagged (`waiting`) also sends `pg_notify(<channel>, key)`,
    /// delivered when it commits; an uncontended release sends nothing.
    #[doc(hidden)] // Sent as-is by distlock's benchmarks' raw baselines; not part of the API.
    pub fn release(&self) -> &str {
        &self.release
    }

    /// The release a store sends once its queue table of fair waiting exists (a store that
    /// creates its schema creates that table at its first release): `$1` key, `$2` token;
    /// one row `(count int8, queued bool)`. It frees the lease, notifying as
    /// [`release`](Self::release) does, only while the key's queue is empty; `queued` says
    /// that the queue holds a place, and the store then sends the queue release.
    #[doc(hidden)] // Sent as-is by distlock's benchmarks' raw baselines; not part of the API.
    pub fn release_unqueued(&self) -> &str {
        &self.queue.release_alone
    }

    /// The notification channel releases are announced on (payload: the store key,
    /// `lock:<key>`): `distlock:<schema>.<table>`, or `distlock:<hash>` when that would
    /// exceed PostgreSQL's 63 bytes. `LISTEN` needs it double-quoted.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// The DDL of [`ensure_schema`](crate::PostgresLockStore::ensure_schema), in order:
    /// the schema, the fence sequence, the lease table, then the lock groups' holders
    /// table (and the `ALTER TABLE … ADD COLUMN IF NOT EXISTS` that gives a holders table
    /// created without it its `placed_at` column), its owner index, the permits table and
    /// the grant function (`CREATE OR REPLACE`). It runs them in one transaction under
    /// `pg_advisory_xact_lock`, skipping `CREATE SCHEMA` when the schema exists, the
    /// column when it exists and the function when it exists with the same body. A DBA
    /// can run them by hand for a
    /// store configured with
    /// [`create_schema(false)`](crate::PostgresLockStoreBuilder::create_schema).
    pub fn ddl(&self) -> Vec<&str> {
        let mut ddl = vec![self.create_schema.as_str(), &self.create_sequence, &self.create_table];
        ddl.extend(self.groups.ddl());
        ddl
    }

    /// The statements that create the queue of fair waiting (`<table>_queue` and its
    /// index) and add its `placed_at` column to a queue table created without it: run on
    /// the first waiting acquisition when the store creates its schema; run them by hand
    /// for a store that does not.
    pub fn queue_ddl(&self) -> Vec<&str> {
        let mut ddl: Vec<&str> = self.queue.create.iter().map(String::as_str).collect();
        ddl.push(&self.queue.add_placed_at);
        ddl
    }

    /// The statement that creates the table of values attached to leases (`<table>_values`,
    /// for leader election): run on the first `set_value` or `inspect_value` when the
    /// store creates its schema; run it by hand for a store that does not.
    pub fn values_ddl(&self) -> Vec<&str> {
        vec![self.values.create.as_str()]
    }

    pub(crate) fn new(layout: &Layout) -> Self {
        let names = Names::new(layout);
        Self {
            acquire: names.render(lease::ACQUIRE),
            reacquire: names.render(lease::REACQUIRE),
            release: names.render(lease::RELEASE),
            wait: names.render(lease::WAIT),
            extend: names.render(lease::EXTEND),
            inspect: names.render(lease::INSPECT),
            list: names.render(lease::LIST),
            purge: names.render(lease::PURGE),
            schema_state: names.render(lease::SCHEMA_STATE),
            lock_schema: names.render(lease::LOCK_SCHEMA),
            create_schema: names.render(lease::CREATE_SCHEMA),
            create_sequence: names.render(lease::CREATE_SEQUENCE),
            create_table: names.render(lease::CREATE_TABLE),
            columns: if layout.notify {
                vec!["key", "token", "fence", "expires_at", "waiting"]
            } else {
                vec!["key", "token", "fence", "expires_at"]
            },
            groups: GroupStatements::new(&names),
            queue: QueueStatements::new(&names),
            values: ValueStatements::new(&names),
            channel: names.channel,
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
impl Statements {
    /// Every statement, with a name for messages.
    pub(crate) fn every_statement(&self) -> Vec<(&'static str, &str)> {
        let (g, q, v) = (&self.groups, &self.queue, &self.values);
        vec![
            ("acquire", &self.acquire),
            ("reacquire", &self.reacquire),
            ("release", &self.release),
            ("wait", &self.wait),
            ("extend", &self.extend),
            ("inspect", &self.inspect),
            ("list", &self.list),
            ("purge", &self.purge),
            ("schema_state", &self.schema_state),
            ("lock_schema", &self.lock_schema),
            ("create_schema", &self.create_schema),
            ("create_sequence", &self.create_sequence),
            ("create_table", &self.create_table),
            ("group acquire", &g.acquire),
            ("group extend", &g.extend),
            ("group release", &g.release),
            ("group withdraw", &g.withdraw),
            ("group release_owner", &g.release_owner),
            ("group set_permits", &g.set_permits),
            ("group remove_permits", &g.remove_permits),
            ("group permits", &g.permits),
            ("group holders", &g.holders),
            ("group waiting", &g.waiting),
            ("group places", &g.places),
            ("group list", &g.list),
            ("group wait", &g.wait),
            ("group purge", &g.purge),
            ("group state", &g.state),
            ("group create_holders", &g.create_holders),
            ("group create_owner_index", &g.create_owner_index),
            ("group create_permits", &g.create_permits),
            ("group create_function", &g.create_function),
            ("group add_placed_at", &g.add_placed_at),
            ("queue create table", &q.create[0]),
            ("queue create index", &q.create[1]),
            ("queue add_placed_at", &q.add_placed_at),
            ("queue exists", &q.exists),
            ("queue acquire", &q.acquire),
            ("queue take handed", &q.take_handed),
            ("queue release", &q.release),
            ("queue release alone", &q.release_alone),
            ("queue wait", &q.wait),
            ("queue len", &q.len),
            ("queue places", &q.places),
            ("queue purge", &q.purge),
            ("values create table", &v.create),
            ("values exists", &v.exists),
            ("values set", &v.set),
            ("values inspect", &v.inspect),
            ("values purge", &v.purge),
        ]
    }
}

/// The statements of fair waiting.
#[derive(Debug)]
pub(crate) struct QueueStatements {
    /// The queue table, qualified and quoted.
    pub(crate) table: String,
    pub(crate) create: [String; 2],
    /// Adds `placed_at` to a queue table created without it.
    pub(crate) add_placed_at: String,
    pub(crate) exists: String,
    pub(crate) acquire: String,
    /// A waiter's take of the lease a release handed to it; see `take_handed.sql`.
    pub(crate) take_handed: String,
    pub(crate) release: String,
    /// The release of a key whose queue is empty; see `release_alone.sql`.
    pub(crate) release_alone: String,
    pub(crate) wait: String,
    pub(crate) len: String,
    pub(crate) places: String,
    pub(crate) purge: String,
}

impl QueueStatements {
    pub(crate) fn new(names: &Names) -> Self {
        Self {
            create: [names.render(queue::CREATE_TABLE), names.render(queue::CREATE_INDEX)],
            add_placed_at: names.render(queue::ADD_PLACED_AT),
            exists: names.render(queue::EXISTS),
            acquire: names.render(queue::ACQUIRE),
            take_handed: names.render(queue::TAKE_HANDED),
            release: names.render(queue::RELEASE),
            release_alone: names.render(queue::RELEASE_ALONE),
            wait: names.render(queue::WAIT),
            len: names.render(queue::LEN),
            places: names.render(queue::PLACES),
            purge: names.render(queue::PURGE),
            table: names.queue.clone(),
        }
    }
}

/// The statements of values attached to leases.
#[derive(Debug)]
pub(crate) struct ValueStatements {
    /// The table of lease values, qualified and quoted.
    pub(crate) table: String,
    pub(crate) create: String,
    /// `→ bool`: whether the table exists.
    pub(crate) exists: String,
    /// `$1` key, `$2` token, `$3` value → 1 row affected when attached.
    pub(crate) set: String,
    /// `$1` key → `(token, fence, micros_left, value)` of an unexpired lease, or no row.
    pub(crate) inspect: String,
    /// `$1` horizon in ms, `$2` batch size → rows affected.
    pub(crate) purge: String,
}

impl ValueStatements {
    pub(crate) fn new(names: &Names) -> Self {
        Self {
            create: names.render(values::CREATE_TABLE),
            exists: names.render(values::EXISTS),
            set: names.render(values::SET),
            inspect: names.render(values::INSPECT),
            purge: names.render(values::PURGE),
            table: names.values.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Identifier, MIN_PURGE_HORIZON};
    use crate::template::tests::{all_files, flat, fragments, layouts};

    #[test]
    fn every_statement_is_built_from_the_files_without_placeholders() {
        let mut unused = all_files();
        for layout in layouts() {
            let (names, sql) = (Names::new(&layout), Statements::new(&layout));
            let statements = sql.every_statement();
            for (name, text) in &statements {
                assert!(!text.contains(['{', '}']), "{name} ({layout:?}): {text}");
            }
            unused.retain(|file| {
                let rendered = names.render(*file);
                let fragment = fragments().iter().any(|fragment| fragment.path == file.path);
                !statements.iter().any(|(_, text)| if fragment { text.contains(&rendered) } else { *text == rendered })
            });
        }
        assert!(
            unused.is_empty(),
            "files no statement uses: {:?}",
            unused.iter().map(|file| file.path).collect::<Vec<_>>()
        );
    }

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
        assert!(flat(&sql.acquire).starts_with("INSERT INTO \"s\".\"t\" AS held"), "{}", sql.acquire);
        assert!(flat(&sql.acquire).contains("nextval('\"s\".\"q\"')"), "{}", sql.acquire);
        assert!(flat(&sql.acquire).contains("WHERE held.expires_at <= clock_timestamp()"), "{}", sql.acquire);
        assert!(!flat(&sql.acquire).contains("EXCLUDED.fence"), "the fence must be drawn after the row lock");
        assert!(flat(&sql.release).contains("token = $2") && !flat(&sql.release).contains("DELETE"), "{}", sql.release);
        assert!(
            flat(&sql.release).contains("CASE WHEN released.waiting THEN pg_notify('distlock:s.t', released.key)"),
            "{}",
            sql.release
        );
        assert!(
            !flat(&sql.release).contains("SET waiting") && flat(&sql.release).contains("RETURNING key, waiting"),
            "{}",
            sql.release
        );
        assert!(flat(&sql.acquire).contains(", waiting = false WHERE held.expires_at"), "{}", sql.acquire);
        assert!(
            flat(&sql.wait).contains("SET waiting = true") && flat(&sql.wait).contains("AND NOT waiting"),
            "{}",
            sql.wait
        );
        let silent = Statements::new(&Layout { notify: false, ..layout(false) });
        assert!(
            !flat(&silent.release).contains("pg_notify") && flat(&silent.release).contains("token = $2"),
            "{}",
            silent.release
        );
        assert!(
            !flat(&silent.release).contains("waiting") && !flat(&silent.acquire).contains("waiting"),
            "{}",
            silent.acquire
        );
        assert!(flat(&sql.create_table).contains("waiting boolean NOT NULL DEFAULT false"), "{}", sql.create_table);
        let alters: Vec<&str> = sql.ddl().into_iter().filter(|ddl| flat(ddl).contains("ALTER")).collect();
        assert_eq!(alters, [sql.groups.add_placed_at.as_str()], "the one upgrade: a column added");
        assert!(flat(&sql.groups.add_placed_at).contains("ADD COLUMN IF NOT EXISTS placed_at timestamptz"));
        assert!(sql.groups.function_body.starts_with("\nDECLARE") && sql.groups.function_body.ends_with("END\n"));
        let horizon = format!("< {} * interval '1 millisecond'", millis(MIN_PURGE_HORIZON));
        assert!(flat(&sql.acquire).contains(&horizon) && flat(&silent.reacquire).contains(&horizon), "{}", sql.acquire);
        assert!(flat(&sql.reacquire).contains("OR held.token = EXCLUDED.token"), "{}", sql.reacquire);
        assert!(
            flat(&sql.reacquire).contains("THEN held.fence ELSE GREATEST(held.fence + 1, nextval("),
            "{}",
            sql.reacquire
        );
        assert!(flat(&sql.reacquire).contains("waiting = CASE WHEN held.token"), "{}", sql.reacquire);
        assert!(!flat(&silent.reacquire).contains("waiting"), "{}", silent.reacquire);
        assert!(flat(&sql.create_table).starts_with("CREATE TABLE IF NOT EXISTS \"s\".\"t\""), "{}", sql.create_table);
        let unlogged = Statements::new(&layout(true));
        assert!(flat(&unlogged.create_table).starts_with("CREATE UNLOGGED TABLE"), "{}", unlogged.create_table);
        assert!(!flat(&unlogged.create_sequence).contains("UNLOGGED"), "{}", unlogged.create_sequence);
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
        assert!(
            flat(&sql.list).contains("WHERE key >= $1 AND key > $2 AND key < $3 ORDER BY key LIMIT $4"),
            "{}",
            sql.list
        );
        assert!(flat(&sql.list).contains("LIKE $5 ESCAPE E'\\\\'"), "{}", sql.list);
        assert!(flat(&sql.list).contains("FROM \"s\".\"t\""), "{}", sql.list);
    }

    #[test]
    fn lease_values_are_written_for_a_live_lease_and_read_with_it() {
        let sql = Statements::new(&layout(true));
        let values = &sql.values;
        assert_eq!(values.table, "\"s\".\"t_values\"");
        assert_eq!(sql.values_ddl(), [values.create.as_str()]);
        assert!(flat(&values.create).starts_with("CREATE UNLOGGED TABLE IF NOT EXISTS \"s\".\"t_values\""));
        let set = flat(&values.set);
        assert!(set.starts_with("INSERT INTO \"s\".\"t_values\" AS attached"), "{set}");
        assert!(
            set.contains("FROM \"s\".\"t\" WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()"),
            "{set}"
        );
        assert!(set.ends_with("WHERE attached.fence <= EXCLUDED.fence"), "never over a later lease's value: {set}");
        let inspect = flat(&values.inspect);
        assert!(
            inspect
                .contains("ON attached.key = held.key AND attached.token = held.token AND attached.fence = held.fence"),
            "{inspect}"
        );
        assert!(inspect.ends_with("WHERE held.key = $1 AND held.expires_at > clock_timestamp()"), "{inspect}");
        for statement in [&sql.acquire, &sql.reacquire, &sql.release, &sql.extend, &sql.queue.release] {
            assert!(!statement.contains("t_values"), "the lease statements never touch the values: {statement}");
        }
    }

    #[test]
    fn millis_saturates() {
        assert_eq!(millis(Duration::from_millis(1500)), 1500);
        assert_eq!(millis(Duration::MAX), i64::MAX);
    }
}
