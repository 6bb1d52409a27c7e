//! An axum service whose `POST /orders/{id}/pay` runs under `#[distlock::lock]`: two
//! concurrent payments of one order never both run; the second gets 409 Conflict with
//! a `lock-not-acquired` problem (`application/problem+json`) naming the `key` `order:…`.
//!
//! ```sh
//! cargo run -p distlock --example orders --features macros,axum         # in-memory store
//! DISTLOCK_STORE=redis://127.0.0.1:6379 cargo run -p distlock --example orders --features macros,axum,redis
//! curl -i -X POST http://127.0.0.1:3000/orders/42/pay
//! ```
//!
//! `DISTLOCK_ADDR` sets the listening address (default `127.0.0.1:3000`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::routing::post;
use axum::Router;
use distlock::{LockError, LockManager};
use tokio::sync::watch;

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The lock manager the `#[lock]` attribute uses.
    pub locks: LockManager,
    /// The (pretend) payment provider.
    pub payments: Payments,
}

/// A pretend payment provider: it takes `latency` per charge, and only while its gate is
/// open (tests close it to keep a payment — and its lock — in flight).
#[derive(Debug, Clone)]
pub struct Payments {
    latency: Duration,
    gate: watch::Receiver<bool>,
    charged: Arc<Mutex<HashMap<String, u32>>>,
}

impl Payments {
    /// A provider taking `latency` per charge, charging only while `gate` is `true`.
    pub fn new(latency: Duration, gate: watch::Receiver<bool>) -> Self {
        Self { latency, gate, charged: Arc::default() }
    }

    /// How many times `order` was charged.
    pub fn charges(&self, order: &str) -> u32 {
        self.charged.lock().map(|charged| charged.get(order).copied().unwrap_or(0)).unwrap_or(0)
    }

    async fn charge(&self, order: &str) -> Result<u32, LockError> {
        let mut gate = self.gate.clone();
        // A closed channel means the gate's owner is gone: charge at once.
        let _ = gate.wait_for(|open| *open).await;
        tokio::time::sleep(self.latency).await;
        let mut charged = self.charged.lock().map_err(|_| LockError::Config { message: "poisoned".into() })?;
        let count = charged.entry(order.to_owned()).or_default();
        *count += 1;
        Ok(*count)
    }
}

/// Charges order `id`; only one payment per order runs at a time, across every instance
/// sharing the store. A second one gets 409 Conflict at once (`wait = "0s"`).
#[distlock::lock(key = "order:{id}", ttl = "15s", wait = "0s", manager = state.locks)]
pub async fn pay(State(state): State<AppState>, Path(id): Path<String>) -> Result<String, LockError> {
    let charges = state.payments.charge(&id).await?;
    Ok(format!("order {id} paid (charge #{charges})\n"))
}

/// The service's routes.
pub fn app(state: AppState) -> Router {
    Router::new().route("/orders/{id}/pay", post(pay)).with_state(state)
}

#[allow(dead_code)] // the axum_service test includes this file for `app` only
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DISTLOCK_STORE").unwrap_or_else(|_| "memory://".to_owned());
    let addr = std::env::var("DISTLOCK_ADDR").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let locks = LockManager::new(distlock::connect(&url).await?);
    let (_open, gate) = watch::channel(true);
    let state = AppState { locks, payments: Payments::new(Duration::from_millis(500), gate) };
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{} (store {})", listener.local_addr()?, url.split('@').next_back().unwrap_or(""));
    axum::serve(listener, app(state)).await?;
    Ok(())
}
