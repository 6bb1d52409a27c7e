//! Lock groups on PostgreSQL: [`GroupLockStore`] for [`PostgresLockStore`].
//!
//! Every operation is one round trip (the first group operation of a store also checks
//! the group objects once): a grant is one call of the store's PL/pgSQL
//! function (one transaction; see [`group_sql`](crate::group_sql) for its steps), the
//! others are single autocommit statements. Statements whose connection turned out to
//! be dead run again on another connection, as the lock operations do; running any of
//! them twice is harmless (a grant run again recognises the group its first run took).

use distlock_sql::connect::explain;
use distlock_sql::listing::{group_names, page_start, waiting_place, GroupRow};
use std::time::Duration;

use distlock_api::waiters::{deadline_after, wakes_of, wakes_reach, Registration, Woken};
use distlock_api::{
    async_trait, check_group_members, GroupAcquire, GroupLockStore, GroupRequest, InvalidGroup, KeyPattern, ListCursor,
    ListPage, LockError, LockInfo, LockMode, LockStore, OwnerId, StoreKey, Token, Ttl, WaitingPlace, LOCK_NAMESPACE,
};

use crate::error::{is_connection_lost, UnexpectedAnswer, BACKEND};
use crate::group_sql::{GroupStatements, GROUP_PAYLOAD_PREFIX, SHARED_PAYLOAD_PREFIX};
use crate::sql::{millis, prefix_successor};
use crate::store::PostgresLockStore;

/// How long after the first lease of a waited-for name ends (as the server computed it)
/// a waiter wakes to retry.
const EXPIRY_MARGIN: Duration = Duration::from_millis(2);

/// The mode as stored: `'R'` shared, `'W'` exclusive.
fn mode_code(mode: LockMode) -> &'static str {
    match mode {
        LockMode::Shared => "R",
        // Exclusive, and any mode added later: never weaker than a write lock.
        _ => "W",
    }
}

/// The payload a change of `key`'s holders is notified with, and the key its waiters
/// register under.
fn payload(key: &StoreKey) -> String {
    format!("{GROUP_PAYLOAD_PREFIX}{}", key.as_str())
}

/// The payload a freed shared hold or place of `key` is notified with.
fn shared_payload(key: &StoreKey) -> String {
    format!("{SHARED_PAYLOAD_PREFIX}{}", key.as_str())
}

/// Permits as the table stores them (`integer`): beyond `i32::MAX` is as good as
/// unlimited.
fn permits_value(permits: u32) -> i32 {
    i32::try_from(permits).unwrap_or(i32::MAX)
}

fn names(keys: &[StoreKey]) -> Vec<&str> {
    keys.iter().map(StoreKey::as_str).collect()
}

impl PostgresLockStore {
    fn group_sql(&self) -> &GroupStatements {
        &self.statements().groups
    }

    fn group_fail(
        &self,
        operation: &'static str,
        key: Option<&StoreKey>,
        error: impl Into<distlock_api::BoxError>,
    ) -> LockError {
        LockError::store(BACKEND, operation, key.map(StoreKey::lock_key), error)
    }

    /// After the waiter registered: whether `request` could be granted now (`None`: the
    /// caller returns at once, also when a row that blocks it could not be flagged), else
    /// flags the rows that block it, so that their releases notify, and returns how many
    /// of them must be released before it could be granted, the time until the first of
    /// them ends and whether a shared hold or place is among them.
    async fn flag_blockers(&self, request: &GroupRequest<'_>) -> Result<Option<Blockers>, LockError> {
        const OPERATION: &str = "wait for group change";
        let columns = Columns::of(request);
        let ticket = request.ticket.map(|ticket| i64::try_from(ticket).unwrap_or(i64::MAX));
        let (unflagged, blocking, micros_left, shared, releases): (i64, i64, Option<i64>, bool, i64) = self
            .retrying(OPERATION, || {
                sqlx::query_as(&self.group_sql().wait)
                    .bind(&columns.names)
                    .bind(&columns.modes)
                    .bind(&columns.permits)
                    .bind(request.token.as_str())
                    .bind(ticket)
                    .fetch_one(self.pool())
            })
            .await
            .map_err(|error| self.group_fail(OPERATION, None, error))?;
        if blocking == 0 || unflagged > 0 {
            return Ok(None);
        }
        Ok(micros_left.map(|micros| Blockers {
            releases: u64::try_from(releases).unwrap_or(0).max(1),
            left: Duration::from_micros(u64::try_from(micros).unwrap_or(1)),
            shared,
        }))
    }

