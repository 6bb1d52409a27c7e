//! Lock groups on Redis Cluster: [`GroupLockStore`] for [`RedisClusterStore`], each
//! operation the shared group command (`commands/group.rs`) on the Cluster's layout,
//! where every key a group script touches — the names' sorted sets and permits, the
//! group's lease key, the tag's fence counter and shard channel — carries the group's
//! **hash tag** ([`Layout`](crate::layout::Layout)), sent to the master owning that slot.
//!
//! `<tag>` is the name's own hash tag (`orders` for `{orders}:a`) or, for a name without
//! one, the whole name with `%`, `{` and `}` percent-encoded. A group is atomic because
//! all its names must have the same tag; a group whose names do not is refused before
//! any I/O.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use distlock_api::waiters::KeyState;
use distlock_api::{
    GroupAcquire, GroupLockStore, GroupRequest, HeldLock, KeyPattern, ListCursor, ListPage, LockError, LockInfo,
    LockMode, OwnerId, StoreKey, Token, Ttl, WaitingPlace,
};
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use crate::cluster::RedisClusterStore;
use crate::commands::{owned_names, Commands, GroupNames};

/// Lock groups on Redis Cluster: the single-node store's scripts, each in the one slot
/// of the group's hash tag (see the crate README, "Redis Cluster").
#[async_trait]
impl GroupLockStore for RedisClusterStore {
    fn max_group(&self) -> usize {
        crate::commands::MAX_GROUP
    }

    /// One script in the slot of the group's hash tag, as on a single node.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] before any I/O when the names do not all share one hash tag
    /// (`{orders}:a`, `{orders}:b`); [`LockError::InvalidGroup`] before any I/O for an
    /// empty group, a name given twice, too many members or zero default permits;
    /// [`LockError::Store`] when the script fails (the outcome is unknown: release with
    /// the same token).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the script runs atomically or not at all.
    async fn try_acquire_group(&self, request: GroupRequest<'_>) -> Result<GroupAcquire, LockError> {
        let commands = self.commands();
        let tag = &commands.group_request_tag(&request)?;
        let request = &request;
        self.exec(&commands.group_route(tag), |mut conn| async move {
            commands.try_acquire_group(&mut conn, request, tag).await
        })
        .await
    }

    /// The single-node extend script, in the slot of the group's tag.
    async fn extend_group(&self, keys: &[StoreKey], token: &Token, ttl: Ttl) -> Result<usize, LockError> {
        let commands = self.commands();
        let Some(names) = &commands.group_names(keys)? else { return Ok(0) };
        self.exec(&commands.group_route(&names.tag), |mut conn| async move {
            commands.extend_group(&mut conn, names, token, ttl).await
        })
        .await
    }

    /// The single-node release script, `SPUBLISH`ing the changed names' `h` keys on the
    /// tag's shard channel when one of them has a waited-for mark or places (an
    /// uncontended release publishes nothing).
    async fn release_group(&self, keys: &[StoreKey], token: &Token) -> Result<usize, LockError> {
        let Some(names) = self.commands().group_names(keys)? else { return Ok(0) };
        self.release_names(&names, token).await
    }

    /// The single-node withdraw script, `SPUBLISH`ing on the tag's shard channel.
    async fn withdraw_intents(&self, keys: &[StoreKey], token: &Token) -> Result<(), LockError> {
        let commands = self.commands();
        let Some(names) = &commands.group_names(keys)? else { return Ok(()) };
        self.exec(&commands.group_route(&names.tag), |mut conn| async move {
            commands.withdraw_intents(&mut conn, names, token).await
        })
        .await
    }

    /// Visits **every master**: `SCAN … MATCH {prefix}:group-lease:{* TYPE string COUNT
    /// 1000` on each one, reads each lease key found (`GET`, in its slot; fence, expiry,
    /// owner, names) and releases every group of `owner` with the release script. The cost
    /// grows with the whole keyspace (`SCAN` walks every key of every master, 1,000 per
    /// round trip) plus a round trip per live group and per group released: an
    /// administrative operation for start-up and shutdown, not for a request path. Each
    /// group is released atomically; the whole is not.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in that every step is atomic; a cancelled call may have released some
    /// of the owner's groups and not others.
    async fn release_owner(&self, owner: &OwnerId) -> Result<u64, LockError> {
        let commands = self.commands();
        let error = |err: redis::RedisError| commands.release_owner_error(err);
        let (head, pattern) = commands.group_lease_glob();
        let mut released = 0u64;
        for (host, port) in self.masters("release the groups of an owner").await? {
            let mut cursor = 0u64;
            loop {
                let scan = Commands::scan_group_leases(cursor, &pattern);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host: host.clone(), port });
                let reply = self.cluster_connection().route_command(scan, routing).await.map_err(error)?;
                let (next, keys): (u64, Vec<String>) =
                    redis::FromRedisValue::from_redis_value(reply).map_err(|err| commands.release_owner_error(err))?;
                for key in keys {
                    let Some((tag, token)) = commands.group_lease_of(&head, &key) else { continue };
                    let mut get = redis::cmd("GET");
                    get.arg(&key);
                    let get = &get;
                    let entry: Option<String> = self
                        .exec(&key, |mut conn| async move { get.query_async(&mut conn).await })
                        .await
                        .map_err(error)?;
                    let Some(names) = owned_names(entry.as_deref(), owner) else { continue };
                    let names = GroupNames { keys: &names, tag: tag.into() };
                    released += self.release_names(&names, &token).await? as u64;
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(released)
    }

    /// `HSET {stem}:p <mode> <permits>`, or `HDEL` for `None`.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidGroup`] for zero permits, before any I/O.
    async fn set_permits(&self, key: &StoreKey, mode: LockMode, permits: Option<u32>) -> Result<(), LockError> {
        let commands = self.commands();
        self.on_name(key, |mut conn| async move { commands.set_permits(&mut conn, key, mode, permits).await }).await
    }

    /// `HGET {stem}:p <mode>`.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] also when the field holds something other than a count.
    async fn permits(&self, key: &StoreKey, mode: LockMode) -> Result<Option<u32>, LockError> {
        let commands = self.commands();
        self.on_name(key, |mut conn| async move { commands.permits(&mut conn, key, mode).await }).await
    }

    /// The single-node holders script, reading the lease keys of the name's tag.
    async fn holders(&self, key: &StoreKey) -> Result<Vec<LockInfo>, LockError> {
        let commands = self.commands();
        self.on_name(key, |mut conn| async move { commands.group_holders(&mut conn, key).await }).await
    }

    /// The single-node waiting script.
    async fn waiting(&self, key: &StoreKey) -> Result<usize, LockError> {
        let commands = self.commands();
        self.on_name(key, |mut conn| async move { commands.group_waiting(&mut conn, key).await }).await
    }

    /// The single-node places script, in the name's slot.
    async fn places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        let commands = self.commands();
        self.on_name(key, |mut conn| async move { commands.group_places(&mut conn, key).await }).await
    }

