#[derive(distlock_macros::Versioned)]
struct Post {
    id: i64,
    #[versioned(version)]
    version: i32,
}

fn main() {}
