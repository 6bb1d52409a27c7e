//! `Version`: the Rust types of an integer version column. Imports nothing from the rest
//! of the crate.

use std::fmt::{Debug, Display};

/// The Rust type of an integer version column: `i16` for `smallint`, `i32` for `integer`,
/// `i64` for `bigint`.
///
/// [`VersionedUpdate::version`](crate::VersionedUpdate::version) takes any of them, so a
/// version read into the field type of the column passes straight back, and is bound as
/// that type. Results and errors report versions as `i64`, which holds all three.
///
/// Implemented for `i16`, `i32` and `i64` only (PostgreSQL has no unsigned integers);
/// it cannot be implemented outside this crate.
pub trait Version: Copy + Debug + Display + Into<i64> + Send + Sync + 'static + sealed::Sealed {}

impl Version for i16 {}
impl Version for i32 {}
impl Version for i64 {}

mod sealed {
    use crate::dialect::{Dialect, Int};

    /// Keeps [`Version`](super::Version) to the three integer types PostgreSQL has.
    pub trait Sealed {
        fn expected(self) -> Expected;
    }

    /// An expected version, kept in the type it came in so that it is bound as that type.
    #[derive(Debug, Clone, Copy)]
    pub enum Expected {
        Smallint(i16),
        Integer(i32),
        Bigint(i64),
    }

    impl Expected {
        pub fn get(self) -> i64 {
            match self {
                Expected::Smallint(version) => version.into(),
                Expected::Integer(version) => version.into(),
                Expected::Bigint(version) => version,
            }
        }

        /// Adds the version to `values` as its own type.
        pub fn bind<DB: Dialect>(self, values: &mut DB::Values) -> Result<(), sqlx::error::BoxDynError> {
            match self {
                Expected::Smallint(version) => DB::push_int(values, Int::I16(version)),
                Expected::Integer(version) => DB::push_int(values, Int::I32(version)),
                Expected::Bigint(version) => DB::push_int(values, Int::I64(version)),
            }
        }
    }

    impl Sealed for i16 {
        fn expected(self) -> Expected {
            Expected::Smallint(self)
        }
    }

    impl Sealed for i32 {
        fn expected(self) -> Expected {
            Expected::Integer(self)
        }
    }

    impl Sealed for i64 {
        fn expected(self) -> Expected {
            Expected::Bigint(self)
        }
    }
}

pub(crate) use sealed::Expected;

/// The expected version of `version`, in its own type.
pub(crate) fn expected<V: Version>(version: V) -> Expected {
    sealed::Sealed::expected(version)
}
