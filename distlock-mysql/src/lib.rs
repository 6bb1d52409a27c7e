#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]

// Layers, each importing only those below it:
//   idempotency, builder, group, value → store → sql → config; url → config;
//   error and notify are leaves; the cancel safety of acquisitions is `distlock_sql::InFlight`.
mod builder;
mod config;
mod error;
mod group;
mod idempotency;
mod notify;
mod sql;
mod store;
mod url;
mod value;

pub use builder::MysqlLockStoreBuilder;
pub use config::{
    DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_TABLE, MAX_TIMEOUT,
};
pub use distlock_sql::NoConnection;
pub use idempotency::{MysqlIdempotencyStore, DEFAULT_IDEMPOTENCY_TABLE};
pub use sql::Statements;
pub use sqlx;
pub use store::MysqlLockStore;
pub use url::MysqlUrl;
