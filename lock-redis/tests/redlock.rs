//! The conformance suite on Redlock over 3 and 5 private masters (no lock groups, no
//! fair queue: those cases are left out, see the README's "Redlock").

mod scale_kit;

mod three_masters_fenced {
    async fn store() -> Option<std::sync::Arc<distlock_api::DynLockStore>> {
        super::scale_kit::redlock_store(3, "?fencing=true&prefix=c3").await
    }
    crate::suite_without_groups_and_queue!(store);
}

mod five_masters {
    async fn store() -> Option<std::sync::Arc<distlock_api::DynLockStore>> {
        super::scale_kit::redlock_store(5, "?prefix=c5").await
    }
    crate::suite_without_groups_and_queue!(store);
}
