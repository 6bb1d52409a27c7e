//! The integration tests of `distlock-postgres`, in one binary: each test binary links the whole
//! dependency graph, so one file per concern here costs one link, not one each.

mod common;
mod conformance;
mod connect;
mod dead_connections;
mod faults;
mod fences;
mod groups;
mod idempotency;
mod kept;
mod listing;
mod no_connection;
mod notify;
mod store;
mod values;
mod wait_max;
