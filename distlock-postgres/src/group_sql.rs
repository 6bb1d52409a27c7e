//! The SQL of lock groups: two tables beside the lease table, one PL/pgSQL function that
//! grants a group in one call (`src/sql/group/acquire_group.sql`), and the plain
//! statements around it (the other files of `src/sql/group/`).
//!
//! Names, modes, tokens and durations travel as bind parameters; only validated,
//! double-quoted identifiers and the notification channel are spliced into the text.
//!
//! # Why a function, and why this order inside it
//!
//! A grant must read the holders and permits of every member and write the new holds
//! with nothing changing in between. One autocommit statement cannot do that under
//! `READ COMMITTED`: its snapshot is taken before any lock it waits for, so a grant
//! committed by a concurrent acquirer while it waited stays invisible and both are
//! granted. So the function, in one transaction:
//!
//! 0. answers a waiting group's retry without any lock when a live hold or an older live
//!    place of the other mode blocks one of its members and its places have more than
//!    half their time left: the locked check would block it too, and nothing needs
//!    writing. Queued readers' retries then do not queue for a name's advisory lock ahead
//!    of the writer they wait for (nor that writer's retries while readers hold it);
//! 1. takes `pg_advisory_xact_lock(hashtextextended(name, 0))` for every name, in the
//!    order of the lock keys (one global order: no deadlocks, also when two names hash
//!    alike; a collision only serialises two names more than needed). Acquirers of a
//!    name now run one after the other, and the locks end with the transaction, so
//!    transaction poolers are fine. One or two names take them in plain expressions;
//! 2. run again after a lost connection (`p_again`), recognises a group its token already
//!    holds whole (the first run committed before its answer was lost) and returns that
//!    fence;
//! 3. draws one fence from the store's sequence (after every earlier grant of these names
//!    committed, so it is larger than their fences; a blocked attempt leaves a gap);
//! 4. a first attempt on names whose rows are all free takes slot 0 of each in one
//!    `INSERT … ON CONFLICT (name, slot) DO UPDATE … WHERE token IS NULL` (the common,
//!    uncontended case: one small statement, a HOT update; one or two names are read
//!    element by element, not through `unnest`);
//! 5. a first attempt blocked for certain — by a live hold, or an older live place, of the
//!    other mode on one of its names — records its places as in step 7 (in its own, a free
//!    or a new slot; stale holds stay for a later full check to free) and returns the
//!    ticket, without the full check (which would not pass it either): blocked attempts,
//!    such as the readers that return while a writer waits, hold the names' locks for
//!    less time, and the writer's granting retry queues for less behind them (a retry
//!    that gets this far was not blocked so in step 0 a moment before);
//! 6. otherwise checks every member and takes the slots in one statement — the function
//!    is `VOLATILE`, so each statement takes a fresh snapshot, which includes every grant
//!    committed before the advisory locks were ours — against the live holders, the live
//!    older places of waiting groups (counted as holders of their mode) and the permits
//!    row of (name, mode), else the member's default; `coalesce(bool_and(…), false)` so that nothing is granted for no
//!    member. A member's slot is the group's own intent, else the lowest free slot, else
//!    a new one. A hold of another group that ended by the check's time but is not freed
//!    (*stale*) does not count, but an `extend` of it may be in flight: then the statement
//!    takes nothing, an `UPDATE` frees the stale rows — it locks them, so such an `extend`
//!    is waited for and re-checked (it either committed first, and the hold is live and
//!    counts, or finds the row freed and reports it not held) — and the check runs again:
//!    an ended hold is never counted free and revived at the same time;
//! 7. blocked: records or refreshes the places of its members (of its exclusive members
//!    only when barging; when asked) in slots as above, and returns the ticket.
//!
//! Rows are never deleted by these operations: releases free them (`token = NULL`) and
//! grants take them again, so the table holds one row per slot a name ever needed at
//! once, and its updates are HOT (no index entries written), as on the lease table. The
//! purge deletes rows whose lease ended before its horizon.
//!
//! # Release notifications
//!
//! Holds carry the `waiting` flag of the lease table's protocol (see `sql.rs`): a
//! waiter registers for `group:<name>` and `group-shared:<name>` of each of its names,
//! then, in one statement (`group/wait.sql`), checks whether its request could be
//! granted now and flags the rows that keep it from being granted; a release, a
//! withdrawal or `release_owner` notifies for the flagged rows it frees: `group:<name>`
//! for exclusive holds and places, `group-shared:<name>` for shared ones. A waiter that
//! no shared row blocks drops its `group-shared:` registrations after the check: readers
//! queued behind a writer's place sleep through the releases of the readers the writer
//! waits for (each woke every queued reader, whose retries then competed with the
//! writer's for the name's advisory lock). A grant carries the flag of its own intent over
//! to its new hold (the same row), so readers that waited on a writer's intent are woken
//! when that writer releases. Permit changes always notify `group:<name>`, which every
//! waiter keeps.

