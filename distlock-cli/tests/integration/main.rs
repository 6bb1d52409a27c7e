//! The integration tests of `distlock-cli`, in one binary: each test binary links the whole
//! dependency graph, so one file per concern here costs one link, not one each.

#[macro_use]
mod common;

mod cli;
mod election;
mod groups;
mod list;
mod scale;
mod schedule;
mod stores;
mod top;
