//! How a hold is shown to a person: its holder's safe name and its time left.

use std::time::Duration;

use distlock::Token;
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
