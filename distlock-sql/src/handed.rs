//! Tokens a release handed their key to: a hint for the fair waiter's next attempt.
//!
//! A fair waiter's queued attempt is a full statement (or transaction): it finds the
//! head of the queue, takes the lease or a place. When the store has seen the release
//! hand the key to the waiter (the hand-over's notification reached this process), the
//! lease is already the waiter's, and the attempt can take it with one token-checked
//! statement instead. The hint is only that: a store checks the token on the server and
//! falls back to the full attempt when the lease is not the waiter's after all (it
//! lapsed meanwhile).

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

/// A bounded set of tokens a release handed their key to, until each one's next attempt.
///
/// A waiter cancelled between its wake-up and its attempt leaves its token behind; a
/// set of [`MAX`](Self::MAX) tokens starts again empty, which only sends waiters to the
/// full attempt.
///
/// ```
/// use distlock_sql::HandedTokens;
///
/// let handed = HandedTokens::default();
/// handed.mark("a-token");
/// assert!(handed.take("a-token"));
/// assert!(!handed.take("a-token"), "a hint serves one attempt");
/// ```
#[derive(Debug, Default)]
pub struct HandedTokens {
    tokens: Mutex<HashSet<String>>,
}

impl HandedTokens {
    /// The most tokens the set keeps.
    pub const MAX: usize = 1024;

    /// Notes that a release handed `token`'s key to it.
    pub fn mark(&self, token: &str) {
        let mut tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
        if tokens.len() >= Self::MAX {
            tokens.clear();
        }
        tokens.insert(token.to_owned());
    }

    /// Whether a release handed `token`'s key to it since its last attempt, forgetting it.
    pub fn take(&self, token: &str) -> bool {
        let mut tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
        !tokens.is_empty() && tokens.remove(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_set_starts_again_empty() {
        let handed = HandedTokens::default();
        for n in 0..HandedTokens::MAX {
            handed.mark(&n.to_string());
        }
        assert!(handed.take("0"));
        handed.mark("0");
        handed.mark("last");
        assert!(!handed.take("1"), "the full set was emptied");
        assert!(handed.take("last"));
    }
}
