#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]

mod config;
mod error;
mod inflight;
mod notify;
mod purge;
mod sql;
mod store;

pub use config::{
    PostgresLockStoreBuilder, DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_APPLICATION_NAME, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_SCHEMA, DEFAULT_SEQUENCE, DEFAULT_TABLE,
};
pub use purge::{PurgerHandle, MIN_PURGE_HORIZON};
pub use sql::Statements;
pub use sqlx;
pub use store::PostgresLockStore;
