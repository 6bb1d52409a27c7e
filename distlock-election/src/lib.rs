#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod election;
mod leadership;
mod observer;

pub use election::{Election, Leader};
pub use leadership::Leadership;
pub use observer::Observer;
