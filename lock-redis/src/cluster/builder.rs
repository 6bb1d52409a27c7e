//! Making a [`RedisClusterStore`]: the shared settings, refused with a notification
//! client (a Cluster subscribes on its own connections).

use distlock_api::LockError;

use crate::builder::RedisClusterStoreBuilder;
use crate::cluster::RedisClusterStore;

impl RedisClusterStoreBuilder {
    /// Connects to the Cluster at `url` (`redis+cluster://host:port[,host:port…]`) with
    /// these settings; see [`RedisClusterStore::connect`] for the URL, the Cluster's
    /// defaults and the errors.
    ///
    /// # Errors
    ///
    /// As [`RedisClusterStore::connect`], and [`LockError::Config`] when the URL
    /// contradicts the builder or it was given a
    /// [`notification_client`](Self::notification_client) (a Cluster subscribes on its
    /// own connections).
    pub async fn connect(self, url: &str) -> Result<RedisClusterStore, LockError> {
        if self.notification_client.is_some() {
            return Err(LockError::Config {
                message: "a Redis Cluster store subscribes on its own connections: `notification_client` is for \
                          `RedisLockStoreBuilder::build`"
                    .to_owned(),
            });
        }
        RedisClusterStore::connect_with(self, url).await
    }
}