    /// Pages through every master in turn, as [`list`](distlock_api::LockStore::list)
    /// does (`SCAN … MATCH {key_prefix}:group:{*}:<literal prefix>*:[hs]` on one master
    /// at a time), then reads each name found with the single-node list script in its
    /// slot.
    async fn list_groups(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        let layout = &self.commands().layout;
        let glob = layout.group_names_glob(&pattern.literal_prefix());
        let (found, next) = self.scan_masters("list_groups", &glob, cursor, limit).await?;
        let names = self.commands().group_names_found(&found, pattern);
        let reads = names.iter().map(|name| async move {
            let key = name.to_store_key();
            let commands = self.commands();
            let names = std::slice::from_ref(name);
            self.on_name(&key, |mut conn| async move { commands.group_list(&mut conn, names).await }).await
        });
        let locks: Vec<Vec<HeldLock>> =
            futures_util::future::join_all(reads).await.into_iter().collect::<Result<_, _>>()?;
        Ok(ListPage::new(locks.into_iter().flatten().collect(), next))
    }

    /// Registers for every name's stem, `SSUBSCRIBE`s to the tag's shard channel (once
    /// per store and channel), then probes the request with the acquire script and
    /// returns at once when it could be granted now; otherwise the probe has marked the
    /// first name that blocks it (`{stem}:w`, in the tag's slot, expiring after twice
    /// `max`), so that the name's next release publishes, and it waits for a published
    /// change of any of its names, at most `max`. Without notifications, a plain sleep of
    /// `max`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future unregisters the waiter.
    async fn wait_for_change(&self, request: GroupRequest<'_>, max: Duration) -> Result<(), LockError> {
        let max = max.min(crate::RedisLockStore::MAX_WAIT);
        if !self.notifications() || request.members.is_empty() {
            tokio::time::sleep(max).await;
            return Ok(());
        }
        let commands = self.commands();
        let tag = &commands.layout.group_tag(request.members.iter().map(|member| &member.key))?;
        let channel = commands.layout.group_release_channel(tag);
        let route = commands.group_route(tag);
        let wake_keys = commands.group_wake_keys(&request);
        let wake_keys: Vec<&str> = wake_keys.iter().map(String::as_str).collect();
        let request = &request;
        let counted = AtomicBool::new(false);
        let result = self
            .registry()
            .wait_any(&wake_keys, max, || async {
                self.subscribe(&channel).await?;
                counted.store(true, Ordering::Relaxed);
                let grantable =
                    self.exec(&route, |mut conn| async move {
                        commands.group_grantable(&mut conn, request, tag, max).await
                    })
                    .await?;
                Ok(if grantable { KeyState::Free } else { KeyState::Held { expires_in: None } })
            })
            .await;
        if counted.load(Ordering::Relaxed) {
            self.unsubscribe(&channel);
        }
        result.map(|_| ())
    }
}

impl RedisClusterStore {
    /// The release script on `names`, in their tag's slot.
    async fn release_names(&self, names: &GroupNames<'_>, token: &Token) -> Result<usize, LockError> {
        let commands = self.commands();
        self.exec(&commands.group_route(&names.tag), |mut conn| async move {
            commands.release_group(&mut conn, names, token).await
        })
        .await
    }

    /// Runs `op` in the slot of the group name `key`.
    async fn on_name<T, F, Fut>(&self, key: &StoreKey, op: F) -> Result<T, LockError>
    where
        F: Fn(crate::cluster::store::AnyConn) -> Fut,
        Fut: std::future::Future<Output = Result<T, LockError>>,
    {
        let tag = self.commands().layout.group_tag([key])?;
        self.exec(&self.commands().group_route(&tag), op).await
    }
}
