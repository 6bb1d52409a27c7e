//! Idempotency benchmark: each operation beside the same round trips sent raw, in one
//! run, on Redis and PostgreSQL, and the axum layer beside a bare handler.
//!
//! ```text
//! DISTLOCK_REDIS_URL=redis://127.0.0.1:6379 DISTLOCK_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres \
//!     cargo bench -p distlock-idempotency --all-features
//! scripts/test.sh cargo bench -p distlock-idempotency --all-features   # private servers
//! ```
//!
//! - first request (a fresh key each cycle): claim + complete.
//!   - `raw`: two plain commands — Redis `SET key fp NX PX 30000` + `SET key resp PX
//!     86400000`; PostgreSQL `INSERT … ON CONFLICT DO NOTHING` + `UPDATE` of one row;
//!   - `store`: `IdempotencyStore::claim` + `complete` (fixed token);
//!   - `library`: `Idempotency::claim` + `ClaimHandle::complete` (token, lease watch,
//!     renewal task, metrics).
//! - replay (one completed key): `raw` one read (`HGET` / `SELECT`) vs `store`
//!   `IdempotencyStore::claim` and `library` `Idempotency::claim` answering `Replay`.
//! - axum (memory store, `tower::ServiceExt::oneshot` on a `Router`): a bare handler vs
//!   the same route behind `IdempotencyLayer` answering a replay.
//!
//! Rounds and ratios are the conformance kit's (`report_against_first`). On Redis and
//! PostgreSQL the variants take turns request by request (`kit::bench::interleaved_cycles`),
//! so a slower stretch of the machine meets them all; the axum rounds run each variant's
//! requests back to back in rotating order (`interleaved_rounds`).

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use axum::routing::post;
use axum::Router;
use distlock_api::{Token, Ttl};
use distlock_conformance::kit::bench::{
    interleaved_cycles, interleaved_rounds, on_worker, report_against_first, rounds,
};
use distlock_idempotency::{
    Claim, DynIdempotencyStore, Fingerprint, Idempotency, IdempotencyKey, IdempotencyLayer, StoredResponse,
};
use distlock_memory::MemoryIdempotencyStore;
use distlock_postgres::sqlx::{self, PgPool};
use distlock_postgres::PostgresIdempotencyStore;
use distlock_redis::redis::{self, aio::ConnectionManager};
use distlock_redis::RedisIdempotencyStore;
use tower::ServiceExt;

const CYCLES: usize = 300;
const LEASE_MS: u64 = 30_000;
const RETENTION_MS: u64 = 86_400_000;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Raw,
    Store,
    Library,
}

const VARIANTS: [Variant; 3] = [Variant::Raw, Variant::Store, Variant::Library];
const NAMES: [&str; 3] = ["raw", "store", "library"];

