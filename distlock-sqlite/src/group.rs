//! Lock groups on SQLite: every attempt is one `BEGIN IMMEDIATE` transaction that reads
//! the names' holders, places and permits and decides with
//! [`distlock_api::grant::decide`].

use std::collections::HashMap;
use std::time::Duration;

use distlock_api::{
    async_trait, check_group_members, check_group_names, grant, GroupAcquire, GroupLockStore, GroupRequest, HeldLock,
    KeyPattern, ListCursor, ListPage, LockError, LockInfo, LockKey, LockMode, OwnerId, StoreKey, Token, Ttl,
    WaitingPlace, LOCK_NAMESPACE,
};
use sqlx::{Row as _, SqliteConnection};

use crate::clock::{left, ms_after, now_ms};
use crate::notify::group_channel;
use crate::process::{self, ProcessId};
use crate::sql::json_array;
use crate::store::{Found, SqliteLockStore, Stamp, BACKEND};

/// One holder of a name, as read.
struct Holder {
    token: String,
    mode: LockMode,
    owner: String,
    fence: i64,
    stamp: Stamp,
}

/// One waiting group's place on a name, as read.
struct Intent {
    token: String,
    mode: LockMode,
    ticket: u64,
    /// When the place was first taken, on this boot's clock.
    placed_ms: i64,
    expires_ms: i64,
}

/// What the names of a request have now: holders and places in force, recorded permits.
#[derive(Default)]
struct Names {
    holders: HashMap<String, Vec<Holder>>,
    intents: HashMap<String, Vec<Intent>>,
    permits: HashMap<(String, LockMode), u32>,
    /// Rows that are over (expired, another boot) were seen.
    over: bool,
    /// Tokens whose processes are gone.
    gone: Vec<String>,
}

impl Names {
    /// A holder's or place's row's stamp and token when it is in force; otherwise `None`,
    /// noting a row that is over (`over`) or whose process is gone (`gone`).
    fn in_force(
        &mut self,
        row: &sqlx::sqlite::SqliteRow,
        boot: &str,
        now: i64,
        liveness: bool,
    ) -> Result<Option<(Stamp, String)>, sqlx::Error> {
        let stamp = Stamp::of(row)?;
        let token: String = row.try_get("token")?;
        if !stamp.unexpired(boot, now) {
            self.over = true;
            return Ok(None);
        }
        if liveness && stamp.process.is_gone() {
            self.gone.push(token);
            return Ok(None);
        }
        Ok(Some((stamp, token)))
    }

    fn grants(&self, request: &GroupRequest<'_>) -> bool {
        request.members.iter().all(|member| {
            let name = member.key.as_str();
            let permits = self.permits.get(&(name.to_owned(), member.mode)).copied().or(member.default_permits);
            let ask =
                grant::Request { token: request.token.as_str(), mode: member.mode, ticket: request.ticket, permits };
            let holders = self.holders.get(name).into_iter().flatten();
            let places = self.intents.get(name).into_iter().flatten();
            grant::decide(
                &ask,
                holders.map(|holder| grant::Holder { token: &holder.token, mode: holder.mode }),
                places.map(|place| grant::Place { token: &place.token, mode: place.mode, ticket: place.ticket }),
            )
            .is_grant()
        })
    }

    /// The nearest end among the holds and places, and the holders' processes.
    fn soonest_change(&self, now: i64) -> (Duration, Vec<ProcessId>) {
        let holds = self.holders.values().flatten().map(|holder| holder.stamp.expires_ms);
        let places = self.intents.values().flatten().map(|place| place.expires_ms);
        let soonest = holds.chain(places).min().map_or(Duration::MAX, |at| left(now, at));
        (soonest, self.holders.values().flatten().map(|holder| holder.stamp.process).collect())
    }
}

/// The holders read, as [`LockInfo`]s sorted by fence.
fn holders_of(holders: Vec<Holder>, now: i64) -> Vec<LockInfo> {
    let mut holders: Vec<LockInfo> = holders
        .into_iter()
        .filter_map(|holder| {
            let token = Token::parse(&holder.token).ok()?;
            Some(
                LockInfo::new(token, u64::try_from(holder.fence).ok(), left(now, holder.stamp.expires_ms))
                    .with_mode(holder.mode)
                    .with_owner(holder.owner),
            )
        })
        .collect();
    holders.sort_by_key(|info| info.fence);
    holders
}

