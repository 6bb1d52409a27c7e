//! `connect(url)`: a store chosen by URL scheme.

use std::sync::Arc;

use distlock_api::{DynLockStore, LockError};

/// Connects to the store named by `url` and returns it ready to use.
///
/// | scheme | store | feature |
/// |---|---|---|
/// | `memory://` | [`MemoryLockStore::connect`](crate::memory::MemoryLockStore::connect): a new, empty in-process store | `memory` (default) |
/// | `redis://`, `rediss://`, `valkey://`, `valkeys://`, `redis+unix://`, `valkey+unix://`, `unix://` | [`RedisLockStore::connect`](crate::redis::RedisLockStore::connect) | `redis` |
/// | `redlock://host1:port,host2:port,host3:port` (Redlock over independent masters) | `distlock_redis::RedlockStore::connect` | `redis` |
/// | `redis+cluster://host1:port,host2:port,…` (Redis Cluster, hash-tagged keys) | `distlock_redis::RedisClusterStore::connect` | `redis` |
/// | `redis+sentinel://sentinel1:26379,…/<master name>` (Sentinel, follows failovers) | `distlock_redis::RedisSentinelStore::connect` | `redis` |
/// | `postgres://`, `postgresql://` | [`PostgresLockStore::connect`](crate::postgres::PostgresLockStore::connect), then [`ensure_schema`](crate::postgres::PostgresLockStore::ensure_schema) | `postgres` |
/// | `mysql://`, `mariadb://` | `distlock_mysql::MysqlLockStore::connect`, then `ensure_schema` | `mysql` |
/// | `etcd://host:port[,host:port…]` | `distlock_etcd::EtcdLockStore::connect` | `etcd` |
/// | `sqlite:///path/to/locks.db` (one host, no server) | `distlock_sqlite::SqliteLockStore::connect`: creates the file and its tables if missing | `sqlite` |
///
/// The store's layout is part of its URL, so that every process and the `distlock` CLI
/// agree on where locks live:
///
/// - Redis: `?prefix=myapp` (keys `myapp:lock:…`; empty: `lock:…`), `?fencing=true|false`,
///   `?fences=counter|clock` (clock: restart-safe fencing numbers),
///   `?notifications=true|false`, `?fair=true|false` — see
///   [`RedisUrl`](crate::redis::RedisUrl); every Redis topology's scheme takes the same
///   parameters. Without them a single node gets the plain wire: `SET key token NX PX
///   ttl` and the compare-and-delete release script, nothing else;
/// - PostgreSQL: `?schema=`, `?table=`, `?sequence=`, `?unlogged=true|false`,
///   `?create=false` (only check the layout, for a role without DDL rights),
///   `?notifications=true|false` — see [`PostgresUrl`](crate::postgres::PostgresUrl);
/// - MySQL/MariaDB: `?table=`, `?create=false` (only check the table, for a role
///   without DDL rights), `?notifications=true|false` — see `distlock_mysql::MysqlUrl`;
/// - etcd: `?prefix=myapp` (keys `myapp/lock:…`), `?notifications=true|false`,
///   `?timeout=5s`, `?connect_timeout=5s` — see `distlock_etcd::EtcdUrl`;
/// - SQLite: `?table=`, `?notifications=true|false`, `?fair_queue=true|false`,
///   `?liveness=true|false` — see `distlock_sqlite::SqliteUrl`.
///
/// An unknown or malformed parameter is a [`LockError::Config`] naming it; nothing is
/// silently ignored. Connecting checks the server (credentials, database), so a wrong
/// password fails here rather than at the first lock.
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
/// [`LockError::Config`] before any I/O for a URL without a scheme, an unknown scheme, a
/// scheme whose Cargo feature is not enabled (the message names the feature), or an
/// unknown or malformed parameter; [`LockError::Store`] (operation `"connect"`) with
/// the server's or the network's own message when connecting fails. No error repeats
/// the URL's credentials.
///
/// # Cancel safety
///
/// Cancel safe: dropping the future drops the half-made connection.
pub async fn connect(url: &str) -> Result<Arc<DynLockStore>, LockError> {
    match backend_of(url)? {
        Backend::Memory => memory(url).await,
        Backend::Redis => redis(url).await,
        Backend::Postgres => postgres(url).await,
        Backend::Mysql => mysql(url).await,
        Backend::Etcd => etcd(url).await,
        Backend::Sqlite => sqlite(url).await,
    }
}

/// The store family a URL names.
enum Backend {
    Memory,
    Redis,
    Postgres,
    Mysql,
    Etcd,
    Sqlite,
}

