//! The integration tests of `distlock-idempotency`, in one binary: each test binary links the whole
//! dependency graph, so one file per concern here costs one link, not one each.

mod layer;
mod metrics;
mod renewal;