    /// The wait of [`wait_for_change`](GroupLockStore::wait_for_change), as
    /// [`WaiterRegistry::wait_any`](distlock_api::waiters::WaiterRegistry::wait_any) does it
    /// (register, wait for the listener, check, sleep), except that:
    ///
    /// - it registers for both payloads of every name and, when no shared row blocks the
    ///   request, stops listening to the `group-shared:` ones after the check: only the
    ///   rows that blocked the request when it checked matter, and none of those is shared
    ///   (a permits change notifies `group:`);
    /// - it sleeps until as many releases were notified as must come before the request
    ///   could be granted ([`wakes_reach`]): every blocking row of the other mode, and of
    ///   its own mode as many as keep the holders at or above the permits. A writer that
    ///   waits for eight readers looks again once, after the last of them released, not
    ///   after each (every look is a retry and a check, which would also compete with the
    ///   readers' releases); a semaphore's waiter looks again at the first release. A
    ///   blocking row that ends without a release ends the sleep when the first of them
    ///   runs out, as before.
    async fn wait_for_blockers(
        &self,
        request: &GroupRequest<'_>,
        deadline: tokio::time::Instant,
    ) -> Result<Woken, LockError> {
        let waiters = self.notifier.waiters();
        let register = |key: String| waiters.register(&key);
        let exclusive: Vec<Registration> = request.members.iter().map(|m| register(payload(&m.key))).collect();
        let shared: Vec<Registration> = request.members.iter().map(|m| register(shared_payload(&m.key))).collect();
        let mut listening = waiters.listening();
        // Until the listener listens no release would reach this waiter: a plain sleep
        // (the caller polls), cut short if the listener comes up.
        if !matches!(tokio::time::timeout_at(deadline, listening.wait_for(|up| *up)).await, Ok(Ok(_))) {
            tokio::time::sleep_until(deadline).await;
            return Ok(Woken::TimedOut);
        }
        // Counted before the check: a release after it is counted, one before it is seen
        // by the check.
        let since_exclusive = wakes_of(&exclusive);
        let since_shared = wakes_of(&shared);
        let Ok(checked) = tokio::time::timeout_at(deadline, self.flag_blockers(request)).await else {
            return Ok(Woken::TimedOut);
        };
        let Some(blockers) = checked? else {
            return Ok(Woken::AlreadyFree);
        };
        let wake_at = deadline.min(deadline_after(blockers.left.saturating_add(EXPIRY_MARGIN)));
        let (watched, since): (Vec<&Registration>, u64) = if blockers.shared {
            (exclusive.iter().chain(&shared).collect(), since_exclusive.wrapping_add(since_shared))
        } else {
            // Unregistered from their keys' wake-ups; the keys' entries go with `shared`.
            drop(shared);
            (exclusive.iter().collect(), since_exclusive)
        };
        Ok(wakes_reach(&watched, since, blockers.releases, &mut listening, wake_at, deadline).await)
    }
}

/// What [`PostgresLockStore::flag_blockers`] found blocking a request.
struct Blockers {
    /// How many of them must be released before it could be granted (each release of a
    /// blocking row notifies); at least 1.
    releases: u64,
    /// Time until the first of them runs out.
    left: Duration,
    /// Whether a shared hold or place is among them.
    shared: bool,
}

/// A request's members as the statements bind them: names, modes (`'R'`/`'W'`) and
/// default permits (`NULL`: unlimited), in the same order.
struct Columns<'a> {
    names: Vec<&'a str>,
    modes: Vec<&'static str>,
    permits: Vec<Option<i32>>,
}

impl<'a> Columns<'a> {
    fn of(request: &GroupRequest<'a>) -> Self {
        let members = request.members;
        Self {
            names: members.iter().map(|member| member.key.as_str()).collect(),
            modes: members.iter().map(|member| mode_code(member.mode)).collect(),
            permits: members.iter().map(|member| member.default_permits.map(permits_value)).collect(),
        }
    }
}

/// Lock groups in two tables beside the lease table (`<table>_holders`,
/// `<table>_permits`) and one function (`<table>_acquire_group`), created by
/// [`ensure_schema`](PostgresLockStore::ensure_schema) or at the first group operation
/// (checked only, with [`GroupSchemaMissing`](crate::GroupSchemaMissing) when missing, on a
/// store that may not create); see "Lock groups" in the crate documentation. Group names
/// live apart from single-lock keys.
#[async_trait]
impl GroupLockStore for PostgresLockStore {
    fn max_group(&self) -> usize {
        distlock_api::LockGroup::MAX_MEMBERS
    }