use crate::config::Identifier;
use crate::template::{group, Names};

/// The payload prefix of group notifications for a freed exclusive hold or place and for
/// a permits change, which any waiter of the name may wait for: `group:<store key>` never
/// equals a single lock's payload (a store key, `lock:<key>`).
pub(crate) const GROUP_PAYLOAD_PREFIX: &str = "group:";

/// The payload prefix of group notifications for a freed shared hold or place
/// (`group-shared:<store key>`): only waiters that a shared row blocks (exclusive members,
/// members with permits) wait for it, so readers queued behind a writer's place are not
/// woken by every release of the readers the writer waits for.
pub(crate) const SHARED_PAYLOAD_PREFIX: &str = "group-shared:";

/// The columns the group statements use, per table.
pub(crate) const HOLDER_COLUMNS: [&str; 10] =
    ["name", "slot", "mode", "token", "owner", "fence", "ticket", "placed_at", "expires_at", "waiting"];
pub(crate) const PERMIT_COLUMNS: [&str; 3] = ["name", "mode", "permits"];

/// The statements of a store's lock groups, each described in its `.sql` file.
#[derive(Debug)]
pub(crate) struct GroupStatements {
    pub(crate) holders_name: Identifier,
    pub(crate) permits_name: Identifier,
    pub(crate) function_name: Identifier,
    pub(crate) acquire: String,
    pub(crate) extend: String,
    pub(crate) release: String,
    pub(crate) withdraw: String,
    pub(crate) release_owner: String,
    pub(crate) set_permits: String,
    pub(crate) remove_permits: String,
    pub(crate) permits: String,
    pub(crate) holders: String,
    pub(crate) waiting: String,
    pub(crate) places: String,
    pub(crate) list: String,
    pub(crate) wait: String,
    pub(crate) purge: String,
    pub(crate) state: String,
    pub(crate) create_holders: String,
    pub(crate) create_owner_index: String,
    pub(crate) create_permits: String,
    pub(crate) create_function: String,
    /// The function's body, as the catalog keeps it (`pg_proc.prosrc`).
    pub(crate) function_body: String,
    /// Adds `placed_at` to a holders table created without it.
    pub(crate) add_placed_at: String,
}

/// What the catalog says about the group objects: `(holders relpersistence, holders
/// columns missing, holders privileges missing, permits exists, permits columns missing,
/// permits privileges missing, function exists, function executable, function body is
/// this version's)`.
pub(crate) type GroupSchemaState =
    (Option<String>, Vec<String>, Vec<String>, bool, Vec<String>, Vec<String>, bool, Option<bool>, Option<bool>);

/// The column that a holders table created without it gets added.
const PLACED_AT: &str = "placed_at";

impl GroupStatements {
    /// The DDL that [`ensure_schema`](crate::PostgresLockStore::ensure_schema) runs for
    /// groups, in order: the holders table (and its `placed_at` column, for a table
    /// created without it), its owner index, the permits table and the function.
    pub(crate) fn ddl(&self) -> [&str; 5] {
        [
            &self.create_holders,
            &self.add_placed_at,
            &self.create_owner_index,
            &self.create_permits,
            &self.create_function,
        ]
    }

