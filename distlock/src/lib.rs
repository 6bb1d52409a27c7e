#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod connect;

pub use connect::connect;
#[cfg(feature = "idempotency")]
#[cfg_attr(docsrs, doc(cfg(feature = "idempotency")))]
pub use connect::connect_idempotency;
pub use distlock_api::*;

/// The contract crate, for paths such as `distlock::api::LockStore`.
pub use distlock_api as api;

/// The in-memory store (feature `memory`, on by default): `memory://`; the store for
/// applications' own tests (see "Testing your app").
#[cfg(feature = "memory")]
#[cfg_attr(docsrs, doc(cfg(feature = "memory")))]
pub use distlock_memory as memory;

/// The Redis store (feature `redis`): `redis://host:6379/0?prefix=…&fencing=…`, or
/// `redis::RedisLockStore::builder()`.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use distlock_redis as redis;

/// The PostgreSQL store (feature `postgres`): `postgres://user@host/db?schema=…&table=…`,
/// or `postgres::PostgresLockStore::builder()`.
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use distlock_postgres as postgres;

/// The MySQL/MariaDB store (feature `mysql`): `mysql://user@host/db?table=…` (or
/// `mariadb://…`), or `mysql::MysqlLockStore::builder()`.
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub use distlock_mysql as mysql;

/// The SQLite store (feature `sqlite`): `sqlite:///path/to/locks.db?table=…`, or
/// `sqlite::SqliteLockStore::builder()`. Locks shared by the processes of one host
/// through one database file, without a server.
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use distlock_sqlite as sqlite;

/// The etcd store (feature `etcd`): `etcd://host:2379,host:2379?prefix=…`, or
/// `etcd::EtcdLockStore::builder()`. Building it needs `protoc`.
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub use distlock_etcd as etcd;

/// Leader election (feature `election`): candidates campaign with a value, the leader
/// holds a fenced term, resigns or proclaims a new value, and anyone reads or observes
/// the leader. See `distlock-election`'s own documentation.
#[cfg(feature = "election")]
#[cfg_attr(docsrs, doc(cfg(feature = "election")))]
pub use distlock_election as election;

/// Scheduled jobs (feature `jobs`): each firing of a cron schedule runs on at most one
/// instance of a fleet. See `distlock-jobs`'s own documentation.
#[cfg(feature = "jobs")]
#[cfg_attr(docsrs, doc(cfg(feature = "jobs")))]
pub use distlock_jobs as jobs;

/// Idempotency keys (feature `idempotency`): claim → run → complete on the memory store,
/// and on Redis, PostgreSQL, MySQL/MariaDB and SQLite with those features; `idempotency::IdempotencyLayer` for
/// axum routers with the `axum` feature. See `distlock-idempotency`'s own documentation.
///
/// Everything of `distlock-idempotency` (the manager, the layer, the contract it
/// re-exports from [`api::idempotency`]) and each enabled store's implementation, in one
/// place.
#[cfg(feature = "idempotency")]
#[cfg_attr(docsrs, doc(cfg(feature = "idempotency")))]
pub mod idempotency {
    pub use distlock_idempotency::*;
    pub use distlock_memory::MemoryIdempotencyStore;
    #[cfg(feature = "mysql")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
    pub use distlock_mysql::MysqlIdempotencyStore;
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub use distlock_postgres::{PostgresIdempotencyStore, PostgresIdempotencyStoreBuilder, PurgeTask};
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub use distlock_redis::RedisIdempotencyStore;
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub use distlock_sqlite::SqliteIdempotencyStore;
}

/// Optimistic locking and fenced writes on sqlx (feature `optimistic`; PostgreSQL, and
/// SQLite and MySQL/MariaDB with the `sqlite` and `mysql` features):
/// `optimistic::VersionedUpdate` checks and bumps a row's version in one statement, and
/// refuses writes carrying an older lock fence than the row has seen. See the crate's own
/// documentation.
#[cfg(feature = "optimistic")]
#[cfg_attr(docsrs, doc(cfg(feature = "optimistic")))]
pub use distlock_optimistic as optimistic;

/// A fault-injecting store for applications' own tests (feature `testing`):
/// `testing::FaultyStore` wraps any store; its `Faults` handle fails operations, adds
/// latency, makes leases vanish and drops release notifications (see "Testing your app").
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub use distlock_testing as testing;

/// `#[distlock::lock(key = "order:{order_id}", ttl = "15s", manager = self.locks)]`: runs an
/// `async fn` under a lock, taken in one attempt with a 10 s lease unless `wait` / `ttl`
/// say otherwise (feature `macros`). See the crate documentation's guide.
#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use distlock_macros::lock;

/// What the code generated by [`lock`] refers to. Not a public API.
#[cfg(feature = "macros")]
#[doc(hidden)]
pub mod __private {
    pub use std::time::Duration;

    /// The `manager = …` expression as an owned manager (a cheap clone), so the function's
    /// body can take its parameters — `self` included — by value.
    pub fn manager(manager: &crate::LockManager) -> crate::LockManager {
        manager.clone()
    }
}

/// The workspace README's examples, compiled and run as doctests (one uses `testing`).
#[cfg(all(doctest, feature = "memory", feature = "testing"))]
#[doc = include_str!("../../README.md")]
pub struct WorkspaceReadmeDoctests;

/// The guide's examples (`docs/guide.md`), compiled and run as doctests; they use every
/// feature.
#[cfg(all(
    doctest,
    feature = "memory",
    feature = "redis",
    feature = "postgres",
    feature = "macros",
    feature = "axum",
    feature = "metrics",
    feature = "optimistic",
    feature = "testing",
    feature = "election",
    feature = "jobs"
))]
#[doc = include_str!("../../docs/guide.md")]
pub struct GuideDoctests;
