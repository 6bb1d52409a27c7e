//! The differential test catches a planted one-character change to either server-side
//! rule. Each test here puts a *mutant* of the rule on a real server — the grant function
//! or the acquire script with one character changed at a spot the rule depends on — runs
//! the driver against it and requires a divergence within [`MUTANT_STEPS`] steps; a
//! control runs the same path with the text unchanged and requires agreement (for
//! `DISTLOCK_DIFF_STEPS` steps, else the CI limits).
//!
//! - PostgreSQL: the store's own DDL
//!   ([`Statements::ddl`](distlock::postgres::Statements::ddl)) creates a schema, with
//!   the grant function's text mutated, and a store with `create_schema(false)` (which
//!   uses the function it finds) runs the history. Mutants of `acquire_group.sql`:
//!   [`PG_TICKET`] (`h.ticket < blocked_ticket` → `<=`: a place of an equal ticket holds
//!   the request back), [`PG_MODE`] (`'I'` → `'J'`: requests yield to older places of
//!   their own mode instead of the other), [`PG_PERMITS`] (`< p.permits` → `<=`: one
//!   holder more than the permits).
//! - Redis: the store runs behind a [`ScriptProxy`] that sends the mutant wherever the
//!   store runs `group_acquire` (`lib/group.lua`, `lib/clock_fence.lua` and
//!   `group_acquire.lua`, joined as `distlock-redis/src/scripts.rs` joins them), with the
//!   store's own keys and arguments. Mutants of `group_acquire.lua`: [`REDIS_TICKET`]
//!   (`"(3" .. ticket_s` → `"3" ..`: the same as `PG_TICKET`), [`REDIS_MODE`] (`== 88` →
//!   `== 83`: every member checked in the other mode), [`REDIS_PERMITS`] (`held + 1 >
//!   tonumber(permits)` → `>=`: one holder fewer than the recorded permits).
//!
//! A mutation must find its text exactly once, and the mutated text must reach the server
//! (the function in the catalog, the proxy's swap count), so an edit of the rule's text
//! fails these tests rather than let them pass on an unchanged rule.
//!
//! Mutant runs have no expiries (nothing the mutants change depends on time, and a run
//! then has no epochs to sleep through) and stop at the first divergence; each prints the
//! step that caught its mutant, and `DISTLOCK_DIFF_SEED=<n>` replays one.

use std::sync::Arc;

use distlock::postgres::{sqlx, PostgresLockStore};
use distlock::DynLockStore;

use super::script_proxy::ScriptProxy;
use super::{drive, private_name, private_url, seed, Divergence, Limits};

/// Steps a mutant may go unnoticed before its test fails. Over 160 seeds each, the
/// mutants were caught after 18 to 149 steps on average and 734 at most (the equal-ticket
/// mutants need a probe with a waiting group's exact ticket); 2,000 steps, about 3 s
/// without expiries, leave a miss about one chance in a million.
const MUTANT_STEPS: u64 = 2000;

/// The Redis acquire script, as the store runs it.
const GROUP_ACQUIRE: &str = concat!(
    include_str!("../../../../distlock-redis/src/lua/lib/group.lua"),
    include_str!("../../../../distlock-redis/src/lua/lib/clock_fence.lua"),
    include_str!("../../../../distlock-redis/src/lua/group_acquire.lua"),
);

/// A one-character change of a rule's text: `find`, which must occur exactly once,
/// becomes `replace`.
#[derive(Debug)]
struct Mutant {
    what: &'static str,
    find: &'static str,
    replace: &'static str,
}

impl Mutant {
    fn apply(&self, text: &str) -> String {
        assert_eq!(
            text.matches(self.find).count(),
            1,
            "mutant `{}`: `{}` is not in the text once",
            self.what,
            self.find
        );
        assert!(one_character_apart(self.find, self.replace), "mutant `{}` changes more than one character", self.what);
        text.replacen(self.find, self.replace, 1)
    }
}

/// Whether `b` is `a` with one character replaced, inserted or removed.
fn one_character_apart(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..].iter().rev().zip(b[prefix..].iter().rev()).take_while(|(x, y)| x == y).count();
    let (a_left, b_left) = (a.len() - prefix - suffix, b.len() - prefix - suffix);
    a_left.max(b_left) == 1
}

