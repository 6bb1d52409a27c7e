//! What the store asks of the servers beyond the single-node commands: the sentinels,
//! for the master's address (through the URL's sentinels or the application's
//! `SentinelClient`), and the master, to `WAIT` for its replicas.

use std::fmt;
use std::time::Duration;

use distlock_api::{Acquire, LockError, LockStore, StoreKey, Token};
use redis::aio::ConnectionManager;
use redis::sentinel::SentinelClient;

use super::config::SentinelUrl;
use crate::commands::Failure;
use crate::single::RedisLockStore;
use crate::single::RedisLockStoreBuilder;

/// The name reported by the Sentinel store and in its errors.
pub(super) const BACKEND: &str = "redis-sentinel";

/// How long one question to one sentinel may take.
const SENTINEL_TIMEOUT: Duration = Duration::from_millis(500);

/// Where the store learns the master's address: the sentinels of a `redis+sentinel://`
/// URL, or the application's [`SentinelClient`], which also carries the master's
/// credentials, database and TLS.
pub(super) enum MasterSource {
    Url(SentinelUrl),
    Client(tokio::sync::Mutex<SentinelClient>),
}

impl fmt::Debug for MasterSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Url(url) => f
                .debug_struct("Url")
                .field("sentinels", &url.sentinels)
                .field("master_name", &url.master_name)
                .field("wait_replicas", &url.wait_replicas)
                .finish(),
            Self::Client(_) => f.write_str("SentinelClient"),
        }
    }
}

impl MasterSource {
    /// `WAIT` for this many replicas, this long, after every acquisition (a URL's
    /// `wait_replicas`).
    pub(super) fn wait_replicas(&self) -> Option<(u32, Duration)> {
        match self {
            Self::Url(url) => url.wait_replicas,
            Self::Client(_) => None,
        }
    }

    /// The master's address and the single-node store on it, with `builder`'s settings.
    pub(super) async fn connect(&self, builder: &RedisLockStoreBuilder) -> Result<(String, RedisLockStore), LockError> {
        match self {
            Self::Url(url) => connect_master(builder, url).await,
            Self::Client(client) => {
                let master = ask_client(client, builder.connect_timeout).await?;
                connect_client(builder, master).await
            }
        }
    }

    /// [`connect`](Self::connect) when the master is no longer at `current`; `None` when
    /// it still is, or the sentinels did not answer.
    pub(super) async fn connect_if_moved(
        &self,
        builder: &RedisLockStoreBuilder,
        current: &str,
    ) -> Option<Result<(String, RedisLockStore), LockError>> {
        match self {
            Self::Url(url) => {
                let address = resolve(url).await.ok()?;
                if address == current {
                    return None;
                }
                Some(builder.clone().connect(&url.master_url(&address)).await.map(|store| (address, store)))
            }
            Self::Client(client) => {
                let master = ask_client(client, builder.connect_timeout).await.ok()?;
                if master.get_connection_info().addr().to_string() == current {
                    return None;
                }
                Some(connect_client(builder, master).await)
            }
        }
    }
}

/// The current master's client, from the application's `SentinelClient`, within `timeout`.
async fn ask_client(
    client: &tokio::sync::Mutex<SentinelClient>,
    timeout: Duration,
) -> Result<redis::Client, LockError> {
    let asked = async { client.lock().await.async_get_client().await };
    match tokio::time::timeout(timeout, asked).await {
        Ok(Ok(master)) => Ok(master),
        Ok(Err(err)) => Err(LockError::store(BACKEND, "connect", None, err)),
        Err(_) => Err(LockError::store(BACKEND, "connect", None, Failure("no sentinel answered in time".into()))),
    }
}

/// The single-node store on the master `client` points at: its connection with
/// `builder`'s settings, its subscriber from the same client, and the prefix's settings
/// recorded or checked.
async fn connect_client(
    builder: &RedisLockStoreBuilder,
    client: redis::Client,
) -> Result<(String, RedisLockStore), LockError> {
    let address = client.get_connection_info().addr().to_string();
    let conn = ConnectionManager::new_with_config(client.clone(), builder.connection_manager_config())
        .await
        .map_err(|err| LockError::store(BACKEND, "connect", None, err))?;
    let store = builder.clone().notification_client(client).build(conn)?;
    store.check_shared_settings().await?;
    Ok((address, store))
}

/// Asks the sentinels for the master, then connects the single-node store to it.
async fn connect_master(
    builder: &RedisLockStoreBuilder,
    url: &SentinelUrl,
) -> Result<(String, RedisLockStore), LockError> {
    let address = resolve(url).await?;
    let store = builder.clone().connect(&url.master_url(&address)).await?;
    Ok((address, store))
}

/// `SENTINEL GET-MASTER-ADDR-BY-NAME` on each sentinel in turn: the first answer.
pub(super) async fn resolve(url: &SentinelUrl) -> Result<String, LockError> {
    let master_name = url.master_name.as_str();
    let mut last = String::from("no sentinel answered");
    for sentinel in &url.sentinels {
        let ask = async {
            let client = redis::Client::open(format!("redis://{sentinel}"))?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(master_name)
                .query_async::<Option<(String, u16)>>(&mut conn)
                .await
        };
        match tokio::time::timeout(SENTINEL_TIMEOUT, ask).await {
            Ok(Ok(Some((host, port)))) => return Ok(format!("{host}:{port}")),
            Ok(Ok(None)) => last = format!("sentinel {sentinel} does not know the master `{master_name}`"),
            Ok(Err(err)) => last = format!("sentinel {sentinel}: {err}"),
            Err(_) => last = format!("sentinel {sentinel} did not answer in time"),
        }
    }
    Err(LockError::store(BACKEND, "connect", None, Failure(last)))
}

/// `WAIT replicas timeout` after an acquisition (with `wait_replicas`); too few
/// acknowledgements release the lease and fail the acquisition.
pub(super) async fn wait_for_replicas(
    store: &RedisLockStore,
    wait_replicas: Option<(u32, Duration)>,
    key: &StoreKey,
    token: &Token,
    acquired: Acquire,
) -> Result<Acquire, LockError> {
    let (Some((replicas, timeout)), true) = (wait_replicas, acquired.is_acquired()) else {
        return Ok(acquired);
    };
    let mut conn = store.connection_manager().clone();
    let millis = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let acked: Result<i64, _> = redis::cmd("WAIT").arg(replicas).arg(millis).query_async(&mut conn).await;
    let problem = match acked {
        Ok(acked) if acked >= i64::from(replicas) => return Ok(acquired),
        Ok(acked) => format!("only {acked} of {replicas} replicas acknowledged the lease within {timeout:?}"),
        Err(err) => format!("WAIT failed: {err}"),
    };
    let _ = store.release(key, token).await;
    Err(LockError::store(BACKEND, "acquire", Some(key.lock_key()), Failure(problem)))
}