    pub(crate) fn new(names: &Names) -> Self {
        let create_function = names.render(group::CREATE_ACQUIRE_GROUP);
        Self {
            function_body: function_body(&create_function).to_owned(),
            add_placed_at: names.render(group::ADD_PLACED_AT),
            acquire: names.render(group::ACQUIRE),
            extend: names.render(group::EXTEND),
            release: names.render(group::RELEASE),
            withdraw: names.render(group::WITHDRAW),
            release_owner: names.render(group::RELEASE_OWNER),
            set_permits: names.render(group::SET_PERMITS),
            remove_permits: names.render(group::REMOVE_PERMITS),
            permits: names.render(group::PERMITS),
            holders: names.render(group::HOLDERS),
            waiting: names.render(group::WAITING),
            places: names.render(group::PLACES),
            list: names.render(group::LIST),
            wait: names.render(group::WAIT),
            purge: names.render(group::PURGE),
            state: names.render(group::STATE),
            create_holders: names.render(group::CREATE_HOLDERS),
            create_owner_index: names.render(group::CREATE_OWNER_INDEX),
            create_permits: names.render(group::CREATE_PERMITS),
            create_function,
            holders_name: names.holders_name.clone(),
            permits_name: names.permits_name.clone(),
            function_name: names.acquire_group_name.clone(),
        }
    }

    /// What is missing or unusable, in words, for `check_schema`'s error (empty: all
    /// is there).
    pub(crate) fn problems(&self, schema: &Identifier, state: &GroupSchemaState) -> Vec<String> {
        let (
            holders,
            holder_columns,
            holder_privileges,
            permits,
            permit_columns,
            permit_privileges,
            function,
            executable,
            _,
        ) = state;
        let qualified = |name: &Identifier| format!("{}.{}", schema.quoted(), name.quoted());
        let mut problems = Vec::new();
        let mut table = |exists: bool, name: &Identifier, columns: &[String], privileges: &[String]| {
            if !exists {
                problems.push(format!("table {} does not exist", qualified(name)));
                return;
            }
            if !columns.is_empty() {
                problems.push(format!("table {} has no column {}", qualified(name), columns.join(", ")));
            }
            if !privileges.is_empty() {
                problems.push(format!("no {} privilege on table {}", privileges.join(", "), qualified(name)));
            }
        };
        table(holders.is_some(), &self.holders_name, holder_columns, holder_privileges);
        table(*permits, &self.permits_name, permit_columns, permit_privileges);
        if !function {
            problems.push(format!("function {} does not exist", qualified(&self.function_name)));
        } else if *executable == Some(false) {
            problems.push(format!("no EXECUTE privilege on function {}", qualified(&self.function_name)));
        }
        problems
    }

    /// Whether everything exists as this version makes it (privileges aside), so that
    /// `ensure_schema` has nothing to create, add or replace.
    pub(crate) fn complete(state: &GroupSchemaState) -> bool {
        state.0.is_some() && !Self::lacks_placed_at(state) && state.3 && state.6 && Self::function_current(state)
    }

    /// Whether the existing function (if any) has this version's body.
    pub(crate) fn function_current(state: &GroupSchemaState) -> bool {
        state.8 != Some(false)
    }

    fn lacks_placed_at(state: &GroupSchemaState) -> bool {
        state.0.is_some() && state.1.iter().any(|column| column == PLACED_AT)
    }

    /// The DDL to run when something is missing: the `CREATE … IF NOT EXISTS`
    /// statements, `placed_at` for a holders table created without it, and the function
    /// when it does not exist or has another body (`CREATE OR REPLACE`).
    pub(crate) fn creation(&self, state: &GroupSchemaState) -> Vec<&str> {
        let mut ddl = vec![self.create_holders.as_str()];
        if Self::lacks_placed_at(state) {
            ddl.push(&self.add_placed_at);
        }
        ddl.extend([self.create_owner_index.as_str(), &self.create_permits]);
        if !state.6 || !Self::function_current(state) {
            ddl.push(&self.create_function);
        }
        ddl
    }
}

