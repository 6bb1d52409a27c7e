#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod firing;
mod job;

pub use error::JobError;
pub use firing::{Firing, JobRun, Outcome};
pub use job::Job;
