//! The distlock contract: lock keys, tokens, options, the [`LockStore`] trait, the
//! [`LockManager`] on top of it, the [`DistributedLock`] handle and [`LockError`].
//!
//! Stores (`distlock-memory`, `distlock-redis`, `distlock-postgres`) implement
//! [`LockStore`]'s few atomic primitives; everything that must behave the same whatever
//! the store — validation, the `lock:` namespace, token generation, waiting, releasing
//! dropped handles — lives in [`LockManager`].
//!
//! Most applications depend on the `distlock` front crate instead, which re-exports this
//! crate and picks stores with Cargo features.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use distlock_api::{LockManager, LockStore, LockError};
//!
//! async fn pay(locks: &LockManager, order_id: u64) -> Result<(), LockError> {
//!     locks
//!         .with_lock(&format!("order:{order_id}"), Duration::from_secs(15), Duration::ZERO, Duration::from_millis(50), || async {
//!             // … charge the order; another process holding the lock gets NotAcquired …
//!             Ok(())
//!         })
//!         .await
//! }
//! ```
//!
//! # Semantics
//!
//! The promises every store keeps are listed in [`LockStore`]'s `# Contract` section. On
//! top of them, the manager guarantees:
//!
//! - **Bad input gets a typed error before any I/O**: keys ([`LockKey`]), TTLs ([`Ttl`]),
//!   waits and retry intervals ([`LockOptions`]).
//! - **A fresh 128-bit random token per acquisition** ([`Token`]), so locks are not
//!   reentrant: a second acquisition of a held key fails, even from the same process.
//! - **Waiting is never a busy loop**: `wait` = 0 tries once; `wait` > 0 retries at most
//!   every `retry_interval` (sooner when the store signals a release) and makes its last
//!   attempt at the deadline.
//! - **Nothing is left behind**: dropped handles, cancelled acquisitions and `with_lock`
//!   blocks that fail or panic free their lock promptly, in the background.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]

mod error;
mod key;
mod lock;
mod manager;
mod options;
mod store;
mod token;

pub use async_trait::async_trait;
pub use error::{BoxError, InvalidKey, InvalidOptions, LockError};
pub use key::{LockKey, StoreKey, LOCK_NAMESPACE};
pub use lock::DistributedLock;
pub use manager::LockManager;
pub use options::{LockOptions, Ttl, ValidOptions};
pub use store::{Acquire, Capabilities, DynLockStore, LockInfo, LockStore};
pub use token::Token;
