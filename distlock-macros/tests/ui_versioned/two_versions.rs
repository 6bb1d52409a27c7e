#[derive(distlock_macros::Versioned)]
#[versioned(table = "posts")]
struct Post {
    id: i64,
    #[versioned(version)]
    version: i32,
    #[versioned(version)]
    revision: i32,
}

fn main() {}
