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
//! The waiting itself is the shared [`WaiterRegistry`]: a waiter registers for its key
//! before it flags the key's lease as waited for (so a release between the caller's failed
//! attempt and the registration is seen by the flagging statement, and a later one is
//! notified), waits for the listener to be `LISTEN`ing (until then waiting is plain
//! sleeping: the caller polls), and wakes early when the listener's state changes (a lost
//! connection may have swallowed the notification). This module is only the listener: it
//! keeps the `LISTEN` connection, hands each notified key to the registry, tells it
//! whether it is listening, and re-connects in the background with a back-off (50 ms
//! doubling to 5 s).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use distlock_api::waiters::WaiterRegistry;
use distlock_sql::HandedTokens;
use sqlx::postgres::{PgListener, PgPool, PgPoolOptions};
use tokio::task::AbortHandle;

use crate::config::Layout;

/// The first pause before re-connecting a lost listener; doubled after each failure.
const MIN_BACKOFF: Duration = Duration::from_millis(50);
/// The longest pause between attempts to re-connect the listener.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// The notification payload of a hand-over to a token (`queue/release.sql`): this
/// followed by the token.
pub(crate) const TURN: &str = "turn:";
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
    /// Waiters per store key; "listening" while the listener is `LISTEN`ing.
    waiters: WaiterRegistry,
    /// Fair waiters of this store a release handed their key to, until their next attempt.
    handed: HandedTokens,
}

impl Shared {
    /// Wakes the waiters of a notification's payload: a key, or `turn:<token>` for the
    /// fair waiter a release handed its key to, noted (before it wakes) for its next
    /// attempt when it waits in this store.
    fn dispatch(&self, payload: &str) {
        let handed = payload.strip_prefix(TURN);
        if let Some(token) = handed {
            self.handed.mark(token);
        }
        if !self.waiters.wake(payload) {
            if let Some(token) = handed {
                self.handed.take(token);
            }
        }
    }
}

impl Notifier {
    pub(crate) fn new(channel: String, pool: PgPool) -> Self {
        let shared = Shared { channel, pool, waiters: WaiterRegistry::new(), handed: HandedTokens::default() };
        Self { shared: Arc::new(shared), task: OnceLock::new() }
    }

    /// The notification channel.
    pub(crate) fn channel(&self) -> &str {
        &self.shared.channel
    }

    /// Whether a release handed `token`'s key to it since its last queued attempt (as
    /// this store's listener saw), forgetting it: a hint that the lease is its own.
    pub(crate) fn take_handed(&self, token: &str) -> bool {
        self.shared.handed.take(token)
    }

    /// The store's waiters, starting the listener on first use. Must be called inside a
    /// tokio runtime.
    pub(crate) fn waiters(&self) -> &WaiterRegistry {
        self.task.get_or_init(|| tokio::spawn(run(Arc::clone(&self.shared))).abort_handle());
        &self.shared.waiters
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        if let Some(task) = self.task.get() {
            task.abort();
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
    shared.waiters.set_listening(false);
    listen_pool.close().await;
    tracing::debug!(channel = %shared.channel, "release listener stopped: the store's pool was closed");
}

async fn listen_forever(shared: &Shared, listen_pool: &PgPool) {
    // LISTEN itself has no timeout of its own; a blackholed server must not hang us.
    let listen_timeout = listen_pool.options().get_acquire_timeout().saturating_mul(2);
    let mut backoff = MIN_BACKOFF;
    loop {
        match tokio::time::timeout(listen_timeout, listen(listen_pool, &shared.channel)).await {
            Ok(Ok(mut listener)) => {
                shared.waiters.set_listening(true);
                tracing::debug!(channel = %shared.channel, "listening for releases");
                backoff = MIN_BACKOFF;
                let lost = loop {
                    match listener.try_recv().await {
                        Ok(Some(notification)) => shared.dispatch(notification.payload()),
                        Ok(None) => break None,
                        Err(error) => break Some(error),
                    }
                };
                shared.waiters.set_listening(false);
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
        assert_eq!(channel_name(&layout("public", "distribute_lock")), "distlock:public.distribute_lock");
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
}
