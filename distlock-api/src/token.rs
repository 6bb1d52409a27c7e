//! Lock tokens: 128-bit random values that identify one acquisition.

use std::fmt;

use uuid::Uuid;

use crate::error::LockError;

/// The secret that identifies one acquisition of a lock.
///
/// A fresh token is generated for every acquisition: a random UUID v4 (122 random bits)
/// in its 36-character hyphenated text form, never a timestamp or a counter, so it
/// cannot be guessed. The bits come from a thread-local cryptographic generator (ChaCha12,
/// seeded by the operating system and reseeded after every 64 KiB of output), with no
/// system call per token. A process forked without `exec` starts with a copy of its
/// parent's generator, as it starts with a copy of its parent's tokio runtime: neither
/// is to be used in the child. Stores save it as the lock's value and compare it on release and
/// extend.
///
/// `Debug` shows only the first 8 characters, so a token does not end up whole in logs;
/// [`Token::as_str`] gives the full text. Tokens never appear in the `Display` of a
/// [`LockError`].
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Token {
    /// The hyphenated lower-case text, kept inline: making, copying and comparing a token
    /// allocate nothing.
    text: [u8; Self::LEN],
}

impl Token {
    /// The length of a token's text form.
    pub const LEN: usize = 36;

    /// Generates a new random token.
    pub fn generate() -> Self {
        // One `u128` takes 16 bytes of the generator's output; a `[u8; 16]` would take
        // a 32-bit word per byte.
        let bytes = rand::random::<u128>().to_le_bytes();
        Self::from_uuid(uuid::Builder::from_random_bytes(bytes).into_uuid())
    }

    /// The token of `uuid`, encoded once into its inline buffer.
    fn from_uuid(uuid: Uuid) -> Self {
        let mut text = [0; Self::LEN];
        uuid.hyphenated().encode_lower(&mut text);
        Self { text }
    }

    /// Parses a token given as text, e.g. by an administrator who releases a lock by hand.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidToken`] when `token` is not a hyphenated UUID v4.
    pub fn parse(token: &str) -> Result<Self, LockError> {
        match Uuid::try_parse(token) {
            Ok(uuid) if token.len() == Self::LEN && uuid.get_version_num() == 4 => Ok(Self::from_uuid(uuid)),
            _ => Err(LockError::InvalidToken),
        }
    }

    /// The token's text, as stored by the store.
    pub fn as_str(&self) -> &str {
        // Always ASCII (hex digits and hyphens, written by `from_uuid`): the check passes.
        std::str::from_utf8(&self.text).unwrap_or_default()
    }

    /// The first 8 characters, for display in tools and logs.
    pub fn short(&self) -> &str {
        self.as_str().get(..8).unwrap_or_default()
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({}…)", self.short())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tokens_are_uuid_v4_text() {
        let token = Token::generate();
        assert_eq!(token.as_str().len(), Token::LEN);
        assert_eq!(Token::parse(token.as_str()).unwrap(), token);
        assert_ne!(Token::generate(), token);
        assert!(!format!("{token:?}").contains(&token.as_str()[8..]));
    }

    #[test]
    fn generated_tokens_are_distinct_across_threads() {
        let threads: Vec<_> =
            (0..4).map(|_| std::thread::spawn(|| (0..25_000).map(|_| Token::generate()).collect::<Vec<_>>())).collect();
        let mut seen = std::collections::HashSet::new();
        for thread in threads {
            for token in thread.join().unwrap() {
                assert!(seen.insert(token), "token collision");
            }
        }
        assert_eq!(seen.len(), 100_000);
    }

    #[test]
    fn parse_rejects_non_v4_text() {
        for bad in ["", "not-a-token", "00000000-0000-1000-8000-000000000000", "0123456789abcdef0123456789abcdef"] {
            assert!(matches!(Token::parse(bad), Err(LockError::InvalidToken)), "{bad}");
        }
        let upper = Token::generate().as_str().to_uppercase();
        assert_eq!(Token::parse(&upper).unwrap().as_str(), upper.to_lowercase());
    }
}
