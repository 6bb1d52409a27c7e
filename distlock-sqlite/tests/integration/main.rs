//! The integration tests of `distlock-sqlite`, in one binary: each test binary links the whole
//! dependency graph, so one file per concern here costs one link, not one each.

mod conformance;
mod host;
mod idempotency;
mod no_connection;
mod values;
