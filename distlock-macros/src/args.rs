//! Parsing and compile-time checking of the attribute's arguments.

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;
use syn::{Expr, LitBool, LitStr};

/// The longest TTL or wait accepted, as `distlock::Ttl::MAX`: 365 days.
const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 60 * 60);
/// The shortest renewal interval (`distlock::Renewal::MIN_INTERVAL`).
const MIN_RENEW_INTERVAL: Duration = Duration::from_millis(10);

/// A duration given as a humantime string, with the literal it came from.
pub(crate) struct DurationArg {
    pub(crate) value: Duration,
    pub(crate) lit: LitStr,
}

/// Background renewal of the lease.
pub(crate) enum Renew {
    Off,
    Auto,
    Every(DurationArg),
}

/// The attribute's arguments, checked.
pub(crate) struct LockArgs {
    pub(crate) key: LitStr,
    /// `None`: [`DEFAULT_TTL`].
    pub(crate) ttl: Option<DurationArg>,
    pub(crate) wait: Option<DurationArg>,
    pub(crate) retry: Option<DurationArg>,
    pub(crate) renew: Renew,
    pub(crate) manager: Expr,
    /// Run the function in a reentrant scope.
    pub(crate) reentrant: bool,
    /// Take a read (shared) or write (exclusive) lock group instead of a plain lock.
    pub(crate) mode: Option<Mode>,
}

/// `read` or `write`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Read,
    Write,
}

#[derive(Default)]
struct RawArgs {
    key: Option<LitStr>,
    ttl: Option<DurationArg>,
    wait: Option<DurationArg>,
    retry: Option<DurationArg>,
    renew: Option<Renew>,
    manager: Option<Expr>,
    reentrant: Option<bool>,
    mode: Option<(Mode, Span)>,
}

/// The lease when the attribute names none: 10 s.
pub(crate) const DEFAULT_TTL: Duration = Duration::from_secs(10);

const EXPECTED: &str = "expected `key`, `ttl`, `wait`, `retry`, `renew`, `manager`, `reentrant`, `read` or `write`";

impl LockArgs {
    pub(crate) fn parse(attr: TokenStream) -> syn::Result<Self> {
        let mut raw = RawArgs::default();
        let parser = syn::meta::parser(|meta| raw.parse_one(meta));
        syn::parse::Parser::parse2(parser, attr)?;
        raw.finish()
    }
}

impl RawArgs {
    fn parse_one(&mut self, meta: ParseNestedMeta<'_>) -> syn::Result<()> {
        let Some(name) = meta.path.get_ident().map(ToString::to_string) else {
            return Err(meta.error(format!("unknown argument; {EXPECTED}")));
        };
        let duplicate = match name.as_str() {
            "key" => self.key.is_some(),
            "ttl" => self.ttl.is_some(),
            "wait" => self.wait.is_some(),
            "retry" => self.retry.is_some(),
            "renew" => self.renew.is_some(),
            "manager" => self.manager.is_some(),
            "reentrant" => self.reentrant.is_some(),
            "read" | "write" => self.mode.is_some(),
            other => return Err(meta.error(format!("unknown argument `{other}`; {EXPECTED}"))),
        };
        if duplicate && matches!(name.as_str(), "read" | "write") {
            return Err(meta.error("give one of `read` and `write`, once"));
        }
        if duplicate {
            return Err(meta.error(format!("`{name}` is given more than once")));
        }
        match name.as_str() {
            "key" => self.key = Some(meta.value()?.parse()?),
            "ttl" => self.ttl = Some(duration(meta.value()?.parse()?)?),
            "wait" => self.wait = Some(duration(meta.value()?.parse()?)?),
            "retry" => self.retry = Some(duration(meta.value()?.parse()?)?),
            "renew" => self.renew = Some(renew(&meta)?),
            "reentrant" => self.reentrant = Some(flag(&meta)?),
            "read" => self.mode = Some((Mode::Read, meta.path.span())),
            "write" => self.mode = Some((Mode::Write, meta.path.span())),
            _ => self.manager = Some(meta.value()?.parse()?),
        }
        Ok(())
    }