/// A run of a mutant must diverge.
fn require_caught(label: &str, mutant: &Mutant, outcome: Result<(), Divergence>) {
    match outcome {
        Err(divergence) => {
            let what = divergence.report.lines().next().unwrap_or_default();
            eprintln!("{label}: mutant `{}` caught at step {}: {what}", mutant.what, divergence.steps);
        }
        Ok(()) => panic!(
            "{label}: mutant `{}` (`{}` → `{}`) agreed with the grant rule for {MUTANT_STEPS} steps",
            mutant.what, mutant.find, mutant.replace
        ),
    }
}

/// A mutant's run: `MUTANT_STEPS`; the unchanged rule's: as the other tests'.
fn limits(mutant: Option<&Mutant>) -> Limits {
    match mutant {
        Some(_) => Limits { steps: MUTANT_STEPS, budget: None },
        None => Limits::from_env(),
    }
}

// PostgreSQL: `src/sql/group/acquire_group.sql`, the check-and-take statement.

/// An older place of the other mode holds the request back only when its ticket is
/// strictly smaller: `<=` lets an equal ticket (a probe's) hold it back too.
const PG_TICKET: Mutant = Mutant {
    what: "a place of an equal ticket counts as older",
    find: "AND h.ticket < blocked_ticket), false) AS yields",
    replace: "AND h.ticket <= blocked_ticket), false) AS yields",
};

/// A request yields to older places of the other mode (`I` exclusive, `J` shared): `J`
/// makes it yield to those of its own mode instead.
const PG_MODE: Mutant = Mutant {
    what: "requests yield to older places of their own mode",
    find: "(h.mode = 'I') <> (d.mode = 'W')",
    replace: "(h.mode = 'J') <> (d.mode = 'W')",
};

/// Holders and older places of the mode must be fewer than the permits: `<=` admits one
/// more.
const PG_PERMITS: Mutant = Mutant {
    what: "permits admit one more",
    find: "a.same + a.queued < p.permits",
    replace: "a.same + a.queued <= p.permits",
};

/// The store's DDL with `mutant` applied to it, in a schema of its own, and a store that
/// does not create its schema on it; then the driver.
async fn postgres(test: &'static str, mutant: Option<&Mutant>) -> Option<Result<(), Divergence>> {
    let url = distlock_conformance::kit::postgres_url(test)?;
    let name = private_name();
    let creator = PostgresLockStore::builder().schema(name.as_str()).connect(&url).await;
    let creator = creator.unwrap_or_else(|err| panic!("{test}: connect: {err}"));
    let pool = creator.pool().clone();
    let ddl = creator.statements().ddl();
    if let Some(mutant) = mutant {
        let found = ddl.iter().filter(|statement| statement.contains(mutant.find)).count();
        assert_eq!(found, 1, "{test}: `{}` is not in one statement of the DDL", mutant.find);
    }
    let mut tx = pool.begin().await.expect("a transaction");
    for statement in ddl {
        let statement = match mutant {
            Some(mutant) if statement.contains(mutant.find) => mutant.apply(statement),
            _ => statement.to_owned(),
        };
        let done = sqlx::query(&statement).execute(&mut *tx).await;
        done.unwrap_or_else(|err| panic!("{test}: {err} in\n{statement}"));
    }
    tx.commit().await.expect("the DDL commits");
    if let Some(mutant) = mutant {
        let functions: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace \
             WHERE n.nspname = $1 AND strpos(p.prosrc, $2) > 0",
        )
        .bind(&name)
        .bind(mutant.replace)
        .fetch_one(&pool)
        .await
        .expect("the catalog answers");
        assert_eq!(functions, 1, "{test}: the schema's grant function is not the mutant");
    }
    let store = PostgresLockStore::builder().schema(name.as_str()).create_schema(false).build(pool.clone());
    let store: Arc<DynLockStore> = Arc::new(store.expect("a valid layout"));
    let outcome = drive("postgres", store, &name, seed(), false, limits(mutant)).await;
    let dropped = sqlx::query(&format!("DROP SCHEMA {name} CASCADE")).execute(&pool).await;
    dropped.unwrap_or_else(|err| panic!("{test}: dropping schema {name}: {err}"));
    Some(outcome)
}

