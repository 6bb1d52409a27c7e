//! `IdempotencyLayer`: a tower layer that makes axum routes idempotent, following
//! draft-ietf-httpapi-idempotency-key-header by default.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::MatchedPath;
use axum::http::request::Parts;
use axum::http::uri::PathAndQuery;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use tower_layer::Layer;
use tower_service::Service;

use axum::response::IntoResponse as _;
use distlock_api::http::{Problem, ProblemType};
use distlock_api::idempotency::{normalise_json, Fingerprint, IdempotencyKey, StoredResponse};

use crate::header::parse_key;
use crate::manager::{Claim, ClaimHandle, Idempotency};

/// The request header carrying the key.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// The header added to replayed responses, with the value `true`.
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// What a mismatch (the key reused for a different request) answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MismatchStatus {
    /// 422 Unprocessable Content, as the IETF draft says (the default).
    #[default]
    UnprocessableContent,
    /// 409 Conflict with the existing hash: the problem body's `existing_hash` member is
    /// the hash stored by the first request with the key (64 lowercase hex digits),
    /// never the new request's.
    ///
    /// In this mode a request's fingerprint is the SHA-256 of its normalised body alone —
    /// not its method, path, query or headers — so a client can compute the same hash
    /// (`sha256sum` of the normalised text): the body is normalised by
    /// [`IdempotencyLayer::normalise_body`]'s function, [`normalise_json`] unless set.
    /// A function set with [`IdempotencyLayer::fingerprint`] replaces the body hash, and
    /// its value is what the answer carries.
    ///
    /// This is the one answer of the library that carries a hash of a request, and only in
    /// this mode, which exists to tell the caller it: the first request's, sent by the same
    /// caller (records are scoped to the caller's identity). The default 422 carries none.
    ///
    /// ```json
    /// {
    ///   "type": "https://docs.rs/distlock-api/latest/distlock_api/http/#idempotency-key-reused",
    ///   "title": "Idempotency-Key reused",
    ///   "status": 409,
    ///   "detail": "this Idempotency-Key was used for a different request, whose hash is existing_hash",
    ///   "existing_hash": "9a441cc8d0f48d22c89ac5136e263040f590b081531dd7758be20e883371efdc"
    /// }
    /// ```
    ConflictWithHash,
}

/// The caller's identity, part of the lookup scope: two callers sending the same key
/// never see each other's responses.
type IdentityFn = dyn Fn(&Parts) -> Option<String> + Send + Sync;
/// The request's fingerprint from its head and body.
type FingerprintFn = dyn Fn(&Parts, &[u8]) -> Fingerprint + Send + Sync;
/// A request body's normalised bytes, hashed alone.
type NormaliseFn = dyn Fn(&[u8]) -> Vec<u8> + Send + Sync;

/// How requests are fingerprinted: the last of `fingerprint` and `normalise_body` set.
#[derive(Clone)]
enum Fingerprinting {
    /// Neither set: [`default_fingerprint`], or in the `ConflictWithHash` mode the body
    /// hash of [`normalise_json`].
    Unset,
    /// A function of the head and body.
    Request(Arc<FingerprintFn>),
    /// SHA-256 of the normalised body alone.
    Body(Arc<NormaliseFn>),
}

struct Config {
    idempotency: Idempotency,
    methods: Vec<Method>,
    require_key: bool,
    identity: Arc<IdentityFn>,
    fingerprint: Fingerprinting,
    request_limit: usize,
    response_limit: usize,
    mismatch: MismatchStatus,
    wait_in_progress: Option<Duration>,
    in_progress_retry_after: Duration,
    fail_open: bool,
    abandon_server_errors: bool,
}

