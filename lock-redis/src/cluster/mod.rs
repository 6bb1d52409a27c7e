//! Redis Cluster: [`RedisClusterStore`] (`store.rs`: the single server's commands on the
//! hash-tagged [`Layout`](crate::layout::Layout), sent straight to the master owning the
//! lock's slot) and its lock groups (`group.rs`).

mod group;
mod store;

pub use store::RedisClusterStore;
