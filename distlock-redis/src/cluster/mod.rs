//! Redis Cluster: [`RedisClusterStore`]. Top-down: `builder.rs` (the shared settings,
//! with the Cluster's defaults) → `store.rs` (the single server's commands on the
//! hash-tagged [`Layout`](crate::layout::Layout), sent straight to the master owning the
//! lock's slot) → `group.rs` (its lock groups, each in the slot of the group's tag).

mod builder;
mod group;
mod store;

pub use builder::RedisClusterStoreBuilder;
pub use store::RedisClusterStore;
