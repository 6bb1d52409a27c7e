//! Lock groups: the `GroupLockStore` implementation, the grant decided by
//! [`distlock_api::grant::decide`] inside a transaction that locks the group's names.

use std::collections::HashMap;
use std::time::Duration;

use distlock_api::grant::{decide, Holder, Place, Request};
use distlock_api::{
    async_trait, check_group_members, check_group_names, GroupAcquire, GroupLockStore, GroupRequest, KeyPattern,
    ListCursor, ListPage, LockError, LockInfo, LockMode, OwnerId, StoreKey, Token, Ttl, WaitingPlace,
};
use distlock_sql::listing::{group_names, page_start, waiting_place, GroupRow};
use sqlx::mysql::MySqlArguments;
use sqlx::query::Query;
use sqlx::{Connection, MySql};

use crate::error::{UnexpectedAnswer, BACKEND};
use crate::sql::{self, in_list, rows, HOLD_ROW, NAME_ROW, PLACE_ROW, WAITER_ROW};
use crate::store::{key_range, parse_token, token_text, MysqlLockStore};

/// The `mode` column: 0 exclusive, 1 shared.
fn mode_code(mode: LockMode) -> i64 {
    match mode {
        LockMode::Shared => 1,
        _ => 0,
    }
}

fn mode_of(code: i64) -> LockMode {
    if code == 1 {
        LockMode::Shared
    } else {
        LockMode::Exclusive
    }
}

/// What the grant reads of one name.
#[derive(Debug, Default)]
struct NameState {
    holders: Vec<(String, LockMode)>,
    places: Vec<(String, LockMode, u64)>,
    permits: Vec<(LockMode, u32)>,
}

fn bind_names<'q>(
    mut query: Query<'q, MySql, MySqlArguments>,
    keys: &'q [&'q str],
) -> Query<'q, MySql, MySqlArguments> {
    for key in keys {
        query = query.bind(*key);
    }
    query
}

fn unexpected(what: String) -> LockError {
    LockError::store(BACKEND, "acquire group", None, UnexpectedAnswer(what))
}

impl MysqlLockStore {
    fn group_fail(&self, operation: &'static str, error: impl Into<distlock_api::BoxError>) -> LockError {
        LockError::store(BACKEND, operation, None, error)
    }

