#![doc = include_str!("../README.md")]
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod dialect;
mod error;
#[cfg(feature = "axum")]
mod http;
mod ident;
mod update;
mod version;

pub use dialect::Dialect;
pub use error::{FencedOut, OptimisticError, RowId, StaleRecord};
pub use update::VersionedUpdate;
pub use version::Version;

/// `#[derive(Versioned)]` (feature `derive`): `update_by_id`, `update_by_id_returning`,
/// `update_by_id_force` and `update_by_id_force_returning` for a struct with one integer
/// field marked `#[versioned(version)]`; see the crate documentation.
#[cfg(feature = "derive")]
#[cfg_attr(docsrs, doc(cfg(feature = "derive")))]
pub use distlock_macros::Versioned;

/// The `sqlx` crate this one is built on, so applications can match its version.
pub use sqlx;
