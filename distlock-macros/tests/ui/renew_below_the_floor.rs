#![allow(unused)]
use distlock::{LockError, LockManager};

#[distlock::lock(key = "order:{id}", ttl = "15s", renew = "1ms", manager = locks)]
async fn pay(locks: &LockManager, id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
