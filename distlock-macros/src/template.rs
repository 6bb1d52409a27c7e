//! Key templates: `"order:{order_id}"` → a `format!` call over the function's parameters.

use proc_macro2::Ident;
use syn::LitStr;

/// The longest key the lock API accepts, in bytes (`distlock::LockKey::MAX_LEN`).
const MAX_KEY_LEN: usize = 512;

/// A parsed key template: a `format!` string and the placeholder names, in order.
pub(crate) struct KeyTemplate {
    pub(crate) format: String,
    pub(crate) placeholders: Vec<String>,
}

impl KeyTemplate {
    /// Parses `{name}` placeholders (`{{` and `}}` are literal braces) and checks the
    /// literal parts the way `LockKey::new` would, so a key that can never be valid fails
    /// to compile.
    pub(crate) fn parse(lit: &LitStr) -> syn::Result<Self> {
        let text = lit.value();
        let error = |message: String| syn::Error::new(lit.span(), message);
        let mut format = String::new();
        let mut placeholders = Vec::new();
        let mut literal_len = 0;
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    format.push_str("{{");
                    literal_len += 1;
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    format.push_str("}}");
                    literal_len += 1;
                }
                '{' => {
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) => name.push(c),
                            None => return Err(error(format!("unclosed placeholder `{{{name}` in the key template"))),
                        }
                    }
                    if !is_identifier(&name) {
                        return Err(error(format!(
                            "`{{{name}}}` is not a placeholder: write `{{parameter_name}}` (no expressions, \
                             no format specs), or `{{{{` / `}}}}` for literal braces"
                        )));
                    }
                    format.push_str("{}");
                    placeholders.push(name);
                }
                '}' => return Err(error("unmatched `}` in the key template; write `}}` for a literal brace".into())),
                c if c.is_control() => {
                    return Err(error(format!("the key template contains the control character {c:?}")));
                }
                c => {
                    format.push(c);
                    literal_len += c.len_utf8();
                }
            }
        }
        if text.is_empty() {
            return Err(error("the key must not be empty".into()));
        }
        if literal_len > MAX_KEY_LEN {
            return Err(error(format!(
                "the key template is {literal_len} bytes long, at most {MAX_KEY_LEN} are allowed"
            )));
        }
        Ok(Self { format, placeholders })
    }
}

fn is_identifier(name: &str) -> bool {
    syn::parse_str::<Ident>(name).is_ok()
        || name.strip_prefix("r#").is_some_and(|raw| syn::parse_str::<Ident>(raw).is_ok())
}
