//! Reading the store parameters of a URL query. No error repeats the URL (it may hold a
//! password): errors name the parameter, shortened and without control characters.

use distlock_api::LockError;

use crate::identifier::{Identifier, IdentifierRules};

/// Reads `query` (the part of a URL after `?`, without its fragment): each
/// `name=value` pair whose percent-decoded name is in `known` goes to
/// `store_parameter(name, value)` with its value decoded, each other pair to
/// `other(name, pair)` (which passes it on to the driver or refuses it).
///
/// # Errors
///
/// [`LockError::Config`] for a name or value that is not UTF-8 once decoded, or a known
/// parameter given more than once; and what the two functions return.
pub fn read_query<'q>(
    query: &'q str,
    known: &[&str],
    mut store_parameter: impl FnMut(&str, &str) -> Result<(), LockError>,
    mut other: impl FnMut(&str, &'q str) -> Result<(), LockError>,
) -> Result<(), LockError> {
    let mut seen: Vec<String> = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (raw_name, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = decode(raw_name, true).ok_or_else(|| config("a URL parameter name is not UTF-8".to_owned()))?;
        if !known.contains(&name.as_str()) {
            other(&name, pair)?;
            continue;
        }
        let shown = shown(&name);
        if seen.contains(&name) {
            return Err(config(format!("URL parameter `{shown}` is given more than once")));
        }
        let value = decode(raw_value, true)
            .ok_or_else(|| config(format!("the value of URL parameter `{shown}` is not UTF-8")))?;
        store_parameter(&name, &value)?;
        seen.push(name);
    }
    Ok(())
}

/// The value of the flag parameter `name`: `true` or `false`, in any case.
///
/// # Errors
///
/// [`LockError::Config`] naming `name` and showing the value for anything else.
pub fn flag(name: &str, value: &str) -> Result<bool, LockError> {
    match value.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(config(format!("URL parameter `{name}` must be `true` or `false`, got {:?}", shown(value)))),
    }
}

/// The value of the name parameter `name` as an identifier.
///
/// # Errors
///
/// [`LockError::Config`] naming `name` when the value is not a plain identifier.
pub fn identifier<R: IdentifierRules>(name: &str, value: &str) -> Result<Identifier<R>, LockError> {
    Identifier::new(name, value).map_err(|error| match error {
        LockError::Config { message } => config(format!("URL parameter `{name}`: {message}")),
        other => other,
    })
}

/// The error for an unknown parameter `name` of a `database` URL; `expected` lists what
/// the URL may carry.
pub fn unknown(database: &str, name: &str, expected: &str) -> LockError {
    config(format!("unknown {database} URL parameter `{}`: expected {expected}", shown(name)))
}

/// A name or value as it may appear in an error: printable and at most 40 characters.
pub fn shown(text: &str) -> String {
    let printable: String = text.chars().filter(|c| !c.is_control()).take(40).collect();
    if printable.len() < text.len() {
        format!("{printable}…")
    } else {
        printable
    }
}

/// Percent-decoding; with `plus_is_space`, as in `application/x-www-form-urlencoded`
/// (what sqlx applies to query parameters), otherwise `+` stays (a path may hold it). A
/// `%` not followed by two hex digits stays as it is. `None` when the result is not UTF-8.
pub fn decode(text: &str, plus_is_space: bool) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (hex, bytes[i]) {
            (Some(byte), _) => {
                out.push(byte);
                i += 3;
                continue;
            }
            (None, b'+') if plus_is_space => out.push(b' '),
            (None, byte) => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

fn config(message: String) -> LockError {
    LockError::Config { message }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_matches_form_urlencoding_or_keeps_plus() {
        assert_eq!(decode("a+b%20c%2B%zz%", true), Some("a b c+%zz%".to_owned()));
        assert_eq!(decode("a+b%20c", false), Some("a+b c".to_owned()));
        assert_eq!(decode("%C3%A9", true), Some("é".to_owned()));
        assert_eq!(decode("%FF", false), None);
    }

    #[test]
    fn known_parameters_are_decoded_once_each_and_others_passed_on() {
        let mut set = Vec::new();
        let mut passed = Vec::new();
        read_query(
            "ta%62le=a%5Fb&sslmode=x&&flag=TRUE",
            &["table", "flag"],
            |name, value| {
                set.push((name.to_owned(), value.to_owned()));
                Ok(())
            },
            |name, pair| {
                passed.push((name.to_owned(), pair));
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(set, [("table".to_owned(), "a_b".to_owned()), ("flag".to_owned(), "TRUE".to_owned())]);
        assert_eq!(passed, [("sslmode".to_owned(), "sslmode=x")]);
        let twice = read_query("table=a&table=a", &["table"], |_, _| Ok(()), |_, _| Ok(())).unwrap_err();
        assert!(twice.to_string().contains("`table` is given more than once"), "{twice}");
    }

    #[test]
    fn flags_and_errors_show_short_printable_text() {
        assert!(flag("create", "True").unwrap());
        assert!(!flag("create", "FALSE").unwrap());
        let err = flag("create", &format!("yes\n{}", "x".repeat(60))).unwrap_err().to_string();
        assert!(err.contains("`create`") && !err.contains('\n') && err.contains('…'), "{err}");
        assert!(unknown("MySQL", "tabel", "table").to_string().contains("`tabel`"));
    }
}
