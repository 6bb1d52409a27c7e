#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// Layers, each importing only those listed before it: `metric_names` and `header` are
// leaves; `observe` records metrics; `manager` is claim → run → complete on any store of
// `distlock_api::idempotency`'s contract (implemented in the store crates); `layer` maps
// it to HTTP.
#[cfg(feature = "axum")]
mod header;
#[cfg(feature = "axum")]
mod layer;
mod manager;
pub mod metric_names;
mod observe;
mod renewals;

pub use distlock_api::idempotency::{
    normalise_json, Completion, DynIdempotencyStore, Fingerprint, IdempotencyKey, IdempotencyStore, StoreClaim,
    StoredResponse,
};
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub use layer::{
    default_fingerprint, IdempotencyLayer, IdempotencyService, MismatchStatus, IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED,
};
pub use manager::{Claim, ClaimHandle, Idempotency, IdempotencyOptions};
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use metric_names::describe_metrics;