    /// One call of the grant function: advisory locks on the names (in one global
    /// order), a check of every member on a fresh snapshot, then the holds or the intents.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidGroup`] (before any I/O) for no members, more than
    /// [`max_group`](GroupLockStore::max_group), a name twice or zero default permits;
    /// [`LockError::Store`] when the server fails (the outcome is then unknown: release
    /// the group with the same token, which is harmless when nothing was taken), or, with
    /// cause [`GroupSchemaMissing`](crate::GroupSchemaMissing), when the group objects are
    /// missing and the store may not create them (as every group operation).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the call commits or not. If the future is dropped while the call is
    /// in flight, a [`release_group`](GroupLockStore::release_group) or
    /// [`withdraw_intents`](GroupLockStore::withdraw_intents) with the same token first
    /// waits until it has been answered.
    async fn try_acquire_group(&self, request: GroupRequest<'_>) -> Result<GroupAcquire, LockError> {
        const OPERATION: &str = "acquire group";
        check_group_members(request.members, self.max_group())?;
        self.ensure_group_schema().await?;
        let Columns { names, modes, permits } = Columns::of(&request);
        let intent_ttl = request.intent_ttl.map(|ttl| millis(ttl.as_duration()));
        let ticket = request.ticket.map(|ticket| i64::try_from(ticket).unwrap_or(i64::MAX));
        let mut attempt = self.in_flight.begin(request.token);
        let mut retries = self.pool().options().get_max_connections();
        let mut again = false;
        let row = loop {
            let conn = match self.kept.checkout().await {
                Ok(conn) => conn,
                Err(error) => return Err(self.group_fail(OPERATION, None, explain(self.pool(), error).await)),
            };
            let row = sqlx::query_as::<_, (Option<i64>, Option<i64>)>(&self.group_sql().acquire)
                .bind(&names)
                .bind(&modes)
                .bind(&permits)
                .bind(request.token.as_str())
                .bind(request.owner.as_str())
                .bind(millis(request.ttl.as_duration()))
                .bind(intent_ttl)
                .bind(ticket)
                .bind(again)
                .bind(request.fair)
                .fetch_one(&mut **attempt.hold(conn))
                .await;
            match row {
                Err(error) if retries > 0 && is_connection_lost(&error) => {
                    retries -= 1;
                    // The first run may have committed before its backend died.
                    again = true;
                    tracing::debug!(%error, "lost a pooled connection; acquiring the group again on another");
                }
                row => break row,
            }
        };
        let conn = attempt.finish();
        let unexpected = |what: String| self.group_fail(OPERATION, None, UnexpectedAnswer(what));
        let row = row.map_err(|error| self.group_fail(OPERATION, None, error))?;
        if let Some(conn) = conn {
            self.kept.keep(conn);
        }
        match row {
            (Some(fence), _) => {
                let fence = u64::try_from(fence).map_err(|_| unexpected(format!("negative fence {fence}")))?;
                Ok(GroupAcquire::Acquired { fence: Some(fence) })
            }
            (None, Some(ticket)) => {
                let ticket = u64::try_from(ticket).map_err(|_| unexpected(format!("negative ticket {ticket}")))?;
                Ok(GroupAcquire::Blocked { ticket })
            }
            (None, None) => Err(unexpected("the group function returned neither a fence nor a ticket".to_owned())),
        }
    }

    /// One `UPDATE … WHERE name = ANY(…) AND token = … AND <live>`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the statement commits or not.
    async fn extend_group(&self, keys: &[StoreKey], token: &Token, ttl: Ttl) -> Result<usize, LockError> {
        self.ensure_group_schema().await?;
        let names = names(keys);
        let done = self
            .retrying("extend group", || {
                sqlx::query(&self.group_sql().extend)
                    .bind(&names)
                    .bind(token.as_str())
                    .bind(millis(ttl.as_duration()))
                    .execute(self.pool())
            })
            .await
            .map_err(|error| self.group_fail("extend group", None, error))?;
        Ok(usize::try_from(done.rows_affected()).unwrap_or(usize::MAX))
    }

