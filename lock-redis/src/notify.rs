//! Release notifications: one pub/sub subscriber connection per store, waking the
//! waiters of a key when a release of that key is published.
//!
//! Every release sends `PUBLISH {key_prefix}:released <redis lock key>` pipelined behind
//! its `EVALSHA` (see `RedisLockStore::release`). A waiter registers itself for its key
//! *before* it checks (`EXISTS`) that the key is still held, so a release that lands
//! between the manager's failed attempt and the registration is never slept through.
//! While the subscriber is not subscribed (starting, lost, reconnecting) waiters sleep
//! their whole interval: plain polling, never a busy loop, never past `max`.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{PubSub, PubSubSink};
use redis::{RedisResult, Value};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The subscriber's first reconnection delay; it doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How often an idle subscriber connection is checked with `PING`, so that a connection
/// silently cut by the network (no reset ever arrives) is noticed and replaced.
const HEALTH_CHECK_EVERY: Duration = Duration::from_secs(5);

/// Whether the subscriber is subscribed, and a number bumped on every change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Subscription {
    live: bool,
    epoch: u64,
}

/// State shared by the listener handle(s) and the subscriber task.
struct Shared {
    client: redis::Client,
    channel: String,
    /// Waiters per Redis lock key. An entry lives exactly as long as someone waits on it.
    waiters: Mutex<HashMap<String, Arc<Notify>>>,
    subscription: watch::Sender<Subscription>,
    connection_timeout: Duration,
    response_timeout: Duration,
}

impl Shared {
    fn set_live(&self, live: bool) {
        self.subscription.send_modify(|s| {
            if s.live != live {
                s.live = live;
                s.epoch += 1;
            }
        });
    }

