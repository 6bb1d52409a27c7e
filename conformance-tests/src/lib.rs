//! The conformance suite every distlock store runs, and the test kit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod kit;
