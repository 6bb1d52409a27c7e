#![allow(unused)]
use distlock::{LockError, LockManager};

#[distlock::lock(key = "order:{order.id}", ttl = "15s", manager = locks)]
async fn pay(locks: &LockManager, order: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
