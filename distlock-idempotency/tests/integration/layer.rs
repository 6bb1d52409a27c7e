//! The axum layer: a real `Router` over real stores (memory, Redis, PostgreSQL), driven
//! request by request with `tower::ServiceExt::oneshot`.
#![cfg(feature = "axum")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Path;
use axum::http::{header, Request, Response, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use distlock_idempotency::{
    normalise_json, DynIdempotencyStore, Fingerprint, Idempotency, IdempotencyLayer, IdempotencyOptions, MismatchStatus,
};
use distlock_memory::MemoryIdempotencyStore;
use distlock_postgres::PostgresIdempotencyStore;
use distlock_redis::RedisIdempotencyStore;
use serde_json::Value;
use tokio::sync::Notify;
use tower::ServiceExt;

/// What the handlers share with the test.
#[derive(Default)]
struct Handlers {
    runs: AtomicUsize,
    /// Signalled when `/slow` is entered.
    entered: Notify,
}

fn make_app(
    store: Arc<DynIdempotencyStore>,
    options: IdempotencyOptions,
    layer: impl FnOnce(IdempotencyLayer) -> IdempotencyLayer,
) -> (Router, Arc<Handlers>) {
    let handlers = Arc::new(Handlers::default());
    let idem = Idempotency::with_options(store, options).unwrap();
    let layer =
        layer(IdempotencyLayer::new(idem).identity(|req| req.headers.get("x-user")?.to_str().ok().map(str::to_owned)));
    let (h1, h2, h3, h4, h5) =
        (handlers.clone(), handlers.clone(), handlers.clone(), handlers.clone(), handlers.clone());
    let router = Router::new()
        .route(
            "/orders",
            post(move |body: String| async move {
                let n = h1.runs.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
                (StatusCode::CREATED, [("x-order", n.to_string())], format!("order {n} for {body}"))
            })
            .get(move || async move {
                h2.runs.fetch_add(1, Ordering::SeqCst);
                "listed"
            }),
        )
        .route(
            "/fail",
            post(move || async move {
                h3.runs.fetch_add(1, Ordering::SeqCst);
                (StatusCode::INTERNAL_SERVER_ERROR, "boom")
            }),
        )
        .route(
            "/slow",
            // The first call never finishes (it is cancelled by the test); later ones do.
            post(move || async move {
                let n = h4.runs.fetch_add(1, Ordering::SeqCst) + 1;
                h4.entered.notify_one();
                if n == 1 {
                    std::future::pending::<()>().await;
                }
                format!("slow {n}")
            }),
        )
        .route(
            "/splits/{id}/finalize",
            // Answers the hash of the pallet spec it finalised, as the application computes it.
            post(move |Path(id): Path<u32>, body: Bytes| async move {
                h5.runs.fetch_add(1, Ordering::SeqCst);
                let hash = Fingerprint::of_body(&pallet_spec(&body)).to_hex();
                (StatusCode::CREATED, format!("split {id} finalised: {hash}"))
            }),
        )
        .route("/health", get(|| async { "ok" }))
        .route_layer(layer);
    (router, handlers)
}

/// A split's pallet spec normalised as the specification's finalize hash does it: pallets
/// sorted by temporary id, package ids ascending, each pallet `{temp_id, packages}` in that
/// field order, compact JSON. A body that is not a pallet list is returned unchanged.
fn pallet_spec(body: &[u8]) -> Vec<u8> {
    let pallets = serde_json::from_slice::<Value>(body).ok().and_then(|request| {
        let pallets = request.get("pallets")?.as_array()?.iter().map(|pallet| {
            let temp_id = pallet.get("temp_id")?.as_str()?.to_owned();
            let packages = pallet.get("packages")?.as_array()?.iter().map(Value::as_u64);
            Some((temp_id, packages.collect::<Option<Vec<u64>>>()?))
        });
        pallets.collect::<Option<Vec<_>>>()
    });
    let Some(mut pallets) = pallets else { return body.to_vec() };
    pallets.sort_by(|a, b| a.0.cmp(&b.0));
    let pallets: Vec<String> = pallets
        .into_iter()
        .map(|(temp_id, mut packages)| {
            packages.sort_unstable();
            format!(r#"{{"temp_id":{},"packages":{}}}"#, Value::from(temp_id), Value::from(packages))
        })
        .collect();
    format!("[{}]", pallets.join(",")).into_bytes()
}

/// The specification's pallet example, as a client sends it: pallets and packages
/// unsorted, a field the hash leaves out, spaces.
const PALLETS: &str = r#"{"pallets": [
    {"temp_id": "T2", "packages": [1042, 1007], "label": "fragile"},
    {"packages": [1013, 1001, 1005], "temp_id": "T1"}
]}"#;
/// [`PALLETS`] normalised.
const PALLETS_NORMALISED: &str =
    r#"[{"temp_id":"T1","packages":[1001,1005,1013]},{"temp_id":"T2","packages":[1007,1042]}]"#;
