//! Compile errors of `#[distlock::lock]`, checked against `.stderr` snapshots in `ui/`.
//! Regenerate with `TRYBUILD=overwrite cargo test -p distlock-macros --test compile_fail`
//! and review the diff.

#[test]
fn compile_errors_point_at_the_culprit() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}

#[test]
fn versioned_derive_errors_point_at_the_culprit() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui_versioned/*.rs");
}
