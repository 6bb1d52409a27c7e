//! Metrics (feature `metrics`); every function compiles to nothing without it.

#[cfg(feature = "metrics")]
mod imp {
    use crate::metric_names::{CLAIM_TOTAL, COMPLETION_TOTAL, CONFLICT_TOTAL, REPLAY_TOTAL};

    pub(crate) fn claim(backend: &'static str, outcome: &'static str) {
        metrics::counter!(CLAIM_TOTAL, "backend" => backend, "outcome" => outcome).increment(1);
        match outcome {
            "replayed" => metrics::counter!(REPLAY_TOTAL, "backend" => backend).increment(1),
            "in_progress" | "mismatch" => {
                metrics::counter!(CONFLICT_TOTAL, "backend" => backend, "reason" => outcome).increment(1);
            }
            _ => {}
        }
    }

    pub(crate) fn completion(backend: &'static str, outcome: &'static str) {
        metrics::counter!(COMPLETION_TOTAL, "backend" => backend, "outcome" => outcome).increment(1);
    }
}

#[cfg(not(feature = "metrics"))]
mod imp {
    #[inline(always)]
    pub(crate) fn claim(_: &'static str, _: &'static str) {}
    #[inline(always)]
    pub(crate) fn completion(_: &'static str, _: &'static str) {}
}

pub(crate) use imp::{claim, completion};