/// The places read, as [`WaitingPlace`]s, oldest ticket first.
fn places_of(mut intents: Vec<Intent>, now: i64) -> Vec<WaitingPlace> {
    intents.sort_by_key(|intent| intent.ticket);
    intents
        .into_iter()
        .filter_map(|intent| {
            let token = Token::parse(&intent.token).ok()?;
            let waited = left(intent.placed_ms, now);
            Some(WaitingPlace::new(token, intent.mode, Some(waited), left(now, intent.expires_ms)))
        })
        .collect()
}

fn mode_of(text: &str) -> LockMode {
    if text == LockMode::Shared.as_str() {
        LockMode::Shared
    } else {
        LockMode::Exclusive
    }
}

fn group_fail<E: Into<distlock_api::BoxError>>(operation: &'static str) -> impl Fn(E) -> LockError {
    move |error| LockError::store(BACKEND, operation, None, error)
}

fn channels<'a>(keys: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    keys.into_iter().map(group_channel).collect()
}

impl SqliteLockStore {
    /// Reads the state of the names in `json` (a JSON array of store keys) at `now`.
    async fn names(&self, conn: &mut SqliteConnection, json: &str, boot: &str, now: i64) -> Result<Names, sqlx::Error> {
        let liveness = self.inner.layout.liveness;
        let mut names = Names::default();
        for row in sqlx::query(&self.inner.sql.group_holders).bind(json).fetch_all(&mut *conn).await? {
            let Some((stamp, token)) = names.in_force(&row, boot, now, liveness)? else { continue };
            let holder = Holder {
                mode: mode_of(&row.try_get::<String, _>("mode")?),
                owner: row.try_get("owner")?,
                fence: row.try_get("fence")?,
                token,
                stamp,
            };
            names.holders.entry(row.try_get("key")?).or_default().push(holder);
        }
        for row in sqlx::query(&self.inner.sql.group_intents).bind(json).fetch_all(&mut *conn).await? {
            let Some((stamp, token)) = names.in_force(&row, boot, now, liveness)? else { continue };
            let intent = Intent {
                mode: mode_of(&row.try_get::<String, _>("mode")?),
                ticket: u64::try_from(row.try_get::<i64, _>("ticket")?).unwrap_or(0),
                placed_ms: row.try_get("placed_ms")?,
                expires_ms: stamp.expires_ms,
                token,
            };
            names.intents.entry(row.try_get("key")?).or_default().push(intent);
        }
        for row in sqlx::query(&self.inner.sql.group_permits_of).bind(json).fetch_all(&mut *conn).await? {
            let permits = u32::try_from(row.try_get::<i64, _>("permits")?).unwrap_or(u32::MAX);
            names.permits.insert((row.try_get("key")?, mode_of(&row.try_get::<String, _>("mode")?)), permits);
        }
        Ok(names)
    }

    /// Removes the holds and places on the names in `json` that are over.
    async fn purge_names(
        &self,
        conn: &mut SqliteConnection,
        json: &str,
        names: &Names,
        boot: &str,
        now: i64,
    ) -> Result<(), sqlx::Error> {
        if !names.over && names.gone.is_empty() {
            return Ok(());
        }
        let gone = json_array(names.gone.iter().map(String::as_str));
        let sql = &self.inner.sql;
        sqlx::query(&sql.group_purge_holders).bind(json).bind(boot).bind(now).bind(&gone).execute(&mut *conn).await?;
        sqlx::query(&sql.group_purge_intents).bind(json).bind(boot).bind(now).bind(&gone).execute(&mut *conn).await?;
        Ok(())
    }

