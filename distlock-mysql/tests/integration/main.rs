//! The integration tests of `distlock-mysql`, in one binary: each test binary links the whole
//! dependency graph, so one file per concern here costs one link, not one each.

mod conformance;
mod connect;
mod faults;
mod idempotency;
mod kept;
mod no_connection;
mod notify;
mod values;