fn response() -> StoredResponse {
    StoredResponse::new(201, r#"{"id":"ord_1","status":"created"}"#).with_header("content-type", "application/json")
}

fn fresh(prefix: &str) -> IdempotencyKey {
    IdempotencyKey::new(format!("{prefix}:{}", Token::generate().as_str())).expect("key")
}

/// One claim + complete through the store or the library.
async fn cycle(variant: Variant, store: &Arc<DynIdempotencyStore>, idem: &Idempotency, key: &IdempotencyKey) {
    let fp = Fingerprint::of_parts(&[b"bench"]);
    match variant {
        Variant::Store => {
            let token = Token::generate();
            let lease = Ttl::new(std::time::Duration::from_millis(LEASE_MS)).expect("ttl");
            store.claim(key, &fp, &token, lease).await.expect("claim");
            let retention = Ttl::new(std::time::Duration::from_millis(RETENTION_MS)).expect("ttl");
            assert!(store.complete(key, &token, &response(), retention).await.expect("complete"));
        }
        Variant::Library => {
            let Claim::Started(claim) = idem.claim(key, fp).await.expect("claim") else { panic!("not started") };
            assert!(claim.complete(&response()).await.expect("complete"));
        }
        Variant::Raw => unreachable!("raw cycles are the backend's"),
    }
}

/// One retry of a completed key through the store or the library.
async fn replay_once(variant: Variant, store: &Arc<DynIdempotencyStore>, idem: &Idempotency, key: &IdempotencyKey) {
    let fp = Fingerprint::of_parts(&[b"bench"]);
    if variant == Variant::Store {
        let lease = Ttl::new(std::time::Duration::from_millis(LEASE_MS)).expect("ttl");
        let answer = store.claim(key, &fp, &Token::generate(), lease).await.expect("claim");
        assert!(matches!(answer, distlock_idempotency::StoreClaim::Replay(_)));
    } else {
        assert!(matches!(idem.claim(key, fp).await.expect("claim"), Claim::Replay(_)));
    }
}

async fn completed_key(idem: &Idempotency, prefix: &str) -> IdempotencyKey {
    let key = fresh(prefix);
    let Claim::Started(claim) = idem.claim(&key, Fingerprint::of_parts(&[b"bench"])).await.expect("claim") else {
        panic!("not started")
    };
    claim.complete(&response()).await.expect("complete");
    key
}

async fn redis_bench(url: &str, rounds: usize) {
    let redis_store = RedisIdempotencyStore::connect(url).await.expect("connect");
    let conn: ConnectionManager =
        redis::Client::open(url).expect("url").get_connection_manager().await.expect("raw connection");
    let store: Arc<DynIdempotencyStore> = Arc::new(redis_store.clone());
    let idem = Idempotency::new(Arc::clone(&store));
    let prefix = format!("dlbench-idem-{}", Token::generate().short());
    let body = response().encode();
    let samples = interleaved_cycles(&VARIANTS, rounds, CYCLES as u64, |variant| {
        let (conn, store, idem, prefix, body, redis_store) =
            (conn.clone(), Arc::clone(&store), idem.clone(), prefix.clone(), body.clone(), redis_store.clone());
        async move {
            {
                let key = fresh(&prefix);
                if variant == Variant::Raw {
                    let mut conn = conn.clone();
                    let redis_key = redis_store.redis_key(&key);
                    let _: Option<String> = redis::cmd("SET")
                        .arg(&redis_key)
                        .arg("fp")
                        .arg("NX")
                        .arg("PX")
                        .arg(LEASE_MS)
                        .query_async(&mut conn)
                        .await
                        .expect("SET NX");
                    let _: () = redis::cmd("SET")
                        .arg(&redis_key)
                        .arg(&body)
                        .arg("PX")
                        .arg(RETENTION_MS)
                        .query_async(&mut conn)
                        .await
                        .expect("SET");
                } else {
                    cycle(variant, &store, &idem, &key).await;
                }
            }
        }
    })
    .await;
    let title =
        format!("Redis first request: claim + complete, {CYCLES} fresh keys/round, taking turns request by request");
    report_against_first(&title, "µs/request", CYCLES as f64, &NAMES, &samples);

    let key = completed_key(&idem, &prefix).await;
    let redis_key = redis_store.redis_key(&key);
    let samples = interleaved_cycles(&VARIANTS, rounds, CYCLES as u64, |variant| {
        let (mut conn, store, idem, key, redis_key) =
            (conn.clone(), Arc::clone(&store), idem.clone(), key.clone(), redis_key.clone());
        async move {
            {
                if variant == Variant::Raw {
                    let _: Vec<u8> =
                        redis::cmd("HGET").arg(&redis_key).arg("resp").query_async(&mut conn).await.expect("HGET");
                } else {
                    replay_once(variant, &store, &idem, &key).await;
                }
            }
        }
    })
    .await;
    let title = format!("Redis replay: one completed key, {CYCLES} retries/round, taking turns request by request");
    report_against_first(&title, "µs/request", CYCLES as f64, &["raw HGET", "store", "library"], &samples);
    // The bench's records expire with their retention; delete them now.
    let mut conn = conn.clone();
    let keys: Vec<String> =
        redis::cmd("KEYS").arg(format!("distlock:idem:{prefix}:*")).query_async(&mut conn).await.unwrap_or_default();
    for chunk in keys.chunks(500) {
        let _: Result<(), _> = redis::cmd("DEL").arg(chunk).query_async(&mut conn).await;
    }
}

async fn postgres_bench(url: &str, rounds: usize) {
    let pg_store = PostgresIdempotencyStore::connect(url).await.expect("connect");
    pg_store.ensure_schema().await.expect("schema");
    let pool: PgPool = pg_store.pool().clone();
    let table = pg_store.table_name();
    let store: Arc<DynIdempotencyStore> = Arc::new(pg_store.clone());
    let idem = Idempotency::new(Arc::clone(&store));
    let prefix = format!("dlbench-idem-{}", Token::generate().short());
    let body = response().encode();
    let insert = format!(
        "INSERT INTO {table} (key, fingerprint, token, expires_at) VALUES ($1, $2, $3, clock_timestamp() + interval '30 seconds') ON CONFLICT (key) DO NOTHING"
    );
    let update = format!(
        "UPDATE {table} SET token = NULL, response = $2, expires_at = clock_timestamp() + interval '1 day' WHERE key = $1"
    );
    let samples = interleaved_cycles(&VARIANTS, rounds, CYCLES as u64, |variant| {
        let (pool, store, idem, prefix, body, insert, update) = (
            pool.clone(),
            Arc::clone(&store),
            idem.clone(),
            prefix.clone(),
            body.clone(),
            insert.clone(),
            update.clone(),
        );
        async move {
            {
                let key = fresh(&prefix);
                if variant == Variant::Raw {
                    let token = Token::generate();
                    sqlx::query(&insert)
                        .bind(key.as_str())
                        .bind(&b"fp"[..])
                        .bind(token.as_str())
                        .execute(&pool)
                        .await
                        .expect("insert");
                    sqlx::query(&update).bind(key.as_str()).bind(&body).execute(&pool).await.expect("update");
                } else {
                    cycle(variant, &store, &idem, &key).await;
                }
            }
        }
    })
    .await;
    let title = format!(
        "PostgreSQL first request: claim + complete, {CYCLES} fresh keys/round, taking turns request by request"
    );
    report_against_first(&title, "µs/request", CYCLES as f64, &NAMES, &samples);

    let key = completed_key(&idem, &prefix).await;
    let select = format!("SELECT response FROM {table} WHERE key = $1 AND expires_at > clock_timestamp()");
    let samples = interleaved_cycles(&VARIANTS, rounds, CYCLES as u64, |variant| {
        let (pool, store, idem, key, select) =
            (pool.clone(), Arc::clone(&store), idem.clone(), key.clone(), select.clone());
        async move {
            {
                if variant == Variant::Raw {
                    let _: Option<Vec<u8>> =
                        sqlx::query_scalar(&select).bind(key.as_str()).fetch_one(&pool).await.expect("select");
                } else {
                    replay_once(variant, &store, &idem, &key).await;
                }
            }
        }
    })
    .await;
    let title =
        format!("PostgreSQL replay: one completed key, {CYCLES} retries/round, taking turns request by request");
    report_against_first(&title, "µs/request", CYCLES as f64, &["raw SELECT", "store", "library"], &samples);
    sqlx::query(&format!("DELETE FROM {table} WHERE key LIKE $1"))
        .bind(format!("{prefix}:%"))
        .execute(&pool)
        .await
        .expect("clean up");
}

async fn axum_bench(redis_url: Option<&str>, rounds: usize) {
    let handler = || async { (axum::http::StatusCode::CREATED, r#"{"id":"ord_1","status":"created"}"#) };
    let bare: Router = Router::new().route("/orders", post(handler));
    let memory = Idempotency::new(Arc::new(MemoryIdempotencyStore::new()));
    let layered = Router::new().route("/orders", post(handler)).route_layer(IdempotencyLayer::new(memory));
    let mut apps = vec![bare, layered];
    let mut names = vec!["bare handler", "layer replay (memory)"];
    if let Some(url) = redis_url {
        let redis = Idempotency::new(Arc::new(RedisIdempotencyStore::connect(url).await.expect("connect")));
        apps.push(Router::new().route("/orders", post(handler)).route_layer(IdempotencyLayer::new(redis)));
        names.push("layer replay (Redis)");
    }
    let key = Token::generate().as_str().to_owned();
    let request = |key: &str| {
        Request::post("/orders")
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body(Body::from("{\"item\":1}"))
            .expect("request")
    };
    for app in &apps[1..] {
        app.clone().oneshot(request(&key)).await.expect("first request");
    }
    let variants: Vec<usize> = (0..apps.len()).collect();
    let samples = interleaved_rounds(&variants, rounds, |i| {
        let (app, key) = (apps[i].clone(), key.clone());
        async move {
            for _ in 0..CYCLES {
                let response = app.clone().oneshot(request(&key)).await.expect("request");
                let _ = axum::body::to_bytes(response.into_body(), usize::MAX).await.expect("body");
            }
        }
    })
    .await;
    let title = format!("axum: replayed request vs bare handler, {CYCLES} requests/round");
    report_against_first(&title, "µs/request", CYCLES as f64, &names, &samples);
}

fn main() {
    let rounds = rounds(11);
    let redis_url = std::env::var("DISTLOCK_REDIS_URL").ok();
    let postgres_url = std::env::var("DISTLOCK_POSTGRES_URL").ok();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(on_worker(async move {
        println!("distlock-idempotency benchmark: {rounds} rounds, median round");
        if let Some(url) = &redis_url {
            redis_bench(url, rounds).await;
        } else {
            println!("(DISTLOCK_REDIS_URL not set: Redis skipped)");
        }
        if let Some(url) = &postgres_url {
            postgres_bench(url, rounds).await;
        } else {
            println!("(DISTLOCK_POSTGRES_URL not set: PostgreSQL skipped)");
        }
        axum_bench(redis_url.as_deref(), rounds).await;
    }));
}
