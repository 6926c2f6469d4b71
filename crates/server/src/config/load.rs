//! Reading a configuration: a TOML file, an envoyproxy/ratelimit YAML file or a directory of
//! them, each bounded in size and nesting before a parser sees it; serde's errors turned into
//! file:line:field errors in the file's words; the embedded default.

use std::path::Path;

use super::error::{ConfigError, ConfigErrors, Source};
use super::raw::RawConfig;
use super::schema::Config;
use super::{depth, envoy, validate};

/// The configuration `floodgate serve` runs when started without `--config`: one rule that
/// admits 10 requests per 10 seconds per client IP (token bucket), applied to forward-auth and
/// proxied requests, and usable by name (`per-client-ip`) from `POST /v1/check`.
pub(super) const EMBEDDED_DEFAULT: &str = r#"# Floodgate's embedded default configuration.
[store]
kind = "memory"
max_keys = 100000

[[rules]]
name = "per-client-ip"
algorithm = "token_bucket"
limit = "10/10s"
key = "client_ip"
"#;

/// The name used in errors for [`EMBEDDED_DEFAULT`].
const EMBEDDED_DEFAULT_NAME: &str = "<embedded default>";

/// Reads and validates the configuration at `path` (see [`read_sources`]); errors name it as
/// it was given.
///
/// # Errors
/// [`ConfigErrors`] with every problem found (one with line 0 when the file cannot be read).
pub(crate) fn load(path: &Path) -> Result<Config, ConfigErrors> {
    load_with(path, &envoy::EnvoyArgs::default())
}

/// [`load`] with the `--envoy-*` flags given (see [`parse_sources`]).
///
/// # Errors
/// As [`load`].
pub(crate) fn load_with(path: &Path, flags: &envoy::EnvoyArgs) -> Result<Config, ConfigErrors> {
    parse_sources(&path.display().to_string(), &read_sources(path)?, flags)
}

/// The text of the configuration at `path`, as `(file name, text)`: the file itself (TOML, or
/// envoyproxy/ratelimit YAML when it ends in `.yaml`/`.yml`), or every `.yaml`/`.yml` file of
/// a directory (envoyproxy/ratelimit's runtime directory, one domain per file), in name order.
///
/// # Errors
/// [`ConfigErrors`] naming the path when it cannot be read, or a directory holds no YAML file.
pub(crate) fn read_sources(path: &Path) -> Result<Vec<(String, String)>, ConfigErrors> {
    let display = path.display().to_string();
    let fail = |file: &str, message: String| {
        ConfigErrors(vec![ConfigError {
            file: file.to_string(),
            line: 0,
            field: String::new(),
            message,
        }])
    };
    if path.is_dir() {
        let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(path)
            .map_err(|e| fail(&display, format!("cannot read: {e}")))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && envoy::is_yaml(&p.display().to_string()))
            .filter(|p| !super::envoy_env::ignored(p))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(fail(
                &display,
                "the directory holds no .yaml or .yml file (envoyproxy/ratelimit's format, one \
                 domain per file)"
                    .into(),
            ));
        }
        let mut total = 0;
        let mut sources = Vec::with_capacity(files.len());
        for p in files {
            let name = p.display().to_string();
            let text = read_bounded(&p).map_err(|message| fail(&name, message))?;
            total += text.len();
            if total > depth::MAX_TOTAL_BYTES {
                return Err(fail(
                    &display,
                    format!(
                        "the directory's YAML files hold more than {} bytes together, the most \
                         a configuration may hold",
                        depth::MAX_TOTAL_BYTES
                    ),
                ));
            }
            sources.push((name, text));
        }
        Ok(sources)
    } else {
        let text = read_bounded(path).map_err(|message| fail(&display, message))?;
        Ok(vec![(display, text)])
    }
}

/// The text of the file at `path`, read no further than [`depth::MAX_FILE_BYTES`] (a larger
/// file is refused without being read whole).
fn read_bounded(path: &Path) -> Result<String, String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let mut bytes = Vec::new();
    file.take(depth::MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() > depth::MAX_FILE_BYTES {
        return Err(format!(
            "the file is larger than {} bytes, the most a configuration file may hold",
            depth::MAX_FILE_BYTES
        ));
    }
    String::from_utf8(bytes).map_err(|e| format!("cannot read: not UTF-8 text ({e})"))
}

