//! The `orders` example served for real on 127.0.0.1:0, hit by concurrent raw HTTP/1.1
//! requests: per order exactly one payment runs while it is held; the others get 409 with
//! the JSON body naming the key.
#![cfg(all(feature = "macros", feature = "axum", feature = "memory"))]

use crate::common;

#[path = "../../examples/orders.rs"]
#[allow(dead_code, unreachable_pub)]
mod orders;

use std::time::Duration;

use common::post;
use distlock::LockManager;
use tokio::sync::watch;

async fn exactly_one_payment_per_order_runs(locks: LockManager) {
    const REQUESTS: usize = 8;
    let (open, gate) = watch::channel(false);
    let payments = orders::Payments::new(Duration::ZERO, gate);
    let state = orders::AppState { locks, payments: payments.clone() };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, orders::app(state)).await });

    let run = distlock::Token::generate().short().to_owned();
    let ids = [format!("{run}-a"), format!("{run}-b")];
    let mut pending = Vec::new();
    for id in &ids {
        for _ in 0..REQUESTS {
            let path = format!("/orders/{id}/pay");
            pending.push((id.clone(), tokio::spawn(async move { post(addr, &path).await })));
        }
    }

    // The gate is closed: each order's winner holds its lock; everyone else must get 409.
    let mut conflicts = std::collections::HashMap::<String, usize>::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while conflicts.values().sum::<usize>() < ids.len() * (REQUESTS - 1) {
        assert!(tokio::time::Instant::now() < deadline, "409s so far: {conflicts:?}");
        let mut still_pending = Vec::new();
        for (id, request) in pending {
            if request.is_finished() {
                let (status, body) = request.await.unwrap();
                assert_eq!(status, 409, "while order {id} is being paid: {body}");
                assert_eq!(body, common::not_acquired_body(409, &format!("order:{id}")));
                *conflicts.entry(id).or_default() += 1;
            } else {
                still_pending.push((id, request));
            }
        }
        pending = still_pending;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(pending.len(), ids.len(), "one winner per order is still inside, holding the lock");
    for id in &ids {
        assert_eq!(conflicts[id], REQUESTS - 1, "{id}");
        assert_eq!(payments.charges(id), 0, "nothing charged while the gate is closed");
    }

    open.send_replace(true);
    for (id, request) in pending {
        let (status, body) = request.await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(body, format!("order {id} paid (charge #1)\n"));
    }
    for id in &ids {
        assert_eq!(payments.charges(id), 1, "{id} charged exactly once");
        // The lock was released: the next payment goes through.
        assert_eq!(post(addr, &format!("/orders/{id}/pay")).await.0, 200);
    }
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_gives_one_winner_and_409s() {
    let store = distlock::connect("memory://").await.unwrap();
    exactly_one_payment_per_order_runs(LockManager::new(store)).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_gives_one_winner_and_409s() {
    let Some(url) = distlock_conformance::kit::redis_url("axum orders service on redis") else { return };
    let store = distlock::connect(&url).await.unwrap();
    exactly_one_payment_per_order_runs(LockManager::new(store)).await;
}
