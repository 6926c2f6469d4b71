//! Bounds checked before a configuration is parsed: its size and how deeply it nests.
//!
//! The TOML and YAML parsers (and the drop of what they build) recurse once per level of
//! nesting, so a small file nested thousands of levels deep (`- - - - ...`, `[[[[...`,
//! `a.b.c.d...`) would overflow the stack and abort the process: at start, in `check-config`,
//! or on a hot reload of the live file. A cheap linear pre-scan measures the nesting first and
//! refuses a file deeper than [`MAX_DEPTH`] with an error naming the file and the line where
//! the bound is crossed. Real configurations nest fewer than 10 levels.
//!
//! The scans over-count rather than under-count (a line's indentation, every sequence or key
//! indicator and every open bracket each count as a level), so a file they accept parses
//! within a small multiple of the bound, far below any stack limit.

use super::error::ConfigError;

/// Deepest nesting accepted in a configuration file, in levels.
pub(crate) const MAX_DEPTH: usize = 64;

/// Largest configuration file accepted, in bytes (4 MiB; real ones are a few KiB).
pub(crate) const MAX_FILE_BYTES: usize = 4 << 20;

/// Largest configuration accepted in all (the files of a YAML directory together), in bytes.
pub(crate) const MAX_TOTAL_BYTES: usize = 16 << 20;

fn too_deep(file: &str, line: usize) -> ConfigError {
    ConfigError {
        file: file.to_string(),
        line,
        field: String::new(),
        message: format!(
            "nested more than {MAX_DEPTH} levels deep (the most a configuration may nest; real \
             ones need fewer than 10)"
        ),
    }
}

/// `text` (the file `file`) is at most [`MAX_FILE_BYTES`].
///
/// # Errors
/// A [`ConfigError`] naming the file and the bound.
pub(crate) fn check_size(file: &str, text: &str) -> Result<(), ConfigError> {
    if text.len() > MAX_FILE_BYTES {
        return Err(ConfigError {
            file: file.to_string(),
            line: 0,
            field: String::new(),
            message: format!(
                "the file is {} bytes, more than the {MAX_FILE_BYTES} bytes a configuration \
                 file may hold",
                text.len()
            ),
        });
    }
    Ok(())
}

/// TOML `text` nests at most [`MAX_DEPTH`] levels: table headers (`[a.b.c]`), dotted keys
/// (`a.b.c = 1`), arrays and inline tables all count.
///
/// # Errors
/// A [`ConfigError`] naming the file and the line where the bound is crossed.
pub(crate) fn check_toml(file: &str, text: &str) -> Result<(), ConfigError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Open {
        Array,
        Table,
    }
    let bytes = text.as_bytes();
    let mut line = 1;
    // The level of the enclosing table header, and per open bracket its kind and the level
    // inside it.
    let mut header = 0usize;
    let mut stack: Vec<(Open, usize)> = Vec::new();
    // Before `=` of a key/value pair (counting the key's dots), or in a value.
    let mut in_key = true;
    let mut at_line_start = true;
    let mut key_level = 0usize;
    let mut i = 0;
    let check = |level: usize, line: usize| {
        if level > MAX_DEPTH {
            Err(too_deep(file, line))
        } else {
            Ok(())
        }
    };
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'\n' => {
                line += 1;
                if stack.is_empty() {
                    at_line_start = true;
                    in_key = true;
                    key_level = header;
                }
                i += 1;
                continue;
            }
            b' ' | b'\t' | b'\r' => {
                i += 1;
                continue;
            }
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            _ => {}
        }
        if at_line_start && stack.is_empty() && b == b'[' {
            // A table header: `[a.b]` or `[[a.b]]`, one level per segment.
            at_line_start = false;
            let mut level = 1;
            i += 1;
            while i < bytes.len() && bytes[i] != b'\n' && bytes[i] != b']' {
                match bytes[i] {
                    b'.' => level += 1,
                    b'"' | b'\'' => i = skip_string(bytes, i, &mut line),
                    _ => {}
                }
                check(level, line)?;
                i += 1;
            }
            header = level;
            key_level = header;
            continue;
        }
        if at_line_start {
            at_line_start = false;
            key_level = header;
        }
        match b {
            b'"' | b'\'' => {
                i = skip_string(bytes, i, &mut line) + 1;
                continue;
            }
            b'.' if in_key => {
                key_level += 1;
                check(key_level + 1, line)?;
            }
            b'=' if in_key => {
                in_key = false;
                key_level += 1;
                check(key_level, line)?;
            }
            b'[' if !in_key => {
                key_level += 1;
                check(key_level, line)?;
                stack.push((Open::Array, key_level));
            }
            b'{' if !in_key => {
                key_level += 1;
                check(key_level, line)?;
                stack.push((Open::Table, key_level));
                in_key = true;
            }
            b']' | b'}' if !in_key || b == b'}' => {
                stack.pop();
                key_level = stack.last().map_or(header, |&(_, level)| level);
                in_key = false;
            }
            b',' => match stack.last() {
                Some(&(Open::Table, level)) => {
                    in_key = true;
                    key_level = level;
                }
                Some(&(Open::Array, level)) => key_level = level,
                None => {}
            },
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// The index of the closing quote of the string opening at `start` (`"`, `'`, `"""` or
/// `'''`; the text's end when unclosed), counting the newlines it spans into `line`.
fn skip_string(bytes: &[u8], start: usize, line: &mut usize) -> usize {
    let quote = bytes[start];
    let triple = bytes.get(start..start + 3) == Some(&[quote, quote, quote][..]);
    let mut i = start + if triple { 3 } else { 1 };
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'\n' {
            *line += 1;
            if !triple {
                return i.saturating_sub(1);
            }
        } else if b == b'\\' && quote == b'"' {
            i += 1;
        } else if b == quote {
            if !triple {
                return i;
            }
            if bytes.get(i..i + 3) == Some(&[quote, quote, quote][..]) {
                return i + 2;
            }
        }
        i += 1;
    }
    bytes.len()
}

