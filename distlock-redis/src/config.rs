//! The store's validated configuration: plain data, the defaults, and the rules every
//! setting is checked against. A leaf: it imports nothing else of this crate.

use std::time::Duration;

use distlock_api::LockError;

/// The default key prefix: keys are `distlock:lock:{key}`.
pub(crate) const DEFAULT_KEY_PREFIX: &str = "distlock";
/// The longest key prefix accepted, in bytes.
pub(crate) const MAX_KEY_PREFIX_LEN: usize = 256;
/// The longest timeout kept as given; longer ones (up to `Duration::MAX`) are cut to it.
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// Everything a store needs to know about its layout and connections, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Config {
    pub(crate) key_prefix: String,
    pub(crate) fencing: bool,
    /// Fencing numbers drawn from the server's clock and the counter (restart-safe).
    pub(crate) clock_fences: bool,
    pub(crate) release_notifications: bool,
    pub(crate) fair_queue: bool,
    /// Greater than zero, at most `MAX_TIMEOUT`.
    pub(crate) response_timeout: Duration,
    /// Greater than zero, at most `MAX_TIMEOUT`.
    pub(crate) connect_timeout: Duration,
}

/// Checks a key prefix: at most [`MAX_KEY_PREFIX_LEN`] bytes, no control characters. An
/// empty prefix is allowed: keys then start with their namespace (`lock:{key}`).
pub(crate) fn validate_key_prefix(prefix: &str) -> Result<(), LockError> {
    distlock_api::check_key_prefix(prefix, MAX_KEY_PREFIX_LEN)
}

/// What every key of a prefix starts with: `{prefix}:`, or nothing for the empty prefix.
pub(crate) fn key_stem(prefix: &str) -> String {
    if prefix.is_empty() {
        String::new()
    } else {
        format!("{prefix}:")
    }
}

/// The settings every client of a prefix must share, as URL parameters:
/// `fencing=…&fences=…&notifications=…&fair=…`.
pub(crate) fn shared_settings(fencing: bool, clock_fences: bool, notifications: bool, fair: bool) -> String {
    let fences = if clock_fences { "clock" } else { "counter" };
    format!("fencing={fencing}&fences={fences}&notifications={notifications}&fair={fair}")
}

/// `Ok` when the settings recorded for `prefix` under `key` are `settings`; otherwise the
/// [`LockError::Config`] that names both and how to change them.
pub(crate) fn check_recorded_settings(
    prefix: &str,
    key: &str,
    settings: &str,
    recorded: Option<String>,
) -> Result<(), LockError> {
    match recorded {
        Some(recorded) if recorded == settings => Ok(()),
        recorded => Err(LockError::Config {
            message: format!(
                "the Redis key prefix `{prefix}` is used with other settings: `{key}` records {}, this store has \
                 `{settings}`; every client of a prefix must use the same `fencing`, `fences`, `notifications` and \
                 `fair` (use the recorded ones or another prefix; to change them, stop every client of the prefix \
                 and `DEL {key}`)",
                recorded.map_or_else(|| "nothing readable".to_owned(), |recorded| format!("`{recorded}`")),
            ),
        }),
    }
}

/// A timeout as the store uses it: zero is an error naming `setting`; anything above
/// [`MAX_TIMEOUT`] is cut to it, so deadlines built from it never overflow.
pub(crate) fn checked_timeout(setting: &str, timeout: Duration) -> Result<Duration, LockError> {
    if timeout.is_zero() {
        return Err(LockError::Config { message: format!("the Redis `{setting}` must be greater than zero") });
    }
    Ok(saturated_timeout(timeout))
}

/// `timeout`, at most [`MAX_TIMEOUT`].
pub(crate) fn saturated_timeout(timeout: Duration) -> Duration {
    timeout.min(MAX_TIMEOUT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_prefix_rules() {
        for good in ["", "distlock", "neton", "a", "app:v2", "订单", &"p".repeat(256)] {
            assert!(validate_key_prefix(good).is_ok(), "{good:?}");
        }
        assert_eq!((key_stem(""), key_stem("neton")), (String::new(), "neton:".to_owned()));
        for bad in ["a\nb", "nul\0", "\u{7f}", &"p".repeat(257)] {
            let err = validate_key_prefix(bad).unwrap_err();
            assert!(matches!(err, LockError::Config { .. }), "{bad:?}: {err}");
            assert!(err.to_string().contains("key prefix"), "{err}");
        }
    }

    #[test]
    fn timeouts_are_positive_and_saturate_at_the_maximum() {
        let err = checked_timeout("response_timeout", Duration::ZERO).unwrap_err();
        assert!(matches!(err, LockError::Config { .. }), "{err}");
        assert!(err.to_string().contains("`response_timeout`"), "{err}");
        assert_eq!(checked_timeout("t", Duration::from_nanos(1)).unwrap(), Duration::from_nanos(1));
        assert_eq!(checked_timeout("t", MAX_TIMEOUT).unwrap(), MAX_TIMEOUT);
        assert_eq!(checked_timeout("t", Duration::MAX).unwrap(), MAX_TIMEOUT);
        // Two of them together (the subscriber's connect + SUBSCRIBE bound) still fit an Instant.
        let now = std::time::Instant::now();
        assert!(now.checked_add(MAX_TIMEOUT + MAX_TIMEOUT).is_some());
    }
}
