//! Redis Sentinel: [`RedisSentinelStore`], the single-node store on the master the
//! sentinels name, following failovers. Top-down: `builder.rs` (the settings and the URL
//! checked against each other before any I/O) → `config.rs` (the parsed
//! `redis+sentinel://` URL) → `master.rs` (asking the URL's sentinels or the
//! application's `SentinelClient` for the master, `WAIT` for its replicas) → `store.rs`
//! (each operation the current master's store's).

mod builder;
mod config;
mod master;
mod store;

pub use builder::RedisSentinelStoreBuilder;
pub use store::RedisSentinelStore;
