//! The command lines of the tool crates (`simulate`, `bench`): flags in, the library's plain
//! options out, the output written here.

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use floodgate_simulate::Choice;

pub(crate) mod bench;
pub(crate) mod openapi;
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

/// Writes `text` to standard output and flushes it. A reader that went away (`floodgate
/// check-config rules.toml | head -1`) is not an error: the rest is simply not wanted.
///
/// # Errors
/// Any other failure to write, with context.
pub(crate) fn write_stdout(text: &str) -> anyhow::Result<()> {
    use anyhow::Context as _;
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .or_else(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe => Ok(()),
            _ => Err(e),
        })
        .context("cannot write to standard output")
}