    async fn try_acquire_group_inner(&self, request: &GroupRequest<'_>) -> Result<GroupAcquire, sqlx::Error> {
        let boot = crate::clock::boot_id().map_err(sqlx::Error::Io)?;
        let me = process::current();
        let json = json_array(request.members.iter().map(|member| member.key.as_str()));
        let mut write = self.begin().await?;
        let now = now_ms();
        let names = self.names(write.conn(), &json, boot, now).await?;
        self.purge_names(write.conn(), &json, &names, boot, now).await?;
        let token = request.token.as_str();
        if names.grants(request) {
            let fence = self.next_number(write.conn()).await?;
            sqlx::query(&self.inner.sql.group_withdraw).bind(&json).bind(token).execute(write.conn()).await?;
            let expires_ms = ms_after(now, request.ttl.as_duration());
            for member in request.members {
                sqlx::query(&self.inner.sql.group_hold)
                    .bind(member.key.as_str())
                    .bind(token)
                    .bind(member.mode.as_str())
                    .bind(request.owner.as_str())
                    .bind(i64::try_from(fence).unwrap_or(i64::MAX))
                    .bind(boot)
                    .bind(expires_ms)
                    .bind(me.pid)
                    .bind(me.start)
                    .bind(me.namespace)
                    .execute(write.conn())
                    .await?;
            }
            write.commit().await?;
            return Ok(GroupAcquire::Acquired { fence: Some(fence) });
        }
        let ticket = match request.ticket {
            Some(ticket) => ticket,
            None => self.next_number(write.conn()).await?,
        };
        if let Some(intent_ttl) = request.intent_ttl {
            let expires_ms = ms_after(now, intent_ttl.as_duration());
            for member in request.members.iter().filter(|member| request.places(member)) {
                sqlx::query(&self.inner.sql.group_intend)
                    .bind(member.key.as_str())
                    .bind(token)
                    .bind(member.mode.as_str())
                    .bind(i64::try_from(ticket).unwrap_or(i64::MAX))
                    .bind(boot)
                    .bind(now)
                    .bind(expires_ms)
                    .bind(me.pid)
                    .bind(me.start)
                    .bind(me.namespace)
                    .execute(write.conn())
                    .await?;
            }
        }
        write.commit().await?;
        Ok(GroupAcquire::Blocked { ticket })
    }

    async fn release_group_inner(&self, json: &str, token: &Token) -> Result<usize, sqlx::Error> {
        let boot = crate::clock::boot_id().map_err(sqlx::Error::Io)?;
        let mut write = self.begin().await?;
        let now = now_ms();
        sqlx::query(&self.inner.sql.group_withdraw).bind(json).bind(token.as_str()).execute(write.conn()).await?;
        let freed: Vec<(String, String, i64)> = sqlx::query_as(&self.inner.sql.group_release)
            .bind(json)
            .bind(token.as_str())
            .fetch_all(write.conn())
            .await?;
        write.commit().await?;
        Ok(freed.iter().filter(|(_, row_boot, expires_ms)| row_boot == boot && *expires_ms > now).count())
    }

    /// For a waiting group: nothing to wait for when it could be granted now; else the
    /// nearest end among its names' holds and places, and the holders' processes.
    async fn group_state(&self, request: &GroupRequest<'_>) -> Result<Found, LockError> {
        let fail = group_fail("wait for a change");
        let boot = Self::boot_id()?;
        let json = json_array(request.members.iter().map(|member| member.key.as_str()));
        let mut conn =
            self.explained(self.inner.pool.acquire().await).await.map_err(group_fail("wait for a change"))?;
        let now = now_ms();
        let names = self.names(&mut conn, &json, boot, now).await.map_err(&fail)?;
        if names.grants(request) {
            return Ok(Found::Free);
        }
        let (left, holders) = names.soonest_change(now);
        Ok(Found::Held { left, holders })
    }
}

#[async_trait]
impl GroupLockStore for SqliteLockStore {
    fn max_group(&self) -> usize {
        distlock_api::LockGroup::MAX_MEMBERS
    }

    async fn try_acquire_group(&self, request: GroupRequest<'_>) -> Result<GroupAcquire, LockError> {
        check_group_members(request.members, self.max_group())?;
        self.ready("acquire a group").await?;
        self.explained(self.try_acquire_group_inner(&request).await).await.map_err(group_fail("acquire a group"))
    }

