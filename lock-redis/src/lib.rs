#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]

// Layers, each importing only those listed before it: `config` (validated settings) and
// `scripts` and `notify` are leaves; `url` parses store URLs with `config`'s rules;
// `store` runs the commands; `group` (lock groups, with `group_scripts`, a leaf) adds
// methods to the store; `builder` makes stores from settings and URLs.
mod builder;
mod clock_fence;
mod cluster;
mod cluster_group;
mod config;
mod fenced_set;
mod group;
mod group_scripts;
mod notify;
mod queue_scripts;
mod redlock;
mod scripts;
mod sentinel;
mod store;
mod topology;
mod url;

pub use builder::RedisLockStoreBuilder;
pub use clock_fence::CLOCK_FENCE_FUNCTION;
pub use cluster::RedisClusterStore;
pub use fenced_set::{fenced_set, FencedSet, FENCED_SET_SCRIPT, FENCED_VALUE_FIELD, FENCE_FIELD};
pub use queue_scripts::{FAIR_RELEASE_SCRIPT, QUEUED_ACQUIRE_SCRIPT, QUEUE_LEN_SCRIPT};
pub use redlock::{RedlockStore, RedlockStoreBuilder, REDLOCK_RELEASE_SCRIPT};
pub use scripts::{
    EXTEND_SCRIPT, FENCED_ACQUIRE_SCRIPT, FENCED_EXTEND_SCRIPT, INSPECT_SCRIPT, LIST_SCRIPT, RELEASE_SCRIPT,
};
pub use sentinel::RedisSentinelStore;
pub use store::RedisLockStore;
pub use topology::{connect_any, TOPOLOGY_SCHEMES};
pub use url::RedisUrl;

/// The `redis` crate this store is built on, so applications can match its version
/// (e.g. to build a [`ConnectionManager`](redis::aio::ConnectionManager) themselves).
pub use redis;
