#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]
#![warn(clippy::unwrap_used, clippy::expect_used)]

// `shard` and `group_state` are the lock store's leaves; `store` and `group` implement
// the lock contracts on them; `idempotency` implements the idempotency contract on its own maps;
// `builder` makes both stores from a builder or a `memory://` URL.
mod builder;
mod group;
mod group_state;
mod idempotency;
mod shard;
mod store;

pub use builder::MemoryLockStoreBuilder;
pub use idempotency::MemoryIdempotencyStore;
pub use store::MemoryLockStore;
