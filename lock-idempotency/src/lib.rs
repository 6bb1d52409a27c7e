#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// Layers, each importing only those listed before it: `key`, `fingerprint`, `response`
// and `metric_names` are leaves; `store` is the contract; `observe` records metrics;
// `manager` is claim → run → complete on any store; `memory`, `redis` and `postgres`
// implement the contract; `layer` maps it to HTTP.
mod fingerprint;
#[cfg(feature = "axum")]
mod header;
mod key;
#[cfg(feature = "axum")]
mod layer;
mod manager;
mod memory;
pub mod metric_names;
mod observe;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
mod response;
mod store;

pub use fingerprint::{normalise_json, Fingerprint};
pub use key::IdempotencyKey;
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub use layer::{
    default_fingerprint, IdempotencyLayer, IdempotencyService, MismatchStatus, IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED,
};
pub use manager::{Claim, ClaimHandle, Completion, Idempotency, IdempotencyOptions};
pub use memory::MemoryIdempotencyStore;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use metric_names::describe_metrics;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::{PostgresIdempotencyStore, PostgresIdempotencyStoreBuilder, PurgeTask};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis::{RedisIdempotencyStore, CLAIM_SCRIPT, COMPLETE_SCRIPT};
pub use response::StoredResponse;
pub use store::{DynIdempotencyStore, IdempotencyStore, StoreClaim};