fn backend_of(url: &str) -> Result<Backend, LockError> {
    const EXPECTED: &str = "expected `memory://`, `redis://…`, `postgres://…`, `mysql://…`, `etcd://…` or `sqlite://…`";
    let Some(scheme) = scheme_of(url) else {
        return Err(config(format!("not a store URL (no `scheme://` at its start): {EXPECTED}")));
    };
    match scheme.to_ascii_lowercase().as_str() {
        "memory" => Ok(Backend::Memory),
        "redis" | "rediss" | "valkey" | "valkeys" | "redis+unix" | "valkey+unix" | "unix" => Ok(Backend::Redis),
        // The scale-out Redis topologies (Redlock…), under the same feature.
        scheme if is_redis_topology(scheme) => Ok(Backend::Redis),
        "postgres" | "postgresql" => Ok(Backend::Postgres),
        "mysql" | "mariadb" => Ok(Backend::Mysql),
        "etcd" => Ok(Backend::Etcd),
        "sqlite" => Ok(Backend::Sqlite),
        other => Err(config(format!("unknown store URL scheme `{other}://`: {EXPECTED}"))),
    }
}

/// Connects to the idempotency store named by `url` (feature `idempotency`), with the
/// same schemes, parameters and errors as [`connect`]:
///
/// | scheme | store | features |
/// |---|---|---|
/// | `memory://` | a new, empty [`MemoryIdempotencyStore`](crate::idempotency::MemoryIdempotencyStore) | `idempotency` |
/// | `redis://…` | `RedisIdempotencyStore::connect`: records `{prefix}:idem:{key}` beside the locks | `idempotency`, `redis` |
/// | `postgres://…` | `PostgresIdempotencyStore::connect`, then `ensure_schema` | `idempotency`, `postgres` |
/// | `mysql://…`, `mariadb://…` | `MysqlIdempotencyStore::connect`, then `ensure_schema`: the table `distlock_idempotency` beside the locks | `idempotency`, `mysql` |
/// | `sqlite:///path/to/locks.db` | `SqliteIdempotencyStore::connect`: the table `distlock_idempotency` in the locks' file | `idempotency`, `sqlite` |
///
/// etcd keeps no idempotency records: `etcd://` is [`LockError::Unsupported`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), distlock::LockError> {
/// let store = distlock::connect_idempotency("memory://").await?;
/// let idem = distlock::idempotency::Idempotency::new(store);
/// # let _ = idem; Ok(()) }
/// ```
///
/// # Errors
///
/// As [`connect`].
#[cfg(feature = "idempotency")]
#[cfg_attr(docsrs, doc(cfg(feature = "idempotency")))]
pub async fn connect_idempotency(url: &str) -> Result<Arc<distlock_idempotency::DynIdempotencyStore>, LockError> {
    match backend_of(url)? {
        Backend::Memory => Ok(Arc::new(distlock_memory::MemoryIdempotencyStore::connect(url).await?)),
        Backend::Redis => idempotency::redis(url).await,
        Backend::Postgres => idempotency::postgres(url).await,
        Backend::Mysql => idempotency::mysql(url).await,
        Backend::Etcd => Err(LockError::Unsupported { backend: "etcd", operation: "idempotency" }),
        Backend::Sqlite => idempotency::sqlite(url).await,
    }
}

/// The idempotency stores of each URL scheme, or the error naming a missing feature.
#[cfg(feature = "idempotency")]
mod idempotency {
    use std::sync::Arc;

    use distlock_api::LockError;
    use distlock_idempotency::DynIdempotencyStore;

    #[cfg(feature = "redis")]
    pub(super) async fn redis(url: &str) -> Result<Arc<DynIdempotencyStore>, LockError> {
        Ok(Arc::new(distlock_redis::RedisIdempotencyStore::connect(url).await?))
    }

    #[cfg(not(feature = "redis"))]
    pub(super) async fn redis(_url: &str) -> Result<Arc<DynIdempotencyStore>, LockError> {
        Err(super::not_enabled("redis", "redis://"))
    }

    #[cfg(feature = "postgres")]
    pub(super) async fn postgres(url: &str) -> Result<Arc<DynIdempotencyStore>, LockError> {
        let store = distlock_postgres::PostgresIdempotencyStore::connect(url).await?;
        store.ensure_schema().await?;
        Ok(Arc::new(store))
    }

    #[cfg(not(feature = "postgres"))]
    pub(super) async fn postgres(_url: &str) -> Result<Arc<DynIdempotencyStore>, LockError> {
        Err(super::not_enabled("postgres", "postgres://"))
    }

    #[cfg(feature = "mysql")]
    pub(super) async fn mysql(url: &str) -> Result<Arc<DynIdempotencyStore>, LockError> {
        let store = distlock_mysql::MysqlIdempotencyStore::connect(url).await?;
        store.ensure_schema().await?;
        Ok(Arc::new(store))
    }

    #[cfg(not(feature = "mysql"))]
    pub(super) async fn mysql(_url: &str) -> Result<Arc<DynIdempotencyStore>, LockError> {
        Err(super::not_enabled("mysql", "mysql://"))
    }

    #[cfg(feature = "sqlite")]
    pub(super) async fn sqlite(url: &str) -> Result<Arc<DynIdempotencyStore>, LockError> {
        let store = distlock_sqlite::SqliteIdempotencyStore::connect(url).await?;
        store.ensure_schema().await?;
        Ok(Arc::new(store))
    }