    async fn extend_group(&self, keys: &[StoreKey], token: &Token, ttl: Ttl) -> Result<usize, LockError> {
        check_group_names(keys.iter(), self.max_group())?;
        if keys.is_empty() {
            return Ok(0);
        }
        self.ready("extend a group").await?;
        let boot = Self::boot_id()?;
        let now = now_ms();
        let update = sqlx::query(&self.inner.sql.group_extend)
            .bind(json_array(keys.iter().map(StoreKey::as_str)))
            .bind(token.as_str())
            .bind(boot)
            .bind(ms_after(now, ttl.as_duration()))
            .bind(now);
        let extended = self.explained(self.write_one(update).await).await.map_err(group_fail("extend a group"))?;
        Ok(usize::try_from(extended).unwrap_or(usize::MAX))
    }

    async fn release_group(&self, keys: &[StoreKey], token: &Token) -> Result<usize, LockError> {
        check_group_names(keys.iter(), self.max_group())?;
        if keys.is_empty() {
            return Ok(0);
        }
        self.ready("release a group").await?;
        let json = json_array(keys.iter().map(StoreKey::as_str));
        let freed = self
            .explained(self.release_group_inner(&json, token).await)
            .await
            .map_err(group_fail("release a group"))?;
        self.wake(&channels(keys.iter().map(StoreKey::as_str))).await;
        Ok(freed)
    }

    async fn withdraw_intents(&self, keys: &[StoreKey], token: &Token) -> Result<(), LockError> {
        check_group_names(keys.iter(), self.max_group())?;
        if keys.is_empty() {
            return Ok(());
        }
        self.ready("withdraw intents").await?;
        let withdraw = sqlx::query(&self.inner.sql.group_withdraw)
            .bind(json_array(keys.iter().map(StoreKey::as_str)))
            .bind(token.as_str());
        self.explained(self.write_one(withdraw).await).await.map_err(group_fail("withdraw intents"))?;
        self.wake(&channels(keys.iter().map(StoreKey::as_str))).await;
        Ok(())
    }

    async fn release_owner(&self, owner: &OwnerId) -> Result<u64, LockError> {
        self.ready("release an owner's holds").await?;
        let fail = group_fail("release an owner's holds");
        let boot = Self::boot_id()?;
        let freed: Vec<(String, String, i64)> = {
            let mut write = self.explained(self.begin().await).await.map_err(group_fail("release an owner's holds"))?;
            let rows = sqlx::query_as(&self.inner.sql.group_release_owner)
                .bind(owner.as_str())
                .fetch_all(write.conn())
                .await
                .map_err(&fail)?;
            write.commit().await.map_err(&fail)?;
            rows
        };
        let now = now_ms();
        let mut keys: Vec<&str> = freed.iter().map(|(key, ..)| key.as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        self.wake(&channels(keys)).await;
        Ok(freed.iter().filter(|(_, row_boot, expires_ms)| row_boot == boot && *expires_ms > now).count() as u64)
    }

    async fn set_permits(&self, key: &StoreKey, mode: LockMode, permits: Option<u32>) -> Result<(), LockError> {
        self.ready("set permits").await?;
        let statement = match permits {
            Some(permits) => sqlx::query(&self.inner.sql.group_set_permits)
                .bind(key.as_str())
                .bind(mode.as_str())
                .bind(i64::from(permits)),
            None => sqlx::query(&self.inner.sql.group_remove_permits).bind(key.as_str()).bind(mode.as_str()),
        };
        self.explained(self.write_one(statement).await).await.map_err(group_fail("set permits"))?;
        self.wake(&[group_channel(key.as_str())]).await;
        Ok(())
    }

    async fn permits(&self, key: &StoreKey, mode: LockMode) -> Result<Option<u32>, LockError> {
        self.ready("read permits").await?;
        let permits: Option<i64> = sqlx::query_scalar(&self.inner.sql.group_permits)
            .bind(key.as_str())
            .bind(mode.as_str())
            .fetch_optional(
                &mut *self.explained(self.inner.pool.acquire().await).await.map_err(group_fail("read permits"))?,
            )
            .await
            .map_err(group_fail("read permits"))?;
        Ok(permits.map(|permits| u32::try_from(permits).unwrap_or(u32::MAX)))
    }

    async fn holders(&self, key: &StoreKey) -> Result<Vec<LockInfo>, LockError> {
        self.ready("read holders").await?;
        let fail = group_fail("read holders");
        let boot = Self::boot_id()?;
        let mut conn = self.explained(self.inner.pool.acquire().await).await.map_err(group_fail("read holders"))?;
        let now = now_ms();
        let names = self.names(&mut conn, &json_array([key.as_str()]), boot, now).await.map_err(&fail)?;
        Ok(holders_of(names.holders.into_values().flatten().collect(), now))
    }

    async fn waiting(&self, key: &StoreKey) -> Result<usize, LockError> {
        self.ready("count waiting groups").await?;
        let fail = group_fail("count waiting groups");
        let boot = Self::boot_id()?;
        let mut conn =
            self.explained(self.inner.pool.acquire().await).await.map_err(group_fail("count waiting groups"))?;
        let now = now_ms();
        let names = self.names(&mut conn, &json_array([key.as_str()]), boot, now).await.map_err(&fail)?;
        Ok(names.intents.values().map(Vec::len).sum())
    }

    /// The name's places in force (read as a grant reads them), oldest ticket first,
    /// with the time waited since `placed_ms` on this boot's clock.
    async fn places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        self.ready("read places").await?;
        let fail = group_fail("read places");
        let boot = Self::boot_id()?;
        let mut conn = self.explained(self.inner.pool.acquire().await).await.map_err(group_fail("read places"))?;
        let now = now_ms();
        let mut names = self.names(&mut conn, &json_array([key.as_str()]), boot, now).await.map_err(&fail)?;
        Ok(names.intents.remove(key.as_str()).map_or_else(Vec::new, |intents| places_of(intents, now)))
    }

