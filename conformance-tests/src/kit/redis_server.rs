//! A private `redis-server` on a free port that a test can stop, restart and flush.
