#[derive(distlock_macros::Versioned)]
#[versioned(table = "posts")]
struct Post {
    id: i64,
    title: String,
}

fn main() {}
