//! Redis glob patterns (`SCAN ... MATCH`, `KEYS`): `*`, `?`, `[abc]`, `[^a]`, `[a-z]` and `\x`,
//! matched byte-wise as Redis' `stringmatchlen` does, so that the audit can filter the names
//! `SCAN` returns itself and know how many it examined.

/// `true` when `name` matches the Redis glob `pattern`.
///
/// ```
/// use floodgate_audit::glob::matches;
/// assert!(matches(b"fg:*", b"fg:TVAw8orauko"));
/// assert!(matches(b"rate*", b"rate_limit:alice"));
/// assert!(matches(b"r[a-c]te?", b"rbtex"));
/// assert!(!matches(b"r[^a]te", b"rate"));
/// ```
pub fn matches(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => {
            // Collapse runs of '*'; then try every suffix.
            let rest = trim_stars(rest);
            if rest.is_empty() {
                return true;
            }
            (0..=name.len()).any(|i| matches(rest, &name[i..]))
        }
        Some((b'?', rest)) => !name.is_empty() && matches(rest, &name[1..]),
        Some((b'[', rest)) => {
            let Some((&c, tail)) = name.split_first() else {
                return false;
            };
            let (hit, after) = class(rest, c);
            hit && matches(after, tail)
        }
        Some((b'\\', rest)) if !rest.is_empty() => {
            name.first() == Some(&rest[0]) && matches(&rest[1..], &name[1..])
        }
        Some((&p, rest)) => name.first() == Some(&p) && matches(rest, &name[1..]),
    }
}

fn trim_stars(mut p: &[u8]) -> &[u8] {
    while let Some((b'*', rest)) = p.split_first() {
        p = rest;
    }
    p
}

/// Matches `c` against the class that starts after `[`; returns the result and the pattern
/// after the closing `]` (an unclosed class runs to the end, as in Redis).
fn class(p: &[u8], c: u8) -> (bool, &[u8]) {
    let (negate, mut p) = match p.split_first() {
        Some((b'^', rest)) => (true, rest),
        _ => (false, p),
    };
    let mut hit = false;
    loop {
        match p {
            [] => break,
            [b']', rest @ ..] => {
                p = rest;
                break;
            }
            [b'\\', x, rest @ ..] => {
                hit |= *x == c;
                p = rest;
            }
            [a, b'-', b, rest @ ..] if *b != b']' => {
                let (lo, hi) = if a <= b { (*a, *b) } else { (*b, *a) };
                hit |= (lo..=hi).contains(&c);
                p = rest;
            }
            [x, rest @ ..] => {
                hit |= *x == c;
                p = rest;
            }
        }
    }
    (hit != negate, p)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn redis_glob_cases() {
        assert!(matches(b"*", b""));
        assert!(matches(b"fg:*", b"fg:"));
        assert!(!matches(b"fg:*", b"xfg:a"));
        assert!(matches(b"*limit*", b"ratelimit:1"));
        assert!(matches(b"a\\*b", b"a*b"));
        assert!(!matches(b"a\\*b", b"axb"));
        assert!(matches(b"h[ae]llo", b"hello"));
        assert!(!matches(b"h[ae]llo", b"hillo"));
        assert!(matches(b"h[^e]llo", b"hallo"));
        assert!(matches(b"h[a-b]llo", b"hbllo"));
        assert!(matches(b"**a", b"ba"));
        assert!(!matches(b"?", b""));
    }
}
