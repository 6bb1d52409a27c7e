#![allow(unused)]
use distlock::{LockError, LockManager};

#[distlock::lock(key = "doc:{id}", manager = locks, read, write)]
async fn both(locks: &LockManager, id: u64) -> Result<(), LockError> {
    Ok(())
}

#[distlock::lock(key = "doc:{id}", manager = locks, write, reentrant)]
async fn reentrant_write(locks: &LockManager, id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
