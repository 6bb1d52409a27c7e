//! Store URLs of the Redis scheme family: one server's (`redis://`, `rediss://`,
//! `redis+unix://`, … in `node.rs`: the connection plus the store's layout parameters),
//! and the multi-server schemes (`redis+cluster://`, `redlock://`, `redis+sentinel://` in
//! `hosts.rs`), which split into one single-server URL per host. Pure parsing, no I/O.

mod hosts;
mod node;

pub(crate) use hosts::{CLUSTER, REDLOCK, SENTINEL};
pub use node::RedisUrl;
