#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]

// Layers, top-down: the topologies `single/`, `cluster/`, `sentinel/` and `redlock/` are
// folders read the same way, their own `builder.rs` (connecting) first and `store.rs`
// (the trait impls) last; the settings every topology shares are the one-server
// builder's (`single/settings.rs`: `RedisLockStoreBuilder<S>`, whose type parameter
// names the topology it builds), so the other topologies build on `single/` (`url/`:
// every scheme of the family parsed once; `config`: the checked settings); `commands/`
// sends each lock and group operation once, over any connection, with the keys of
// `layout`; `scripts` holds every Lua script (a file of `src/lua/`, helpers of
// `src/lua/lib/`) and their runner; `idempotency` is the idempotency contract on a
// store's connection and scripts. `config`, `layout` and `notify` are leaves.
mod cluster;
mod commands;
mod config;
mod fenced_set;
mod idempotency;
mod layout;
#[cfg(test)]
mod lua_lint;
mod notify;
mod redlock;
mod scripts;
mod sentinel;
mod single;
mod topology;
mod url;

pub use cluster::{RedisClusterStore, RedisClusterStoreBuilder};
pub use fenced_set::{fenced_set, FencedSet, FENCED_VALUE_FIELD, FENCE_FIELD};
pub use idempotency::RedisIdempotencyStore;
pub use redlock::{RedlockStore, RedlockStoreBuilder};
pub use scripts::RELEASE_SCRIPT;
pub use sentinel::{RedisSentinelStore, RedisSentinelStoreBuilder};
pub use single::RedisLockStore;
pub use single::RedisLockStoreBuilder;
pub use topology::{connect_any, TOPOLOGY_SCHEMES};
pub use url::RedisUrl;

/// The `redis` crate this store is built on, so applications can match its version
/// (e.g. to build a [`ConnectionManager`](redis::aio::ConnectionManager) themselves).
pub use redis;
