//! distlock redis store (work in progress).