/// The body of the function `create` defines: the text between its dollar quotes, as
/// PostgreSQL keeps it in `pg_proc.prosrc`.
fn function_body(create: &str) -> &str {
    const QUOTE: &str = "$distlock$";
    create.split_once(QUOTE).and_then(|(_, rest)| rest.rsplit_once(QUOTE)).map_or("", |(body, _)| body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Layout;
    use crate::template::tests::flat;

    fn statements(unlogged: bool, notify: bool) -> GroupStatements {
        GroupStatements::new(&Names::new(&Layout {
            schema: Identifier::new("schema", "s").unwrap(),
            table: Identifier::new("table", "t").unwrap(),
            sequence: Identifier::new("sequence", "q").unwrap(),
            unlogged,
            notify,
        }))
    }

    #[test]
    fn group_statements_name_their_objects_after_the_table() {
        let sql = statements(false, true);
        assert!(
            flat(&sql.create_holders).starts_with("CREATE TABLE IF NOT EXISTS \"s\".\"t_holders\""),
            "{}",
            sql.create_holders
        );
        assert!(sql.create_permits.contains("\"s\".\"t_permits\""), "{}", sql.create_permits);
        assert_eq!(
            (sql.holders_name.as_str(), sql.permits_name.as_str(), sql.function_name.as_str()),
            ("t_holders", "t_permits", "t_acquire_group")
        );
        assert!(sql.create_function.contains("FUNCTION \"s\".\"t_acquire_group\"("), "{}", sql.create_function);
        assert!(sql.create_function.contains("nextval('\"s\".\"q\"')"), "{}", sql.create_function);
        assert!(sql.acquire.contains("FROM \"s\".\"t_acquire_group\"($1"), "{}", sql.acquire);
        assert!(sql.release.contains("pg_notify('distlock:s.t',"), "{}", sql.release);
        let prefixes = format!("THEN '{SHARED_PAYLOAD_PREFIX}' ELSE '{GROUP_PAYLOAD_PREFIX}' END");
        assert!(sql.release.contains(&prefixes), "{}", sql.release);
        assert!(sql.set_permits.contains(&format!("'{GROUP_PAYLOAD_PREFIX}' || name")), "{}", sql.set_permits);
        assert!(sql.set_permits.contains("pg_notify("), "{}", sql.set_permits);
        let unlogged = statements(true, false);
        assert!(flat(&unlogged.create_holders).starts_with("CREATE UNLOGGED TABLE"), "{}", unlogged.create_holders);
        assert!(!unlogged.create_permits.contains("UNLOGGED"), "permits are configuration");
        for statement in [&unlogged.release, &unlogged.withdraw, &unlogged.release_owner, &unlogged.set_permits] {
            assert!(!statement.contains("pg_notify"), "{statement}");
        }
        // The function does not depend on the notification setting: stores on one table
        // share it.
        assert_eq!(sql.create_function, statements(false, false).create_function);
    }

    #[test]
    fn the_function_serialises_before_it_reads() {
        let sql = statements(false, true).create_function;
        let lock = sql.find("pg_advisory_xact_lock").unwrap();
        let draw = sql.find("nextval").unwrap();
        let check = sql.find("bool_and").unwrap();
        assert!(lock < draw && draw < check, "{sql}");
        assert!(sql.contains("WHERE NOT EXISTS (SELECT 1 FROM \"s\".\"t_holders\" AS x"), "the fast path: {sql}");
        assert!(!sql.contains("DELETE"), "slots are freed and taken again, never deleted: {sql}");
        assert!(sql.contains("coalesce(bool_and("), "an empty group grants nothing");
        assert!(
            sql.contains(
                "SET plan_cache_mode = force_generic_plan\nSET enable_bitmapscan = off\nSET enable_seqscan = off"
            ),
            "generic index plans, whatever the table's size or statistics when planned: {sql}"
        );
        let certain = sql.find("IF p_ticket IS NULL AND NOT p_again AND EXISTS (").unwrap();
        assert!(lock < certain && certain < check, "blocked for certain, under the locks, before the check: {sql}");
        assert!(sql.contains("FROM unnest(p_names) AS n ORDER BY 1)) AS k"), "advisory locks in one global order");
    }
}
