//! Redlock: [`RedlockStore`], the Redlock algorithm over N independent Redis masters,
//! each driven by a single-node [`RedisLockStore`](crate::RedisLockStore) (the same
//! commands and scripts per master). Top-down: `builder.rs` ([`RedlockStoreBuilder`] and
//! connecting to a majority) → `config.rs` (the `redlock://` URL split into one URL per
//! master, and the layout they must share) → `quorum.rs` (one command on every master in
//! parallel, bounded, and the vote's arithmetic) → `store.rs` (each operation decided by
//! the majority).

mod builder;
mod config;
mod quorum;
mod store;

pub use builder::RedlockStoreBuilder;
pub use store::RedlockStore;