/// Parses what [`read_sources`] read: YAML files as envoyproxy/ratelimit's format
/// ([`envoy::parse`]), one other file as Floodgate's TOML ([`parse`]). `display` names the
/// configuration (the path given); `flags` override the `[envoy]` settings (a YAML
/// configuration has only them).
///
/// # Errors
/// [`ConfigErrors`] as [`parse`] and [`envoy::parse`] give them.
pub(crate) fn parse_sources(
    display: &str,
    sources: &[(String, String)],
    flags: &envoy::EnvoyArgs,
) -> Result<Config, ConfigErrors> {
    match sources {
        [(file, text)] if !envoy::is_yaml(file) => {
            let mut config = parse(file, text)?;
            config.envoy = flags.apply(config.envoy);
            Ok(config)
        }
        _ => envoy::parse(display, sources, &flags.apply(Default::default())),
    }
}

/// The [`EMBEDDED_DEFAULT`] configuration.
pub(crate) fn embedded_default() -> Config {
    parse(EMBEDDED_DEFAULT_NAME, EMBEDDED_DEFAULT).expect("the embedded default config is valid")
}

/// Parses and validates `text`; `file` is the name errors give.
///
/// # Errors
/// [`ConfigErrors`]: the first syntax or type error (unknown field, wrong type, missing field:
/// TOML cannot be read past it), or every semantic error (invalid quota, duplicate rule name,
/// cost above capacity, ...), in line order.
pub(crate) fn parse(file: &str, text: &str) -> Result<Config, ConfigErrors> {
    // Bounded before the parser sees it: a deeply nested file would overflow its stack.
    depth::check_size(file, text)
        .and_then(|()| depth::check_toml(file, text))
        .map_err(|e| ConfigErrors(vec![e]))?;
    let src = Source::new(file, text);
    let raw = deserialize(&src, text).map_err(|e| ConfigErrors(vec![e]))?;
    validate::config(file, &src, &raw)
}

/// Deserializes with the path of the failing field tracked, for the error message.
fn deserialize(src: &Source<'_>, text: &str) -> Result<RawConfig, ConfigError> {
    let de = toml::Deserializer::parse(text).map_err(|e| {
        src.error(
            e.span().unwrap_or(0..0),
            "",
            format!("invalid TOML: {}", e.message()),
        )
    })?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = clean_path(&e.path().to_string());
        let inner = e.into_inner();
        src.error(
            inner.span().unwrap_or(0..0),
            field,
            plain_types(inner.message()),
        )
    })
}

/// serde's type names in a message in the words of the file: `expected i64` is `expected a
/// whole number` (`invalid type: string "3", expected a whole number`).
fn plain_types(message: &str) -> String {
    let mut message = message
        .replace("expected i64", "expected a whole number")
        .replace("expected u64", "expected a whole number")
        .replace("expected a boolean", "expected true or false")
        .replace(
            "expected a sequence",
            "expected a list (`[...]`, or a `[[table]]` per item, as `[[rules]]`)",
        )
        .replace("invalid type: map,", "invalid type: table,");
    // `expected struct RawServer`: one of this module's raw tables.
    while let Some(at) = message.find("expected struct Raw") {
        let end = message[at + "expected struct ".len()..]
            .find(|c: char| !c.is_ascii_alphanumeric())
            .map_or(message.len(), |n| at + "expected struct ".len() + n);
        message.replace_range(at..end, "expected a table");
    }
    message
}

/// Drops the private segments `toml::Spanned` adds to a serde path.
fn clean_path(path: &str) -> String {
    let cleaned: Vec<&str> = path
        .split('.')
        .filter(|seg| !seg.is_empty() && !seg.starts_with("$__serde_spanned"))
        .collect();
    // An empty path (the document as a whole) names no field.
    cleaned.join(".")
}
