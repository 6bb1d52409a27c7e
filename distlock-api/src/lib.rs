#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod engine;
mod error;
pub mod grant;
mod group;
mod group_lock;
mod holder;
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub mod http;
pub mod idempotency;
mod key;
mod listing;
mod lock;
mod manager;
pub mod metric_names;
mod observe;
mod options;
pub mod probe;
mod store;
mod token;
mod value;
pub mod waiters;

pub use async_trait::async_trait;
pub use engine::{in_reentrant_scope, reentrant_scope, LeaseWatch, LEASE_LOST_TARGET};
pub use error::{BoxError, ErrorReport, InvalidGroup, InvalidKey, InvalidOptions, InvalidValue, LockError, LossReason};
pub use group::{
    check_group_members, check_group_names, Admission, GroupAcquire, GroupLockStore, GroupMember, GroupRequest,
    LockGroup, OwnerId, Permits, StoreMember,
};
pub use key::{check_key_prefix, LockKey, StoreKey, LOCK_NAMESPACE};

pub use group_lock::{GroupLock, GroupStamp};
pub use holder::{LockInfo, LockMode, WaitingPlace};
pub use listing::{HeldLock, KeyPattern, ListCursor, ListPage};
pub use lock::DistributedLock;
pub use manager::LockManager;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use metric_names::describe_metrics;
pub use options::{Fairness, LockOptions, Renewal, Ttl, ValidOptions};
pub use store::{Acquire, Capabilities, DynLockStore, LockStore, QueueStore, QueuedAttempt};
pub use token::Token;
pub use value::{LeaseValue, LeaseValueStore, ValuedHolder};
