//! What `distlock top` has seen of a store: the held keys of the pages read so far, each
//! as of its last sighting, aged out when the listing comes round without it, and the
//! hand-offs told apart between two sightings of a key.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use distlock::HeldLock;

use crate::show::owner;

/// The most keys remembered; past it, those seen longest ago are forgotten first, so
/// that a store of millions of held keys costs a bounded amount of memory.
pub(crate) const MAX_KEYS: usize = 100_000;

/// The hand-offs per second are counted over this many refresh intervals.
pub(crate) const RATE_REFRESHES: u32 = 10;

/// The hand-offs of a key (its column, the hottest keys) are counted over this window.
pub(crate) const HOT_WINDOW: Duration = Duration::from_secs(60);

/// One held key as last seen.
#[derive(Debug)]
pub(crate) struct Key {
    /// The first holder's mode.
    pub(crate) mode: &'static str,
    /// The first holder's token fingerprint ([`owner`]), never the token.
    pub(crate) holder: String,
    /// How many holders the key had (a shared lock may have several).
    pub(crate) holders: usize,
    /// The first holder's time left when the key was seen.
    ttl_left: Duration,
    /// The first holder's fence, on stores that fence.
    pub(crate) fence: Option<u64>,
    /// The holders' tokens and fences, hashed: a change between two sightings is a
    /// hand-off. A renewal changes neither.
    signature: u64,
    seen_at: Instant,
    /// The listing's pass in which the key was last seen.
    pass: u64,
    /// Waiting acquisitions (the fair queue's places and waiting groups), when read:
    /// `None` until read, or on a store that keeps neither.
    pub(crate) waiters: Option<usize>,
    /// Since when the key has had waiters, as far as this view has read them.
    pub(crate) waiting_since: Option<Instant>,
    /// When the hand-offs of the last [`HOT_WINDOW`] were seen.
    handoffs: VecDeque<Instant>,
}

/// The waiters read for one key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Waiting {
    /// The places in its fair queue and of waiting groups.
    pub(crate) count: usize,
    /// How long the oldest place has existed, by the store's clock, when the store says.
    pub(crate) oldest: Option<Duration>,
}

impl Key {
    /// The first holder's time left at `now`, counted down from its sighting.
    pub(crate) fn time_left(&self, now: Instant) -> Duration {
        self.ttl_left.saturating_sub(now.saturating_duration_since(self.seen_at))
    }

    /// The key's hand-offs in the last [`HOT_WINDOW`].
    pub(crate) fn handoffs(&self, now: Instant) -> usize {
        self.handoffs.iter().filter(|at| now.saturating_duration_since(**at) <= HOT_WINDOW).count()
    }
}

/// The order of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sort {
    /// Least time left first.
    TimeLeft,
    /// Most hand-offs first.
    Hottest,
    /// By key.
    Key,
}

impl Sort {
    /// The next order (`s`).
    pub(crate) fn next(self) -> Self {
        match self {
            Self::TimeLeft => Self::Hottest,
            Self::Hottest => Self::Key,
            Self::Key => Self::TimeLeft,
        }
    }

    /// What the header calls it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::TimeLeft => "time left",
            Self::Hottest => "hottest",
            Self::Key => "key",
        }
    }
}

/// The keys seen so far, and the hand-offs among them.
#[derive(Debug)]
pub(crate) struct Seen {
    keys: HashMap<String, Key>,
    /// The pass of the listing in progress: one more each time the listing wraps.
    pass: u64,
    /// Every hand-off seen, for the rate.
    handoffs: VecDeque<Instant>,
    started: Instant,
    interval: Duration,
}

impl Seen {
    pub(crate) fn new(interval: Duration, now: Instant) -> Self {
        Self { keys: HashMap::new(), pass: 0, handoffs: VecDeque::new(), started: now, interval }
    }

