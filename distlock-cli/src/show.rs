//! How a hold is shown to a person: its holder's safe name and its time left; and how
//! the places of waiting acquisitions are printed.

use std::io::{self, Write};
use std::time::Duration;

use distlock::{Token, WaitingPlace};
use serde::Serialize;
use sha2::{Digest, Sha256};

/// A holder's name that is safe to show: the first 8 hex digits of the SHA-256 of its
/// token. Two holders are told apart, one holder is recognised across listings, and the
/// token cannot be recovered (unlike a prefix of it, which is part of the secret).
pub(crate) fn owner(token: &Token) -> String {
    let digest = Sha256::digest(token.as_str().as_bytes());
    digest.iter().take(4).map(|byte| format!("{byte:02x}")).collect()
}

/// A duration rounded to what a person reads: ms below 10 s, else 0.1 s.
pub(crate) fn round(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis < 10_000 {
        format!("{millis}ms")
    } else {
        format!("{:.1}s", duration.as_secs_f64())
    }
}

/// A duration in milliseconds, as [`round`] shows it.
pub(crate) fn round_ms(ms: u128) -> String {
    round(Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX)))
}

/// One waiting acquisition's place on one key, as printed.
#[derive(Debug, Serialize)]
pub(crate) struct Waiter {
    pub(crate) key: String,
    /// `lock` (a place in a single lock's fair queue) or `group` (a waiting group's place).
    pub(crate) kind: &'static str,
    pub(crate) mode: &'static str,
    /// [`owner`] of the waiter's token.
    pub(crate) owner: String,
    /// How long the place has existed, by the store's clock; `null` on a store that does
    /// not record it.
    pub(crate) waited_ms: Option<u128>,
    /// The place's time left unless the waiter refreshes it.
    pub(crate) place_left_ms: u128,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) token: Option<String>,
}

impl Waiter {
    pub(crate) fn new(key: &str, kind: &'static str, place: &WaitingPlace, show_tokens: bool) -> Self {
        Self {
            key: key.to_owned(),
            kind,
            mode: place.mode.as_str(),
            owner: owner(&place.token),
            waited_ms: place.waited.map(|waited| waited.as_millis()),
            place_left_ms: place.ttl_left.as_millis(),
            token: show_tokens.then(|| place.token.as_str().to_owned()),
        }
    }
}

/// The waiting places, oldest first: key, kind, mode, owner, time waited, place left.
pub(crate) fn write_waiting(
    out: &mut impl Write,
    waiting: &[Waiter],
    total: usize,
    show_tokens: bool,
) -> io::Result<()> {
    let waited = |waiter: &Waiter| waiter.waited_ms.map_or_else(|| "-".to_owned(), round_ms);
    let left = |waiter: &Waiter| round_ms(waiter.place_left_ms);
    let key_width = waiting.iter().map(|waiter| waiter.key.chars().count()).max().unwrap_or(0).max(7);
    let waited_width = waiting.iter().map(|waiter| waited(waiter).len()).max().unwrap_or(0).max(6);
    let left_width = waiting.iter().map(|waiter| left(waiter).len()).max().unwrap_or(0).max(10);
    let token_header = if show_tokens { "  TOKEN" } else { "" };
    let header = format!(
        "{:key_width$}  {:5}  {:9}  {:8}  {:>waited_width$}  {:>left_width$}{token_header}",
        "WAITING", "KIND", "MODE", "OWNER", "WAITED", "PLACE LEFT"
    );
    writeln!(out, "{}", header.trim_end())?;
    for waiter in waiting {
        let line = format!(
            "{:key_width$}  {:5}  {:9}  {:8}  {:>waited_width$}  {:>left_width$}  {}",
            waiter.key,
            waiter.kind,
            waiter.mode,
            waiter.owner,
            waited(waiter),
            left(waiter),
            waiter.token.as_deref().unwrap_or_default()
        );
        writeln!(out, "{}", line.trim_end())?;
    }
    if waiting.len() < total {
        writeln!(out, "{} of {total} waiting shown (--limit)", waiting.len())
    } else {
        writeln!(out, "{total} waiting")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_stable_short_and_not_a_prefix_of_the_token() {
        let token = Token::parse("4f1c0a4e-8d5b-4d61-9a8e-0c2b7f3e9a10").unwrap();
        let owner = owner(&token);
        assert_eq!(owner.len(), 8);
        assert!(owner.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(owner, super::owner(&token.clone()), "stable");
        assert!(!token.as_str().contains(&owner), "not part of the token");
        assert_ne!(owner, super::owner(&Token::generate()));
    }
}