/// A tower [`Layer`] that makes the routes it wraps idempotent: a request carrying an
/// `Idempotency-Key` runs its handler once; retries get the stored response back.
///
/// | situation | answer (defaults) | problem `type` name |
/// |---|---|---|
/// | method not guarded (guarded: POST, PATCH) | passed through | |
/// | no key | passed through; 400 with [`require_key`](Self::require_key) | `idempotency-key-missing` |
/// | key not an sf-string or bare token of 1–255 visible characters | 400 | `idempotency-key-malformed` |
/// | request body over [`request_limit`](Self::request_limit) (1 MiB) | 413 | `request-too-large` |
/// | first request | runs; its response (status, headers, body) is stored — errors too | |
/// | retry after completion | the stored response, with `Idempotent-Replayed: true` | |
/// | retry while the first runs | 409 with `Retry-After` ([`in_progress_retry_after`](Self::in_progress_retry_after), 1 s), or wait and replay with [`wait_in_progress`](Self::wait_in_progress) | `request-in-progress` |
/// | same key, different request | 422, or 409 + the first request's hash with [`MismatchStatus::ConflictWithHash`] | `idempotency-key-reused` |
/// | store unreachable | 503 with `Retry-After: 1`, or run unprotected with [`fail_open`](Self::fail_open) | `idempotency-store-unavailable` |
/// | response over [`response_limit`](Self::response_limit) | 500, not stored | `response-not-stored` |
///
/// Error answers are the library's problem details (`application/problem+json`, RFC 9457):
/// `type` is `https://docs.rs/distlock-api/latest/distlock_api/http/#` and the name above,
/// with `title`, `status` and `detail`; every type is listed in `distlock::http`. No
/// answer carries the key, a fingerprint or a hash, except `existing_hash` in the
/// [`ConflictWithHash`](MismatchStatus::ConflictWithHash) mode.
///
/// **Scope.** The record's key is a SHA-256 of the caller's [identity](Self::identity)
/// (by default the `Authorization` header), the method, the route (axum's
/// [`MatchedPath`] when the layer is added with `Router::route_layer`, else the path) and
/// the client's key: one caller can never read another's responses. When the fingerprint
/// is a body hash (below), the request's path and query join the scope: a body alone
/// cannot tell `/splits/1/finalize` from `/splits/2/finalize`, so each keeps its own
/// record.
///
/// **Fingerprint.** By default SHA-256 over the method, path, query, `Content-Type` and
/// body ([`default_fingerprint`]). A *body hash*, the SHA-256 of the normalised body
/// alone, with [`normalise_body`](Self::normalise_body) (e.g. [`normalise_json`]: key
/// order and whitespace ignored) — and by default in the
/// [`ConflictWithHash`](MismatchStatus::ConflictWithHash) mode. Any function of the
/// request's head and body with [`fingerprint`](Self::fingerprint).
///
/// ```
/// use std::sync::Arc;
/// use axum::{routing::post, Router};
/// use distlock::idempotency::{Idempotency, IdempotencyLayer};
/// use distlock::memory::MemoryIdempotencyStore;
///
/// let idem = Idempotency::new(Arc::new(MemoryIdempotencyStore::new()));
/// let app: Router = Router::new()
///     .route("/orders", post(|| async { "created" }))
///     .route_layer(
///         IdempotencyLayer::new(idem)
///             .require_key(true)
///             .identity(|req| req.headers.get("x-user-id")?.to_str().ok().map(str::to_owned)),
///     );
/// ```
///
/// A handler whose request is dropped half-way (the client went away) leaves its claim to
/// lapse after the lease; the next retry then runs it.
#[derive(Clone)]
pub struct IdempotencyLayer {
    config: Arc<Config>,
}

impl fmt::Debug for IdempotencyLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        f.debug_struct("IdempotencyLayer")
            .field("idempotency", &c.idempotency)
            .field("methods", &c.methods)
            .field("require_key", &c.require_key)
            .field("mismatch", &c.mismatch)
            .field("fingerprint", &c.fingerprint)
            .finish_non_exhaustive()
    }
}

impl IdempotencyLayer {
    /// The layer with the defaults of the table above.
    pub fn new(idempotency: Idempotency) -> Self {
        Self {
            config: Arc::new(Config {
                idempotency,
                methods: vec![Method::POST, Method::PATCH],
                require_key: false,
                identity: Arc::new(|parts: &Parts| {
                    parts.headers.get(header::AUTHORIZATION).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                }),
                fingerprint: Fingerprinting::Unset,
                request_limit: 1 << 20,
                response_limit: 1 << 20,
                mismatch: MismatchStatus::default(),
                wait_in_progress: None,
                in_progress_retry_after: ProblemType::REQUEST_IN_PROGRESS
                    .retry_after()
                    .unwrap_or(Duration::from_secs(1)),
                fail_open: false,
                abandon_server_errors: false,
            }),
        }
    }

