//! Release notifications: one `LISTEN` connection per store, dispatching to per-key waiters.
//!
//! Release is one autocommit statement that also calls `pg_notify(<channel>, key)` for the
//! row it released if a waiter flagged that lease (`waiting`; see [`sql`](crate::sql));
//! PostgreSQL delivers the notification when that statement commits, and only if it
//! released something. The store runs **one** [`PgListener`] on its own
//! connection (a private pool of one, opened with the store pool's connect options), started
//! lazily by the first [`wait_for_release`](distlock_api::LockStore::wait_for_release) and
//! stopped when the last clone of the store is dropped or the store's pool is closed.
//!
//! A waiter:
//!
//! 1. waits (at most until its deadline) for the listener to be `LISTEN`ing — while it is
//!    not (starting, or re-connecting after a lost connection), waiting is plain sleeping:
//!    the caller polls;
//! 2. registers for its key (a [`Notify`] shared by the key's waiters; the entry is
//!    removed with the last waiter, so the map only holds keys being waited for);
//! 3. only then flags the key's lease as waited for, with one statement that sets
//!    `waiting = true` on a live lease (or only reads a lease already flagged): a release
//!    that committed between the caller's failed attempt and the registration is seen
//!    there (no live lease: return at once), so it cannot be slept through; the release of
//!    a flagged lease after the registration is notified;
//! 4. sleeps until notified, until the lease would expire on its own, until the listener's
//!    state changes (a lost connection may have swallowed the notification, so the caller
//!    retries at once), or until its deadline — whichever comes first.
//!
//! The listener re-connects in the background with a back-off (50 ms doubling to 5 s).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool, PgPoolOptions};
use tokio::sync::futures::Notified;
use tokio::sync::{watch, Notify};
use tokio::task::AbortHandle;

use crate::config::Layout;

/// The first pause before re-connecting a lost listener; doubled after each failure.
const MIN_BACKOFF: Duration = Duration::from_millis(50);
/// The longest pause between attempts to re-connect the listener.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// PostgreSQL truncates identifiers (and refuses channel names) beyond 63 bytes.
const MAX_CHANNEL_LEN: usize = 63;

/// The notification channel of a lease table: `distlock:<schema>.<table>` when that fits
/// in 63 bytes, else `distlock:` and a 64-bit FNV-1a hash of `<schema>.<table>` in hex (a
/// collision between two tables only causes spurious wake-ups). Schema and table are
/// validated identifiers, so the name contains only `[A-Za-z0-9_:.]` and can be spliced
/// into SQL text as a literal.
pub(crate) fn channel_name(layout: &Layout) -> String {
    let qualified = format!("{}.{}", layout.schema.as_str(), layout.table.as_str());
    let plain = format!("distlock:{qualified}");
    if plain.len() <= MAX_CHANNEL_LEN {
        return plain;
    }
    // FNV-1a: fixed and portable, so every process (and version) derives the same name.
    let hash = qualified
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3));
    format!("distlock:{hash:016x}")
}

/// The listener of one store and its waiters. Shared by the store's clones; the listener
/// task stops when this is dropped.
#[derive(Debug)]
pub(crate) struct Notifier {
    shared: Arc<Shared>,
    task: OnceLock<AbortHandle>,
}

#[derive(Debug)]
struct Shared {
    channel: String,
    /// The store's pool: the listener copies its connect options and stops when it closes.
    pool: PgPool,
    waiters: Mutex<HashMap<String, Slot>>,
    /// `true` while the listener is `LISTEN`ing. Every change (down, or up again) bumps
    /// the version, which wakes registered waiters: they may have missed a notification.
    listening: watch::Sender<bool>,
}

#[derive(Debug)]
struct Slot {
    notify: Arc<Notify>,
    waiters: usize,
}

impl Notifier {
    pub(crate) fn new(channel: String, pool: PgPool) -> Self {
        let shared = Shared { channel, pool, waiters: Mutex::default(), listening: watch::channel(false).0 };
        Self { shared: Arc::new(shared), task: OnceLock::new() }
    }

