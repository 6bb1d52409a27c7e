//! Release notifications: one pub/sub subscriber connection per store, waking the
//! waiters of a key when a release of that key is published.
//!
//! Every release sends `PUBLISH {key_prefix}:released <redis lock key>` pipelined behind
//! its `EVALSHA` (see `RedisLockStore::release`). The waiting itself is the shared
//! [`WaiterRegistry`]: a waiter registers for its key *before* it checks (`EXISTS`) that
//! the key is still held, so a release that lands between the manager's failed attempt
//! and the registration is never slept through. This module is the listener: it keeps
//! the subscription, hands each published key to the registry, and reports the registry
//! "not listening" while it is not subscribed (starting, lost, reconnecting), so that
//! waiters sleep their whole interval: plain polling, never a busy loop, never past `max`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_api::waiters::{KeyState, WaiterRegistry, Woken};
use distlock_api::{LockError, Token};
use futures_util::StreamExt;
use redis::aio::{PubSub, PubSubSink};
use redis::{RedisResult, Value};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The subscriber's first reconnection delay; it doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How often an idle subscriber connection is checked with `PING`, so that a connection
/// silently cut by the network (no reset ever arrives) is noticed and replaced.
const HEALTH_CHECK_EVERY: Duration = Duration::from_secs(5);

/// State shared by the listener handle and the subscriber task.
struct Shared {
    client: redis::Client,
    channel: String,
    /// Waiters per Redis lock key; "listening" while the subscriber is subscribed.
    waiters: WaiterRegistry,
    connect_timeout: Duration,
    response_timeout: Duration,
}

impl Shared {
    /// Wakes the waiters of every key a message names: one key, or several joined by
    /// newlines (a lock-group release names all its names in one message; keys never
    /// contain control characters).
    fn dispatch(&self, message: &[u8]) {
        for redis_key in message.split(|&byte| byte == b'\n') {
            if let Ok(redis_key) = std::str::from_utf8(redis_key) {
                self.waiters.wake(redis_key);
            }
        }
    }
}

/// The store's release listener: lazily starts one subscriber task (on the first wait)
/// and restarts it if it ever ends (say its runtime was shut down).
pub(crate) struct ReleaseListener {
    shared: Arc<Shared>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl fmt::Debug for ReleaseListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReleaseListener")
            .field("channel", &self.shared.channel)
            .field("subscribed", &self.shared.waiters.is_listening())
            .field("keys_waited_on", &self.shared.waiters.waited_keys())
            .finish()
    }
}

impl Drop for ReleaseListener {
    fn drop(&mut self) {
        if let Some(task) = self.task.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }
}