    fn with(mut self, change: impl FnOnce(&mut Config)) -> Self {
        // Settings are made before the layer is shared, so this rarely copies.
        if let Some(config) = Arc::get_mut(&mut self.config) {
            change(config);
            return self;
        }
        let c = &self.config;
        let mut config = Config {
            idempotency: c.idempotency.clone(),
            methods: c.methods.clone(),
            identity: Arc::clone(&c.identity),
            fingerprint: c.fingerprint.clone(),
            ..**c
        };
        change(&mut config);
        Self { config: Arc::new(config) }
    }

    /// The methods guarded (default POST and PATCH); others pass through.
    #[must_use]
    pub fn methods(self, methods: impl IntoIterator<Item = Method>) -> Self {
        let methods = methods.into_iter().collect();
        self.with(|c| c.methods = methods)
    }

    /// Whether a guarded request without a key is refused with 400 (default: passed
    /// through, not protected).
    #[must_use]
    pub fn require_key(self, require: bool) -> Self {
        self.with(|c| c.require_key = require)
    }

    /// The caller's identity, part of every record's scope (default: the
    /// `Authorization` header's value). `None` is "anonymous", one shared scope.
    #[must_use]
    pub fn identity(self, identity: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static) -> Self {
        self.with(|c| c.identity = Arc::new(identity))
    }

    /// Fingerprint requests with any function of their head and body, replacing
    /// [`normalise_body`](Self::normalise_body). Defaults to [`default_fingerprint`], and
    /// to a body hash in the [`ConflictWithHash`](MismatchStatus::ConflictWithHash) mode,
    /// whose answer then carries this function's value instead.
    #[must_use]
    pub fn fingerprint(self, fingerprint: impl Fn(&Parts, &[u8]) -> Fingerprint + Send + Sync + 'static) -> Self {
        self.with(|c| c.fingerprint = Fingerprinting::Request(Arc::new(fingerprint)))
    }

    /// Fingerprint each request by its body alone: the SHA-256 of `normalise(body)`
    /// ([`Fingerprint::of_body`]), leaving out method, path, query and headers; replaces
    /// [`fingerprint`](Self::fingerprint). Bodies that normalise to the same bytes are the
    /// same request, and the hash is what `sha256sum` prints for the normalised text —
    /// what a client can compute, and what the
    /// [`ConflictWithHash`](MismatchStatus::ConflictWithHash) answer carries. The record
    /// is then scoped to the request's path and query as well (see the type's docs).
    ///
    /// `normalise` returns the bytes to hash; for a body it cannot read, return the body
    /// unchanged and let the handler refuse it (its answer is stored like any other).
    /// Defaults to [`normalise_json`] in the `ConflictWithHash` mode.
    ///
    /// An application's own normalisation, say of a split that lists its new pallets, each
    /// with a temporary id and package ids: pallets sorted by temporary id, package ids
    /// ascending, each pallet written as `{temp_id, packages}` in that field order, as
    /// compact JSON (what JavaScript's `JSON.stringify` writes), then SHA-256:
    ///
    /// ```
    /// use std::sync::Arc;
    /// use distlock::idempotency::{Fingerprint, Idempotency, IdempotencyLayer, MismatchStatus};
    /// use distlock::memory::MemoryIdempotencyStore;
    /// use serde_json::Value;
    ///
    /// fn pallet_spec(body: &[u8]) -> Vec<u8> {
    ///     let pallets = serde_json::from_slice::<Value>(body).ok().and_then(|request| {
    ///         let pallets = request.get("pallets")?.as_array()?.iter().map(|pallet| {
    ///             let temp_id = pallet.get("temp_id")?.as_str()?.to_owned();
    ///             let packages = pallet.get("packages")?.as_array()?.iter().map(Value::as_u64);
    ///             Some((temp_id, packages.collect::<Option<Vec<u64>>>()?))
    ///         });
    ///         pallets.collect::<Option<Vec<_>>>()
    ///     });
    ///     let Some(mut pallets) = pallets else { return body.to_vec() }; // the handler answers 400
    ///     pallets.sort_by(|a, b| a.0.cmp(&b.0));
    ///     let pallets: Vec<String> = pallets
    ///         .into_iter()
    ///         .map(|(temp_id, mut packages)| {
    ///             packages.sort_unstable();
    ///             // Written out: the fields in this order, not sorted as serde_json's maps are.
    ///             format!(r#"{{"temp_id":{},"packages":{}}}"#, Value::from(temp_id), Value::from(packages))
    ///         })
    ///         .collect();
    ///     format!("[{}]", pallets.join(",")).into_bytes()
    /// }
    ///
    /// let body = br#"{"pallets": [
    ///     {"temp_id": "T2", "packages": [1042, 1007], "label": "fragile"},
    ///     {"packages": [1013, 1001, 1005], "temp_id": "T1"}
    /// ]}"#;
    /// let normalised = r#"[{"temp_id":"T1","packages":[1001,1005,1013]},{"temp_id":"T2","packages":[1007,1042]}]"#;
    /// assert_eq!(pallet_spec(body), normalised.as_bytes());
    /// // printf '%s' "$normalised" | sha256sum
    /// let hash = "9a441cc8d0f48d22c89ac5136e263040f590b081531dd7758be20e883371efdc";
    /// assert_eq!(Fingerprint::of_body(&pallet_spec(body)).to_hex(), hash);
    ///
    /// let idem = Idempotency::new(Arc::new(MemoryIdempotencyStore::new()));
    /// let layer = IdempotencyLayer::new(idem).normalise_body(pallet_spec).mismatch(MismatchStatus::ConflictWithHash);
    /// # drop(layer);
    /// ```
    #[must_use]
    pub fn normalise_body(self, normalise: impl Fn(&[u8]) -> Vec<u8> + Send + Sync + 'static) -> Self {
        self.with(|c| c.fingerprint = Fingerprinting::Body(Arc::new(normalise)))
    }