    fn dispatch(&self, redis_key: &[u8]) {
        let Ok(redis_key) = std::str::from_utf8(redis_key) else { return };
        if let Some(notify) = self.waiters.lock().unwrap_or_else(|e| e.into_inner()).get(redis_key) {
            notify.notify_waiters();
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
        let subscription = *self.shared.subscription.borrow();
        f.debug_struct("ReleaseListener")
            .field("channel", &self.shared.channel)
            .field("subscribed", &subscription.live)
            .field("keys_waited_on", &self.waited_keys())
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

/// How a wait ended (for tests and tracing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// A release of the key was published.
    Notified,
    /// The key was already free when the waiter looked.
    AlreadyFree,
    /// The subscription dropped or came back: messages may have been missed, look again.
    SubscriptionChanged,
    /// `max` ran out (also when the subscriber was not subscribed: a plain sleep).
    TimedOut,
}

impl ReleaseListener {
    pub(crate) fn new(
        client: redis::Client,
        channel: String,
        connection_timeout: Duration,
        response_timeout: Duration,
    ) -> Self {
        let shared = Shared {
            client,
            channel,
            waiters: Mutex::default(),
            subscription: watch::channel(Subscription { live: false, epoch: 0 }).0,
            connection_timeout,
            response_timeout,
        };
        Self { shared: Arc::new(shared), task: Mutex::default() }
    }

    /// How many keys have waiters registered (the map never outgrows the live waits).
    pub(crate) fn waited_keys(&self) -> usize {
        self.shared.waiters.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn ensure_started(&self) {
        let mut task = self.task.lock().unwrap_or_else(|e| e.into_inner());
        if task.as_ref().is_none_or(JoinHandle::is_finished) {
            *task = Some(tokio::spawn(subscriber(Arc::clone(&self.shared))));
        }
    }

    fn register(&self, redis_key: &str) -> Registration {
        let mut waiters = self.shared.waiters.lock().unwrap_or_else(|e| e.into_inner());
        let notify = Arc::clone(waiters.entry(redis_key.to_owned()).or_default());
        Registration { shared: Arc::clone(&self.shared), redis_key: redis_key.to_owned(), notify: Some(notify) }
    }

    /// Waits until `redis_key` is released (a published release or `still_held`
    /// reporting it free), the subscription changes, or `max` runs out.
    ///
    /// `still_held` is asked once, after this waiter is registered and the subscriber is
    /// subscribed: a release before that point is seen by it, a release after it is
    /// published to a subscription that already exists.
    pub(crate) async fn wait<F, Fut, E>(&self, redis_key: &str, max: Duration, still_held: F) -> Result<Woken, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<bool, E>>,
    {
        let deadline = Instant::now() + max;
        self.ensure_started();
        let registration = self.register(redis_key);
        let notify = Arc::clone(registration.notify());
        let released = notify.notified();
        tokio::pin!(released);
        released.as_mut().enable();

        let mut subscription = self.shared.subscription.subscribe();
        // Until the subscriber is subscribed no release would reach this waiter: this
        // wait is then a plain sleep (polling), cut short if the subscription comes up.
        let epoch = match tokio::time::timeout_at(deadline, subscription.wait_for(|s| s.live)).await {
            Ok(Ok(live)) => live.epoch,
            Ok(Err(_)) | Err(_) => return Ok(Woken::TimedOut),
        };
        match tokio::time::timeout_at(deadline, still_held()).await {
            Err(_) => return Ok(Woken::TimedOut),
            Ok(Err(err)) => return Err(err),
            Ok(Ok(false)) => return Ok(Woken::AlreadyFree),
            Ok(Ok(true)) => {}
        }
        tokio::select! {
            () = &mut released => Ok(Woken::Notified),
            () = tokio::time::sleep_until(deadline) => Ok(Woken::TimedOut),
            _ = subscription.wait_for(|s| s.epoch != epoch) => Ok(Woken::SubscriptionChanged),
        }
    }
}

/// A waiter's entry in the map; removes the key's entry when its last waiter leaves.
struct Registration {
    shared: Arc<Shared>,
    redis_key: String,
    notify: Option<Arc<Notify>>,
}

impl Registration {
    fn notify(&self) -> &Arc<Notify> {
        self.notify.as_ref().expect("taken only on drop")
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut waiters = self.shared.waiters.lock().unwrap_or_else(|e| e.into_inner());
        // Counted and dropped under the lock, where every clone is made: two waiters
        // leaving at once cannot both see the other's clone and leave the entry behind.
        let notify = self.notify.take();
        if let Some(notify) = &notify {
            let is_last = Arc::strong_count(notify) == 2;
            if is_last && waiters.get(&self.redis_key).is_some_and(|entry| Arc::ptr_eq(entry, notify)) {
                waiters.remove(&self.redis_key);
            }
        }
        drop(notify);
    }
}

/// Marks the subscription down when the subscriber task ends, however it ends.
struct MarkDownOnExit(Arc<Shared>);

impl Drop for MarkDownOnExit {
    fn drop(&mut self) {
        self.0.set_live(false);
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
                shared.set_live(true);
                tracing::debug!(channel = %shared.channel, "release subscriber subscribed");
                let ended = listen(&shared, pubsub).await;
                shared.set_live(false);
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
    match tokio::time::timeout(shared.connection_timeout + shared.response_timeout, attempt).await {
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
            healthy = async { ping.as_mut().expect("guarded").await }, if ping.is_some() => {
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

    #[test]
    fn registrations_clean_up_the_map() {
        let listener = listener();
        let a1 = listener.register("p:lock:a");
        let a2 = listener.register("p:lock:a");
        let b = listener.register("p:lock:b");
        assert!(Arc::ptr_eq(a1.notify(), a2.notify()));
        assert_eq!(listener.waited_keys(), 2);
        drop(a1);
        assert_eq!(listener.waited_keys(), 2, "a still has a waiter");
        drop(a2);
        drop(b);
        assert_eq!(listener.waited_keys(), 0);
    }

    #[test]
    fn concurrent_leaves_never_leak_entries() {
        let listener = Arc::new(listener());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let listener = Arc::clone(&listener);
                std::thread::spawn(move || {
                    for _ in 0..2_000 {
                        drop(listener.register("p:lock:hot"));
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(listener.waited_keys(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreachable_subscriber_makes_waits_plain_sleeps_of_max() {
        let listener = listener();
        let started = Instant::now();
        let woken = listener.wait("p:lock:a", Duration::from_secs(3), || async { Ok::<_, ()>(true) }).await;
        assert_eq!(woken, Ok(Woken::TimedOut));
        assert_eq!(started.elapsed(), Duration::from_secs(3), "neither early nor late");
        assert!(!listener.shared.subscription.borrow().live);
        assert_eq!(listener.waited_keys(), 0);
    }
}
