//! The integration tests of `distlock`, in one binary: each test binary links the whole
//! dependency graph, so one file per concern here costs one link, not one each.

mod axum_impl_response;
mod axum_service;
mod axum_status;
mod common;
mod connect;
mod connect_idempotency;
mod fair_processes;
mod fuzz_inputs;
mod grant_rule;
mod group_kill9;
mod lock_attr;
mod logs;
mod metrics;
mod optimistic;
mod owner_restart;
mod release_after_block;
mod tracing;
mod wrong_server;
