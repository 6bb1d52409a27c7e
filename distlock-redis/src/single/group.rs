//! Lock groups on one server: [`GroupLockStore`] for [`RedisLockStore`], each operation
//! the shared group command (`commands/group.rs`, where the key layout and the costs are
//! described) on the store's connection.

use std::time::Duration;

use async_trait::async_trait;
use distlock_api::waiters::{deadline_after, KeyState};
use distlock_api::{
    GroupAcquire, GroupLockStore, GroupRequest, KeyPattern, ListCursor, ListPage, LockError, LockInfo, LockMode,
    OwnerId, StoreKey, Token, Ttl, WaitingPlace,
};

use crate::commands::{owned_names, GroupNames};
use crate::single::RedisLockStore;

/// Lock groups: every operation is one Lua script (`EVALSHA`, `EVAL` on `NOSCRIPT`)
/// over the keys of the names involved and the group's lease key; see the crate
/// README, "Lock groups", for the layout and the costs.
#[async_trait]
impl GroupLockStore for RedisLockStore {
    fn max_group(&self) -> usize {
        crate::commands::MAX_GROUP
    }

    /// One script: checks every member (no live holder of the other mode; fewer live
    /// holders of its mode than the permits in `{stem}:p`, else the member's default; for
    /// a shared member, no live intent of another token with an older ticket) and either
    /// grants all (one `INCR` of `{key_prefix}:fence` in fencing mode) or, with an intent
    /// TTL, records intents for the exclusive members.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidGroup`] before any I/O for an empty group, a name given twice,
    /// more than [`max_group`](GroupLockStore::max_group) members or zero default
    /// permits; [`LockError::Store`] when the script fails (the outcome is unknown:
    /// release with the same token).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the script runs atomically or not at all.
    async fn try_acquire_group(&self, request: GroupRequest<'_>) -> Result<GroupAcquire, LockError> {
        let tag = self.commands().group_request_tag(&request)?;
        self.commands().try_acquire_group(&mut self.connection_manager().clone(), &request, &tag).await
    }

    /// One script: `ZADD XX` of the new expiry for every name whose `{stem}:h` holds the
    /// token with an unexpired hold (an expired member stays expired), and a new `PX` for
    /// the group's lease key; nothing when the lease key is gone (released or expired).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the script runs atomically or not at all.
    async fn extend_group(&self, keys: &[StoreKey], token: &Token, ttl: Ttl) -> Result<usize, LockError> {
        let Some(names) = self.commands().group_names(keys)? else { return Ok(0) };
        self.commands().extend_group(&mut self.connection_manager().clone(), &names, token, ttl).await
    }

    /// One script: `GETDEL` of the group's lease key (a hold was live while it existed),
    /// `ZREM` of the token from `{stem}:h` of every name (its hold or its place), and, when
    /// that changed something, release notifications are on and someone may wait for one
    /// of the names (a name has a waited-for mark `{stem}:w`, which it deletes, or places
    /// in `{stem}:h`), one `PUBLISH {key_prefix}:released <stem>:h\n<stem>:h…` (inside
    /// the script) naming the names. An uncontended release publishes nothing.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the script runs atomically or not at all.
    async fn release_group(&self, keys: &[StoreKey], token: &Token) -> Result<usize, LockError> {
        let Some(names) = self.commands().group_names(keys)? else { return Ok(0) };
        self.commands().release_group(&mut self.connection_manager().clone(), &names, token).await
    }

    /// One script: `ZREM` of the token's intents from `{stem}:h` (and `HDEL` of their
    /// tickets), with one `PUBLISH` naming every name whose intent it removed, so readers
    /// held back by it look again.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the script runs atomically or not at all.
    async fn withdraw_intents(&self, keys: &[StoreKey], token: &Token) -> Result<(), LockError> {
        let Some(names) = self.commands().group_names(keys)? else { return Ok(()) };
        self.commands().withdraw_intents(&mut self.connection_manager().clone(), &names, token).await
    }

