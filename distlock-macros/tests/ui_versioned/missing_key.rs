#[derive(distlock_macros::Versioned)]
#[versioned(table = "posts", key = "post_id")]
struct Post {
    id: i64,
    #[versioned(version)]
    version: i64,
}

fn main() {}
