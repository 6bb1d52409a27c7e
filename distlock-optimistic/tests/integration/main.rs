//! The integration tests of `distlock-optimistic`, in one binary: each test binary links the whole
//! dependency graph, so one file per concern here costs one link, not one each.

// `cases!`, which the SQLite and MySQL modules expand.
#[macro_use]
mod common;
mod mysql;
mod paused_holder;
mod postgres;
mod sqlite;
