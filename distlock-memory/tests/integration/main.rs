//! The integration tests of `distlock-memory`, in one binary: each test binary links the whole
//! dependency graph, so one file per concern here costs one link, not one each.

mod conformance;
mod idempotency;
mod memory;
mod paused_time;
mod wait_max;