    /// One `SELECT` of the next `limit` names with a hold or place row in key order
    /// (from the pattern's literal prefix, after the cursor, the last name examined),
    /// then their holds and places in force, read as a grant reads them.
    async fn list_groups(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        self.ready("list_groups").await?;
        let after = distlock_sql::listing::page_start(cursor, "SQLite")?;
        let fail = group_fail("list_groups");
        let boot = Self::boot_id()?;
        let lowest = format!("{LOCK_NAMESPACE}{}", pattern.literal_prefix());
        let limit = limit.clamp(1, ListPage::MAX_LIMIT);
        let mut conn = self.explained(self.inner.pool.acquire().await).await.map_err(group_fail("list_groups"))?;
        let found: Vec<String> = sqlx::query_scalar(&self.inner.sql.group_names)
            .bind(&lowest)
            .bind(after)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&mut *conn)
            .await
            .map_err(&fail)?;
        let full = found.len() == limit;
        let in_range: Vec<&str> =
            found.iter().map(String::as_str).take_while(|name| name.starts_with(&lowest)).collect();
        let beyond = in_range.len() < found.len();
        let now = now_ms();
        let mut names = self.names(&mut conn, &json_array(in_range.iter().copied()), boot, now).await.map_err(&fail)?;
        let mut listed = Vec::new();
        for store_key in &in_range {
            let Some(key) = store_key.strip_prefix(LOCK_NAMESPACE).filter(|key| pattern.matches(key)) else { continue };
            let holders = names.holders.remove(*store_key).map_or_else(Vec::new, |holders| holders_of(holders, now));
            let places = names.intents.remove(*store_key).map_or_else(Vec::new, |intents| places_of(intents, now));
            if holders.is_empty() && places.is_empty() {
                continue;
            }
            let Ok(key) = LockKey::new(key) else { continue };
            listed.push(HeldLock::new(key, holders).with_waiting(places));
        }
        let next = if full && !beyond { in_range.last().map(|last| ListCursor::new(*last)) } else { None };
        Ok(ListPage::new(listed, next))
    }

    async fn wait_for_change(&self, request: GroupRequest<'_>, max: Duration) -> Result<(), LockError> {
        check_group_members(request.members, self.max_group())?;
        self.ready("wait for a change").await?;
        let channels = channels(request.members.iter().map(|member| member.key.as_str()));
        self.wait_on(&channels, None, max, || self.group_state(&request)).await
    }
}