    #[cfg(not(feature = "sqlite"))]
    pub(super) async fn sqlite(_url: &str) -> Result<Arc<DynIdempotencyStore>, LockError> {
        Err(super::not_enabled("sqlite", "sqlite://"))
    }
}

fn config(message: String) -> LockError {
    LockError::Config { message }
}

/// The URL's scheme, when it starts with a well-formed one followed by `://`. Only this
/// part of a URL is ever repeated in an error: the rest may hold a password.
fn scheme_of(url: &str) -> Option<&str> {
    let (scheme, rest) = url.split_once(':')?;
    let mut chars = scheme.chars();
    let well_formed = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    (well_formed && rest.starts_with("//")).then_some(scheme)
}

#[cfg(feature = "memory")]
async fn memory(url: &str) -> Result<Arc<DynLockStore>, LockError> {
    Ok(Arc::new(distlock_memory::MemoryLockStore::connect(url).await?))
}

#[cfg(not(feature = "memory"))]
async fn memory(_url: &str) -> Result<Arc<DynLockStore>, LockError> {
    Err(not_enabled("memory", "memory://"))
}

#[cfg(feature = "redis")]
async fn redis(url: &str) -> Result<Arc<DynLockStore>, LockError> {
    distlock_redis::connect_any(url).await
}

/// `redlock` and the other scale-out Redis schemes (their list lives in `distlock-redis`,
/// which is only there with the `redis` feature).
fn is_redis_topology(scheme: &str) -> bool {
    matches!(scheme, "redlock" | "redis+cluster" | "redis+sentinel")
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

#[cfg(feature = "mysql")]
async fn mysql(url: &str) -> Result<Arc<DynLockStore>, LockError> {
    let store = distlock_mysql::MysqlLockStore::connect(url).await?;
    store.ensure_schema().await?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "mysql"))]
async fn mysql(_url: &str) -> Result<Arc<DynLockStore>, LockError> {
    Err(not_enabled("mysql", "mysql://"))
}

#[cfg(feature = "etcd")]
async fn etcd(url: &str) -> Result<Arc<DynLockStore>, LockError> {
    Ok(Arc::new(distlock_etcd::EtcdLockStore::connect(url).await?))
}

#[cfg(not(feature = "etcd"))]
async fn etcd(_url: &str) -> Result<Arc<DynLockStore>, LockError> {
    Err(not_enabled("etcd", "etcd://"))
}

#[cfg(feature = "sqlite")]
async fn sqlite(url: &str) -> Result<Arc<DynLockStore>, LockError> {
    Ok(Arc::new(distlock_sqlite::SqliteLockStore::connect(url).await?))
}

#[cfg(not(feature = "sqlite"))]
async fn sqlite(_url: &str) -> Result<Arc<DynLockStore>, LockError> {
    Err(not_enabled("sqlite", "sqlite://"))
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
        for url in ["", "localhost:6379", "mongodb://db/x", "zk://x", "memory://x", "memory://?prefix=a", "redis:6379"]
        {
            let err = connect(url).await.unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{url}: {err}");
        }
    }

    #[tokio::test]
    async fn errors_never_repeat_credentials() {
        for url in [
            "zk://user:secret@host",
            "user:secret@host",
            "user:secret@host/db?next=http://x",
            "secret@host://x",
            "redis://:secret@127.0.0.1:1/0?prefix=a&bogus=1",
            "postgres://app:secret@127.0.0.1:1/db?bogus=1",
            "redis://:secret@127.0.0.1:1/0?prefix=",
            "etcd://root:secret@127.0.0.1:1?bogus=1",
            "mysql://app:secret@127.0.0.1:1/db?bogus=1",
            "mariadb://app:secret@127.0.0.1:1/db",
        ] {
            let err = connect(url).await.unwrap_err();
            assert!(!err.to_string().contains("secret"), "{url}: {err}");
            assert!(!format!("{err:?}").contains("secret"), "{url}: {err:?}");
        }
    }

    #[tokio::test]
    async fn memory_urls_work_case_insensitively() {
        assert_eq!(connect("memory://").await.unwrap().backend(), "memory");
        assert_eq!(connect("MEMORY://").await.unwrap().backend(), "memory");
        assert_eq!(connect("memory:///").await.unwrap().backend(), "memory");
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn sqlite_urls_open_a_file() {
        let dir = distlock_conformance::kit::fresh_dir("connect");
        let store = connect(&format!("sqlite://{}", dir.join("locks.db").display())).await.unwrap();
        assert_eq!(store.backend(), "sqlite");
        let err = connect("sqlite:///tmp/locks.db?tabel=x").await.unwrap_err();
        assert!(matches!(err, LockError::Config { .. }) && err.to_string().contains("`tabel`"), "{err}");
    }

    #[cfg(not(feature = "redis"))]
    #[tokio::test]
    async fn disabled_feature_is_named() {
        let err = connect("redis://127.0.0.1:6379").await.unwrap_err();
        assert!(err.to_string().contains("`redis` feature"), "{err}");
    }
}