/// Computed outside the library:
/// printf '%s' '[{"temp_id":"T1","packages":[1001,1005,1013]},{"temp_id":"T2","packages":[1007,1042]}]' | sha256sum
const PALLETS_HASH: &str = "9a441cc8d0f48d22c89ac5136e263040f590b081531dd7758be20e883371efdc";
/// Package 1013 moved from T1 to T2:
/// printf '%s' '[{"temp_id":"T1","packages":[1001,1005]},{"temp_id":"T2","packages":[1007,1013,1042]}]' | sha256sum
const MOVED_HASH: &str = "48cbb4f72b38f71b232bcc55c5d5de3ee05fe86587b2c99ea2aa8dfa2bd2ad59";
const MOVED: &str =
    r#"{"pallets":[{"temp_id":"T2","packages":[1013,1042,1007]},{"temp_id":"T1","packages":[1005,1001]}]}"#;

fn request(path: &str, key: Option<&str>, user: &str, body: &str) -> Request<Body> {
    let mut builder = Request::post(path).header("x-user", user).header(header::CONTENT_TYPE, "application/json");
    if let Some(key) = key {
        builder = builder.header("idempotency-key", key);
    }
    builder.body(Body::from(body.to_owned())).unwrap()
}

async fn send(app: &Router, request: Request<Body>) -> (StatusCode, Response<Body>, String) {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let (parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    (status, Response::from_parts(parts, Body::empty()), String::from_utf8_lossy(&body).into_owned())
}

fn replayed(response: &Response<Body>) -> bool {
    response.headers().get("idempotent-replayed").is_some_and(|v| v == "true")
}

fn fresh_key() -> String {
    distlock_api::Token::generate().as_str().to_owned()
}

/// The body of a problem-details answer of type `name`, checked: its media type, its
/// standard members, and that it carries none of `secrets` (the client's key, hashes).
fn problem(name: &str, status: StatusCode, response: &Response<Body>, body: &str, secrets: &[&str]) -> Value {
    assert_eq!(response.status(), status, "{body}");
    assert_eq!(response.headers()[header::CONTENT_TYPE], "application/problem+json");
    let problem: Value = serde_json::from_str(body).unwrap();
    assert_eq!(problem["type"], format!("https://docs.rs/distlock-api/latest/distlock_api/http/#{name}"));
    assert_eq!(problem["status"], status.as_u16(), "{problem}");
    assert!(problem["title"].is_string() && problem["detail"].is_string(), "{problem}");
    for secret in secrets {
        assert!(!body.contains(secret), "{secret} in {body}");
    }
    problem
}

/// 32 concurrent identical requests: the handler runs once, every client gets its response.
async fn concurrent_identical_requests_run_once(store: Arc<DynIdempotencyStore>) {
    let (app, handlers) = make_app(store, IdempotencyOptions::new(), |l| l.wait_in_progress(Duration::from_secs(20)));
    let key = fresh_key();
    let barrier = Arc::new(tokio::sync::Barrier::new(32));
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (app, key, barrier) = (app.clone(), key.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                send(&app, request("/orders", Some(&key), "u1", r#"{"item":1}"#)).await
            })
        })
        .collect();
    let mut replays = 0;
    for task in tasks {
        let (status, response, body) = task.await.unwrap();
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(body, r#"order 1 for {"item":1}"#);
        assert_eq!(response.headers()["x-order"], "1");
        replays += usize::from(replayed(&response));
    }
    assert_eq!(handlers.runs.load(Ordering::SeqCst), 1);
    assert_eq!(replays, 31);
}

/// A 500 is stored and replayed like any other response.
async fn server_error_is_replayed(store: Arc<DynIdempotencyStore>) {
    let (app, handlers) = make_app(store, IdempotencyOptions::new(), |l| l);
    let key = fresh_key();
    for attempt in 0..2 {
        let (status, response, body) = send(&app, request("/fail", Some(&key), "u1", "{}")).await;
        assert_eq!((status, body.as_str()), (StatusCode::INTERNAL_SERVER_ERROR, "boom"));
        assert_eq!(replayed(&response), attempt == 1);
    }
    assert_eq!(handlers.runs.load(Ordering::SeqCst), 1);
}

/// The same key with another body: 422 by default; in the 409 mode, 409 carrying the
/// SHA-256 of the first request's normalised JSON body alone (not the new request's).
async fn different_payload_is_a_mismatch(store: Arc<DynIdempotencyStore>) {
    // printf '%s' '{"item":1}' | sha256sum
    const FIRST_HASH: &str = "8a90f2b609081eaf2e6fd34f85016f6a865cb41be9c56e2883c3c3e70385cebd";
    for mode in [MismatchStatus::UnprocessableContent, MismatchStatus::ConflictWithHash] {
        let (app, handlers) = make_app(Arc::clone(&store), IdempotencyOptions::new(), |l| l.mismatch(mode));
        let key = fresh_key();
        assert_eq!(send(&app, request("/orders", Some(&key), "u1", r#"{ "item": 1 }"#)).await.0, StatusCode::CREATED);
        for other in [r#"{"item":2}"#, r#"{"item":3}"#] {
            let (status, response, body) = send(&app, request("/orders", Some(&key), "u1", other)).await;
            // Never the new request's hash, in either mode, nor the client's key.
            let new_hash = Fingerprint::of_body(&normalise_json(other.as_bytes())).to_hex();
            if mode == MismatchStatus::UnprocessableContent {
                let secrets = [key.as_str(), &new_hash, FIRST_HASH];
                let problem = problem("idempotency-key-reused", status, &response, &body, &secrets);
                assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
                assert!(problem.get("existing_hash").is_none(), "{problem}");
            } else {
                let problem = problem("idempotency-key-reused", status, &response, &body, &[key.as_str(), &new_hash]);
                assert_eq!(status, StatusCode::CONFLICT);
                assert_eq!(problem["existing_hash"], FIRST_HASH, "{problem}");
                assert!(response.headers().get(header::RETRY_AFTER).is_none());
            }
        }
        assert_eq!(handlers.runs.load(Ordering::SeqCst), 1);
    }
}

/// The specification's finalize hash: with the pallet normalisation, the fingerprint is
/// the SHA-256 of the normalised body alone (reordered pallets and packages, another
/// `Content-Type` and spaces are the same request), the 409 answer carries the hash the
/// first request stored — equal to the application's own value and to the reference
/// computed outside the library — and each split keeps its own record.
async fn conflict_carries_the_first_requests_body_hash(store: Arc<DynIdempotencyStore>) {
    assert_eq!(String::from_utf8(pallet_spec(PALLETS.as_bytes())).unwrap(), PALLETS_NORMALISED);
    assert_eq!(Fingerprint::of_body(PALLETS_NORMALISED.as_bytes()).to_hex(), PALLETS_HASH);
    let (app, handlers) = make_app(store, IdempotencyOptions::new(), |l| {
        l.normalise_body(pallet_spec).mismatch(MismatchStatus::ConflictWithHash)
    });
    let key = fresh_key();
    let (status, _, first) = send(&app, request("/splits/7/finalize", Some(&key), "u1", PALLETS)).await;
    assert_eq!((status, first.as_str()), (StatusCode::CREATED, &*format!("split 7 finalised: {PALLETS_HASH}")));

    let reordered =
        r#"{"pallets":[{"temp_id":"T1","packages":[1005,1013,1001]},{"packages":[1007,1042],"temp_id":"T2"}]}"#;
    let mut retry = request("/splits/7/finalize", Some(&key), "u1", reordered);
    retry.headers_mut().insert(header::CONTENT_TYPE, "text/plain".parse().unwrap());
    let (status, response, body) = send(&app, retry).await;
    assert_eq!((status, body.as_str()), (StatusCode::CREATED, first.as_str()));
    assert!(replayed(&response));

    for other in [MOVED, r#"{"pallets":[]}"#] {
        let (status, response, body) = send(&app, request("/splits/7/finalize", Some(&key), "u1", other)).await;
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/problem+json");
        let problem: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(problem["status"], 409);
        assert_eq!(problem["existing_hash"], PALLETS_HASH, "{problem}");
        assert!(first.ends_with(problem["existing_hash"].as_str().unwrap()));
    }

    // Another split, same key: its own record, whose first body is `MOVED`.
    let (status, response, body) = send(&app, request("/splits/8/finalize", Some(&key), "u1", MOVED)).await;
    assert_eq!((status, body.as_str()), (StatusCode::CREATED, &*format!("split 8 finalised: {MOVED_HASH}")));
    assert!(!replayed(&response));
    let (status, _, body) = send(&app, request("/splits/8/finalize", Some(&key), "u1", PALLETS)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["existing_hash"], MOVED_HASH);
    assert_eq!(handlers.runs.load(Ordering::SeqCst), 2);
}

/// Missing (when required) and malformed keys: 400 before anything runs.
async fn missing_and_malformed_keys_are_400(store: Arc<DynIdempotencyStore>) {
    let (app, handlers) = make_app(Arc::clone(&store), IdempotencyOptions::new(), |l| l.require_key(true));
    let long = "k".repeat(256);
    for key in [None, Some(""), Some("a b"), Some("\"unterminated"), Some(long.as_str())] {
        let (status, response, body) = send(&app, request("/orders", key, "u1", "{}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{key:?}: {body}");
        let name = if key.is_none() { "idempotency-key-missing" } else { "idempotency-key-malformed" };
        problem(name, status, &response, &body, &[&long]);
    }
    let mut twice = request("/orders", Some("a"), "u1", "{}");
    twice.headers_mut().append("idempotency-key", "b".parse().unwrap());
    assert_eq!(send(&app, twice).await.0, StatusCode::BAD_REQUEST);
    assert_eq!(handlers.runs.load(Ordering::SeqCst), 0);
    // Not required: a request without a key runs unprotected.
    let (app, handlers) = make_app(store, IdempotencyOptions::new(), |l| l);
    for _ in 0..2 {
        assert_eq!(send(&app, request("/orders", None, "u1", "{}")).await.0, StatusCode::CREATED);
    }
    assert_eq!(handlers.runs.load(Ordering::SeqCst), 2);
}

/// `"key"` (an RFC 8941 string) and `key` (a bare token) are the same key.
async fn quoted_and_bare_keys_are_the_same(store: Arc<DynIdempotencyStore>) {
    let (app, handlers) = make_app(store, IdempotencyOptions::new(), |l| l);
    let key = fresh_key();
    send(&app, request("/orders", Some(&key), "u1", "{}")).await;
    let (status, response, _) = send(&app, request("/orders", Some(&format!("\"{key}\"")), "u1", "{}")).await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(replayed(&response));
    assert_eq!(handlers.runs.load(Ordering::SeqCst), 1);
}

/// Two callers using the same key each get their own run and their own response.
async fn callers_do_not_see_each_others_responses(store: Arc<DynIdempotencyStore>) {
    let (app, handlers) = make_app(store, IdempotencyOptions::new(), |l| l);
    let key = fresh_key();
    let (_, _, alice) = send(&app, request("/orders", Some(&key), "alice", "{}")).await;
    let (_, response, bob) = send(&app, request("/orders", Some(&key), "bob", "{}")).await;
    assert!(!replayed(&response));
    assert_ne!(alice, bob);
    assert_eq!(handlers.runs.load(Ordering::SeqCst), 2);
    let (_, response, again) = send(&app, request("/orders", Some(&key), "alice", "{}")).await;
    assert!(replayed(&response));
    assert_eq!(again, alice);
}

/// A retry while the first request runs: 409 with `Retry-After`. The first request then
/// dies (its future is dropped): after the lease the next retry runs.
async fn in_progress_then_dropped_request_is_retried_after_the_lease(store: Arc<DynIdempotencyStore>) {
    let lease = Duration::from_millis(600);
    let (app, handlers) = make_app(store, IdempotencyOptions::new().lease(lease), |l| l);
    let key = fresh_key();
    let first = tokio::spawn({
        let (app, key) = (app.clone(), key.clone());
        async move { send(&app, request("/slow", Some(&key), "u1", "{}")).await }
    });
    handlers.entered.notified().await;
    let (status, response, body) = send(&app, request("/slow", Some(&key), "u1", "{}")).await;
    problem("request-in-progress", status, &response, &body, &[&key]);
    assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    // Still claimed until the lease ends (the first request's effects are unknown).
    assert_eq!(send(&app, request("/slow", Some(&key), "u1", "{}")).await.0, StatusCode::CONFLICT);
    tokio::time::sleep(lease + Duration::from_millis(200)).await;
    let (status, _, body) = send(&app, request("/slow", Some(&key), "u1", "{}")).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "slow 2"));
    assert_eq!(handlers.runs.load(Ordering::SeqCst), 2);
}

/// Unguarded methods pass through; bodies over the limit are refused; the JSON body hash
/// ignores key order.
async fn methods_limits_and_json_body_hash(store: Arc<DynIdempotencyStore>) {
    let (app, handlers) =
        make_app(store, IdempotencyOptions::new(), |l| l.request_limit(64).normalise_body(normalise_json));
    let key = fresh_key();
    for _ in 0..2 {
        let get = Request::get("/orders").header("idempotency-key", key.as_str()).body(Body::empty()).unwrap();
        let (status, response, _) = send(&app, get).await;
        assert_eq!(status, StatusCode::OK);
        assert!(!replayed(&response));
    }
    assert_eq!(handlers.runs.load(Ordering::SeqCst), 2);
    let (status, response, body) = send(&app, request("/orders", Some(&key), "u1", &"x".repeat(65))).await;
    problem("request-too-large", status, &response, &body, &[&key]);
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    send(&app, request("/orders", Some(&key), "u1", r#"{"a": 1, "b": [1, 2]}"#)).await;
    let (status, response, _) = send(&app, request("/orders", Some(&key), "u1", r#"{"b":[1,2],"a":1}"#)).await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(replayed(&response));
    assert_eq!(handlers.runs.load(Ordering::SeqCst), 3);
}

/// A retry while a long-lease first request runs: `Retry-After` is the layer's hint (1 s
/// unless set), not the 30 s the claim's lease has left.
async fn in_progress_retry_after_is_the_hint_not_the_lease(store: Arc<DynIdempotencyStore>) {
    for (hint, expected) in
        [(None, "1"), (Some(Duration::from_millis(4500)), "5"), (Some(Duration::from_secs(90)), "30")]
    {
        let (app, handlers) =
            make_app(Arc::clone(&store), IdempotencyOptions::new().lease(Duration::from_secs(30)), |l| match hint {
                Some(hint) => l.in_progress_retry_after(hint),
                None => l,
            });
        let key = fresh_key();
        let first = tokio::spawn({
            let (app, key) = (app.clone(), key.clone());
            async move { send(&app, request("/slow", Some(&key), "u1", "{}")).await }
        });
        handlers.entered.notified().await;
        let (status, response, body) = send(&app, request("/slow", Some(&key), "u1", "{}")).await;
        problem("request-in-progress", status, &response, &body, &[&key]);
        assert_eq!(status, StatusCode::CONFLICT);
        // A hint over the lease left is capped by it.
        let retry_after: u64 = response.headers()[header::RETRY_AFTER].to_str().unwrap().parse().unwrap();
        if expected == "30" {
            assert!((29..=30).contains(&retry_after), "{retry_after}");
        } else {
            assert_eq!(retry_after.to_string(), expected);
        }
        first.abort();
    }
}

macro_rules! layer_tests {
    ($factory:path; $($case:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            let Some(store) = $factory().await else { return };
            super::$case(store).await;
        }
    )*};
}

macro_rules! all_layer_tests {
    ($factory:path) => {
        layer_tests!($factory;
            concurrent_identical_requests_run_once,
            server_error_is_replayed,
            different_payload_is_a_mismatch,
            missing_and_malformed_keys_are_400,
            quoted_and_bare_keys_are_the_same,
            callers_do_not_see_each_others_responses,
            in_progress_then_dropped_request_is_retried_after_the_lease,
            methods_limits_and_json_body_hash,
            conflict_carries_the_first_requests_body_hash,
            in_progress_retry_after_is_the_hint_not_the_lease,
        );
    };
}

mod memory {
    use super::*;

    async fn store() -> Option<Arc<DynIdempotencyStore>> {
        Some(Arc::new(MemoryIdempotencyStore::new()))
    }

    all_layer_tests!(store);
}

mod redis {
    use super::*;

    async fn store() -> Option<Arc<DynIdempotencyStore>> {
        let url = distlock_conformance::kit::redis_url("idempotency layer on redis")?;
        Some(Arc::new(RedisIdempotencyStore::connect(&url).await.expect("connect")))
    }

    all_layer_tests!(store);

    /// A record's Redis key carries the store's namespace once: `{prefix}:idem:` and the
    /// layer's 64 hex digits.
    #[tokio::test]
    async fn record_keys_carry_the_namespace_once() {
        let Some(url) = distlock_conformance::kit::redis_url("idempotency layer record keys") else { return };
        let prefix = format!("layer-keys-{}", distlock_api::Token::generate().as_str());
        let separator = if url.contains('?') { '&' } else { '?' };
        let store = RedisIdempotencyStore::connect(&format!("{url}{separator}prefix={prefix}")).await.expect("connect");
        let (app, _) = make_app(Arc::new(store), IdempotencyOptions::new(), |l| l);
        let (status, ..) = send(&app, request("/orders", Some(&fresh_key()), "u1", "{}")).await;
        assert_eq!(status, StatusCode::CREATED);

        let client = distlock_redis::redis::Client::open(url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let keys: Vec<String> =
            distlock_redis::redis::cmd("KEYS").arg(format!("{prefix}:idem:*")).query_async(&mut conn).await.unwrap();
        assert_eq!(keys.len(), 1, "{keys:?}");
        let digest = keys[0].strip_prefix(&format!("{prefix}:idem:")).unwrap_or_else(|| panic!("{keys:?}"));
        assert!(digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()), "{keys:?}");
        let all: Vec<String> =
            distlock_redis::redis::cmd("KEYS").arg(format!("{prefix}:*")).query_async(&mut conn).await.unwrap();
        let _: () = distlock_redis::redis::cmd("DEL").arg(all).query_async(&mut conn).await.unwrap();
    }
}

mod postgres {
    use super::*;

    async fn store() -> Option<Arc<DynIdempotencyStore>> {
        let url = distlock_conformance::kit::postgres_url("idempotency layer on postgres")?;
        let store = PostgresIdempotencyStore::connect(&url).await.expect("connect");
        store.ensure_schema().await.expect("schema");
        Some(Arc::new(store))
    }

    all_layer_tests!(store);
}

/// A store that fails every call, as an unreachable server does.
#[derive(Debug)]
struct Unreachable;

#[distlock_api::async_trait]
impl distlock_idempotency::IdempotencyStore for Unreachable {
    fn backend(&self) -> &'static str {
        "unreachable"
    }
    async fn claim(
        &self,
        _: &distlock_idempotency::IdempotencyKey,
        _: &distlock_idempotency::Fingerprint,
        _: &distlock_api::Token,
        _: distlock_api::Ttl,
    ) -> Result<distlock_idempotency::StoreClaim, distlock_api::LockError> {
        Err(distlock_api::LockError::store("unreachable", "claim", None, "connection refused"))
    }
    async fn renew(
        &self,
        _: &distlock_idempotency::IdempotencyKey,
        _: &distlock_api::Token,
        _: distlock_api::Ttl,
    ) -> Result<bool, distlock_api::LockError> {
        Ok(false)
    }
    async fn complete(
        &self,
        _: &distlock_idempotency::IdempotencyKey,
        _: &distlock_api::Token,
        _: &distlock_idempotency::StoredResponse,
        _: distlock_api::Ttl,
    ) -> Result<bool, distlock_api::LockError> {
        Ok(false)
    }
    async fn abandon(
        &self,
        _: &distlock_idempotency::IdempotencyKey,
        _: &distlock_api::Token,
    ) -> Result<bool, distlock_api::LockError> {
        Ok(false)
    }
}

/// A failing store: 503 and the handler not run (fail closed), or run unprotected with
/// `fail_open`.
#[tokio::test]
async fn store_failure_is_503_unless_fail_open() {
    let (app, handlers) = make_app(Arc::new(Unreachable), IdempotencyOptions::new(), |l| l);
    let (status, response, body) = send(&app, request("/orders", Some("k"), "u1", "{}")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    problem("idempotency-store-unavailable", status, &response, &body, &["unreachable", "refused"]);
    assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    assert_eq!(handlers.runs.load(Ordering::SeqCst), 0);
    let (app, handlers) = make_app(Arc::new(Unreachable), IdempotencyOptions::new(), |l| l.fail_open(true));
    assert_eq!(send(&app, request("/orders", Some("k"), "u1", "{}")).await.0, StatusCode::CREATED);
    assert_eq!(handlers.runs.load(Ordering::SeqCst), 1);
}

/// The lease of the claim held by the child process of the `kill -9` case.
const KILL9_LEASE: Duration = Duration::from_secs(1);

/// The child side of [`killed_server_process_lets_the_retry_run_after_the_lease`]: its
/// handler announces that it runs and never finishes. Returns at once when run as an
/// ordinary test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_entry_serves_a_stuck_handler() {
    let Some(arg) = distlock_conformance::kit::child::role_arg("idem-layer-server") else { return };
    let (url, key) = arg.split_once(' ').expect("url and key");
    let store = Arc::new(RedisIdempotencyStore::connect(url).await.expect("connect"));
    let (app, handlers) = make_app(store, IdempotencyOptions::new().lease(KILL9_LEASE), |l| l);
    let key = key.to_owned();
    let request = tokio::spawn(async move { send(&app, request("/slow", Some(&key), "u1", "{}")).await });
    handlers.entered.notified().await;
    distlock_conformance::kit::child::announce("IN HANDLER");
    let _ = request.await;
    distlock_conformance::kit::child::park().await;
}

/// `kill -9` of a server process while its handler runs: retries get 409 until the
/// claim's lease ends (it was renewed while the process lived), then the retry runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_server_process_lets_the_retry_run_after_the_lease() {
    let Some(url) = distlock_conformance::kit::redis_url("idempotency layer kill -9") else { return };
    let key = fresh_key();
    let mut child = distlock_conformance::kit::child::ChildProcess::spawn(
        "layer::child_entry_serves_a_stuck_handler",
        "idem-layer-server",
        &format!("{url} {key}"),
    );
    child.wait_for_line("IN HANDLER", Duration::from_secs(60));
    let store = Arc::new(RedisIdempotencyStore::connect(&url).await.expect("connect"));
    let (app, handlers) = make_app(store, IdempotencyOptions::new(), |l| l);
    // The first run of `/slow` (the one that never finishes) was the child's.
    handlers.runs.store(1, Ordering::SeqCst);
    // Past two renewals of the living child's claim.
    tokio::time::sleep(KILL9_LEASE * 2).await;
    assert_eq!(send(&app, request("/slow", Some(&key), "u1", "{}")).await.0, StatusCode::CONFLICT);
    child.kill9();
    let killed_at = tokio::time::Instant::now();
    loop {
        let (status, _, body) = send(&app, request("/slow", Some(&key), "u1", "{}")).await;
        if status == StatusCode::OK {
            assert_eq!(body, "slow 2");
            break;
        }
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
        assert!(killed_at.elapsed() < KILL9_LEASE * 5, "the claim never lapsed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(handlers.runs.load(Ordering::SeqCst), 2);
}
