//! The integration tests of `distlock-testing`, in one binary: each test binary links the whole
//! dependency graph, so one file per concern here costs one link, not one each.

mod conformance;
mod forwarding;
mod memory;
mod real_stores;
