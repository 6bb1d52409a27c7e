//! The whole conformance suite on Redlock over 3 private masters. Redlock has no lock
//! groups and no fair queue (see the README's "Redlock"): those cases check that it
//! refuses groups (`Unsupported`) and that its waiters barge. Five masters run the fault
//! tests (`redlock_faults.rs`: a stopped minority and majority of 3 and of 5) and the
//! benchmark; the suite itself runs once, to keep the test run short.

use crate::scale_kit;

mod three_masters_fenced {
    async fn store() -> Option<std::sync::Arc<distlock_api::DynLockStore>> {
        super::scale_kit::redlock_store(3, "?fencing=true&prefix=c3").await
    }
    distlock_conformance::conformance_suite!(store);
}
