#![allow(unused)]
use distlock::{LockError, LockManager};

#[distlock::lock(ttl = "15s", manager = locks)]
async fn pay(locks: &LockManager, id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
