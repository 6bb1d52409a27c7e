//! Parsing the `Idempotency-Key` header: an RFC 8941 string (`"…"`, as the IETF draft
//! defines the field) or a bare token (as most clients send it).

/// The longest key accepted, in characters (the draft leaves it open; Stripe allows 255).
pub(crate) const MAX_KEY_LEN: usize = 255;

/// The key in `value`: `"abc"` and `abc` are the same key. `None` when the value is
/// malformed or the key is not 1–255 visible ASCII characters (0x21–0x7E).
pub(crate) fn parse_key(value: &[u8]) -> Option<String> {
    let value = value.trim_ascii();
    let key = match value {
        [b'"', inner @ .., b'"'] => unescape(inner)?,
        [b'"', ..] => return None,
        bare => bare.to_vec(),
    };
    let visible = key.iter().all(|b| (0x21..=0x7e).contains(b));
    (visible && (1..=MAX_KEY_LEN).contains(&key.len())).then(|| String::from_utf8(key).ok()).flatten()
}

/// The content of an sf-string: `\"` and `\\` are the only escapes, no bare `"`.
fn unescape(inner: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&escaped @ (b'"' | b'\\')) => out.push(escaped),
                _ => return None,
            },
            b'"' => return None,
            _ => out.push(b),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_and_bare_are_the_same_key() {
        let uuid = "8e03978e-40d5-43e8-bc93-6894a57f9324";
        assert_eq!(parse_key(format!("\"{uuid}\"").as_bytes()).as_deref(), Some(uuid));
        assert_eq!(parse_key(uuid.as_bytes()).as_deref(), Some(uuid));
        assert_eq!(parse_key(br#""a\"b\\c""#).as_deref(), Some(r#"a"b\c"#));
        assert_eq!(parse_key(&[b'k'; 255]).map(|k| k.len()), Some(255));
    }

    #[test]
    fn malformed_values_are_refused() {
        for bad in [
            &b""[..],
            b"\"\"",
            b"\"",
            b"\"abc",
            b"a b",
            b"\"a b\"",
            b"\"a\\nb\"",
            b"\"a\"b\"",
            "ключ".as_bytes(),
            &[b'k'; 256],
        ] {
            assert_eq!(parse_key(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
