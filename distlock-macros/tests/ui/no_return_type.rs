#![allow(unused)]
use distlock::{LockError, LockManager};

#[distlock::lock(key = "order:{id}", ttl = "15s", manager = locks)]
async fn pay(locks: &LockManager, id: u64) {}

fn main() {}
