//! distlock postgres store (work in progress).
