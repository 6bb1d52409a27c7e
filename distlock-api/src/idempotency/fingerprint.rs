//! Request fingerprints: SHA-256 digests that tell a retry from a different request.

use std::fmt;

use sha2::{Digest, Sha256};

/// The SHA-256 digest of what makes a request the same request. A claim with the same
/// key and another fingerprint is a [mismatch](super::StoreClaim::Mismatch): the client
/// reused a key for a different request.
///
/// Build one from a request's normalised body with [`Fingerprint::of_body`] (the SHA-256
/// of exactly those bytes, as `sha256sum` prints it), from a JSON document with
/// [`Fingerprint::of_json`] (key order and whitespace ignored), from several parts with
/// [`Fingerprint::of_parts`] (each part is length-prefixed, so `("ab", "c")` and
/// `("a", "bc")` differ), or take a digest computed elsewhere with
/// [`Fingerprint::from_bytes`].
///
/// ```
/// use distlock::idempotency::Fingerprint;
///
/// let a = Fingerprint::of_json(&serde_json::json!({"b": 1, "a": [2, 3]}));
/// let b = Fingerprint::of_json(&serde_json::json!({"a": [2, 3], "b": 1}));
/// assert_eq!(a, b); // keys sorted before hashing
/// assert_eq!(a, Fingerprint::of_body(br#"{"a":[2,3],"b":1}"#));
/// assert_eq!(
///     Fingerprint::of_body(b"abc").to_hex(), // printf abc | sha256sum
///     "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
/// );
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

    /// SHA-256 of exactly `body`: the hex of [`to_hex`](Self::to_hex) is what
    /// `sha256sum` prints for the same bytes, so a client can compute it too. Hash a
    /// normalised body (see [`normalise_json`]) so that equivalent requests agree.
    pub fn of_body(body: &[u8]) -> Self {
        Self(Sha256::digest(body).into())
    }

    /// SHA-256 of the compact JSON text of `value` with the keys of every object sorted
    /// (the text [`normalise_json`] writes): documents that differ only in key order or
    /// whitespace get the same fingerprint. Array order counts; sort arrays whose order
    /// does not matter before calling this.
    pub fn of_json(value: &serde_json::Value) -> Self {
        let mut text = Vec::new();
        write_sorted(value, &mut text);
        Self::of_body(&text)
    }

    /// The digest's 32 bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The digest as 64 lowercase hex digits (what the layer's 409 answer carries in the
    /// `MismatchStatus::ConflictWithHash` mode of `distlock-idempotency`'s layer).
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

/// A JSON body as compact JSON text with the keys of every object sorted (by their UTF-8
/// bytes); arrays keep their order. A body that is not JSON is returned unchanged.
///
/// Bodies that differ only in key order or whitespace normalise to the same text, so
/// `Fingerprint::of_body(&normalise_json(body))` (equal to [`Fingerprint::of_json`] of
/// the parsed body) is the same for all of them. Numbers are written as `serde_json`
/// reads them: integers within 64 bits exactly, others as the nearest `f64`.
///
/// ```
/// use distlock::idempotency::normalise_json;
///
/// let body = br#"{ "b": [2, 1], "a": {"y": null, "x": "text"} }"#;
/// assert_eq!(normalise_json(body), br#"{"a":{"x":"text","y":null},"b":[2,1]}"#);
/// assert_eq!(normalise_json(b"not json"), b"not json");
/// ```
pub fn normalise_json(body: &[u8]) -> Vec<u8> {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(value) => {
            let mut text = Vec::with_capacity(body.len());
            write_sorted(&value, &mut text);
            text
        }
        Err(_) => body.to_vec(),
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
    fn normalise_json_is_the_text_of_json_fingerprints() {
        let body = br#" { "z": [3, {"b": true, "a": 1.5}], "a": "\u00e9\n" } "#;
        let text = normalise_json(body);
        assert_eq!(String::from_utf8(text.clone()).unwrap(), "{\"a\":\"é\\n\",\"z\":[3,{\"a\":1.5,\"b\":true}]}");
        let value: serde_json::Value = serde_json::from_slice(body).unwrap();
        assert_eq!(Fingerprint::of_body(&text), Fingerprint::of_json(&value));
        for not_json in [&b""[..], b"{", b"a=1&b=2", b"\xff\xfe"] {
            assert_eq!(normalise_json(not_json), not_json);
        }
    }

    #[test]
    fn body_hash_is_plain_sha256() {
        // printf '%s' '{"item":1}' | sha256sum
        assert_eq!(
            Fingerprint::of_body(br#"{"item":1}"#).to_hex(),
            "8a90f2b609081eaf2e6fd34f85016f6a865cb41be9c56e2883c3c3e70385cebd"
        );
    }

    #[test]
    fn hex_round_trip() {
        let fp = Fingerprint::of_parts(&[b"POST", b"/orders"]);
        assert_eq!(Fingerprint::from_slice(fp.as_bytes()), Some(fp));
        assert!(Fingerprint::from_slice(&[1, 2]).is_none());
        assert!(fp.to_hex().chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }
}