/// YAML `text` nests at most [`MAX_DEPTH`] levels: each indentation step of block style,
/// each `- `, `? ` or `key:` indicator on a line, and each open `[` or `{` of flow style
/// count as one.
///
/// # Errors
/// A [`ConfigError`] naming the file and the line where the bound is crossed.
pub(crate) fn check_yaml(file: &str, text: &str) -> Result<(), ConfigError> {
    // Indentations of the enclosing block levels.
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    // A block scalar (`|`, `>`) started at this indentation: more indented lines are its text.
    let mut block_scalar: Option<usize> = None;
    for (n, raw) in text.split('\n').enumerate() {
        let line = n + 1;
        let indent = raw.len() - raw.trim_start_matches(' ').len();
        let content = raw[indent..].trim_end();
        if let Some(parent) = block_scalar {
            if content.is_empty() || indent > parent {
                continue;
            }
            block_scalar = None;
        }
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        if flow == 0 {
            while indents.last().is_some_and(|&top| top >= indent) {
                indents.pop();
            }
            indents.push(indent);
        }
        let bytes = content.as_bytes();
        let mut level = indents.len() + flow;
        let mut i = 0;
        // Leading indicators: `- - - x`, `? x`, `- key: value`.
        let mut leading = true;
        while i < bytes.len() {
            let b = bytes[i];
            let next_blank = bytes.get(i + 1).is_none_or(|c| *c == b' ' || *c == b'\t');
            match b {
                b'#' if i == 0 || bytes[i - 1] == b' ' || bytes[i - 1] == b'\t' => break,
                b'"' | b'\'' => {
                    i = skip_yaml_quoted(bytes, i);
                    leading = false;
                }
                b'-' | b'?' if leading && next_blank => level += 1,
                b':' if next_blank => {
                    level += 1;
                    leading = true;
                }
                b'[' | b'{' => {
                    flow += 1;
                    level += 1;
                    leading = false;
                }
                b']' | b'}' => {
                    flow = flow.saturating_sub(1);
                    leading = false;
                }
                b' ' | b'\t' => {}
                _ => leading = false,
            }
            if level > MAX_DEPTH {
                return Err(too_deep(file, line));
            }
            i += 1;
        }
        // `key: |` or `- >-`: the lines after it, more indented, are the scalar's text.
        let tail = content
            .rsplit([' ', '\t'])
            .next()
            .unwrap_or("")
            .trim_end_matches(|c: char| c.is_ascii_digit() || c == '+' || c == '-');
        if flow == 0 && (tail == "|" || tail == ">") {
            block_scalar = Some(indent);
        }
    }
    Ok(())
}

/// The index of the closing quote of the YAML quoted scalar opening at `start` on one line
/// (its end when it continues on the next line).
fn skip_yaml_quoted(bytes: &[u8], start: usize) -> usize {
    let quote = bytes[start];
    let mut i = start + 1;
    while i < bytes.len() {
        if quote == b'"' && bytes[i] == b'\\' {
            i += 2;
            continue;
        }
        if bytes[i] == quote {
            if quote == b'\'' && bytes.get(i + 1) == Some(&b'\'') {
                i += 2;
                continue;
            }
            return i;
        }
        i += 1;
    }
    bytes.len()
}

#[cfg(test)]
mod tests;
