#![allow(unused)]
use distlock::{LockError, LockManager};

#[distlock::lock(key = "order:{orderId}", ttl = "15s", manager = locks)]
async fn pay(locks: &LockManager, order_id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
