//! One Redis server: [`RedisLockStore`]. Top-down: `builder.rs` (connecting, or building
//! on the application's connection) → `store.rs` (locks and fair waiting, each operation
//! a call into [`commands`](crate::commands)) → `group.rs` (its lock groups, the same).

mod builder;
pub(crate) mod group;
mod settings;
mod store;

pub use settings::RedisLockStoreBuilder;
pub use store::RedisLockStore;
