//! Nothing here: the benchmark is `benches/peers.rs`.
