//! `distlock inspect` and `distlock release`.

use std::time::Duration;

use serde::Serialize;

use crate::cli::{InspectArgs, ReleaseArgs};
use crate::exit::{Failure, NOT_RELEASED};
use crate::store;

/// What `inspect --json` prints.
#[derive(Debug, Serialize)]
struct Inspection<'a> {
    key: &'a str,
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fence: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl_left_ms: Option<u128>,
}

/// Prints the holder of a lock, or that it is free.
pub(crate) async fn inspect(url: Option<&str>, args: InspectArgs) -> Result<u8, Failure> {
    let url = store::require_url(url, "inspect")?;
    store::refuse_memory(url, "inspect")?;
    let store = store::connect(url).await?;
    let info = store.inspect(&args.key.to_store_key()).await?;
    let key = args.key.as_str();
    let token = info.as_ref().map(|info| if args.show_token { info.token.as_str() } else { info.token.short() });
    if args.json {
        let inspection = Inspection {
            key,
            state: if info.is_some() { "held" } else { "free" },
            token,
            fence: info.as_ref().and_then(|info| info.fence),
            ttl_left_ms: info.as_ref().map(|info| info.ttl_left.as_millis()),
        };
        println!(
            "{}",
            serde_json::to_string(&inspection)
                .map_err(|error| Failure::new(crate::exit::SOFTWARE, error.to_string()))?
        );
        return Ok(0);
    }
    match (&info, token) {
        (Some(info), Some(token)) => {
            let ellipsis = if args.show_token { "" } else { "…" };
            let fence = info.fence.map_or_else(|| "none".to_owned(), |fence| fence.to_string());
            println!("{key}: held by token {token}{ellipsis}, fence {fence}, {} left", round(info.ttl_left));
        }
        _ => println!("{key}: free"),
    }
    Ok(0)
}

/// Releases a lock if `--token` still holds it.
pub(crate) async fn release(url: Option<&str>, args: ReleaseArgs) -> Result<u8, Failure> {
    let url = store::require_url(url, "release")?;
    store::refuse_memory(url, "release")?;
    let store = store::connect(url).await?;
    let key = args.key.as_str();
    if store.release(&args.key.to_store_key(), &args.token).await? {
        println!("{key}: released");
        Ok(0)
    } else {
        eprintln!(
            "distlock: lock `{key}` not released: token {}… does not hold it (it is free, expired, or held by another token)",
            args.token.short()
        );
        Ok(NOT_RELEASED)
    }
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
