//! The command lines of the tool crates (`simulate`, `bench`): flags in, the library's plain
//! options out, the output written here.

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use floodgate_simulate::Choice;

pub(crate) mod bench;
pub(crate) mod simulate;

/// A clap value parser for the named values `all` (name and `--help` text of each), so a
/// library's plain enum lists its choices in `--help` as a `clap::ValueEnum` would.
pub(crate) fn choice_of<T: Copy + Send + Sync + 'static>(
    all: &'static [(T, &'static str, &'static str)],
) -> impl TypedValueParser<Value = T> {
    PossibleValuesParser::new(
        all.iter()
            .map(|(_, name, help)| PossibleValue::new(*name).help(*help)),
    )
    .map(move |name: String| {
        all.iter()
            .find(|(_, n, _)| *n == name)
            .map(|(value, _, _)| *value)
            .expect("the parser only passes listed names")
    })
}

/// [`choice_of`] a [`Choice`] of floodgate-simulate.
pub(crate) fn choice<T: Choice + Send + Sync>() -> impl TypedValueParser<Value = T> {
    choice_of(T::ALL)
}
