//! The not-acquired status as a service-wide setting: 423 Locked instead of 409, served
//! for real. (Its own test binary: the setting is process-wide.)
#![cfg(all(feature = "macros", feature = "axum", feature = "memory"))]

use crate::common;

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use distlock::{LockError, LockManager};

#[distlock::lock(key = "report:{name}", ttl = "15s", manager = locks)]
async fn build_report(State(locks): State<LockManager>, Path(name): Path<String>) -> Result<String, LockError> {
    Ok(format!("report {name} built"))
}

#[tokio::test]
async fn not_acquired_answers_with_the_configured_status() {
    assert_eq!(distlock::http::not_acquired_status(), StatusCode::CONFLICT, "409 by default");
    let err = distlock::http::set_not_acquired_status(StatusCode::OK).unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err}");
    assert_eq!(distlock::http::not_acquired_status(), StatusCode::CONFLICT, "a rejected setting changed it");
    distlock::http::set_not_acquired_status(StatusCode::LOCKED).unwrap();

    let locks = LockManager::new(distlock::connect("memory://").await.unwrap());
    let app = Router::new().route("/reports/{name}", post(build_report)).with_state(locks.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let held = locks.lock("report:daily", Duration::from_secs(15)).await.unwrap();
    let (status, body) = common::post(addr, "/reports/daily").await;
    assert_eq!(status, 423, "{body}");
    assert_eq!(body, common::not_acquired_body(423, "report:daily"));
    // Other errors keep their statuses; a free key goes through.
    assert!(held.release().await.unwrap());
    assert_eq!(common::post(addr, "/reports/daily").await, (200, "report daily built".to_owned()));
    server.abort();
}