async fn postgres_catches(test: &'static str, mutant: &Mutant) {
    if let Some(outcome) = postgres(test, Some(mutant)).await {
        require_caught("postgres", mutant, outcome);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_agrees_with_its_ddl_run_by_hand() {
    if let Some(Err(divergence)) = postgres("postgres_agrees_with_its_ddl_run_by_hand", None).await {
        panic!("{divergence}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_catches_an_equal_ticket_counted_as_older() {
    postgres_catches("postgres_catches_an_equal_ticket_counted_as_older", &PG_TICKET).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_catches_places_of_the_wrong_mode() {
    postgres_catches("postgres_catches_places_of_the_wrong_mode", &PG_MODE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_catches_one_permit_too_many() {
    postgres_catches("postgres_catches_one_permit_too_many", &PG_PERMITS).await;
}

// Redis: `src/lua/group_acquire.lua`, the function `grantable` and its helpers.

/// Older places are those with a ticket below the request's (`(` excludes the bound):
/// without it an equal ticket (a probe's) counts as older.
const REDIS_TICKET: Mutant = Mutant {
    what: "a place of an equal ticket counts as older",
    find: r#"or "(3" .. ticket_s"#,
    replace: r#"or "3" .. ticket_s"#,
};

/// A member is exclusive when its mode letter is `X` (88): 83 (`S`) inverts every member's
/// mode in the check.
const REDIS_MODE: Mutant =
    Mutant { what: "members are checked in the other mode", find: "== 88, ARGV[4 + i]", replace: "== 83, ARGV[4 + i]" };

/// Recorded permits refuse when one more would exceed them: `>=` refuses at one below.
const REDIS_PERMITS: Mutant = Mutant {
    what: "recorded permits admit one fewer",
    find: "held + 1 > tonumber(permits)",
    replace: "held + 1 >= tonumber(permits)",
};

/// The store behind a proxy that runs the acquire script with `mutant` applied; then the
/// driver.
async fn redis(test: &'static str, mutant: Option<&Mutant>) -> Option<Result<(), Divergence>> {
    let url = distlock_conformance::kit::redis_url(test)?;
    let script = mutant.map_or_else(|| GROUP_ACQUIRE.to_owned(), |mutant| mutant.apply(GROUP_ACQUIRE));
    let proxy = ScriptProxy::start(&url, GROUP_ACQUIRE, script).await;
    let proxy = proxy.unwrap_or_else(|err| panic!("{test}: the proxy: {err}"));
    let name = private_name();
    let store = distlock::connect(&private_url(proxy.url(), &name)).await;
    let store = store.unwrap_or_else(|err| panic!("{test}: connect: {err}"));
    let outcome = drive("redis", store, &name, seed(), false, limits(mutant)).await;
    assert!(
        proxy.swapped() > 0,
        "{test}: the store never ran the acquire script as this test joins it (see distlock-redis/src/scripts.rs)"
    );
    Some(outcome)
}

async fn redis_catches(test: &'static str, mutant: &Mutant) {
    if let Some(outcome) = redis(test, Some(mutant)).await {
        require_caught("redis", mutant, outcome);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_agrees_through_the_script_proxy() {
    if let Some(Err(divergence)) = redis("redis_agrees_through_the_script_proxy", None).await {
        panic!("{divergence}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_catches_an_equal_ticket_counted_as_older() {
    redis_catches("redis_catches_an_equal_ticket_counted_as_older", &REDIS_TICKET).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_catches_members_in_the_wrong_mode() {
    redis_catches("redis_catches_members_in_the_wrong_mode", &REDIS_MODE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_catches_one_permit_too_few() {
    redis_catches("redis_catches_one_permit_too_few", &REDIS_PERMITS).await;
}

#[test]
fn mutations_change_one_character() {
    assert!(one_character_apart("a < b", "a <= b"));
    assert!(one_character_apart("'I'", "'J'"));
    assert!(one_character_apart("(3", "3"));
    assert!(!one_character_apart("a < b", "a < b"));
    assert!(!one_character_apart("a < b", "a >= b"));
}
