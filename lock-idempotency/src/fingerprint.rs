//! Request fingerprints: SHA-256 digests that tell a retry from a different request.

use std::fmt;

use sha2::{Digest, Sha256};

/// The SHA-256 digest of what makes a request the same request. A claim with the same
/// key and another fingerprint is a [mismatch](crate::Claim::Mismatch): the client
/// reused a key for a different request.
///
/// Build one from the request's parts with [`Fingerprint::of_parts`] (each part is
/// length-prefixed, so `("ab", "c")` and `("a", "bc")` differ), from a JSON document
/// normalised the way seed 004 does it with [`Fingerprint::of_json`], or take a digest
/// computed elsewhere with [`Fingerprint::from_bytes`].
///
/// ```
/// use distlock_idempotency::Fingerprint;
///
/// let a = Fingerprint::of_json(&serde_json::json!({"b": 1, "a": [2, 3]}));
/// let b = Fingerprint::of_json(&serde_json::json!({"a": [2, 3], "b": 1}));
/// assert_eq!(a, b); // keys sorted before hashing
/// assert_eq!(a.to_hex().len(), 64);
/// assert_ne!(Fingerprint::of_parts(&[b"ab", b"c"]), Fingerprint::of_parts(&[b"a", b"bc"]));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// A digest computed elsewhere.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// SHA-256 over `parts`, each preceded by its length (8 bytes, big-endian).
    pub fn of_parts(parts: &[&[u8]]) -> Self {
        let mut hasher = Sha256::new();
        for part in parts {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
        Self(hasher.finalize().into())
    }

    /// SHA-256 of the compact JSON text of `value` with the keys of every object sorted
    /// (seed 004's "normalise, then SHA-256"): documents that differ only in key order or
    /// whitespace get the same fingerprint. Array order counts; sort arrays whose order
    /// does not matter before calling this.
    pub fn of_json(value: &serde_json::Value) -> Self {
        let mut text = Vec::new();
        write_sorted(value, &mut text);
        Self(Sha256::digest(&text).into())
    }

    /// The digest's 32 bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The digest as 64 lowercase hex digits (what the seed's 409 answer carries).
    pub fn to_hex(&self) -> String {
        use fmt::Write;
        self.0.iter().fold(String::with_capacity(64), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        })
    }

    /// The digest from bytes a store returned; `None` unless exactly 32 bytes.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }
}

/// Compact JSON with object keys in byte order.
fn write_sorted(value: &serde_json::Value, out: &mut Vec<u8>) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_scalar(&Value::String(key.clone()), out);
                out.push(b':');
                write_sorted(value, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_sorted(item, out);
            }
            out.push(b']');
        }
        scalar => write_scalar(scalar, out),
    }
}

fn write_scalar(value: &serde_json::Value, out: &mut Vec<u8>) {
    // Serialising a `Value` scalar into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({}…)", &self.to_hex()[..12])
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_normalisation_sorts_nested_keys_and_ignores_whitespace() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{"z": {"y": 1, "x": [ {"b":2,"a":1} ]}, "a": "é"}"#).unwrap();
        let b: serde_json::Value = serde_json::from_str(r#"{"a":"é","z":{"x":[{"a":1,"b":2}],"y":1}}"#).unwrap();
        assert_eq!(Fingerprint::of_json(&a), Fingerprint::of_json(&b));
        let mut text = Vec::new();
        write_sorted(&a, &mut text);
        assert_eq!(String::from_utf8(text).unwrap(), r#"{"a":"é","z":{"x":[{"a":1,"b":2}],"y":1}}"#);
    }

    #[test]
    fn hex_round_trip() {
        let fp = Fingerprint::of_parts(&[b"POST", b"/orders"]);
        assert_eq!(Fingerprint::from_slice(fp.as_bytes()), Some(fp));
        assert!(Fingerprint::from_slice(&[1, 2]).is_none());
        assert!(fp.to_hex().chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }
}