    fn finish(self) -> syn::Result<LockArgs> {
        let missing = |what: &str| syn::Error::new(Span::call_site(), format!("#[distlock::lock] needs {what}"));
        let key = self.key.ok_or_else(|| missing("a `key = \"…\"`, e.g. `key = \"order:{order_id}\"`"))?;
        let manager = self
            .manager
            .ok_or_else(|| missing("the lock manager: `manager = <expression>`, e.g. `manager = self.locks`"))?;
        if let Some(ttl) = &self.ttl {
            if ttl.value.is_zero() {
                return Err(syn::Error::new(ttl.lit.span(), "the TTL must be greater than zero"));
            }
            if ttl.value > MAX_DURATION {
                return Err(syn::Error::new(ttl.lit.span(), "the TTL must be at most 365 days"));
            }
        }
        let ttl = self.ttl.as_ref().map_or(DEFAULT_TTL, |ttl| ttl.value);
        if let Some(wait) = &self.wait {
            if wait.value > MAX_DURATION {
                return Err(syn::Error::new(wait.lit.span(), "the wait must be at most 365 days"));
            }
            let waits = !wait.value.is_zero();
            if let Some(retry) = self.retry.as_ref().filter(|retry| waits && retry.value.is_zero()) {
                return Err(syn::Error::new(
                    retry.lit.span(),
                    "the retry interval must be greater than zero when `wait` > 0",
                ));
            }
        }
        if let (Some((_, span)), Some(true)) = (&self.mode, self.reentrant) {
            return Err(syn::Error::new(*span, "`reentrant` applies to plain locks, not to `read` / `write` locks"));
        }
        let renew = self.renew.unwrap_or(Renew::Off);
        if let Renew::Every(every) = &renew {
            // `Renewal::MIN_INTERVAL`, refused at run time too.
            if every.value < MIN_RENEW_INTERVAL {
                return Err(syn::Error::new(every.lit.span(), "the renewal interval must be at least 10 ms"));
            }
            // The default loss margin is a fifth of the TTL; renewal must come before it.
            if every.value.is_zero() || every.value >= ttl - ttl / 5 {
                return Err(syn::Error::new(
                    every.lit.span(),
                    "the renewal interval must be greater than zero and shorter than the TTL minus its loss margin (a fifth of the TTL)",
                ));
            }
        }
        Ok(LockArgs {
            key,
            ttl: self.ttl,
            wait: self.wait,
            retry: self.retry,
            renew,
            manager,
            reentrant: self.reentrant.unwrap_or(false),
            mode: self.mode.map(|(mode, _)| mode),
        })
    }
}

fn duration(lit: LitStr) -> syn::Result<DurationArg> {
    match humantime::parse_duration(&lit.value()) {
        Ok(value) => Ok(DurationArg { value, lit }),
        Err(error) => Err(syn::Error::new(
            lit.span(),
            format!("invalid duration {:?}: {error}; expected e.g. \"15s\", \"500ms\" or \"1m 30s\"", lit.value()),
        )),
    }
}

/// `renew`, `renew = true|false` or `renew = "5s"`.
fn renew(meta: &ParseNestedMeta<'_>) -> syn::Result<Renew> {
    if meta.input.is_empty() || meta.input.peek(syn::Token![,]) {
        return Ok(Renew::Auto);
    }
    let value = meta.value()?;
    if value.peek(LitBool) {
        let on: LitBool = value.parse()?;
        return Ok(if on.value { Renew::Auto } else { Renew::Off });
    }
    Ok(Renew::Every(duration(value.parse()?)?))
}

/// `reentrant` or `reentrant = true|false`.
fn flag(meta: &ParseNestedMeta<'_>) -> syn::Result<bool> {
    if meta.input.is_empty() || meta.input.peek(syn::Token![,]) {
        return Ok(true);
    }
    let on: LitBool = meta.value()?.parse()?;
    Ok(on.value)
}
