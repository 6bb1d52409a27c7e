//! The conformance suite on Redlock over 3 private masters (no lock groups, no fair
//! queue: those cases are left out, see the README's "Redlock"). Five masters run the
//! fault tests (`redlock_faults.rs`: a stopped minority and majority of 3 and of 5) and
//! the benchmark; the suite itself runs once, to keep the test run short.

mod scale_kit;

mod three_masters_fenced {
    async fn store() -> Option<std::sync::Arc<distlock_api::DynLockStore>> {
        super::scale_kit::redlock_store(3, "?fencing=true&prefix=c3").await
    }
    crate::suite_without_groups_and_queue!(store);
}