    /// The notification channel.
    pub(crate) fn channel(&self) -> &str {
        &self.shared.channel
    }

    /// The listener's state (`true` while listening), starting the listener on first use.
    /// Must be called inside a tokio runtime.
    pub(crate) fn listening(&self) -> watch::Receiver<bool> {
        self.task.get_or_init(|| tokio::spawn(run(Arc::clone(&self.shared))).abort_handle());
        self.shared.listening.subscribe()
    }

    /// Registers a waiter for `key` (a store key); notifications for it wake
    /// [`Registration::notified`] futures from now on.
    pub(crate) fn register(&self, key: &str) -> Registration {
        let notify = {
            let mut waiters = self.shared.lock();
            let slot =
                waiters.entry(key.to_owned()).or_insert_with(|| Slot { notify: Arc::new(Notify::new()), waiters: 0 });
            slot.waiters += 1;
            Arc::clone(&slot.notify)
        };
        Registration { shared: Arc::clone(&self.shared), key: key.to_owned(), notify }
    }

    /// How many keys currently have waiters (for tests: the map must stay bounded).
    #[cfg(test)]
    fn waiting_keys(&self) -> usize {
        self.shared.lock().len()
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        if let Some(task) = self.task.get() {
            task.abort();
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes every registered waiter of `key`.
    fn dispatch(&self, key: &str) {
        if let Some(slot) = self.lock().get(key) {
            slot.notify.notify_waiters();
        }
    }
}

/// A waiter's registration for one key; dropping it unregisters (and removes the key's
/// entry with its last waiter).
#[derive(Debug)]
pub(crate) struct Registration {
    shared: Arc<Shared>,
    key: String,
    notify: Arc<Notify>,
}

impl Registration {
    /// A future completing at the next notification for the key. Call
    /// [`Notified::enable`] on it before checking the key, so that a notification
    /// arriving in between is not lost.
    pub(crate) fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut waiters = self.shared.lock();
        if let Entry::Occupied(mut slot) = waiters.entry(std::mem::take(&mut self.key)) {
            slot.get_mut().waiters -= 1;
            if slot.get().waiters == 0 {
                slot.remove();
            }
        }
    }
}

/// The listener task: `LISTEN`, dispatch notifications, and on a lost connection mark the
/// listener down and re-connect after a back-off. Ends when the store's pool is closed.
async fn run(shared: Arc<Shared>) {
    let options = &shared.pool.options();
    // A private pool of one connection (the PgListener needs a pool to connect from); it
    // does not take a connection from the store's pool.
    let listen_pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(options.get_acquire_timeout())
        .idle_timeout(None)
        .max_lifetime(None)
        .test_before_acquire(false)
        .connect_lazy_with((*shared.pool.connect_options()).clone());
    let closed = shared.pool.close_event();
    tokio::select! {
        () = listen_forever(&shared, &listen_pool) => {}
        () = closed => {}
    }
    shared.listening.send_replace(false);
    listen_pool.close().await;
    tracing::debug!(channel = %shared.channel, "release listener stopped: the store's pool was closed");
}

async fn listen_forever(shared: &Shared, listen_pool: &PgPool) {
    // LISTEN itself has no timeout of its own; a blackholed server must not hang us.
    let listen_timeout = listen_pool.options().get_acquire_timeout() * 2;
    let mut backoff = MIN_BACKOFF;
    loop {
        match tokio::time::timeout(listen_timeout, listen(listen_pool, &shared.channel)).await {
            Ok(Ok(mut listener)) => {
                shared.listening.send_replace(true);
                tracing::debug!(channel = %shared.channel, "listening for releases");
                backoff = MIN_BACKOFF;
                let lost = loop {
                    match listener.try_recv().await {
                        Ok(Some(notification)) => shared.dispatch(notification.payload()),
                        Ok(None) => break None,
                        Err(error) => break Some(error),
                    }
                };
                shared.listening.send_replace(false);
                drop(listener);
                tracing::warn!(
                    channel = %shared.channel,
                    error = lost.as_ref().map(|e| e as &dyn std::error::Error),
                    "release listener lost its connection; waiters poll until it is back"
                );
            }
            Ok(Err(error)) => {
                tracing::warn!(channel = %shared.channel, %error, ?backoff, "release listener could not LISTEN; retrying");
            }
            Err(_) => {
                tracing::warn!(channel = %shared.channel, ?backoff, "release listener timed out; retrying");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn listen(pool: &PgPool, channel: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    // We re-connect ourselves (after marking the listener down), not inside try_recv.
    listener.eager_reconnect(false);
    listener.ignore_pool_close_event(true);
    listener.listen(channel).await?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Identifier;

    fn layout(schema: &str, table: &str) -> Layout {
        Layout {
            schema: Identifier::new("schema", schema).unwrap(),
            table: Identifier::new("table", table).unwrap(),
            sequence: Identifier::new("sequence", "q").unwrap(),
            unlogged: false,
            notify: true,
        }
    }

    #[test]
    fn channel_names_fit_in_63_bytes_and_tell_tables_apart() {
        assert_eq!(channel_name(&layout("public", "distlock_locks")), "distlock:public.distlock_locks");
        let long = "n".repeat(63);
        let a = channel_name(&layout(&long, "t"));
        let b = channel_name(&layout(&long, "u"));
        let c = channel_name(&layout("t", &long));
        for name in [&a, &b, &c] {
            assert!(name.len() <= MAX_CHANNEL_LEN && name.starts_with("distlock:"), "{name}");
            assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b":._".contains(&b)), "{name}");
        }
        assert_ne!(a, b);
        assert_ne!(a, c);
        // Stable across processes and versions: the same input gives the same name.
        assert_eq!(a, channel_name(&layout(&long, "t")));
        // The longest plain name still fits unhashed.
        let fits = "x".repeat(MAX_CHANNEL_LEN - "distlock:public.".len());
        assert_eq!(channel_name(&layout("public", &fits)), format!("distlock:public.{fits}"));
    }

    #[tokio::test]
    async fn registrations_are_woken_per_key_and_removed_with_their_last_waiter() {
        let pool = PgPoolOptions::new().connect_lazy("postgres://nobody@127.0.0.1:1/x").unwrap();
        let notifier = Notifier::new("c".into(), pool);
        let (a1, a2, b) = (notifier.register("lock:a"), notifier.register("lock:a"), notifier.register("lock:b"));
        assert_eq!(notifier.waiting_keys(), 2);
        let (mut w1, mut w2, mut wb) = (Box::pin(a1.notified()), Box::pin(a2.notified()), Box::pin(b.notified()));
        for w in [&mut w1, &mut w2, &mut wb] {
            w.as_mut().enable();
        }
        notifier.shared.dispatch("lock:a");
        notifier.shared.dispatch("lock:unknown");
        tokio::time::timeout(Duration::from_secs(5), async { tokio::join!(w1, w2) }).await.expect("both a waiters");
        assert!(futures_poll_once(wb.as_mut()).await.is_none(), "b was not released");
        drop(wb);
        drop(a1);
        assert_eq!(notifier.waiting_keys(), 2, "a still has a waiter");
        drop((a2, b));
        assert_eq!(notifier.waiting_keys(), 0);
    }

    /// Polls `future` once.
    async fn futures_poll_once<F: std::future::Future + Unpin>(future: F) -> Option<F::Output> {
        let mut future = future;
        std::future::poll_fn(|cx| match std::pin::Pin::new(&mut future).poll(cx) {
            std::task::Poll::Ready(out) => std::task::Poll::Ready(Some(out)),
            std::task::Poll::Pending => std::task::Poll::Ready(None),
        })
        .await
    }
}
