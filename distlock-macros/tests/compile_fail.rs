//! Compile errors of `#[distlock::lock]` (`ui/`) and of `#[derive(Versioned)]`
//! (`ui_versioned/`), checked against `.stderr` snapshots. Regenerate with
//! `TRYBUILD=overwrite cargo test -p distlock-macros --test compile_fail` and review the diff.
//!
//! One test for both directories: trybuild builds the dependencies once per `TestCases`
//! run, and that build is most of the time this test takes.

#[test]
fn compile_errors_point_at_the_culprit() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
    cases.compile_fail("tests/ui_versioned/*.rs");
}