    /// Walks the database with `SCAN … MATCH {key_prefix}:group-lease:* TYPE string COUNT
    /// 1000`, reads each page's lease keys (`MGET`: fence, expiry, owner, names), then
    /// releases every group of `owner` with the release script: one round trip per page
    /// plus one per group released. The cost grows with the **whole database** (`SCAN`
    /// visits every key, 1,000 per round trip), which keeps acquisitions and releases free
    /// of any owner index: an administrative operation for start-up and shutdown, not for
    /// a request path. Each group is released atomically; the whole is not (a group taken
    /// by the owner while this runs may or may not be released; one that `SCAN` reports
    /// twice is released once).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in that every step is atomic; a cancelled call may have released some
    /// of the owner's groups and not others.
    async fn release_owner(&self, owner: &OwnerId) -> Result<u64, LockError> {
        let commands = self.commands();
        let (head, pattern) = commands.group_lease_glob();
        let mut conn = self.connection_manager().clone();
        let mut cursor = 0u64;
        let mut released = 0u64;
        loop {
            let scan = crate::commands::Commands::scan_group_leases(cursor, &pattern);
            let (next, keys): (u64, Vec<String>) =
                scan.query_async(&mut conn).await.map_err(|err| commands.release_owner_error(err))?;
            let entries: Vec<Option<String>> = if keys.is_empty() {
                Vec::new()
            } else {
                redis::cmd("MGET")
                    .arg(&keys)
                    .query_async(&mut conn)
                    .await
                    .map_err(|err| commands.release_owner_error(err))?
            };
            for (key, entry) in keys.iter().zip(entries) {
                let Some(names) = owned_names(entry.as_deref(), owner) else { continue };
                let Some((tag, token)) = commands.group_lease_of(&head, key) else { continue };
                let names = GroupNames { keys: &names, tag: tag.into() };
                released += commands.release_group(&mut conn, &names, &token).await? as u64;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        Ok(released)
    }

    /// `HSET {stem}:p <mode> <permits>`, or `HDEL` for `None`. The permits hash has no
    /// expiry: it is configuration, kept until removed.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidGroup`] for zero permits, before any I/O.
    async fn set_permits(&self, key: &StoreKey, mode: LockMode, permits: Option<u32>) -> Result<(), LockError> {
        self.commands().set_permits(&mut self.connection_manager().clone(), key, mode, permits).await
    }

    /// `HGET {stem}:p <mode>`.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] also when the field holds something other than a count.
    async fn permits(&self, key: &StoreKey, mode: LockMode) -> Result<Option<u32>, LockError> {
        self.commands().permits(&mut self.connection_manager().clone(), key, mode).await
    }

    /// A read-only script: the unexpired holds of `{stem}:h` (both modes) with their
    /// expiries, and each one's fence and owner from its group's lease key.
    async fn holders(&self, key: &StoreKey) -> Result<Vec<LockInfo>, LockError> {
        self.commands().group_holders(&mut self.connection_manager().clone(), key).await
    }

    /// A read-only script: `ZCOUNT`s of the live places in the name's intent bands.
    async fn waiting(&self, key: &StoreKey) -> Result<usize, LockError> {
        self.commands().group_waiting(&mut self.connection_manager().clone(), key).await
    }

    /// A read-only script: the live places in the name's intent bands with their
    /// tickets. A ticket is the server's clock in ms at the group's first blocked attempt
    /// (one more than the names' last ticket when that was larger), so the time waited is
    /// read from it, to the millisecond (a place taken in the same millisecond as an
    /// earlier one on its names shows up to a few ms less).
    async fn places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        self.commands().group_places(&mut self.connection_manager().clone(), key).await
    }

    /// One `SCAN … MATCH {key_prefix}:group:{<literal prefix of the pattern>*}:[hs]`
    /// (`COUNT limit`; the cursor is the `SCAN` cursor), then one read-only script per
    /// 500 names found with the holders and places of each (as [`holders`] and
    /// [`places`]). Names are listed in the order of Redis's hash table, a name possibly
    /// twice (from its `h` and its `s` key on two pages).
    ///
    /// [`holders`]: GroupLockStore::holders
    /// [`places`]: GroupLockStore::places
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] when a command fails; [`LockError::Config`] for a cursor
    /// that is not a `SCAN` cursor.
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
        let position = self.scan_position(cursor)?;
        let glob = self.commands().layout.group_names_glob(&pattern.literal_prefix());
        let (next, found) = self.scan(position, &glob, limit, "list_groups").await?;
        let names = self.commands().group_names_found(&found, pattern);
        let mut locks = Vec::with_capacity(names.len());
        for batch in names.chunks(crate::commands::GROUP_LIST_BATCH) {
            locks.extend(self.commands().group_list(&mut self.connection_manager().clone(), batch).await?);
        }
        Ok(ListPage::new(locks, (next != 0).then(|| ListCursor::new(next.to_string()))))
    }

    /// Waits for a published change of any of the request's names (a release, a withdrawn
    /// intent), at most `max`: registers for every name's stem, makes sure the store's
    /// subscriber is subscribed, then runs the acquire script as a waiting caller's probe —
    /// the same checks with the request's ticket, the request's own intents not counting —
    /// and returns at once when the request could be granted now, so a release that landed
    /// between the caller's blocked attempt and this wait is not slept through. Otherwise
    /// the same script marks the first name that blocks the request (`{stem}:w`, expiring
    /// after twice `max`), so that the name's next release publishes: a change published
    /// after the registration wakes the wait. While the subscriber is not
    /// subscribed, or without notifications, the wait is a plain sleep of `max`.
    /// Expiries are not published: they are seen at the next attempt. A `max` above
    /// [`MAX_WAIT`](RedisLockStore::MAX_WAIT) counts as `MAX_WAIT`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future unregisters the waiter.
    async fn wait_for_change(&self, request: GroupRequest<'_>, max: Duration) -> Result<(), LockError> {
        let max = max.min(Self::MAX_WAIT);
        let deadline = deadline_after(max);
        let listener = self.listener().filter(|_| !request.members.is_empty());
        let Some(waiters) = listener.map(|listener| listener.registry()) else {
            tokio::time::sleep_until(deadline).await;
            return Ok(());
        };
        let holders = self.commands().group_wake_keys(&request);
        let holders: Vec<&str> = holders.iter().map(String::as_str).collect();
        waiters
            .wait_any(&holders, max, || async {
                let grantable =
                    self.commands().group_grantable(&mut self.connection_manager().clone(), &request, "", max).await?;
                Ok(if grantable { KeyState::Free } else { KeyState::Held { expires_in: None } })
            })
            .await?;
        Ok(())
    }
}