impl ReleaseListener {
    pub(crate) fn new(
        client: redis::Client,
        channel: String,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Self {
        let shared = Shared { client, channel, waiters: WaiterRegistry::new(), connect_timeout, response_timeout };
        Self { shared: Arc::new(shared), task: Mutex::default() }
    }

    fn ensure_started(&self) {
        let mut task = self.task.lock().unwrap_or_else(|e| e.into_inner());
        if task.as_ref().is_none_or(JoinHandle::is_finished) {
            *task = Some(tokio::spawn(subscriber(Arc::clone(&self.shared))));
        }
    }

    /// The registry of waiters, for waits on several keys at once (lock groups); starts
    /// the subscriber if it is not running.
    pub(crate) fn registry(&self) -> &WaiterRegistry {
        self.ensure_started();
        &self.shared.waiters
    }

    /// Waits until one of `keys` is woken (a published release or hand-over naming it,
    /// or `still_held` reporting the lock free), the subscription changes, or `max` runs
    /// out; see [`WaiterRegistry::wait_any`]. `keys` are a Redis lock key, and for a
    /// queued waiter also its [`turn_key`].
    ///
    /// `still_held` is asked once, after this waiter is registered and the subscriber is
    /// subscribed: a release before that point is seen by it, a release after it is
    /// published to a subscription that already exists.
    pub(crate) async fn wait<F, Fut>(&self, keys: &[&str], max: Duration, still_held: F) -> Result<Woken, LockError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<bool, LockError>>,
    {
        self.ensure_started();
        let check = || async {
            // Redis does not publish expiry: the caller's `max` bounds the wait.
            Ok(if still_held().await? { KeyState::Held { expires_in: None } } else { KeyState::Free })
        };
        self.shared.waiters.wait_any(keys, max, check).await
    }
}

/// What a hand-over publishes (`lib/queue.lua`) and what the waiter it hands the lock to
/// registers for besides the lock key: the Redis lock key and the waiter's token joined
/// by a tab (neither contains control characters). A hand-over wakes that one waiter; the
/// others of the key sleep on, as the lock is not free for them.
pub(crate) fn turn_key(redis_key: &str, token: &Token) -> String {
    format!("{redis_key}\t{}", token.as_str())
}

/// Marks the subscription down when the subscriber task ends, however it ends.
struct MarkDownOnExit(Arc<Shared>);

impl Drop for MarkDownOnExit {
    fn drop(&mut self) {
        self.0.waiters.set_listening(false);
    }
}

/// The subscriber task: connect, `SUBSCRIBE`, dispatch messages; on any failure mark the
/// subscription down and reconnect with back-off.
async fn subscriber(shared: Arc<Shared>) {
    let _mark_down = MarkDownOnExit(Arc::clone(&shared));
    let mut backoff = MIN_BACKOFF;
    loop {
        match subscribe(&shared).await {
            Ok(pubsub) => {
                backoff = MIN_BACKOFF;
                shared.waiters.set_listening(true);
                tracing::debug!(channel = %shared.channel, "release subscriber subscribed");
                let ended = listen(&shared, pubsub).await;
                shared.waiters.set_listening(false);
                tracing::debug!(channel = %shared.channel, reason = ended, "release subscriber lost; waiters poll");
            }
            Err(err) => {
                tracing::debug!(
                    channel = %shared.channel,
                    error = &err as &dyn std::error::Error,
                    "release subscriber could not subscribe; waiters poll"
                );
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn subscribe(shared: &Shared) -> RedisResult<PubSub> {
    let attempt = async {
        let mut pubsub = shared.client.get_async_pubsub().await?;
        pubsub.subscribe(&shared.channel).await?;
        Ok(pubsub)
    };
    match tokio::time::timeout(shared.connect_timeout.saturating_add(shared.response_timeout), attempt).await {
        Ok(result) => result,
        Err(_) => Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "subscribing to release notifications timed out",
        ))),
    }
}

type Ping = Pin<Box<dyn Future<Output = bool> + Send>>;

/// Dispatches messages until the connection is lost; returns why it ended.
async fn listen(shared: &Shared, pubsub: PubSub) -> &'static str {
    let (sink, mut messages) = pubsub.split();
    let mut health = tokio::time::interval_at(Instant::now() + HEALTH_CHECK_EVERY, HEALTH_CHECK_EVERY);
    let mut ping: Option<Ping> = None;
    loop {
        tokio::select! {
            message = messages.next() => match message {
                Some(message) => shared.dispatch(message.get_payload_bytes()),
                None => return "connection closed",
            },
            _ = health.tick(), if ping.is_none() => {
                ping = Some(health_check(sink.clone(), shared.response_timeout));
            }
            healthy = async { match ping.as_mut() { Some(ping) => ping.await, None => std::future::pending().await } }, if ping.is_some() => {
                ping = None;
                if !healthy {
                    return "no answer to PING";
                }
            }
        }
    }
}

fn health_check(mut sink: PubSubSink, timeout: Duration) -> Ping {
    Box::pin(async move { matches!(tokio::time::timeout(timeout, sink.ping::<Value>()).await, Ok(Ok(_))) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener() -> ReleaseListener {
        let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
        ReleaseListener::new(client, "p:released".to_owned(), Duration::from_secs(1), Duration::from_secs(1))
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreachable_subscriber_makes_waits_plain_sleeps_of_max() {
        let listener = listener();
        let started = Instant::now();
        let woken = listener.wait(&["p:lock:a"], Duration::from_secs(3), || async { Ok(true) }).await;
        assert_eq!(woken.unwrap(), Woken::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(3), "neither early nor late");
        assert!(!listener.shared.waiters.is_listening());
        assert_eq!(listener.shared.waiters.waited_keys(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_naming_several_keys_wakes_the_waiters_of_each() {
        let listener = listener();
        let shared = Arc::clone(&listener.shared);
        shared.waiters.set_listening(true);
        for (i, key) in ["p:group:{a}", "p:group:{b}"].into_iter().enumerate() {
            let keys = [key];
            let wait = shared
                .waiters
                .wait_any(&keys, Duration::from_secs(60), || async { Ok(KeyState::Held { expires_in: None }) });
            let publish = async {
                // The wait registers and checks before the (paused) clock moves.
                tokio::time::sleep(Duration::from_secs(1)).await;
                shared.dispatch(format!("p:group:{{x}}\np:group:{{a}}\np:group:{{b}}\n{i}").as_bytes());
            };
            let (woken, ()) = tokio::join!(wait, publish);
            assert_eq!(woken.unwrap(), Woken::Notified, "{key}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn huge_timeouts_saturate() {
        let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
        let listener = ReleaseListener::new(client, "p:released".to_owned(), Duration::MAX, Duration::MAX);
        let woken = listener.wait(&["p:lock:a"], Duration::from_secs(3), || async { Ok(true) }).await;
        assert_eq!(woken.unwrap(), Woken::TimedOut);
        // The subscriber task is still trying (it did not panic on the sum of the timeouts).
        assert!(listener.task.lock().unwrap().as_ref().is_some_and(|task| !task.is_finished()));
    }
}
