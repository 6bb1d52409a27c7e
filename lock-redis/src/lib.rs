#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]

// Layers, each importing only those listed before it: `config` (validated settings) and
// `scripts` (every Lua script, a file of `src/lua/` with helpers of `src/lua/lib/`, and
// their runner) and `notify` are leaves; `url` parses store URLs with `config`'s rules;
// `store` runs the commands; `group` (lock groups) adds methods to the store; `builder`
// makes stores from settings and URLs.
mod builder;
mod cluster;
mod cluster_group;
mod config;
mod fenced_set;
mod group;
mod notify;
mod redlock;
mod scripts;
mod sentinel;
mod store;
mod topology;
mod url;

pub use builder::{RedisClusterStoreBuilder, RedisLockStoreBuilder, RedisSentinelStoreBuilder};
pub use cluster::RedisClusterStore;
pub use fenced_set::{fenced_set, FencedSet, FENCED_VALUE_FIELD, FENCE_FIELD};
pub use redlock::{RedlockStore, RedlockStoreBuilder};
pub use scripts::RELEASE_SCRIPT;
pub use sentinel::RedisSentinelStore;
pub use store::RedisLockStore;
pub use topology::{connect_any, TOPOLOGY_SCHEMES};
pub use url::RedisUrl;

/// The `redis` crate this store is built on, so applications can match its version
/// (e.g. to build a [`ConnectionManager`](redis::aio::ConnectionManager) themselves).
pub use redis;