    /// Takes one page of the listing, read at `now`; `last` when it ended the listing,
    /// which then starts again: keys not seen in the pass just ended leave the table.
    pub(crate) fn page(&mut self, locks: Vec<HeldLock>, last: bool, now: Instant) {
        for lock in locks {
            let Some(first) = lock.holders.first() else { continue };
            let signature = {
                let mut hasher = DefaultHasher::new();
                let mut holders: Vec<(&str, Option<u64>)> =
                    lock.holders.iter().map(|holder| (holder.token.as_str(), holder.fence)).collect();
                holders.sort_unstable();
                holders.hash(&mut hasher);
                hasher.finish()
            };
            let key = lock.key.as_str();
            let (handoffs, waiters, waiting_since) = match self.keys.remove(key) {
                Some(mut before) => {
                    if before.signature != signature {
                        before.handoffs.push_back(now);
                        self.handoffs.push_back(now);
                    }
                    while before.handoffs.front().is_some_and(|at| now.saturating_duration_since(*at) > HOT_WINDOW) {
                        before.handoffs.pop_front();
                    }
                    (before.handoffs, before.waiters, before.waiting_since)
                }
                None => (VecDeque::new(), None, None),
            };
            self.keys.insert(
                key.to_owned(),
                Key {
                    mode: first.mode.as_str(),
                    holder: owner(&first.token),
                    holders: lock.holders.len(),
                    ttl_left: first.ttl_left,
                    fence: first.fence,
                    signature,
                    seen_at: now,
                    pass: self.pass,
                    waiters,
                    waiting_since,
                    handoffs,
                },
            );
        }
        if last {
            let ended = self.pass;
            // A key missing from one pass is hidden; it is remembered one pass more, so
            // that a hot key found free once still counts its next holder as a hand-off.
            self.keys.retain(|_, key| key.pass + 1 >= ended);
            self.pass += 1;
        }
        if self.keys.len() > MAX_KEYS {
            let mut seen: Vec<Instant> = self.keys.values().map(|key| key.seen_at).collect();
            let excess = self.keys.len() - MAX_KEYS;
            let (_, cut, _) = seen.select_nth_unstable(excess);
            let cut = *cut;
            self.keys.retain(|_, key| key.seen_at >= cut);
        }
        let window = self.rate_window().max(HOT_WINDOW);
        while self.handoffs.front().is_some_and(|at| now.saturating_duration_since(*at) > window) {
            self.handoffs.pop_front();
        }
    }

    /// Records the waiters read for `key` at `now` (`None`: the store keeps no waiters to
    /// count). The key has had waiters since its oldest place was taken, when the store
    /// tells; otherwise since this view first read any.
    pub(crate) fn waiters(&mut self, key: &str, waiters: Option<Waiting>, now: Instant) {
        if let Some(seen) = self.keys.get_mut(key) {
            seen.waiting_since = match waiters {
                Some(Waiting { count, oldest: Some(oldest) }) if count > 0 => {
                    Some(now.checked_sub(oldest).unwrap_or(now))
                }
                Some(Waiting { count, oldest: None }) if count > 0 => seen.waiting_since.or(Some(now)),
                _ => None,
            };
            seen.waiters = waiters.map(|waiting| waiting.count);
        }
    }

    /// Whether a key is in the table: seen in this pass or the last, and its lease, as
    /// last seen, not run out.
    fn shown(&self, key: &Key, now: Instant) -> bool {
        key.pass + 1 >= self.pass && !key.time_left(now).is_zero()
    }

    /// The keys in the table, in `sort`'s order.
    pub(crate) fn rows(&self, sort: Sort, now: Instant) -> Vec<(&str, &Key)> {
        let mut rows: Vec<(&str, &Key)> =
            self.keys.iter().filter(|(_, key)| self.shown(key, now)).map(|(name, key)| (name.as_str(), key)).collect();
        match sort {
            Sort::TimeLeft => rows.sort_by_key(|(name, key)| (key.time_left(now), *name)),
            Sort::Hottest => rows.sort_by_key(|(name, key)| (std::cmp::Reverse(key.handoffs(now)), *name)),
            Sort::Key => rows.sort_by_key(|(name, _)| *name),
        }
        rows
    }

    /// How many passes of the listing have ended.
    pub(crate) fn passes(&self) -> u64 {
        self.pass
    }

    fn rate_window(&self) -> Duration {
        self.interval.saturating_mul(RATE_REFRESHES)
    }

    /// Hand-offs per second over the last [`RATE_REFRESHES`] intervals (or since the
    /// start, when shorter).
    pub(crate) fn rate(&self, now: Instant) -> f64 {
        let window = self.rate_window().min(now.saturating_duration_since(self.started));
        if window.is_zero() {
            return 0.0;
        }
        let count = self.handoffs.iter().filter(|at| now.saturating_duration_since(**at) <= window).count();
        count as f64 / window.as_secs_f64()
    }

