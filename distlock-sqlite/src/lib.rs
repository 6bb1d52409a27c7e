#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]
#![warn(clippy::unwrap_used, clippy::expect_used)]

// Layers, each importing only those below it:
//   idempotency, builder, group, value → store → write, sql, notify, gate, process, clock, config;
//   write → gate; url → config.
mod builder;
mod clock;
mod config;
mod gate;
mod group;
mod idempotency;
mod notify;
mod process;
mod sql;
mod store;
mod url;
mod value;
mod write;

pub use builder::SqliteLockStoreBuilder;
pub use config::{DEFAULT_BUSY_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_TABLE, MAX_TIMEOUT};
pub use distlock_sql::NoConnection;
pub use idempotency::{SqliteIdempotencyStore, DEFAULT_IDEMPOTENCY_TABLE};
pub use sql::Statements;
pub use sqlx;
pub use store::SqliteLockStore;
pub use url::SqliteUrl;
