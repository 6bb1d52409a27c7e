//! The integration tests of `distlock-redis`, in one binary: each test binary links the whole
//! dependency graph, so one file per concern here costs one link, not one each.

mod clock_fences;
mod cluster;
mod common;
mod conformance;
mod connect;
mod durations;
mod errors;
mod faults;
mod fenced_set;
mod frozen_wire;
mod groups;
mod idempotency;
mod key_layout;
mod lease_values;
mod listing;
mod redlock;
mod redlock_faults;
mod restart_fences;
mod scale_kit;
mod sentinel;
mod store;
mod url_layout;
mod wait_max;