    /// One grant attempt: the names' rows (made to exist by their own autocommit
    /// statement) are locked in key order, the holders, places and permits read, the
    /// rule decided per member, and then either the holds written or the places recorded.
    async fn grant(&self, request: &GroupRequest<'_>) -> Result<Result<GroupAcquire, LockError>, sqlx::Error> {
        let mut names: Vec<&str> = request.members.iter().map(|member| member.key.as_str()).collect();
        names.sort_unstable();
        let n = names.len();
        let mut conn = self.pool.acquire().await?;
        bind_names(sqlx::query(&rows(&self.sql.ensure_names, NAME_ROW, n)), &names).execute(&mut *conn).await?;
        let mut tx = conn.begin().await?;
        let locked: Vec<(i64, i64)> = bind_names(sqlx::query(&in_list(&self.sql.lock_names, n)), &names)
            .try_map(|row: sqlx::mysql::MySqlRow| {
                use sqlx::Row;
                Ok((row.try_get(0)?, row.try_get(1)?))
            })
            .fetch_all(&mut *tx)
            .await?;
        let Some(&(_, now)) = locked.first() else {
            return Ok(Err(unexpected("the group's names have no rows".into())));
        };
        let last_fence = locked.iter().map(|(fence, _)| *fence).max().unwrap_or(0);
        let state_sql = in_list(&self.sql.group_state, n);
        let mut query = sqlx::query_as::<_, (i64, Vec<u8>, Option<Vec<u8>>, i64, i64)>(&state_sql);
        for _ in 0..3 {
            for name in &names {
                query = query.bind(*name);
            }
        }
        let found = query.fetch_all(&mut *tx).await?;
        let mut state: HashMap<Vec<u8>, NameState> = HashMap::new();
        for (kind, name, token, mode, number) in found {
            let entry = state.entry(name).or_default();
            let token = token.map(|token| String::from_utf8_lossy(&token).into_owned()).unwrap_or_default();
            match kind {
                0 => entry.holders.push((token, mode_of(mode))),
                1 => entry.places.push((token, mode_of(mode), u64::try_from(number).unwrap_or(0))),
                _ => entry.permits.push((mode_of(mode), u32::try_from(number).unwrap_or(u32::MAX))),
            }
        }
        let empty = NameState::default();
        let granted = request.members.iter().all(|member| {
            let name = state.get(member.key.as_str().as_bytes()).unwrap_or(&empty);
            let permits = name
                .permits
                .iter()
                .find(|(mode, _)| *mode == member.mode)
                .map(|(_, permits)| *permits)
                .or(member.default_permits);
            let ask = Request { token: request.token.as_str(), mode: member.mode, ticket: request.ticket, permits };
            let holders = name.holders.iter().map(|(token, mode)| Holder { token, mode: *mode });
            let places = name.places.iter().map(|(token, mode, ticket)| Place { token, mode: *mode, ticket: *ticket });
            decide(&ask, holders, places).is_grant()
        });
        let token = request.token.as_str();
        if granted {
            let fence = last_fence.saturating_add(1).max(now);
            let clear = in_list(&self.sql.clear_holds, n);
            bind_names(sqlx::query(&clear), &names).bind(token).execute(&mut *tx).await?;
            let clear = in_list(&self.sql.clear_places, n);
            bind_names(sqlx::query(&clear), &names).bind(token).execute(&mut *tx).await?;
            let hold = rows(&self.sql.hold, HOLD_ROW, n);
            let mut query = sqlx::query(&hold);
            let ttl = sql::millis(request.ttl.as_duration());
            for member in request.members {
                query = query
                    .bind(member.key.as_str())
                    .bind(token)
                    .bind(mode_code(member.mode))
                    .bind(request.owner.as_str())
                    .bind(fence)
                    .bind(ttl);
            }
            query.execute(&mut *tx).await?;
            let set_fence = in_list(&self.sql.set_fence, n);
            bind_names(sqlx::query(&set_fence).bind(fence), &names).execute(&mut *tx).await?;
            tx.commit().await?;
            let fence = u64::try_from(fence).unwrap_or(0);
            return Ok(Ok(GroupAcquire::Acquired { fence: Some(fence) }));
        }
        let oldest_possible = state
            .values()
            .flat_map(|name| name.places.iter().map(|(_, _, ticket)| ticket.saturating_add(1)))
            .max()
            .unwrap_or(1)
            .max(u64::try_from(now).unwrap_or(1));
        let ticket = request.ticket.unwrap_or(oldest_possible);
        let placed: Vec<_> = request.members.iter().filter(|member| request.places(member)).collect();
        if let (Some(place_ttl), false) = (request.intent_ttl, placed.is_empty()) {
            let place = rows(&self.sql.group_place, PLACE_ROW, placed.len());
            let mut query = sqlx::query(&place);
            let ticket = i64::try_from(ticket).unwrap_or(i64::MAX);
            for member in placed {
                query = query
                    .bind(member.key.as_str())
                    .bind(token)
                    .bind(mode_code(member.mode))
                    .bind(ticket)
                    .bind(sql::millis(place_ttl.as_duration()));
            }
            query.execute(&mut *tx).await?;
            tx.commit().await?;
        } else {
            tx.rollback().await?;
        }
        Ok(Ok(GroupAcquire::Blocked { ticket }))
    }
}

#[async_trait]
impl GroupLockStore for MysqlLockStore {
    fn max_group(&self) -> usize {
        distlock_api::LockGroup::MAX_MEMBERS
    }

