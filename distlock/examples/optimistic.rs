//! Optimistic locking on PostgreSQL: two writers read the same row; the first one's
//! versioned update goes through, the second one's is refused as stale, and it succeeds
//! once it has read the row again.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@localhost/postgres \
//!     cargo run --example optimistic -p distlock --features optimistic
//! ```
//!
//! The example works in a temporary table of its own (`documents`), which PostgreSQL drops
//! when the example's connection closes: nothing is left on the server.

use std::error::Error;
use std::process::ExitCode;

use distlock::optimistic::sqlx::{self, Connection as _, PgConnection};
use distlock::optimistic::{OptimisticError, Versioned};

/// What a writer read and wants to write back: the row's columns, and the version it had.
#[derive(Debug, Clone, Versioned)]
#[versioned(table = "documents", crate = "distlock::optimistic")]
struct Document {
    id: i64,
    title: String,
    #[versioned(version)]
    version: i32,
}

async fn read(conn: &mut PgConnection, id: i64) -> Result<Document, sqlx::Error> {
    let (title, version) =
        sqlx::query_as("SELECT title, version FROM documents WHERE id = $1").bind(id).fetch_one(conn).await?;
    Ok(Document { id, title, version })
}

async fn run(url: &str) -> Result<(), Box<dyn Error>> {
    let mut conn = PgConnection::connect(url).await?;
    sqlx::query(
        "CREATE TEMPORARY TABLE documents (id bigint PRIMARY KEY, title text NOT NULL, \
         version integer NOT NULL DEFAULT 0)",
    )
    .execute(&mut conn)
    .await?;
    sqlx::query("INSERT INTO documents (id, title) VALUES (1, 'Draft')").execute(&mut conn).await?;

    // Alice and Bob both open document 1 at version 0.
    let mut alice = read(&mut conn, 1).await?;
    let mut bob = read(&mut conn, 1).await?;
    println!("alice and bob read {:?} at version {}", alice.title, alice.version);

    alice.title = "Alice's title".into();
    let version = alice.update_by_id(&mut conn).await?;
    println!("alice's update went through: version {version}");

    bob.title = "Bob's title".into();
    match bob.update_by_id(&mut conn).await {
        Err(OptimisticError::Stale(stale)) => println!("bob's update was refused: {stale}"),
        Ok(version) => return Err(format!("bob's stale update overwrote alice's (version {version})").into()),
        Err(other) => return Err(other.into()),
    }

    // Bob reads the row again, re-applies his change, and writes it back.
    let mut bob = read(&mut conn, 1).await?;
    bob.title = format!("{} (edited by Bob)", bob.title);
    let version = bob.update_by_id(&mut conn).await?;
    let row = read(&mut conn, 1).await?;
    println!("bob's second update went through: {:?} at version {version}", row.title);
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let Ok(url) = std::env::var("DATABASE_URL") else {
        eprintln!(
            "DATABASE_URL is not set: point it at a PostgreSQL database the example may create a \
             temporary table in, e.g.\n  DATABASE_URL=postgres://postgres@localhost/postgres \
             cargo run --example optimistic -p distlock --features optimistic"
        );
        return ExitCode::from(2);
    };
    match run(&url).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("optimistic example failed: {err}");
            ExitCode::FAILURE
        }
    }
}