    /// The largest request body read, in bytes (default 1 MiB); larger → 413.
    #[must_use]
    pub fn request_limit(self, bytes: usize) -> Self {
        self.with(|c| c.request_limit = bytes)
    }

    /// The largest response body stored, in bytes (default 1 MiB). A larger response is
    /// answered with a 500 problem, not stored, and its claim is abandoned (retries run
    /// again): set the limit above the responses of the routes you guard.
    #[must_use]
    pub fn response_limit(self, bytes: usize) -> Self {
        self.with(|c| c.response_limit = bytes)
    }

    /// What a mismatch answers (default 422); see [`MismatchStatus`].
    #[must_use]
    pub fn mismatch(self, status: MismatchStatus) -> Self {
        self.with(|c| c.mismatch = status)
    }

    /// Instead of answering 409 at once, wait up to `max` for a running first request
    /// to finish and replay its response (default: no wait).
    #[must_use]
    pub fn wait_in_progress(self, max: Duration) -> Self {
        self.with(|c| c.wait_in_progress = Some(max))
    }

    /// The `Retry-After` of a 409 for a retry while the key's first request runs (default
    /// 1 s; sent in whole seconds, rounded up): when that request is likely done, so that
    /// the retry replays its response. Set it to the route's usual duration. It is never
    /// more than the running claim's lease has left — which is not a hint itself: the lease
    /// is how long a *crashed* first request blocks the key, not how long a running one takes.
    #[must_use]
    pub fn in_progress_retry_after(self, after: Duration) -> Self {
        self.with(|c| c.in_progress_retry_after = after)
    }

    /// When the store fails, run the handler unprotected instead of answering 503
    /// (default off: fail closed).
    #[must_use]
    pub fn fail_open(self, fail_open: bool) -> Self {
        self.with(|c| c.fail_open = fail_open)
    }

    /// Do not store 5xx responses: abandon the claim so the next retry runs again
    /// (default off: every final response is stored, as the draft and Stripe do).
    #[must_use]
    pub fn abandon_server_errors(self, abandon: bool) -> Self {
        self.with(|c| c.abandon_server_errors = abandon)
    }
}

impl<S> Layer<S> for IdempotencyLayer {
    type Service = IdempotencyService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotencyService { inner, config: Arc::clone(&self.config) }
    }
}

/// The service made by [`IdempotencyLayer`].
#[derive(Clone)]
pub struct IdempotencyService<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> fmt::Debug for IdempotencyService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyService").finish_non_exhaustive()
    }
}