    /// One transaction: `INSERT IGNORE` of the names' rows (autocommit, before it), then
    /// `SELECT … FOR UPDATE` of those rows in key order, one `SELECT` of their live
    /// holders, places and recorded permits, the grant rule
    /// ([`distlock_api::grant::decide`]) on the server's clock read under those locks,
    /// and the writes. A transaction the server rolls back as a deadlock's victim is run
    /// again.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped transaction is rolled back.
    async fn try_acquire_group(&self, request: GroupRequest<'_>) -> Result<GroupAcquire, LockError> {
        check_group_members(request.members, self.max_group())?;
        self.retrying("acquire group", || self.grant(&request))
            .await
            .map_err(|error| self.group_fail("acquire group", error))?
    }

    /// One `UPDATE` of the token's live holds.
    async fn extend_group(&self, keys: &[StoreKey], token: &Token, ttl: Ttl) -> Result<usize, LockError> {
        check_group_names(keys.iter(), self.max_group())?;
        if keys.is_empty() {
            return Ok(0);
        }
        let names: Vec<&str> = keys.iter().map(StoreKey::as_str).collect();
        let statement = in_list(&self.sql.group_extend, names.len());
        let done = self
            .retrying("extend group", || {
                bind_names(sqlx::query(&statement).bind(sql::millis(ttl.as_duration())), &names)
                    .bind(token.as_str())
                    .execute(&self.pool)
            })
            .await
            .map_err(|error| self.group_fail("extend group", error))?;
        Ok(usize::try_from(done.rows_affected()).unwrap_or(usize::MAX))
    }

    /// One `DELETE` of the token's live holds (a granted group has no places left: the
    /// grant removed them); when it freed any, the listeners waiting for a change of the
    /// names are woken in a task of their own.
    async fn release_group(&self, keys: &[StoreKey], token: &Token) -> Result<usize, LockError> {
        check_group_names(keys.iter(), self.max_group())?;
        if keys.is_empty() {
            return Ok(0);
        }
        let names: Vec<&str> = keys.iter().map(StoreKey::as_str).collect();
        let statement = in_list(&self.sql.group_release, names.len());
        let done = self
            .retrying("release group", || {
                bind_names(sqlx::query(&statement), &names).bind(token.as_str()).execute(&self.pool)
            })
            .await
            .map_err(|error| self.group_fail("release group", error))?;
        if done.rows_affected() > 0 {
            self.wake_names(names.iter().map(|name| (*name).to_owned()).collect());
        }
        Ok(usize::try_from(done.rows_affected()).unwrap_or(usize::MAX))
    }

    /// One `DELETE` of the token's places; when it removed any, the listeners waiting for
    /// a change of the names are woken in a task of their own (a group behind may now be
    /// granted).
    async fn withdraw_intents(&self, keys: &[StoreKey], token: &Token) -> Result<(), LockError> {
        check_group_names(keys.iter(), self.max_group())?;
        if keys.is_empty() {
            return Ok(());
        }
        let names: Vec<&str> = keys.iter().map(StoreKey::as_str).collect();
        let statement = in_list(&self.sql.withdraw, names.len());
        let done = self
            .retrying("withdraw intents", || {
                bind_names(sqlx::query(&statement), &names).bind(token.as_str()).execute(&self.pool)
            })
            .await
            .map_err(|error| self.group_fail("withdraw intents", error))?;
        if done.rows_affected() > 0 {
            self.wake_names(names.iter().map(|name| (*name).to_owned()).collect());
        }
        Ok(())
    }

    /// One `DELETE … WHERE owner = ?` (the owner index).
    async fn release_owner(&self, owner: &OwnerId) -> Result<u64, LockError> {
        let done = self
            .retrying("release owner", || sqlx::query(&self.sql.release_owner).bind(owner.as_str()).execute(&self.pool))
            .await
            .map_err(|error| self.group_fail("release owner", error))?;
        Ok(done.rows_affected())
    }

    /// One upsert (or `DELETE` for `None`) of the permits row.
    async fn set_permits(&self, key: &StoreKey, mode: LockMode, permits: Option<u32>) -> Result<(), LockError> {
        self.retrying("set permits", || {
            let query = match permits {
                Some(permits) => {
                    sqlx::query(&self.sql.set_permits).bind(key.as_str()).bind(mode_code(mode)).bind(i64::from(permits))
                }
                None => sqlx::query(&self.sql.remove_permits).bind(key.as_str()).bind(mode_code(mode)),
            };
            query.execute(&self.pool)
        })
        .await
        .map_err(|error| self.fail("set permits", key, error))?;
        Ok(())
    }