    /// One `DELETE` of the token's holds and intents of `keys` that also notifies the
    /// names waiters flagged; sent once any cancelled grant with the same token has been
    /// answered.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the statement commits or not.
    async fn release_group(&self, keys: &[StoreKey], token: &Token) -> Result<usize, LockError> {
        self.ensure_group_schema().await?;
        self.in_flight.settled(token).await;
        let names = names(keys);
        let (released, _notified): (i64, i64) = self
            .retrying("release group", || async {
                let mut conn = self.kept.checkout().await?;
                let query = sqlx::query_as(&self.group_sql().release).bind(&names).bind(token.as_str());
                let answer = query.fetch_one(&mut **conn).await;
                if answer.is_ok() {
                    self.kept.keep(conn);
                }
                answer
            })
            .await
            .map_err(|error| self.group_fail("release group", None, error))?;
        Ok(usize::try_from(released).unwrap_or(0))
    }

    /// One `DELETE` of the token's intents of `keys`, after any cancelled grant with the
    /// same token has been answered.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the statement commits or not.
    async fn withdraw_intents(&self, keys: &[StoreKey], token: &Token) -> Result<(), LockError> {
        self.ensure_group_schema().await?;
        self.in_flight.settled(token).await;
        let names = names(keys);
        let _: (i64, i64) = self
            .retrying("withdraw intents", || {
                sqlx::query_as(&self.group_sql().withdraw).bind(&names).bind(token.as_str()).fetch_one(self.pool())
            })
            .await
            .map_err(|error| self.group_fail("withdraw intents", None, error))?;
        Ok(())
    }

    /// One `DELETE … WHERE owner = …` (an index lookup), notifying flagged names.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the statement commits or not.
    async fn release_owner(&self, owner: &OwnerId) -> Result<u64, LockError> {
        self.ensure_group_schema().await?;
        let (released, _notified): (i64, i64) = self
            .retrying("release owner", || {
                sqlx::query_as(&self.group_sql().release_owner).bind(owner.as_str()).fetch_one(self.pool())
            })
            .await
            .map_err(|error| self.group_fail("release owner", None, error))?;
        Ok(u64::try_from(released).unwrap_or(0))
    }

    /// One upsert into (or `DELETE` from) the permits table, which every grant reads;
    /// notifies the name's waiters. Permits above `i32::MAX` are stored as `i32::MAX`.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidGroup`] (before any I/O) for `Some(0)`.
    async fn set_permits(&self, key: &StoreKey, mode: LockMode, permits: Option<u32>) -> Result<(), LockError> {
        const OPERATION: &str = "set permits";
        let mode = mode_code(mode);
        let fail = |error| self.group_fail(OPERATION, Some(key), error);
        match permits {
            Some(0) => {
                Err(LockError::InvalidGroup { reason: InvalidGroup::ZeroPermits { key: key.lock_key().to_owned() } })
            }
            Some(permits) => {
                self.ensure_group_schema().await?;
                let permits = permits_value(permits);
                let _: i64 = self
                    .retrying(OPERATION, || {
                        sqlx::query_scalar(&self.group_sql().set_permits)
                            .bind(key.as_str())
                            .bind(mode)
                            .bind(permits)
                            .fetch_one(self.pool())
                    })
                    .await
                    .map_err(fail)?;
                Ok(())
            }
            None => {
                self.ensure_group_schema().await?;
                let _: i64 = self
                    .retrying(OPERATION, || {
                        sqlx::query_scalar(&self.group_sql().remove_permits)
                            .bind(key.as_str())
                            .bind(mode)
                            .fetch_one(self.pool())
                    })
                    .await
                    .map_err(fail)?;
                Ok(())
            }
        }
    }

    /// One primary-key lookup in the permits table.
    async fn permits(&self, key: &StoreKey, mode: LockMode) -> Result<Option<u32>, LockError> {
        self.ensure_group_schema().await?;
        let permits: Option<i32> = self
            .retrying("read permits", || {
                sqlx::query_scalar(&self.group_sql().permits)
                    .bind(key.as_str())
                    .bind(mode_code(mode))
                    .fetch_optional(self.pool())
            })
            .await
            .map_err(|error| self.group_fail("read permits", Some(key), error))?;
        Ok(permits.map(|permits| u32::try_from(permits).unwrap_or(1)))
    }

