#[derive(distlock_macros::Versioned)]
#[versioned(table = "posts")]
struct Post {
    id: i64,
    #[versioned(version)]
    version: String,
}

fn main() {}
