//! Configuration errors that point at the file, line and field at fault.

use std::fmt;
use std::ops::Range;

/// One problem in a configuration file: `FILE:LINE: FIELD: MESSAGE`, e.g.
/// `rules.toml:12: rules[1].limit: invalid quota "10/fortnight": unknown period unit ...`.
///
/// `line` is 1-based; it is 0 only when the problem concerns the file as a whole (it cannot be
/// read), and is then left out: `rules.toml: cannot read: No such file or directory ...`.
/// `field` is the dotted path from the document root with 0-based array indexes
/// (`rules[1].match.methods[0]`), or empty when no field is at fault (a TOML syntax error:
/// `rules.toml:2: invalid TOML: ...`); an empty field is left out too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConfigError {
    /// The file name as given on the command line, or `<embedded default>`.
    pub(crate) file: String,
    /// 1-based line of the offending value (0: the file itself).
    pub(crate) line: usize,
    /// Dotted path of the offending field, e.g. `rules[0].cost`; empty when none is at fault.
    pub(crate) field: String,
    /// What is wrong and, where possible, what would be right.
    pub(crate) message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", shorten(&self.field))?;
        }
        write!(f, ": {}", shorten(&self.message))
    }
}

/// The most characters of a quoted value an error shows; the rest is left out and counted.
pub(crate) const MAX_QUOTED: usize = 120;

/// The most characters of a message (or field) an error shows, whatever it quotes.
pub(crate) const MAX_MESSAGE: usize = 2_000;

/// `text` with every quoted value (`"..."`, as `{:?}` writes it) longer than [`MAX_QUOTED`]
/// characters cut there (`"aaa…" (4000000 characters)`), and the whole cut at
/// [`MAX_MESSAGE`]: a 4 MB value in a file is not echoed into one log line.
fn shorten(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() <= MAX_QUOTED {
        return text.into();
    }
    let mut out = String::with_capacity(text.len().min(MAX_MESSAGE + 64));
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        out.push(c);
        if c != '"' {
            continue;
        }
        // A quoted value: up to the closing quote that is not escaped.
        let (mut shown, mut count, mut escaped, mut closed) = (0usize, 0usize, false, false);
        for c in chars.by_ref() {
            if c == '"' && !escaped {
                closed = true;
                break;
            }
            escaped = c == '\\' && !escaped;
            count += 1;
            if shown < MAX_QUOTED {
                out.push(c);
                shown += 1;
            }
        }
        if count > MAX_QUOTED {
            out.push('…');
        }
        if closed {
            out.push('"');
        }
        if count > MAX_QUOTED {
            out.push_str(&format!(" ({count} characters)"));
        }
    }
    let total = out.chars().count();
    if total > MAX_MESSAGE {
        let cut: String = out.chars().take(MAX_MESSAGE).collect();
        return format!("{cut}… ({total} characters in all)").into();
    }
    out.into()
}

impl std::error::Error for ConfigError {}

/// Every problem found in one configuration file, in document order (at least one).
///
/// Parsing stops at the first syntax or type error; semantic checks (quotas, duplicate names,
/// cost above capacity, addresses) report all problems at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConfigErrors(pub(crate) Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Maps byte offsets of one document to 1-based line numbers.
#[derive(Debug)]
pub(crate) struct Source<'a> {
    pub(crate) file: &'a str,
    text: &'a str,
}

impl<'a> Source<'a> {
    pub(crate) fn new(file: &'a str, text: &'a str) -> Self {
        Self { file, text }
    }

    /// The 1-based line holding byte `offset` (clamped to the document).
    pub(crate) fn line_of(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    /// An error at `span` (a byte range into the document).
    pub(crate) fn error(
        &self,
        span: Range<usize>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            file: self.file.to_string(),
            line: self.line_of(span.start),
            field: field.into(),
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_quoted_values_are_cut_with_their_length() {
        let e = ConfigError {
            file: "f.toml".into(),
            line: 2,
            field: "server.listen".into(),
            message: format!("invalid address {:?}: not host:port", "a".repeat(4_000_000)),
        };
        let shown = e.to_string();
        assert_eq!(
            shown,
            format!(
                "f.toml:2: server.listen: invalid address \"{}…\" (4000000 characters): not host:port",
                "a".repeat(MAX_QUOTED)
            )
        );
        // Short values and escaped quotes are left as they are.
        let short = format!("{:?} and {:?}", "x\"y", "b".repeat(MAX_QUOTED));
        let e = ConfigError {
            message: format!("{short} {}", "c".repeat(200)),
            ..e
        };
        assert_eq!(e.message, shorten(&e.message));
        // An unquoted giant (a parser's snippet) is cut as a whole.
        let e = ConfigError {
            message: "z".repeat(10_000),
            ..e
        };
        assert_eq!(
            e.to_string(),
            format!(
                "f.toml:2: server.listen: {}… (10000 characters in all)",
                "z".repeat(MAX_MESSAGE)
            )
        );
    }

    #[test]
    fn lines_are_one_based_and_count_newlines_before_the_offset() {
        let s = Source::new("f.toml", "a = 1\nb = 2\n\nc = 3");
        assert_eq!(s.line_of(0), 1);
        assert_eq!(s.line_of(5), 1); // the newline itself still belongs to line 1
        assert_eq!(s.line_of(6), 2);
        assert_eq!(s.line_of(13), 4);
        assert_eq!(s.line_of(10_000), 4);
        let e = s.error(6..7, "b", "bad");
        assert_eq!(e.to_string(), "f.toml:2: b: bad");
        let e = s.error(6..7, "", "invalid TOML: bad");
        assert_eq!(e.to_string(), "f.toml:2: invalid TOML: bad");
        let e = ConfigError {
            line: 0,
            ..s.error(0..0, "", "cannot read: gone")
        };
        assert_eq!(e.to_string(), "f.toml: cannot read: gone");
    }
}