    /// One `SELECT count(*)` of the live places (rows of waiting groups) of `key`.
    async fn waiting(&self, key: &StoreKey) -> Result<usize, LockError> {
        self.ensure_group_schema().await?;
        const OPERATION: &str = "count waiting groups";
        let count: i64 = self
            .retrying(OPERATION, || {
                sqlx::query_scalar(&self.group_sql().waiting).bind(key.as_str()).fetch_one(self.pool())
            })
            .await
            .map_err(|error| self.group_fail(OPERATION, Some(key), error))?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    /// One `SELECT` of the live places (rows of waiting groups) of `key`, oldest ticket
    /// first; times left and waited (since the place was taken: `placed_at`, written
    /// by the group's first blocked attempt on the name) are computed on the server.
    async fn places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        self.ensure_group_schema().await?;
        const OPERATION: &str = "places";
        let rows: Vec<(String, String, i64, i64)> = self
            .retrying(OPERATION, || sqlx::query_as(&self.group_sql().places).bind(key.as_str()).fetch_all(self.pool()))
            .await
            .map_err(|error| self.group_fail(OPERATION, Some(key), error))?;
        let unexpected = |what: String| self.group_fail(OPERATION, Some(key), UnexpectedAnswer(what));
        rows.into_iter()
            .map(|(token, mode, micros_left, micros_waited)| {
                waiting_place(&token, code_mode(&mode).map_err(unexpected)?, micros_left, micros_waited)
                    .map_err(unexpected)
            })
            .collect()
    }

    /// One statement per page (`group/list.sql`): the next `limit` names of the holders
    /// table's primary-key index range (from the pattern's literal prefix, after the
    /// cursor, the last name examined), with the live holds and places of those that
    /// match, in name order.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when the statement fails; [`LockError::Config`] for a cursor
    /// that is not a name of this store.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn list_groups(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        self.ensure_group_schema().await?;
        const OPERATION: &str = "list_groups";
        let after = page_start(cursor, "PostgreSQL")?;
        let unexpected = |what: String| self.group_fail(OPERATION, None, UnexpectedAnswer(what));
        let lowest = format!("{LOCK_NAMESPACE}{}", pattern.literal_prefix());
        // Never `None`: the namespace's own characters can be incremented.
        let beyond =
            prefix_successor(&lowest).ok_or_else(|| unexpected(format!("no name range for the prefix {lowest:?}")))?;
        let like = pattern.to_sql_like(LOCK_NAMESPACE);
        let limit = limit.clamp(1, ListPage::MAX_LIMIT);
        let page_size = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows: Vec<GroupListRow> = self
            .retrying(OPERATION, || {
                sqlx::query_as(&self.group_sql().list)
                    .bind(&lowest)
                    .bind(after)
                    .bind(&beyond)
                    .bind(page_size)
                    .bind(&like)
                    .fetch_all(self.pool())
            })
            .await
            .map_err(|error| self.group_fail(OPERATION, None, error))?;
        let (last, examined) = match rows.first() {
            Some((last, examined, ..)) => (last.clone(), *examined),
            None => return Err(unexpected("the list statement returned no row".to_owned())),
        };
        let mut live = Vec::with_capacity(rows.len());
        for (_, _, name, token, mode, owner, fence, micros_left, micros_waited) in &rows {
            let (Some(name), Some(token), Some(mode), Some(owner), Some(micros_left)) =
                (name, token, mode, owner, micros_left)
            else {
                continue;
            };
            let place = matches!(mode.as_str(), "I" | "J");
            live.push(GroupRow {
                name,
                token,
                mode: code_mode(mode).map_err(unexpected)?,
                owner,
                fence: if place { None } else { Some(fence.unwrap_or(0)) },
                micros_left: *micros_left,
                micros_waited: if place { *micros_waited } else { None },
            });
        }
        let names = group_names(pattern, live).map_err(unexpected)?;
        let complete = usize::try_from(examined).map_or(true, |examined| examined < limit);
        let next = match last {
            Some(last) if !complete => Some(ListCursor::new(last)),
            _ => None,
        };
        Ok(ListPage::new(names, next))
    }

    /// One `SELECT` of the live holds of `key`, oldest fence first; times left are
    /// computed on the server.
    async fn holders(&self, key: &StoreKey) -> Result<Vec<LockInfo>, LockError> {
        self.ensure_group_schema().await?;
        const OPERATION: &str = "inspect group holders";
        let rows: Vec<(String, String, String, i64, i64)> = self
            .retrying(OPERATION, || sqlx::query_as(&self.group_sql().holders).bind(key.as_str()).fetch_all(self.pool()))
            .await
            .map_err(|error| self.group_fail(OPERATION, Some(key), error))?;
        let unexpected = |what: String| self.group_fail(OPERATION, Some(key), UnexpectedAnswer(what));
        rows.into_iter()
            .map(|(token, mode, owner, fence, micros_left)| {
                let token =
                    Token::parse(&token).map_err(|_| unexpected("a stored token is not a UUID v4".to_owned()))?;
                let mode = code_mode(&mode).map_err(unexpected)?;
                let fence = u64::try_from(fence).map_err(|_| unexpected(format!("negative fence {fence}")))?;
                let ttl_left = Duration::from_micros(u64::try_from(micros_left).unwrap_or(1));
                Ok(LockInfo::new(token, Some(fence), ttl_left).with_mode(mode).with_owner(owner))
            })
            .collect()
    }

    /// Waits for a `NOTIFY` of a change of one of the request's names (a release, a
    /// withdrawn intent, a permits change) on the store's one listener connection, for the
    /// first row that blocks the request to run out, or for `max`, whichever comes first.
    /// (With release notifications off it sleeps `max`.)
    ///
    /// The waiter registers for every name before, in one statement, it checks whether
    /// the request could be granted now — the grant function's check: live holders of the
    /// other mode, permits of its mode, older intents for shared members (by its ticket;
    /// its own intents do not count) — and flags the rows that block it: it returns at
    /// once when nothing blocks (a release between the caller's blocked attempt and this
    /// wait is not slept through) or when a blocking row was freed before it could be
    /// flagged; a later release of a flagged row is notified (a freed shared row as
    /// `group-shared:<name>`, which a waiter that no shared row blocks does not wait for,
    /// so readers queued behind a writer sleep through the releases of the readers the
    /// writer waits for). While the listener is not
    /// connected it sleeps, so the caller polls.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when the check failed; the caller then sleeps.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped waiter unregisters; flags it set cost at most one
    /// notification nobody waits for.
    async fn wait_for_change(&self, request: GroupRequest<'_>, max: Duration) -> Result<(), LockError> {
        let deadline = deadline_after(max);
        if !self.capabilities().release_notifications || request.members.is_empty() {
            tokio::time::sleep_until(deadline).await;
            return Ok(());
        }
        self.ensure_group_schema().await?;
        let woken = self.wait_for_blockers(&request, deadline).await?;
        tracing::trace!(?woken, "group wait ended");
        Ok(())
    }
}

