//! PostgreSQL fault hooks (terminating the pool's backends).
