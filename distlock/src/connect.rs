//! `connect(url)`: a store chosen by URL scheme.

use std::sync::Arc;

use distlock_api::{DynLockStore, LockError};

/// Connects to the store named by `url` and returns it ready to use.
///
/// | scheme | store | feature |
/// |---|---|---|
/// | `memory://` | a new, empty in-process store | `memory` (default) |
/// | `redis://`, `rediss://` | `RedisLockStore::connect` | `redis` |
/// | `postgres://`, `postgresql://` | `PostgresLockStore::connect`, then `ensure_schema()` | `postgres` |
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), distlock::LockError> {
/// let store = distlock::connect("memory://").await?;
/// assert_eq!(store.backend(), "memory");
/// let locks = distlock::LockManager::new(store);
/// # let _ = locks; Ok(()) }
/// ```
///
/// # Errors
///
/// [`LockError::Config`] for a URL without a scheme, an unknown scheme, or a scheme whose
/// Cargo feature is not enabled (the message names the feature); the store's own errors
/// when connecting fails.
///
/// # Cancel safety
///
/// Cancel safe: dropping the future drops the half-made connection.
pub async fn connect(url: &str) -> Result<Arc<DynLockStore>, LockError> {
    let Some((scheme, _)) = url.split_once("://") else {
        return Err(config(format!(
            "`{}` is not a store URL: expected `memory://`, `redis://…` or `postgres://…`",
            redact(url)
        )));
    };
    match scheme.to_ascii_lowercase().as_str() {
        "memory" => memory(),
        "redis" | "rediss" => redis(url).await,
        "postgres" | "postgresql" => postgres(url).await,
        other => Err(config(format!(
            "unknown store URL scheme `{other}://`: expected `memory://`, `redis://…` or `postgres://…`"
        ))),
    }
}

fn config(message: String) -> LockError {
    LockError::Config { message }
}

/// The URL without its credentials, for error messages.
fn redact(url: &str) -> String {
    let Some(at) = url.rfind('@') else { return url.to_owned() };
    let start = url.find("://").map_or(0, |i| i + 3);
    if at < start {
        return url.to_owned();
    }
    format!("{}…{}", &url[..start], &url[at..])
}

#[cfg(feature = "memory")]
fn memory() -> Result<Arc<DynLockStore>, LockError> {
    Ok(Arc::new(distlock_memory::MemoryLockStore::new()))
}

#[cfg(not(feature = "memory"))]
fn memory() -> Result<Arc<DynLockStore>, LockError> {
    Err(not_enabled("memory", "memory://"))
}

#[cfg(feature = "redis")]
async fn redis(url: &str) -> Result<Arc<DynLockStore>, LockError> {
    Ok(Arc::new(distlock_redis::RedisLockStore::connect(url).await?))
}

#[cfg(not(feature = "redis"))]
async fn redis(_url: &str) -> Result<Arc<DynLockStore>, LockError> {
    Err(not_enabled("redis", "redis://"))
}

#[cfg(feature = "postgres")]
async fn postgres(url: &str) -> Result<Arc<DynLockStore>, LockError> {
    let store = distlock_postgres::PostgresLockStore::connect(url).await?;
    store.ensure_schema().await?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "postgres"))]
async fn postgres(_url: &str) -> Result<Arc<DynLockStore>, LockError> {
    Err(not_enabled("postgres", "postgres://"))
}

#[allow(dead_code)] // unused when every store feature is on
fn not_enabled(feature: &str, scheme: &str) -> LockError {
    config(format!("`{scheme}` URLs need the `{feature}` feature of the `distlock` crate, which is not enabled"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rejects_unknown_and_malformed_urls() {
        for url in ["", "localhost:6379", "mysql://db/x", "etcd://x"] {
            let err = connect(url).await.unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{url}: {err}");
        }
        let err = connect("zk://user:secret@host").await.unwrap_err();
        assert!(!err.to_string().contains("secret"), "{err}");
        let err = connect("user:secret@host").await.unwrap_err();
        assert!(!err.to_string().contains("secret"), "{err}");
    }

    #[tokio::test]
    async fn memory_urls_work_case_insensitively() {
        assert_eq!(connect("memory://").await.unwrap().backend(), "memory");
        assert_eq!(connect("MEMORY://").await.unwrap().backend(), "memory");
    }

    #[cfg(not(feature = "redis"))]
    #[tokio::test]
    async fn disabled_feature_is_named() {
        let err = connect("redis://127.0.0.1:6379").await.unwrap_err();
        assert!(err.to_string().contains("`redis` feature"), "{err}");
    }
}
