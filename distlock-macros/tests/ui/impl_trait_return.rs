#![allow(unused)]
use distlock::LockManager;

// An axum handler's usual `impl IntoResponse`, with a stand-in trait: the lock's own
// error needs a `Result` to leave through.
trait IntoResponse {}
impl IntoResponse for String {}

#[distlock::lock(key = "order:{id}", ttl = "15s", manager = locks)]
async fn pay(locks: &LockManager, id: u64) -> impl IntoResponse {
    format!("paid {id}")
}

fn main() {}