    /// One `SELECT` of the permits row.
    async fn permits(&self, key: &StoreKey, mode: LockMode) -> Result<Option<u32>, LockError> {
        let permits: Option<i64> = self
            .retrying("permits", || {
                sqlx::query_scalar(&self.sql.permits)
                    .bind(key.as_str())
                    .bind(mode_code(mode))
                    .fetch_optional(&self.pool)
            })
            .await
            .map_err(|error| self.fail("permits", key, error))?;
        Ok(permits.map(|permits| u32::try_from(permits).unwrap_or(u32::MAX)))
    }

    /// One `SELECT` of the name's live holds.
    async fn holders(&self, key: &StoreKey) -> Result<Vec<LockInfo>, LockError> {
        let found: Vec<(Vec<u8>, i64, i64, Vec<u8>, i64)> = self
            .retrying("holders", || sqlx::query_as(&self.sql.holders).bind(key.as_str()).fetch_all(&self.pool))
            .await
            .map_err(|error| self.fail("holders", key, error))?;
        let mut holders = Vec::with_capacity(found.len());
        for (token, fence, mode, owner, micros_left) in found {
            let token = parse_token(&token)
                .ok_or_else(|| self.fail("holders", key, UnexpectedAnswer("a stored token is not a UUID v4".into())))?;
            let fence = u64::try_from(fence).unwrap_or(0);
            let ttl_left = Duration::from_micros(u64::try_from(micros_left).unwrap_or(1));
            holders.push(
                LockInfo::new(token, Some(fence), ttl_left)
                    .with_mode(mode_of(mode))
                    .with_owner(String::from_utf8_lossy(&owner).into_owned()),
            );
        }
        Ok(holders)
    }

    /// One `SELECT COUNT(*)` of the name's live places.
    async fn waiting(&self, key: &StoreKey) -> Result<usize, LockError> {
        let count: i64 = self
            .retrying("waiting", || sqlx::query_scalar(&self.sql.waiting).bind(key.as_str()).fetch_one(&self.pool))
            .await
            .map_err(|error| self.fail("waiting", key, error))?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    /// One `SELECT` of the name's live places, oldest ticket first, with the times left
    /// and waited (since the place was taken) on the server's clock.
    async fn places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        let found: Vec<(Vec<u8>, i64, i64, i64)> = self
            .retrying("places", || sqlx::query_as(&self.sql.group_places).bind(key.as_str()).fetch_all(&self.pool))
            .await
            .map_err(|error| self.fail("places", key, error))?;
        found
            .into_iter()
            .map(|(token, mode, micros_left, micros_waited)| {
                waiting_place(token_text(&token), mode_of(mode), micros_left, micros_waited)
                    .map_err(|what| self.fail("places", key, UnexpectedAnswer(what)))
            })
            .collect()
    }

