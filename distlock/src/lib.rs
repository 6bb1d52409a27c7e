#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod connect;

pub use connect::connect;
pub use distlock_api::*;

/// The contract crate, for paths such as `distlock::api::LockStore`.
pub use distlock_api as api;

/// The in-memory store (feature `memory`, on by default).
#[cfg(feature = "memory")]
#[cfg_attr(docsrs, doc(cfg(feature = "memory")))]
pub use distlock_memory as memory;

/// The Redis store (feature `redis`).
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use distlock_redis as redis;

/// The PostgreSQL store (feature `postgres`).
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use distlock_postgres as postgres;
