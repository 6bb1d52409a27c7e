//! `#[lock]` on an axum handler with an opaque response type: the form the attribute's
//! compile error asks for, `Result<impl IntoResponse, LockError>`, is a handler, answers
//! the body's response when the lock is free and 409 when it is held.
#![cfg(all(feature = "macros", feature = "axum", feature = "memory"))]

use crate::common;

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use distlock::{LockError, LockManager};

#[distlock::lock(key = "report:{name}", ttl = "15s", manager = locks)]
async fn build_report(
    State(locks): State<LockManager>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, LockError> {
    Ok((StatusCode::CREATED, format!("report {name} built")))
}

#[tokio::test]
async fn an_opaque_response_behind_a_result_is_served_or_refused() {
    let locks = LockManager::new(distlock::connect("memory://").await.unwrap());
    let app = Router::new().route("/reports/{name}", post(build_report)).with_state(locks.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    assert_eq!(common::post(addr, "/reports/daily").await, (201, "report daily built".to_owned()));
    let held = locks.lock("report:daily", Duration::from_secs(15)).await.unwrap();
    let (status, body) = common::post(addr, "/reports/daily").await;
    assert_eq!(status, 409, "{body}");
    assert!(held.release().await.unwrap());
    server.abort();
}
