//! The keys a store recently saw waiters queue for: a hint that lets the release of a
//! contended key skip the statement meant for keys nobody queues for.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The keys a store recently saw waiters queue for (its own queued attempts, or a release
/// that found places), so that their releases skip the statement that only serves keys
/// nobody queues for. A hint: a key missing here costs one statement more, a key left
/// here after its queue emptied costs the queue release instead of the cheaper one.
#[derive(Debug, Default)]
pub(crate) struct RecentlyQueued {
    keys: Mutex<HashMap<String, Instant>>,
}

impl RecentlyQueued {
    /// How long a key stays marked after it was last seen queued for.
    pub(crate) const WINDOW: Duration = Duration::from_secs(2);
    /// The most keys marked at once; past it, the marks that ended go, or all do.
    const MAX_KEYS: usize = 4096;

    fn keys(&self) -> MutexGuard<'_, HashMap<String, Instant>> {
        // Every update is a single map operation, so a poisoned map is still consistent.
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks `key` as queued for, from now.
    pub(crate) fn insert(&self, key: &str) {
        let now = Instant::now();
        let mut keys = self.keys();
        if let Some(seen) = keys.get_mut(key) {
            *seen = now;
            return;
        }
        if keys.len() >= Self::MAX_KEYS {
            keys.retain(|_, seen| now.duration_since(*seen) < Self::WINDOW);
            if keys.len() >= Self::MAX_KEYS {
                keys.clear();
            }
        }
        keys.insert(key.to_owned(), now);
    }

    /// Whether `key` was marked within the window.
    pub(crate) fn contains(&self, key: &str) -> bool {
        self.keys().get(key).is_some_and(|seen| seen.elapsed() < Self::WINDOW)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_end_after_the_window_and_stay_bounded() {
        let recent = RecentlyQueued::default();
        assert!(!recent.contains("lock:a"));
        recent.insert("lock:a");
        assert!(recent.contains("lock:a") && !recent.contains("lock:b"));
        recent.keys().insert("lock:old".to_owned(), Instant::now() - RecentlyQueued::WINDOW);
        assert!(!recent.contains("lock:old"), "a mark older than the window has ended");
        for i in 0..RecentlyQueued::MAX_KEYS * 2 {
            recent.insert(&format!("lock:{i}"));
        }
        assert!(recent.keys().len() <= RecentlyQueued::MAX_KEYS);
    }
}
