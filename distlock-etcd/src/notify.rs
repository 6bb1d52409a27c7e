//! Release notifications: one watch per store on its key prefix, delivering the deletes
//! (a release, a lease that expired, a waiter leaving a queue, a group hold or place
//! going) to the store's [`WaiterRegistry`].
//!
//! While the watch is healthy, waiters sleep until their key's delete arrives; while it is
//! down (connection lost, member without a leader, the watch cancelled by the server) the
//! registry makes every wait a plain sleep, so waiters poll at their retry interval, and
//! the listener reconnects in the background.

use std::sync::Mutex;
use std::time::Duration;

use distlock_api::waiters::WaiterRegistry;
use etcd_client::{Client, EventType, WatchFilterType, WatchOptions};
use tokio::task::JoinHandle;

use crate::config::Config;

/// The first pause before re-creating a failed watch; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The background task watching the store's prefix; aborted when dropped.
#[derive(Debug)]
pub(crate) struct ReleaseListener {
    task: Mutex<Option<JoinHandle<()>>>,
}

impl ReleaseListener {
    /// Starts the watch task on the current runtime.
    pub(crate) fn start(client: Client, config: Config, waiters: WaiterRegistry) -> Self {
        let task = tokio::spawn(listen(client, config, waiters));
        Self { task: Mutex::new(Some(task)) }
    }
}

impl Drop for ReleaseListener {
    fn drop(&mut self) {
        let task = self.task.get_mut().map_or_else(|poisoned| poisoned.into_inner().take(), Option::take);
        if let Some(task) = task {
            task.abort();
        }
    }
}

/// Marks the registry as not listening when the task ends, however it ends (also when
/// aborted), so no waiter sleeps on a watch that is gone.
struct MarkDownOnExit(WaiterRegistry);

impl Drop for MarkDownOnExit {
    fn drop(&mut self) {
        self.0.set_listening(false);
    }
}

async fn listen(client: Client, config: Config, waiters: WaiterRegistry) {
    let prefix = config.store_prefix();
    let _down = MarkDownOnExit(waiters.clone());
    let mut backoff = FIRST_BACKOFF;
    loop {
        match watch_once(&client, &config, &waiters).await {
            Ok(()) => tracing::debug!(prefix, "etcd release watch ended; re-creating it"),
            Err(err) => {
                tracing::warn!(prefix, error = %err, "etcd release watch failed; waiters poll until it is back")
            }
        }
        let was_up = waiters.is_listening();
        waiters.set_listening(false);
        if was_up {
            backoff = FIRST_BACKOFF;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One watch, from its creation until the stream ends or fails.
async fn watch_once(client: &Client, config: &Config, waiters: &WaiterRegistry) -> Result<(), etcd_client::Error> {
    let prefix = config.store_prefix();
    let options = WatchOptions::new().with_prefix().with_filters([WatchFilterType::NoPut]);
    let mut stream = client.watch_client().watch(prefix.as_str(), Some(options)).await?;
    while let Some(response) = stream.message().await? {
        if response.created() {
            waiters.set_listening(true);
        }
        for event in response.events() {
            if event.event_type() == EventType::Delete {
                if let Some(kv) = event.kv() {
                    let key = String::from_utf8_lossy(kv.key());
                    // A place leaving its queue wakes the waiter behind it (which waits
                    // on that place) and the plain waiters of the lock (which wait for
                    // the queue to empty, on its prefix). A group name's waiters wait on
                    // the name's prefix.
                    if let Some(queue) = config.queue_of_place(&key) {
                        waiters.wake(&key);
                        waiters.wake(&queue);
                    } else if let Some(group) = config.group_of_key(&key) {
                        waiters.wake(&group);
                    } else {
                        waiters.wake(&key);
                    }
                }
            }
        }
        if response.canceled() {
            tracing::debug!(
                prefix = prefix.as_str(),
                reason = response.cancel_reason(),
                "etcd cancelled the release watch"
            );
            return Ok(());
        }
    }
    Ok(())
}
