//! The waiting loop: attempts until the target is taken or the deadline passes, napping
//! between attempts (woken by the store), keeping a place in the store's queue when the
//! plan asks for one, and leaving it when the wait ends without the lock.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::guard::DropGuard;
use super::hold::Hold;
use super::reentrant;
use super::state::{Engine, EngineRef};
use super::target::{Ask, Attempt, Plan, Queueing, Standing, Target};
use crate::error::LockError;
use crate::observe::{self, AcquireOutcome};
use crate::options::ValidOptions;
use crate::token::Token;

/// What a call does when `LockOptions::wait` is unset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DefaultWait {
    OneAttempt,
    Unbounded,
}

/// One acquisition: what to take, how, and for how long to wait.
#[derive(Debug)]
pub(crate) struct Acquisition<'a> {
    pub(crate) target: Target,
    pub(crate) plan: Plan<'a>,
    pub(crate) options: ValidOptions,
    pub(crate) default_wait: DefaultWait,
}

impl Engine {
    /// Takes the target, or `None` when it was still held at the deadline. A single key
    /// that the caller's [reentrant scope](crate::reentrant_scope) holds is joined
    /// without a round trip. The hold keeps the engine alive through `engine` (the
    /// calling thread's reference, [`EngineRefs::current`](super::EngineRefs::current)).
    pub(crate) async fn acquire(
        engine: &Arc<EngineRef>,
        acquisition: Acquisition<'_>,
    ) -> Result<Option<Arc<Hold>>, LockError> {
        let this = engine.engine();
        let backend = this.store.backend();
        let store_id = reentrant::store_id(&this.store);
        if let Target::Key(key) = &acquisition.target {
            if let Some(hold) = reentrant::joinable(store_id, key) {
                tracing::debug!(lock.key = %hold.label(), backend, "lock re-entered in its reentrant scope");
                return Ok(Some(hold));
            }
        }
        // The application key (a group's first member), for the logs.
        let label = acquisition.target.first().as_lock_key();
        // Checked first: a disabled span still costs its fields' formatting for `log`
        // when some dependency turns on `tracing`'s `log` feature (sqlx does).
        // Without a span the loop is awaited bare: an `Instrumented` wrapper around a
        // disabled span still enters it on drop.
        let span = match &acquisition.target {
            _ if !tracing::enabled!(tracing::Level::DEBUG) => None,
            Target::Key(_) => Some(tracing::debug_span!("distlock.acquire", lock.key = %label, backend)),
            Target::Group(keys) => {
                Some(tracing::debug_span!("distlock.acquire_group", lock.key = %label, members = keys.len(), backend))
            }
        };
        let started = Instant::now();
        let mut contended = false;
        let wait = Self::wait_loop(engine, acquisition, started, &mut contended);
        let result = match span {
            Some(span) => wait.instrument(span).await,
            None => wait.await,
        };
        let outcome = match &result {
            Ok(Some(_)) => AcquireOutcome::Acquired,
            Ok(None) => AcquireOutcome::Contended,
            Err(_) => AcquireOutcome::Error,
        };
        // A new hold's stamp is when the wait ended: one clock read serves both metrics.
        let ended = match &result {
            Ok(Some(hold)) => hold.acquired_at(),
            _ => observe::stamp(),
        };
        observe::acquire(backend, outcome, started, ended);
        if contended {
            observe::contention(backend);
        }
        if let Ok(Some(hold)) = &result {
            if let Target::Key(key) = hold.target() {
                reentrant::register(store_id, key, hold);
            }
        }
        result
    }

    async fn wait_loop(
        engine: &Arc<EngineRef>,
        acquisition: Acquisition<'_>,
        started: Instant,
        contended: &mut bool,
    ) -> Result<Option<Arc<Hold>>, LockError> {
        let Acquisition { target, plan, options, default_wait } = acquisition;
        let store = &*engine.engine().store;
        let backend = store.backend();
        // `None`: no deadline. A wait is at most `LockOptions::MAX_WAIT`, so this never overflows.
        let deadline = match (options.wait, default_wait) {
            (Some(wait), _) => Some(started + wait),
            (None, DefaultWait::OneAttempt) => Some(started),
            (None, DefaultWait::Unbounded) => None,
        };
        let waits = deadline != Some(started);
        let queueing = plan.queueing();
        let mut standing = Standing { queued: waits && queueing == Queueing::FirstAttempt, ticket: None };
        // Armed while the store may hold something for this token: an attempt in flight,
        // or a place in the queue. Dropped armed (an error, a cancelled wait), it releases
        // that in the background; the lock's handle keeps it once the target is taken.
        let guard = DropGuard::new(Arc::clone(engine), target, Token::generate());
        let label = guard.target().first().as_lock_key();
        // The first attempt is sent right after `started` was read: one clock read less.
        let mut first_sent_at = Some(started);
        loop {
            let ask = Ask { target: guard.target(), plan: &plan, token: guard.token(), options: &options, standing };
            guard.arm();
            let sent_at = first_sent_at.take().unwrap_or_else(Instant::now);
            let holder_ttl_left = match ask.attempt(store).await {
                Ok(Attempt::Acquired { fence }) => {
                    tracing::debug!(lock.key = %label, backend, fence, "lock acquired");
                    return Ok(Some(Hold::new(guard, fence, sent_at, &options)));
                }
                Ok(Attempt::Blocked { holder_ttl_left, ticket }) => {
                    if !standing.queued {
                        guard.disarm();
                    }
                    *contended = true;
                    standing.ticket = ticket.or(standing.ticket);
                    holder_ttl_left
                }
                Err(error) => {
                    tracing::warn!(
                        lock.key = %label,
                        backend,
                        error = %error.report(),
                        "lock acquisition failed"
                    );
                    return Err(error);
                }
            };
            let now = Instant::now();
            let mut nap = options.retry_interval;
            if let Some(deadline) = deadline {
                if now >= deadline {
                    if standing.queued {
                        match guard.target().withdraw(store, guard.token()).await {
                            Ok(()) => guard.disarm(),
                            Err(error) => tracing::debug!(
                                lock.key = %label,
                                backend,
                                error = %error.report(),
                                "could not leave the queue; retrying in the background"
                            ),
                        }
                    }
                    tracing::debug!(lock.key = %label, backend, "lock held by another owner");
                    return Ok(None);
                }
                nap = nap.min(deadline - now);
            }
            if queueing == Queueing::AfterFirstBlock && !standing.queued {
                // Take a place in the queue at once: arrival order is the order of these calls.
                standing.queued = true;
                tracing::trace!(lock.key = %label, backend, "lock held; queueing");
                continue;
            }
            // The holder's lease ends sooner than the next retry: try again when it does.
            if let Some(left) = holder_ttl_left {
                nap = nap.min(left + Duration::from_millis(1));
            }
            let ask = Ask { standing, ..ask };
            if let Err(error) = ask.wait(store, nap).await {
                tracing::debug!(
                    lock.key = %label,
                    backend,
                    error = %error.report(),
                    "release notification failed; sleeping instead"
                );
                tokio::time::sleep_until(now + nap).await;
            }
        }
    }
}