/// SHA-256 over the method, path, query, `Content-Type` and body: the layer's default.
pub fn default_fingerprint(parts: &Parts, body: &[u8]) -> Fingerprint {
    let content_type = parts.headers.get(header::CONTENT_TYPE).map_or(&b""[..], HeaderValue::as_bytes);
    Fingerprint::of_parts(&[
        parts.method.as_str().as_bytes(),
        parts.uri.path().as_bytes(),
        parts.uri.query().unwrap_or("").as_bytes(),
        content_type,
        body,
    ])
}

impl fmt::Debug for Fingerprinting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Unset => "Unset",
            Self::Request(_) => "Request(..)",
            Self::Body(_) => "Body(..)",
        })
    }
}

impl Fingerprinting {
    /// The request's fingerprint, and whether it hashes the body alone.
    fn of(&self, mismatch: MismatchStatus, parts: &Parts, body: &[u8]) -> (Fingerprint, bool) {
        match (self, mismatch) {
            (Self::Request(fingerprint), _) => (fingerprint(parts, body), false),
            (Self::Body(normalise), _) => (Fingerprint::of_body(&normalise(body)), true),
            (Self::Unset, MismatchStatus::ConflictWithHash) => (Fingerprint::of_body(&normalise_json(body)), true),
            (Self::Unset, MismatchStatus::UnprocessableContent) => (default_fingerprint(parts, body), false),
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> Service<Request<Body>> for IdempotencyService<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let ready = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, ready);
        let config = Arc::clone(&self.config);
        Box::pin(async move { Ok(handle(config, inner, request).await) })
    }
}

async fn handle<S>(config: Arc<Config>, mut inner: S, request: Request<Body>) -> Response<Body>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    if !config.methods.contains(request.method()) {
        return run(&mut inner, request).await;
    }
    let mut values = request.headers().get_all(&IDEMPOTENCY_KEY).iter();
    let client_key = match (values.next(), values.next()) {
        (None, _) if config.require_key => {
            return problem(
                ProblemType::IDEMPOTENCY_KEY_MISSING,
                StatusCode::BAD_REQUEST,
                "this operation requires an Idempotency-Key header",
            )
        }
        (None, _) => return run(&mut inner, request).await,
        (Some(value), None) => parse_key(value.as_bytes()),
        (Some(_), Some(_)) => None,
    };
    let Some(client_key) = client_key else {
        return problem(
            ProblemType::IDEMPOTENCY_KEY_MALFORMED,
            StatusCode::BAD_REQUEST,
            "the Idempotency-Key header must be one string of 1-255 visible ASCII characters",
        );
    };
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, config.request_limit).await else {
        return problem(
            ProblemType::REQUEST_TOO_LARGE,
            StatusCode::PAYLOAD_TOO_LARGE,
            "the request body exceeds the limit",
        );
    };
    let (fingerprint, body_only) = config.fingerprint.of(config.mismatch, &parts, &body);
    let key = scope_key(&config, &parts, &client_key, body_only);
    let started = tokio::time::Instant::now();
    loop {
        let claim = match config.idempotency.claim(&key, fingerprint).await {
            Ok(claim) => claim,
            Err(error) => {
                tracing::warn!(error = &error as &dyn std::error::Error, "idempotency store failed");
                if config.fail_open {
                    return run(&mut inner, Request::from_parts(parts, Body::from(body))).await;
                }
                return problem(
                    ProblemType::IDEMPOTENCY_STORE_UNAVAILABLE,
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the idempotency store is unavailable; the request was not run",
                );
            }
        };
        return match claim {
            Claim::Started(handle) => {
                first_run(&config, &mut inner, Request::from_parts(parts, Body::from(body)), handle).await
            }
            Claim::Replay(stored) => replay(stored),
            Claim::InProgress { retry_after } => {
                if let Some(max) = config.wait_in_progress {
                    let waited = started.elapsed();
                    if waited < max {
                        let pause =
                            retry_after.min(max - waited).clamp(Duration::from_millis(1), Duration::from_millis(25));
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                }
                in_progress(config.in_progress_retry_after, retry_after)
            }
            Claim::Mismatch { stored } => mismatch(config.mismatch, stored),
        };
    }
}

