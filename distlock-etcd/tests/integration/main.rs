//! The integration tests of `distlock-etcd`, in one binary: each test binary links the whole
//! dependency graph, so one file per concern here costs one link, not one each.

mod conformance;
mod faults;
mod groups;
mod leases;
mod queue;
mod values;
