#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]

mod config;
mod notify;
mod scripts;
mod store;

pub use config::RedisLockStoreBuilder;
pub use scripts::{EXTEND_SCRIPT, FENCED_ACQUIRE_SCRIPT, FENCED_EXTEND_SCRIPT, INSPECT_SCRIPT, RELEASE_SCRIPT};
pub use store::RedisLockStore;

/// The `redis` crate this store is built on, so applications can match its version
/// (e.g. to build a [`ConnectionManager`](redis::aio::ConnectionManager) themselves).
pub use redis;
