//! `Observer`: the changes of an election's leader, in term order, and
//! `Election::observe` that starts one.

use std::time::Duration;

use distlock_api::{LockError, Token};
use tokio::time::Instant;

use crate::election::{Election, Leader};

/// Watches an election's leader ([`Election::observe`]).
///
/// [`changed`](Self::changed) returns the leader as first seen, then each change: a new
/// leader (a greater term), a new value of the same leader, or nobody leading. Terms only
/// grow from one answer to the next. An observer reports the **latest** state when it
/// reads: a leader that came and went between two reads is not reported, as with
/// `tokio::sync::watch`. Where a release wakes every waiter of the key (Redis with
/// `notifications=true`, SQLite, etcd, memory), the observer wakes at a release and sees a
/// hand-over within milliseconds; PostgreSQL and MySQL wake only the candidate a released
/// lock is handed to, so there, and for a proclaimed value everywhere, a change is seen
/// within the election's [poll interval](Election::poll_interval).
///
/// A candidate publishes its value just after it takes the lead, and where the store does
/// not hand a released lock to the next candidate (etcd), that candidate takes it a moment
/// after the release: an observer waits up to one poll interval for either rather than
/// report a leader without its value, or nobody, in between.
#[derive(Debug)]
pub struct Observer {
    election: Election,
    last: Option<Option<(u64, Option<String>)>>,
}

impl Election {
    /// Watches the leader: see [`Observer`].
    pub fn observe(&self) -> Observer {
        Observer { election: self.clone(), last: None }
    }
}

impl Observer {
    /// Waits until the leader differs from the one returned last (the first call returns
    /// the current one at once) and returns it; `None`: nobody leads.
    ///
    /// # Errors
    ///
    /// As [`Election::leader`]. The observer stays usable: the next call reads again.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a cancelled call changes nothing the next call relies on.
    pub async fn changed(&mut self) -> Result<Option<Leader>, LockError> {
        let poll = self.election.poll();
        let mut pending_since: Option<(Option<Token>, Instant)> = None;
        loop {
            let held = self.election.holder().await?;
            // A candidate taking the lead gets its term and publishes its value in a
            // moment, and on a store that does not hand a released lock over, a waiting
            // candidate takes it in a moment: report the leader then.
            let pending = match &held {
                Some(held) if held.holder.fence.is_none() || held.value.is_none() => {
                    Some(Some(held.holder.token.clone()))
                }
                Some(_) => None,
                None if self.candidates_wait().await? => Some(None),
                // The last candidate may have taken the lock between the two reads.
                None if self.election.holder().await?.is_some() => continue,
                None => None,
            };
            if let Some(pending) = pending {
                let since = match &pending_since {
                    Some((seen, since)) if *seen == pending => *since,
                    _ => pending_since.insert((pending, Instant::now())).1,
                };
                if since.elapsed() < poll {
                    tokio::time::sleep(Duration::from_millis(2).min(poll)).await;
                    continue;
                }
            }
            let leader = held.and_then(Leader::of);
            let state =
                leader.as_ref().map(|leader| (leader.term, leader.value.as_ref().map(|v| v.as_str().to_owned())));
            if self.last.as_ref() != Some(&state) {
                self.last = Some(state);
                return Ok(leader);
            }
            match leader {
                Some(_) => self.election.store().wait_for_release(self.election.store_key(), poll).await?,
                None => tokio::time::sleep(poll).await,
            }
        }
    }

    /// The changes as a [`Stream`](futures_util::Stream): each item is what
    /// [`changed`](Self::changed) returns, the first the current leader. The stream does
    /// not end; an error is an item, and the next item reads again.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use distlock::election::Election;
    /// use distlock::memory::MemoryLockStore;
    /// use distlock::LockManager;
    /// use futures_util::StreamExt;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), distlock::LockError> {
    /// let locks = LockManager::new(Arc::new(MemoryLockStore::new()));
    /// let election = Election::new(&locks, "scheduler")?;
    /// let mut changes = Box::pin(election.observe().into_stream());
    /// assert_eq!(changes.next().await.transpose()?, Some(None), "nobody leads");
    /// let leadership = election.campaign("a").await?;
    /// let leader = changes.next().await.transpose()?.flatten().expect("a leader");
    /// assert_eq!(leader.term, leadership.term());
    /// # Ok(()) }
    /// ```
    pub fn into_stream(self) -> impl futures_util::Stream<Item = Result<Option<Leader>, LockError>> + Send {
        futures_util::stream::unfold(self, |mut observer| async move {
            let item = observer.changed().await;
            Some((item, observer))
        })
    }

    /// Whether candidates wait in the store's queue for the election's lock.
    async fn candidates_wait(&self) -> Result<bool, LockError> {
        match self.election.store().queue() {
            Some(queue) => Ok(queue.queue_len(self.election.store_key()).await? > 0),
            None => Ok(false),
        }
    }

    /// The leader returned last (`None` before the first call, `Some(None)` when nobody
    /// led then).
    pub fn last_term(&self) -> Option<Option<u64>> {
        self.last.as_ref().map(|state| state.as_ref().map(|(term, _)| *term))
    }
}