/// One row of `group/list.sql`: `(last name examined, names examined, name, token, mode,
/// owner, fence, µs left, µs waited)`.
type GroupListRow = (
    Option<String>,
    i64,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

/// The mode a stored mode code holds or waits for: `R` and `J` shared, `W` and `I`
/// exclusive.
fn code_mode(code: &str) -> Result<LockMode, String> {
    match code {
        "R" | "J" => Ok(LockMode::Shared),
        "W" | "I" => Ok(LockMode::Exclusive),
        other => Err(format!("unknown mode {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_api::{LockKey, StoreMember};

    fn member(key: &str, mode: LockMode, permits: Option<u32>) -> StoreMember {
        StoreMember::new(LockKey::new(key).unwrap().to_store_key(), mode, permits)
    }

    #[test]
    fn requests_are_checked_before_any_io() {
        let ok = [member("a", LockMode::Shared, Some(2)), member("b", LockMode::Exclusive, None)];
        assert!(check_group_members(&ok, 64).is_ok());
        let cases: [(&[StoreMember], usize); 4] = [
            (&[], 64),
            (&ok, 1),
            (&[member("a", LockMode::Shared, None), member("a", LockMode::Exclusive, None)], 64),
            (&[member("a", LockMode::Shared, Some(0))], 64),
        ];
        let reasons: Vec<InvalidGroup> = cases
            .iter()
            .map(|(members, max)| match check_group_members(members, *max) {
                Err(LockError::InvalidGroup { reason }) => reason,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            reasons,
            [
                InvalidGroup::Empty,
                InvalidGroup::TooLarge { len: 2, max: 1 },
                InvalidGroup::DuplicateName { key: "a".into() },
                InvalidGroup::ZeroPermits { key: "a".into() },
            ]
        );
    }

    #[test]
    fn modes_and_permits_as_stored() {
        assert_eq!((mode_code(LockMode::Shared), mode_code(LockMode::Exclusive)), ("R", "W"));
        assert_eq!((permits_value(3), permits_value(u32::MAX)), (3, i32::MAX));
        assert_eq!(payload(&LockKey::new("job").unwrap().to_store_key()), "group:lock:job");
        assert_eq!(shared_payload(&LockKey::new("job").unwrap().to_store_key()), "group-shared:lock:job");
    }
}
