//! One Redis server: [`RedisLockStore`] (`store.rs`: locks and fair waiting, each operation
//! a call into [`commands`](crate::commands)) and its lock groups (`group.rs`).

pub(crate) mod group;
mod store;

pub use store::RedisLockStore;
