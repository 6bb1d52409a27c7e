#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]
#![warn(clippy::unwrap_used, clippy::expect_used)]

// `shard` is the lock store's leaf; `store` and `group` implement the lock contracts on
// it; `idempotency` implements the idempotency contract on its own maps.
mod group;
mod idempotency;
mod shard;
mod store;

pub use idempotency::MemoryIdempotencyStore;
pub use store::MemoryLockStore;
