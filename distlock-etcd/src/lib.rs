#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod builder;
mod config;
mod group;
mod notify;
mod slots;
mod store;
mod url;
mod value;

pub use builder::EtcdLockStoreBuilder;
pub use etcd_client;
pub use store::EtcdLockStore;
pub use url::EtcdUrl;