    /// The `n` keys with the most hand-offs in the last [`HOT_WINDOW`], most first.
    pub(crate) fn hottest(&self, n: usize, now: Instant) -> Vec<(&str, usize)> {
        let mut hot: Vec<(&str, usize)> = self
            .keys
            .iter()
            .map(|(name, key)| (name.as_str(), key.handoffs(now)))
            .filter(|(_, handoffs)| *handoffs > 0)
            .collect();
        hot.sort_by_key(|(name, handoffs)| (std::cmp::Reverse(*handoffs), *name));
        hot.truncate(n);
        hot
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock::{LockInfo, LockKey, Token};

    fn held(key: &str, token: &Token, fence: u64) -> HeldLock {
        HeldLock::new(
            LockKey::new(key).unwrap(),
            vec![LockInfo::new(token.clone(), Some(fence), Duration::from_secs(30))],
        )
    }

    #[test]
    fn a_new_holder_between_two_sightings_is_a_hand_off_a_renewal_is_not() {
        let start = Instant::now();
        let mut seen = Seen::new(Duration::from_secs(1), start);
        let (one, two) = (Token::generate(), Token::generate());
        seen.page(vec![held("hot", &one, 1), held("calm", &one, 7)], true, start);
        let later = start + Duration::from_secs(1);
        seen.page(vec![held("hot", &two, 2), held("calm", &one, 7)], true, later);
        // Free when the listing came round, then held again by another.
        let free = later + Duration::from_secs(1);
        seen.page(vec![held("calm", &one, 7)], true, free);
        assert_eq!(seen.rows(Sort::Key, free).len(), 1, "a key missing from a pass is hidden");
        let again = free + Duration::from_secs(1);
        seen.page(vec![held("hot", &one, 3), held("calm", &one, 7)], true, again);
        assert_eq!(seen.hottest(3, again), [("hot", 2)]);
        assert!((seen.rate(again) - 2.0 / 3.0).abs() < 1e-9, "{}", seen.rate(again));
        let rows = seen.rows(Sort::Hottest, again);
        assert_eq!(rows.iter().map(|(name, _)| *name).collect::<Vec<_>>(), ["hot", "calm"]);
        assert_eq!(rows[0].1.holder, owner(&one));
    }

    #[test]
    fn keys_leave_when_a_pass_ends_without_them_or_their_lease_runs_out() {
        let start = Instant::now();
        let mut seen = Seen::new(Duration::from_secs(1), start);
        let token = Token::generate();
        // A pass of two pages: keys seen in the pass's first page stay through its second.
        seen.page(vec![held("a", &token, 1)], false, start);
        seen.page(vec![held("b", &token, 1)], true, start);
        assert_eq!(seen.rows(Sort::Key, start).len(), 2);
        seen.page(vec![], false, start);
        assert_eq!(seen.rows(Sort::Key, start).len(), 2, "the pass is not over");
        seen.page(vec![held("b", &token, 1)], true, start);
        let keys: Vec<&str> = seen.rows(Sort::Key, start).iter().map(|(name, _)| *name).collect();
        assert_eq!(keys, ["b"]);
        assert!(seen.rows(Sort::Key, start + Duration::from_secs(31)).is_empty(), "leases run out");
        assert_eq!(seen.passes(), 2);
    }

    #[test]
    fn waiters_are_timed_from_when_they_were_first_read() {
        let start = Instant::now();
        let mut seen = Seen::new(Duration::from_secs(1), start);
        seen.page(vec![held("k", &Token::generate(), 1)], true, start);
        seen.waiters("k", Some(Waiting { count: 2, oldest: None }), start);
        seen.waiters("k", Some(Waiting { count: 1, oldest: None }), start + Duration::from_secs(5));
        let rows = seen.rows(Sort::Key, start);
        assert_eq!((rows[0].1.waiters, rows[0].1.waiting_since), (Some(1), Some(start)));
        seen.waiters("k", Some(Waiting::default()), start);
        assert_eq!(seen.rows(Sort::Key, start)[0].1.waiting_since, None);
    }

    #[test]
    fn waiters_are_timed_by_the_store_when_it_says() {
        let start = Instant::now() + Duration::from_secs(60);
        let mut seen = Seen::new(Duration::from_secs(1), start);
        seen.page(vec![held("k", &Token::generate(), 1)], true, start);
        let waiting = Waiting { count: 2, oldest: Some(Duration::from_secs(30)) };
        seen.waiters("k", Some(waiting), start);
        let rows = seen.rows(Sort::Key, start);
        assert_eq!((rows[0].1.waiters, rows[0].1.waiting_since), (Some(2), Some(start - Duration::from_secs(30))));
    }
}
