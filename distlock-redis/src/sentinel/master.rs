//! What the store asks of the servers beyond the single-node commands: the sentinels,
//! for the master's address, and the master, to `WAIT` for its replicas.

use std::time::Duration;

use distlock_api::{Acquire, LockError, LockStore, StoreKey, Token};

use super::config::SentinelUrl;
use crate::builder::RedisLockStoreBuilder;
use crate::commands::Failure;
use crate::single::RedisLockStore;

/// The name reported by the Sentinel store and in its errors.
pub(super) const BACKEND: &str = "redis-sentinel";

/// How long one question to one sentinel may take.
const SENTINEL_TIMEOUT: Duration = Duration::from_millis(500);

/// Asks the sentinels for the master, then connects the single-node store to it.
pub(super) async fn connect_master(
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
