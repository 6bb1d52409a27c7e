#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]

// Layers, each importing only those below it:
//   builder, purge, group, values, idempotency → store → sql → group_sql → template → notify
//   → config, url → config;
//   error is a leaf; the cancel safety of acquisitions is `distlock_sql::InFlight`.
// `idempotency` is the idempotency contract on a table of its own, on a store's pool.
mod builder;
mod config;
mod error;
mod group;
mod group_sql;
mod idempotency;
mod notify;
mod purge;
mod queue;
mod recent;
mod sql;
mod store;
mod template;
mod url;
mod values;

pub use builder::PostgresLockStoreBuilder;
pub use config::{
    DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_APPLICATION_NAME, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_SCHEMA, DEFAULT_SEQUENCE, DEFAULT_TABLE, MAX_ACQUIRE_TIMEOUT, MIN_PURGE_HORIZON,
};
pub use distlock_sql::NoConnection;
pub use error::GroupSchemaMissing;
pub use idempotency::{PostgresIdempotencyStore, PostgresIdempotencyStoreBuilder, PurgeTask};
pub use purge::{PurgeOptions, PurgerHandle};
pub use sql::Statements;
pub use sqlx;
pub use store::PostgresLockStore;
pub use url::PostgresUrl;