    /// One statement per page (`group/list.sql`): the next `limit` names of the names
    /// table's primary-key range (from the pattern's literal prefix, after the cursor,
    /// the last name examined), with the live holds and places of those that match.
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
        const OPERATION: &str = "list_groups";
        let after = page_start(cursor, "MySQL")?;
        let unexpected = |what: String| LockError::store(BACKEND, OPERATION, None, UnexpectedAnswer(what));
        let (lowest, beyond) = key_range(pattern).map_err(unexpected)?;
        let limit = limit.clamp(1, ListPage::MAX_LIMIT);
        let page_size = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows: Vec<GroupListRow> = self
            .retrying(OPERATION, || {
                sqlx::query_as(&self.sql.group_list)
                    .bind(&lowest)
                    .bind(after)
                    .bind(&beyond)
                    .bind(page_size)
                    .fetch_all(&self.pool)
            })
            .await
            .map_err(|error| LockError::store(BACKEND, OPERATION, None, error))?;
        let (last, examined) = match rows.first() {
            Some((last, examined, ..)) => (last.clone(), *examined),
            None => return Err(unexpected("the list statement returned no row".to_owned())),
        };
        let utf8 = |bytes: &[u8]| {
            String::from_utf8(bytes.to_vec()).map_err(|_| unexpected("the table holds a name that is not UTF-8".into()))
        };
        let mut names = Vec::with_capacity(rows.len());
        for (_, _, name, token, kind, mode, owner, fence, micros_left, micros_waited) in &rows {
            let (Some(name), Some(token), Some(kind), Some(mode), Some(micros_left)) =
                (name, token, kind, mode, micros_left)
            else {
                continue;
            };
            names.push((utf8(name)?, token, *kind == 1, *mode, owner, *fence, *micros_left, *micros_waited));
        }
        let live = names.iter().map(|(name, token, place, mode, owner, fence, micros_left, micros_waited)| GroupRow {
            name,
            token: token_text(token),
            mode: mode_of(*mode),
            owner: owner.as_deref().map(token_text).unwrap_or_default(),
            fence: if *place { None } else { Some(fence.unwrap_or(0)) },
            micros_left: *micros_left,
            micros_waited: if *place { *micros_waited } else { None },
        });
        let held = group_names(pattern, live).map_err(unexpected)?;
        let next = match last {
            Some(last) if usize::try_from(examined).is_ok_and(|examined| examined >= limit) => {
                Some(ListCursor::new(utf8(&last)?))
            }
            _ => None,
        };
        Ok(ListPage::new(held, next))
    }

    /// Registers the store's listener for a change of each of the group's names (one
    /// upsert), checks that something may still block the group (one `SELECT` of the
    /// other tokens' live holds and older places: nothing returns at once), and waits
    /// until a group release or withdrawal on one of the names interrupts the listener,
    /// the earliest of those leases ends, or `max` (see "Waiting" in the crate
    /// documentation). With
    /// [`release_notifications(false)`](crate::MysqlLockStoreBuilder::release_notifications),
    /// or while the listener is not connected, it sleeps `max`.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidKey`] for a group the store refuses; [`LockError::Store`]
    /// (operation `"wait for change"`) when the registration or the check failed.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a registration left behind expires.
    async fn wait_for_change(&self, request: GroupRequest<'_>, max: Duration) -> Result<(), LockError> {
        check_group_members(request.members, self.max_group())?;
        let names: Vec<&str> = request.members.iter().map(|member| member.key.as_str()).collect();
        let token = request.token.as_str();
        let ticket = request.ticket.map_or(i64::MAX, |ticket| i64::try_from(ticket).unwrap_or(i64::MAX));
        let register_sql = rows(&self.sql.register_names, WAITER_ROW, names.len());
        let blocked_sql = in_list(&self.sql.blocked, names.len());
        let (names, register_sql, blocked_sql) = (&names, &register_sql, &blocked_sql);
        let fail = |error| self.group_fail("wait for change", error);
        let register = |listener: i64, registration: Duration| async move {
            self.retrying("wait for change", || {
                let mut query = sqlx::query(register_sql);
                for name in names {
                    query = query.bind(*name).bind(listener).bind(sql::millis(registration));
                }
                query.execute(&self.pool)
            })
            .await
            .map(drop)
            .map_err(fail)
        };
        let blocked = || async move {
            self.retrying("wait for change", || {
                let mut query = sqlx::query_scalar::<_, Option<i64>>(blocked_sql);
                for name in names {
                    query = query.bind(*name);
                }
                query = query.bind(token);
                for name in names {
                    query = query.bind(*name);
                }
                query.bind(token).bind(ticket).fetch_one(&self.pool)
            })
            .await
            .map_err(fail)
        };
        self.wait_woken(names, None, max, register, blocked).await
    }
}
/// One row of `group/list.sql`: `(last name examined, names examined, name, token, kind,
/// mode, owner, fence, µs left, µs waited)`.
type GroupListRow = (
    Option<Vec<u8>>,
    i64,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Option<i64>,
    Option<i64>,
    Option<Vec<u8>>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);
