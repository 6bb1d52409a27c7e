#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod faults;
mod faulty;
mod groups;
mod injected;
mod op;
mod queue;
mod store;
mod values;

pub use faults::{Faults, Stolen};
pub use injected::InjectedFault;
pub use op::Op;
pub use store::FaultyStore;