/// The record's key: SHA-256 of identity, method, route and the client's key, and of the
/// path and query when the fingerprint hashes the body alone (and so cannot tell one
/// resource of a route from another). The 64 hex digits alone: the store adds its own
/// namespace.
fn scope_key(config: &Config, parts: &Parts, client_key: &str, body_only: bool) -> IdempotencyKey {
    let identity = (config.identity)(parts);
    let route = parts.extensions.get::<MatchedPath>().map_or(parts.uri.path(), MatchedPath::as_str);
    let mut scope = vec![
        identity.as_deref().map_or(&b"\0anonymous"[..], str::as_bytes),
        parts.method.as_str().as_bytes(),
        route.as_bytes(),
        client_key.as_bytes(),
    ];
    if body_only {
        scope.push(parts.uri.path_and_query().map_or(parts.uri.path(), PathAndQuery::as_str).as_bytes());
    }
    let digest = Fingerprint::of_parts(&scope).to_hex();
    match IdempotencyKey::new(digest) {
        Ok(key) => key,
        Err(never) => unreachable!("64 hex digits are a valid key: {never}"),
    }
}

async fn run<S>(inner: &mut S, request: Request<Body>) -> Response<Body>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    match inner.call(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// Headers not stored: they describe one transfer, not the response.
fn stored_header(name: &HeaderName) -> bool {
    ![header::CONNECTION, header::TRANSFER_ENCODING, header::CONTENT_LENGTH, header::DATE, header::SET_COOKIE]
        .contains(name)
}

async fn first_run<S>(config: &Config, inner: &mut S, request: Request<Body>, claim: ClaimHandle) -> Response<Body>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    let response = run(inner, request).await;
    let (parts, body) = response.into_parts();
    let body = match axum::body::to_bytes(body, config.response_limit).await {
        Ok(body) => body,
        Err(_) => {
            tracing::warn!("response body over the idempotency response limit or failed; not stored, claim abandoned");
            let _ = claim.abandon().await;
            return problem(
                ProblemType::RESPONSE_NOT_STORED,
                StatusCode::INTERNAL_SERVER_ERROR,
                "the response could not be read whole",
            );
        }
    };
    if config.abandon_server_errors && parts.status.is_server_error() {
        if let Err(error) = claim.abandon().await {
            tracing::warn!(error = &error as &dyn std::error::Error, "could not abandon an idempotency claim");
        }
        return Response::from_parts(parts, Body::from(body));
    }
    let stored = StoredResponse {
        status: parts.status.as_u16(),
        headers: parts
            .headers
            .iter()
            .filter(|(name, _)| stored_header(name))
            .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
            .collect(),
        body: body.to_vec(),
    };
    if let Err(error) = claim.complete(&stored).await {
        tracing::warn!(error = &error as &dyn std::error::Error, "could not store an idempotent response");
    }
    Response::from_parts(parts, Body::from(body))
}

fn replay(stored: StoredResponse) -> Response<Body> {
    let mut response = Response::new(Body::from(Bytes::from(stored.body)));
    *response.status_mut() = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers: &mut HeaderMap = response.headers_mut();
    for (name, value) in stored.headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::from_bytes(&value)) {
            headers.append(name, value);
        }
    }
    headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    response
}

/// A retry while the first request runs: `Retry-After` is `hint`, capped by the running
/// claim's `lease_left` (see [`IdempotencyLayer::in_progress_retry_after`]).
fn in_progress(hint: Duration, lease_left: Duration) -> Response<Body> {
    Problem::new(
        ProblemType::REQUEST_IN_PROGRESS,
        StatusCode::CONFLICT,
        "a request with this Idempotency-Key is still being processed; retry later",
    )
    .retry_after(Some(hint.min(lease_left)))
    .into_response()
}

/// `stored` is the fingerprint the store kept from the key's first request: answered
/// only in the `ConflictWithHash` mode.
fn mismatch(status: MismatchStatus, stored: Fingerprint) -> Response<Body> {
    let kind = ProblemType::IDEMPOTENCY_KEY_REUSED;
    match status {
        MismatchStatus::ConflictWithHash => Problem::new(
            kind,
            StatusCode::CONFLICT,
            "this Idempotency-Key was used for a different request, whose hash is existing_hash",
        )
        .with("existing_hash", stored.to_hex())
        .into_response(),
        MismatchStatus::UnprocessableContent => {
            problem(kind, StatusCode::UNPROCESSABLE_ENTITY, "this Idempotency-Key was used for a different request")
        }
    }
}

/// An answer in the library's problem-details format.
fn problem(kind: ProblemType, status: StatusCode, detail: &str) -> Response<Body> {
    Problem::new(kind, status, detail).into_response()
}
