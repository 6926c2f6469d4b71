//! The `floodgate serve` configuration file (TOML): schema, parsing and validation.
//!
//! Every error names the file, the line and the field (see [`ConfigError`]). Unknown fields are
//! rejected. The full reference with examples is docs/configuration.md.
//!
//! ```toml
//! [server]
//! listen = "127.0.0.1:8080"
//! admin_token = "change-me"            # or FLOODGATE_ADMIN_TOKEN; absent = admin API off
//! api_token = "change-me-too"          # or FLOODGATE_API_TOKEN; /v1/check and /v1/peek need it
//! trusted_proxies = ["127.0.0.1/32"]   # peers whose X-Forwarded-For is believed
//! upstream = "http://127.0.0.1:3000"   # reverse-proxy mode
//! ui = true                            # the web page at /ui/ (default; --no-ui turns it off)
//! ui_denied_keys = 20                  # its live view lists the 20 busiest denied keys (default 0: off)
//! reservation_secret = "..."           # or FLOODGATE_RESERVATION_SECRET; signs reservation tokens (32+ chars)
//! reservation_ttl = "5m"               # a reservation token not settled by then is spent (default 5m)
//!
//! [store]
//! kind = "memory"                      # or "redis", with url = "redis://..." (or nodes = [...])
//! max_keys = 100000
//! max_claims = 1000000                 # settled reservation tokens remembered (default 1000000)
//!
//! [[rules]]
//! name = "per-ip"
//! limit = "10/10s"                     # or: limit = 10, period = "10s"
//! key = "client_ip"
//! ```

pub(crate) mod check;
pub(crate) mod depth;
pub(crate) mod describe;
pub(crate) mod descriptors;
pub(crate) mod envoy;
pub(crate) mod envoy_env;
pub(crate) mod error;
pub(crate) mod listen;
mod raw;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;

use floodgate_core::{AlgorithmKind, Policy, Quota, QuotaError};
use floodgate_store::OnFull;
pub(crate) use floodgate_tower::FailureMode;
use floodgate_tower::KeySource;
use floodgate_tower::{CostSource, ForwardedHeader, HeaderMatch, Matcher, RouteCost};
use http::{HeaderName, HeaderValue, Method, Uri};
use ipnet::IpNet;
use toml::Spanned;

use error::Source;
pub(crate) use error::{ConfigError, ConfigErrors};
use raw::{RawConfig, RawRule};

/// The configuration `floodgate serve` runs when started without `--config`: one rule that
/// admits 10 requests per 10 seconds per client IP (token bucket), applied to forward-auth and
/// proxied requests, and usable by name (`per-client-ip`) from `POST /v1/check`.
const EMBEDDED_DEFAULT: &str = r#"# Floodgate's embedded default configuration.
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

/// Longest accepted rule name, in bytes (names appear in metrics labels and store keys).
const MAX_RULE_NAME_BYTES: usize = 64;

/// Largest accepted cost of one request, in units (also the largest `cost` in `POST /v1/check`).
pub(crate) const MAX_COST: u64 = 1_000_000;

/// Largest `limit` accepted for the sliding log, whose state holds one entry per admitted unit
/// (a limit of 10,000 is about 80 KB per key in memory and ~1 MB in a Redis sorted set).
pub(crate) const MAX_SLIDING_LOG_LIMIT: u64 = 10_000;

/// Default `[store] max_keys`.
const DEFAULT_MAX_KEYS: u64 = 100_000;

/// Largest accepted `[store] max_keys`.
const MAX_MAX_KEYS: u64 = 100_000_000;

/// Default `[store] max_claims`: the settled reservation tokens the memory store remembers
/// (until each token's life ends) to refuse a second settle; about 100 bytes each.
pub(crate) const DEFAULT_MAX_CLAIMS: u64 = 1_000_000;

/// A validated configuration.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// The file it came from (as given), or [`EMBEDDED_DEFAULT_NAME`].
    pub(crate) file: String,
    /// `[server]`.
    pub(crate) server: ServerConfig,
    /// `[store]`.
    pub(crate) store: StoreConfig,
    /// `[[rules]]`, in file order (the order decisions are reported in), then the rules of the
    /// limit overrides they allow.
    pub(crate) rules: Vec<RuleConfig>,
    /// Which rule an Envoy rate limit descriptor selects (rules with a `domain`).
    pub(crate) descriptors: descriptors::DescriptorIndex,
}

/// `[server]`: settings read once at start (a reload that changes them is logged and ignored,
/// except `admin_token` and `trusted_proxies`, which take effect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerConfig {
    /// Address to listen on; `--listen` overrides it.
    pub(crate) listen: Option<SocketAddr>,
    /// Address of the gRPC listener (Envoy's rate limit service); `--grpc-listen` overrides
    /// it. `None`: no gRPC listener.
    pub(crate) grpc_listen: Option<SocketAddr>,
    /// Bearer token that guards the admin API; `None` disables it.
    pub(crate) admin_token: Option<String>,
    /// `api_token`: when set, `/v1/check` and `/v1/peek` need `Authorization: Bearer <it>`
    /// (`--api-token` / `FLOODGATE_API_TOKEN` override it); the same rule as `admin_token`.
    pub(crate) api_token: Option<String>,
    /// TCP peers whose `X-Forwarded-For` is believed (counted from the right).
    pub(crate) trusted_proxies: Vec<IpNet>,
    /// Reverse-proxy upstream (`http://host:port`); `--upstream` overrides it.
    pub(crate) upstream: Option<Uri>,
    /// `keep_client_headers`: client-address headers the proxy passes on from untrusted peers
    /// too (each one
    /// [`crate::proxy::client_address_header`] accepts; default none, all stripped).
    pub(crate) keep_client_headers: Vec<http::HeaderName>,
    /// The header trusted proxies set: `"x-forwarded-for"` (default) or `"forwarded"` (RFC 7239).
    pub(crate) forwarded_header: ForwardedHeader,
    /// IPv6 clients are counted per prefix of this length (default 64, what one subscriber
    /// usually holds).
    pub(crate) ipv6_prefix: u8,
    /// Serve the web page at `/ui/` on the API listener (default true); `--no-ui` overrides.
    pub(crate) ui: bool,
    /// `ui_denied_keys`: how many of the busiest denied keys the web page's live view shows
    /// (0, the default: none; keys can be personal data, so the list is opt-in; at most 1,000).
    pub(crate) ui_denied_keys: usize,
    /// `max_delayed`: at most this many requests are held at once in the delay mode (rules
    /// with `delay`); one more that would wait is refused as without a delay. Default
    /// [`floodgate_tower::DEFAULT_MAX_DELAYED`], at most [`MAX_MAX_DELAYED`]; 0: none waits.
    pub(crate) max_delayed: usize,
    /// `reservation_secret`: the HMAC-SHA256 key that signs reservation tokens
    /// (`/v1/check` with `"reserve": true`, `/v1/settle`); at least 32 printable ASCII
    /// characters without spaces. `None`: a random secret per process (tokens then settle only
    /// on the process that made them). Every instance sharing a store must share it.
    pub(crate) reservation_secret: Option<String>,
    /// `reservation_ttl`: how long a reservation token can be settled, in microseconds
    /// (default 5 minutes; 1 second to 7 days). A token not settled by then is spent.
    pub(crate) reservation_ttl: u64,
    /// Connection bounds and timeouts of the listeners and the proxy's upstream client.
    pub(crate) limits: listen::ConnectionLimits,
}

/// The default `[server] reservation_ttl`: 5 minutes, in microseconds.
pub(crate) const DEFAULT_RESERVATION_TTL: u64 = 300_000_000;

/// The bounds of `[server] reservation_ttl`, in microseconds: 1 second to 7 days.
pub(crate) const RESERVATION_TTL_RANGE: std::ops::RangeInclusive<u64> = 1_000_000..=604_800_000_000;

/// A reservation secret must be at least this many characters.
pub(crate) const MIN_RESERVATION_SECRET: usize = 32;

/// `[server] reservation_secret` (and `FLOODGATE_RESERVATION_SECRET`): at least
/// [`MIN_RESERVATION_SECRET`] printable ASCII characters without spaces.
///
/// # Errors
/// What is wrong with it, for the error message.
pub(crate) fn check_reservation_secret(secret: &str) -> Result<(), String> {
    if secret.len() < MIN_RESERVATION_SECRET || !secret.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "must be at least {MIN_RESERVATION_SECRET} printable ASCII characters without \
             spaces (e.g. 32 random bytes in base64: openssl rand -base64 32)"
        ));
    }
    Ok(())
}

/// Largest accepted `[server] max_delayed`.
pub(crate) const MAX_MAX_DELAYED: usize = 1_000_000;

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: None,
            grpc_listen: None,
            admin_token: None,
            api_token: None,
            trusted_proxies: Vec::new(),
            upstream: None,
            keep_client_headers: Vec::new(),
            forwarded_header: ForwardedHeader::XForwardedFor,
            ipv6_prefix: 64,
            ui: true,
            ui_denied_keys: 0,
            max_delayed: floodgate_tower::DEFAULT_MAX_DELAYED,
            reservation_secret: None,
            reservation_ttl: DEFAULT_RESERVATION_TTL,
            limits: listen::ConnectionLimits::default(),
        }
    }
}

/// `[store]`: `kind = "memory"` (the default) or `kind = "redis"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoreConfig {
    /// Most keys held at once (all rules together; memory store).
    pub(crate) max_keys: u64,
    /// What happens when `max_keys` live keys are held and a new key arrives: `"reject"`
    /// (default: deny the new key, so a flood of keys cannot switch limiting off) or
    /// `"admit_untracked"` (admit it without counting).
    pub(crate) on_full: OnFull,
    /// Most live reservation claims held at once (memory store; a Redis store keeps each
    /// claim as a key with a TTL).
    pub(crate) max_claims: u64,
    /// `Some` for `kind = "redis"`.
    pub(crate) redis: Option<RedisConfig>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            max_keys: DEFAULT_MAX_KEYS,
            max_claims: DEFAULT_MAX_CLAIMS,
            on_full: OnFull::Reject,
            redis: None,
        }
    }
}

/// `[store] kind = "redis"`: where Redis is and how long to wait for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RedisConfig {
    /// `url = "redis://host:port/db"` (one server) or `nodes = [...]` (a Redis Cluster).
    pub(crate) target: floodgate_store::redis::RedisTarget,
    /// `timeout_ms`: longest wait for one store call, 1 to 60,000 ms. Default 50 (see
    /// [`DEFAULT_REDIS_TIMEOUT_MS`] for the trade-off).
    pub(crate) timeout_ms: u64,
    /// `breaker_window_ms`: the circuit breaker opens only when Redis has failed every call
    /// for this long, counted from the first failed call since the last success (and at least
    /// 5 calls failed), 0 to 60,000 ms.
    /// Default 250; 0 opens after 5 consecutive failures whatever the time (see
    /// `docs/redis.md`, "Failures").
    pub(crate) breaker_window_ms: u64,
    /// `prefix` of every key (default `"fg:"`, at most 64 bytes, no braces).
    pub(crate) prefix: String,
    /// `fallback = "local"`: while Redis fails, decide in this process with every limit divided
    /// by the number of instances. `false` (`fallback = "none"`, the default): a failure
    /// follows each rule's `failure_mode`.
    pub(crate) local_fallback: bool,
    /// `instances = N` with `fallback = "local"`: divide by `N` (`Some(N)`), an override of
    /// the count discovered in Redis (`None`: every process announces itself there and the
    /// fallback divides by the live count it last saw).
    pub(crate) local_fallback_instances: Option<u64>,
    /// `tls_ca_file`, `tls_cert_file`, `tls_key_file` (PEM; relative paths are relative to the
    /// configuration file's folder), read when the file is loaded. Only with `rediss://`.
    pub(crate) tls: floodgate_store::redis::RedisTls,
}

/// Default `[store] breaker_window_ms`: 250 ms, the store's own default
/// (`RedisStoreConfig::breaker_window`).
const DEFAULT_BREAKER_WINDOW_MS: u64 = 250;

/// Default `[store] timeout_ms`: 50 ms. Longer delays a decision while Redis is slow; shorter
/// sends healthy but momentarily slow calls to the failure mode (10 ms timed out hundreds of
/// calls within seconds against a healthy Redis on a loaded 2-core host). Envoy's rate-limit
/// filter waits 20 ms. See `docs/redis.md`, "Failures".
const DEFAULT_REDIS_TIMEOUT_MS: u64 = 50;

/// `true` for the URL schemes the Redis client accepts (`rediss://` is TLS).
pub(crate) fn is_redis_url(url: &str) -> bool {
    ["redis://", "rediss://", "redis+unix://", "unix://"]
        .iter()
        .any(|scheme| url.starts_with(scheme))
}

/// The one rule for an admin token, wherever it comes from (`[server] admin_token`,
/// `--admin-token`, `FLOODGATE_ADMIN_TOKEN`): at least 16 printable ASCII characters without
/// spaces.
///
/// # Errors
/// What is wrong with it.
pub(crate) fn check_admin_token(token: &str) -> Result<(), String> {
    if token.len() < 16 || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("must be at least 16 printable ASCII characters without spaces".into());
    }
    Ok(())
}

/// One validated `[[rules]]` entry.
#[derive(Debug, Clone)]
pub(crate) struct RuleConfig {
    /// Unique name (`[A-Za-z0-9_.-]`, 1..=64 bytes).
    pub(crate) name: String,
    /// Which requests it applies to (in forward-auth and proxy mode): `[rules.match]`.
    pub(crate) matcher: Matcher,
    /// What it counts separately (see [`parse_key`]).
    pub(crate) key: KeySource,
    /// The algorithm and quota.
    pub(crate) policy: Policy,
    /// The cost of a request: `cost`, `cost_header` and `[[rules.route_costs]]` (the first
    /// matching route, then the header, then `cost`).
    pub(crate) cost: CostSource,
    /// Shadow mode: decide and count, report in metrics and logs, but never deny.
    pub(crate) shadow: bool,
    /// What to answer when the store fails: `"open"` (default: admit, count `error_open`) or
    /// `"closed"` (503, count `error_closed`).
    pub(crate) failure_mode: FailureMode,
    /// `delay = "500ms"`: the delay mode in microseconds (forward-auth and the proxy hold a
    /// request that fits within it until its slot instead of answering 429; see
    /// `docs/reservations.md`, "Delay mode"). Within the algorithm's horizon
    /// ([`Policy::max_wait`]); `None`: refused at once.
    pub(crate) delay: Option<floodgate_core::Micros>,
    /// `domain` and `descriptors`: the rule answers Envoy's rate limit requests for these
    /// descriptors (gRPC and `/v1/check` only; never applied to forward-auth or proxied
    /// requests).
    pub(crate) descriptor: Option<descriptors::DescriptorRule>,
    /// For the rule of a limit override: the position of the rule it overrides.
    pub(crate) override_of: Option<usize>,
    /// `max_keys`: most keys the memory store holds for this rule at once (inside
    /// `[store] max_keys`), so that a flood of new keys on one rule (e.g. junk keys sent to
    /// `POST /v1/check`) cannot take the other rules' room. `None`: only the store's cap. A
    /// limit override's rule has the same cap, counted separately.
    pub(crate) max_keys: Option<u64>,
}

impl RuleConfig {
    /// Whether a reloaded `other` keeps this rule's counters: the same name, algorithm and
    /// quota (the stores identify state by rule name, policy and key); any change starts it
    /// fresh.
    pub(crate) fn same_state(&self, other: &RuleConfig) -> bool {
        self.name == other.name
            && self.policy.kind() == other.policy.kind()
            && self.policy.quota() == other.policy.quota()
    }
}

/// Reads and validates the configuration at `path` (see [`read_sources`]); errors name it as
/// it was given.
///
/// # Errors
/// [`ConfigErrors`] with every problem found (one with line 0 when the file cannot be read).
pub(crate) fn load(path: &Path) -> Result<Config, ConfigErrors> {
    parse_sources(&path.display().to_string(), &read_sources(path)?)
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
            .filter(|p| !envoy_env::ignored(p))
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
/// configuration (the path given).
///
/// # Errors
/// [`ConfigErrors`] as [`parse`] and [`envoy::parse`] give them.
pub(crate) fn parse_sources(
    display: &str,
    sources: &[(String, String)],
) -> Result<Config, ConfigErrors> {
    match sources {
        [(file, text)] if !envoy::is_yaml(file) => parse(file, text),
        _ => envoy::parse(display, sources),
    }
}

/// The rule deciding limit override `quota` of `base`: the same rule under its own name
/// (`<name>@<limit>/<period>`) and quota, so its counters never mix with the base quota's.
pub(crate) fn override_rule(base: &RuleConfig, quota: &Quota) -> RuleConfig {
    let policy = Policy::new(base.policy.kind(), *quota).unwrap_or_else(|_| base.policy.clone());
    RuleConfig {
        name: format!("{}@{}", base.name, quota),
        policy,
        ..base.clone()
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
    let mut v = Validator {
        src: &src,
        errors: Vec::new(),
        store_kind_redis: false,
        store_max_keys: DEFAULT_MAX_KEYS,
    };
    let server = v.server(&raw);
    let store = v.store(&raw);
    v.store_kind_redis = raw
        .store
        .kind
        .as_ref()
        .is_some_and(|k| k.get_ref() == "redis");
    v.store_max_keys = store.max_keys;
    let mut rules = Vec::with_capacity(raw.rules.len());
    // The raw rule of each validated rule (the spans of descriptor errors).
    let mut raw_of = Vec::with_capacity(raw.rules.len());
    let mut names: HashMap<String, usize> = HashMap::new();
    for (i, r) in raw.rules.iter().enumerate() {
        let at = format!("rules[{i}]");
        // Unique regardless of case: `Search` and `search` would be told apart by nothing a
        // person reads (metric labels, headers, logs) except case.
        let folded = r.name.get_ref().to_ascii_lowercase();
        if let Some(&first) = names.get(&folded) {
            let same = raw.rules[first].name.get_ref() == r.name.get_ref();
            v.push(
                &r.name,
                format!("{at}.name"),
                if same {
                    format!(
                        "duplicate rule name {:?} (also rules[{first}].name); names must be unique",
                        r.name.get_ref()
                    )
                } else {
                    format!(
                        "rule name {:?} differs from rules[{first}].name {:?} only in case; \
                         names must be unique regardless of case",
                        r.name.get_ref(),
                        raw.rules[first].name.get_ref()
                    )
                },
            );
        } else {
            names.insert(folded, i);
        }
        if let Some(rule) = v.rule(&at, r) {
            rules.push(rule);
            raw_of.push(i);
        }
    }
    let descriptors = v.descriptor_index(&raw, &raw_of, &mut rules);
    if v.errors.is_empty() {
        Ok(Config {
            file: file.to_string(),
            server,
            store,
            rules,
            descriptors,
        })
    } else {
        // In the order they stand in the file (a stable sort keeps each line's own order).
        v.errors.sort_by_key(|e| e.line);
        Err(ConfigErrors(v.errors))
    }
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

struct Validator<'a> {
    src: &'a Source<'a>,
    errors: Vec<ConfigError>,
    /// `[store] kind = "redis"` (rules' `max_keys` are for the memory store only).
    store_kind_redis: bool,
    /// `[store] max_keys` as validated (the bound of a rule's `max_keys`).
    store_max_keys: u64,
}

impl Validator<'_> {
    fn push<T>(&mut self, at: &Spanned<T>, field: String, message: String) {
        self.errors.push(self.src.error(at.span(), field, message));
    }

    /// A duration setting in milliseconds, `min` to 60,000: its value, or `default` when it is
    /// absent or out of range (then the error is pushed, naming `field`).
    fn millis(&mut self, value: &Option<Spanned<i64>>, field: &str, min: u64, default: u64) -> u64 {
        let Some(v) = value else { return default };
        match u64::try_from(*v.get_ref()) {
            Ok(ms) if (min..=60_000).contains(&ms) => ms,
            _ => {
                self.push(
                    v,
                    field.into(),
                    format!("must be {min} to 60000 milliseconds, got {}", v.get_ref()),
                );
                default
            }
        }
    }

    fn server(&mut self, raw: &RawConfig) -> ServerConfig {
        let s = &raw.server;
        let mut out = ServerConfig::default();
        if let Some(listen) = &s.listen {
            match listen.get_ref().parse::<SocketAddr>() {
                Ok(addr) => out.listen = Some(addr),
                Err(_) => self.push(
                    listen,
                    "server.listen".into(),
                    format!(
                        "invalid address {:?}: expected IP:PORT, e.g. \"127.0.0.1:8080\"",
                        listen.get_ref()
                    ),
                ),
            }
        }
        if let Some(listen) = &s.grpc_listen {
            match listen.get_ref().parse::<SocketAddr>() {
                Ok(addr) => out.grpc_listen = Some(addr),
                Err(_) => self.push(
                    listen,
                    "server.grpc_listen".into(),
                    format!(
                        "invalid address {:?}: expected IP:PORT, e.g. \"127.0.0.1:8081\"",
                        listen.get_ref()
                    ),
                ),
            }
        }
        if let Some(token) = &s.admin_token {
            match check_admin_token(token.get_ref()) {
                Ok(()) => out.admin_token = Some(token.get_ref().clone()),
                Err(msg) => self.push(token, "server.admin_token".into(), msg),
            }
        }
        if let Some(token) = &s.api_token {
            match check_admin_token(token.get_ref()) {
                Ok(()) => out.api_token = Some(token.get_ref().clone()),
                Err(msg) => self.push(token, "server.api_token".into(), msg),
            }
        }
        for (i, p) in s.trusted_proxies.iter().enumerate() {
            match parse_net(p.get_ref()) {
                Ok(net) => out.trusted_proxies.push(net),
                Err(msg) => self.push(p, format!("server.trusted_proxies[{i}]"), msg),
            }
        }
        for (i, name) in s.keep_client_headers.iter().enumerate() {
            match crate::proxy::client_address_header(name.get_ref()) {
                Ok(name) if !out.keep_client_headers.contains(&name) => {
                    out.keep_client_headers.push(name);
                }
                Ok(_) => self.push(
                    name,
                    format!("server.keep_client_headers[{i}]"),
                    format!("{:?} is listed twice", name.get_ref()),
                ),
                Err(msg) => self.push(name, format!("server.keep_client_headers[{i}]"), msg),
            }
        }
        if let Some(h) = &s.forwarded_header {
            match h.get_ref().to_ascii_lowercase().as_str() {
                "x-forwarded-for" => out.forwarded_header = ForwardedHeader::XForwardedFor,
                "forwarded" => out.forwarded_header = ForwardedHeader::Forwarded,
                _ => self.push(
                    h,
                    "server.forwarded_header".into(),
                    format!(
                        "unknown header {:?}; expected \"x-forwarded-for\" or \"forwarded\"",
                        h.get_ref()
                    ),
                ),
            }
        }
        if let Some(p) = &s.ipv6_prefix {
            match u8::try_from(*p.get_ref()) {
                Ok(len) if len <= 128 => out.ipv6_prefix = len,
                _ => self.push(
                    p,
                    "server.ipv6_prefix".into(),
                    format!("must be between 0 and 128, got {}", p.get_ref()),
                ),
            }
        }
        if let Some(ui) = s.ui {
            out.ui = ui;
        }
        if let Some(n) = &s.ui_denied_keys {
            match usize::try_from(*n.get_ref()) {
                Ok(n) if n <= 1_000 => out.ui_denied_keys = n,
                _ => self.push(
                    n,
                    "server.ui_denied_keys".into(),
                    format!("must be between 0 and 1000, got {}", n.get_ref()),
                ),
            }
        }
        if let Some(n) = &s.max_delayed {
            match usize::try_from(*n.get_ref()) {
                Ok(n) if n <= MAX_MAX_DELAYED => out.max_delayed = n,
                _ => self.push(
                    n,
                    "server.max_delayed".into(),
                    format!(
                        "must be between 0 and {MAX_MAX_DELAYED}, got {}",
                        n.get_ref()
                    ),
                ),
            }
        }
        if let Some(secret) = &s.reservation_secret {
            match check_reservation_secret(secret.get_ref()) {
                Ok(()) => out.reservation_secret = Some(secret.get_ref().clone()),
                Err(msg) => self.push(secret, "server.reservation_secret".into(), msg),
            }
        }
        if let Some(ttl) = &s.reservation_ttl {
            match floodgate_core::quota::parse_period(ttl.get_ref()) {
                Ok(us) if RESERVATION_TTL_RANGE.contains(&us) => out.reservation_ttl = us,
                Ok(_) => self.push(
                    ttl,
                    "server.reservation_ttl".into(),
                    format!("must be between 1s and 7day, got {:?}", ttl.get_ref()),
                ),
                Err(msg) => self.push(
                    ttl,
                    "server.reservation_ttl".into(),
                    format!(
                        "invalid duration: {}",
                        msg.replacen("period", "duration", 1)
                    ),
                ),
            }
        }
        if let Some(up) = &s.upstream {
            match parse_upstream(up.get_ref()) {
                Ok(uri) => out.upstream = Some(uri),
                Err(msg) => self.push(up, "server.upstream".into(), msg),
            }
        }
        out.limits = self.connection_limits(s);
        out
    }

    fn store(&mut self, raw: &RawConfig) -> StoreConfig {
        let s = &raw.store;
        let mut out = StoreConfig::default();
        let mut redis = false;
        if let Some(kind) = &s.kind {
            match kind.get_ref().as_str() {
                "memory" => {}
                "redis" => redis = true,
                other => self.push(
                    kind,
                    "store.kind".into(),
                    format!("unknown store kind {other:?}; expected \"memory\" or \"redis\""),
                ),
            }
        }
        if redis {
            out.redis = self.redis_store(s);
        } else {
            let only_redis = [
                s.url.as_ref().map(|v| (v.span(), "url")),
                s.nodes.first().map(|v| (v.span(), "nodes")),
                s.timeout_ms.as_ref().map(|v| (v.span(), "timeout_ms")),
                s.breaker_window_ms
                    .as_ref()
                    .map(|v| (v.span(), "breaker_window_ms")),
                s.prefix.as_ref().map(|v| (v.span(), "prefix")),
                s.fallback.as_ref().map(|v| (v.span(), "fallback")),
                s.instances.as_ref().map(|v| (v.span(), "instances")),
                s.sentinels.first().map(|v| (v.span(), "sentinels")),
                s.master_name.as_ref().map(|v| (v.span(), "master_name")),
                s.tls_ca_file.as_ref().map(|v| (v.span(), "tls_ca_file")),
                s.tls_cert_file
                    .as_ref()
                    .map(|v| (v.span(), "tls_cert_file")),
                s.tls_key_file.as_ref().map(|v| (v.span(), "tls_key_file")),
            ];
            for (span, field) in only_redis.into_iter().flatten() {
                self.errors.push(self.src.error(
                    span,
                    format!("store.{field}"),
                    "only for kind = \"redis\"",
                ));
            }
        }
        if let Some(max) = &s.max_keys {
            let n = *max.get_ref();
            if n < 1 || n as u64 > MAX_MAX_KEYS {
                self.push(
                    max,
                    "store.max_keys".into(),
                    format!("must be a whole number between 1 and {MAX_MAX_KEYS}, got {n}"),
                );
            } else {
                out.max_keys = n as u64;
            }
        }
        if let Some(max) = &s.max_claims {
            let n = *max.get_ref();
            if n < 1 || n as u64 > MAX_MAX_KEYS {
                self.push(
                    max,
                    "store.max_claims".into(),
                    format!("must be a whole number between 1 and {MAX_MAX_KEYS}, got {n}"),
                );
            } else if redis {
                self.push(
                    max,
                    "store.max_claims".into(),
                    "only for kind = \"memory\" (a Redis store keeps each claim as a key with a \
                     TTL, bounded by Redis' maxmemory)"
                        .into(),
                );
            } else {
                out.max_claims = n as u64;
            }
        }
        if let Some(on_full) = &s.on_full {
            match on_full.get_ref().parse::<OnFull>() {
                Ok(v) => out.on_full = v,
                Err(msg) => self.push(on_full, "store.on_full".into(), msg),
            }
        }
        out
    }

    /// The `[store]` fields of `kind = "redis"`; `None` when they have errors (pushed).
    fn redis_store(&mut self, s: &raw::RawStore) -> Option<RedisConfig> {
        let before = self.errors.len();
        for url in s.url.iter().chain(&s.nodes) {
            if !is_redis_url(url.get_ref()) {
                let field = if s.url.as_ref() == Some(url) {
                    "store.url"
                } else {
                    "store.nodes"
                };
                let message = format!(
                    "{:?} is not a redis://, rediss://, redis+unix:// or unix:// URL",
                    url.get_ref()
                );
                self.push(url, field.into(), message);
            }
        }
        let target = if !s.sentinels.is_empty() {
            self.sentinel_target(s)
        } else {
            if let Some(m) = &s.master_name {
                self.push(
                    m,
                    "store.master_name".into(),
                    "only with sentinels = [...]".into(),
                );
            }
            self.url_target(s)
        };
        let timeout_ms = self.millis(
            &s.timeout_ms,
            "store.timeout_ms",
            1,
            DEFAULT_REDIS_TIMEOUT_MS,
        );
        let breaker_window_ms = self.millis(
            &s.breaker_window_ms,
            "store.breaker_window_ms",
            0,
            DEFAULT_BREAKER_WINDOW_MS,
        );
        let mut prefix = "fg:".to_string();
        if let Some(p) = &s.prefix {
            let text = p.get_ref();
            if text.len() > 64 || text.contains(['{', '}']) {
                self.push(
                    p,
                    "store.prefix".into(),
                    "at most 64 bytes, without '{' or '}' (braces would make a cluster hash tag, \
                     letting the prefix choose the slot of every key)"
                        .into(),
                );
            } else {
                prefix = text.clone();
            }
        }
        let mut local = false;
        if let Some(f) = &s.fallback {
            match f.get_ref().as_str() {
                "none" => {}
                "local" => local = true,
                other => self.push(
                    f,
                    "store.fallback".into(),
                    format!("unknown fallback {other:?}; expected \"none\" or \"local\""),
                ),
            }
        }
        let mut instances = None;
        match (&s.instances, local) {
            (Some(n), true) => match u64::try_from(*n.get_ref()) {
                Ok(v @ 1..=10_000) => instances = Some(v),
                _ => self.push(
                    n,
                    "store.instances".into(),
                    format!("must be 1 to 10000 processes, got {}", n.get_ref()),
                ),
            },
            (Some(n), false) => self.push(
                n,
                "store.instances".into(),
                "only with fallback = \"local\"".into(),
            ),
            // Discovered: every process announces itself in Redis.
            (None, true) | (None, false) => {}
        }
        let tls = self.redis_tls(s);
        (self.errors.len() == before).then(|| RedisConfig {
            target: target.expect("no error, so a target"),
            timeout_ms,
            breaker_window_ms,
            prefix,
            local_fallback: local,
            local_fallback_instances: instances,
            tls,
        })
    }

    /// `url` (one server) or `nodes` (a cluster); `None` when they have errors (pushed).
    fn url_target(&mut self, s: &raw::RawStore) -> Option<floodgate_store::redis::RedisTarget> {
        use floodgate_store::redis::RedisTarget;
        match (&s.url, s.nodes.is_empty()) {
            (Some(url), true) => Some(RedisTarget::Standalone(url.get_ref().clone())),
            (None, false) => Some(RedisTarget::Cluster(
                s.nodes.iter().map(|n| n.get_ref().clone()).collect(),
            )),
            (Some(url), false) => {
                self.push(
                    url,
                    "store.url".into(),
                    "give url (one server) or nodes (a cluster), not both".into(),
                );
                None
            }
            (None, true) => {
                let kind = s.kind.as_ref().expect("kind = \"redis\" was given");
                self.push(
                    kind,
                    "store.url".into(),
                    "kind = \"redis\" needs url = \"redis://host:port\", nodes = [...] or \
                     sentinels = [...]"
                        .into(),
                );
                None
            }
        }
    }

    /// `sentinels` and `master_name` (Redis Sentinel); `None` when they have errors (pushed).
    fn sentinel_target(
        &mut self,
        s: &raw::RawStore,
    ) -> Option<floodgate_store::redis::RedisTarget> {
        let before = self.errors.len();
        for u in &s.sentinels {
            if !u.get_ref().starts_with("redis://") {
                self.push(
                    u,
                    "store.sentinels".into(),
                    format!(
                        "{:?} is not a redis:// URL (TLS to sentinels is not supported)",
                        u.get_ref()
                    ),
                );
            }
        }
        for (v, field) in [
            (s.url.as_ref(), "store.url"),
            (s.nodes.first(), "store.nodes"),
        ] {
            if let Some(v) = v {
                self.push(
                    v,
                    field.into(),
                    "give one of url (one server), nodes (a cluster) or sentinels (Redis \
                     Sentinel)"
                        .into(),
                );
            }
        }
        let master_name = match &s.master_name {
            Some(m) if !m.get_ref().is_empty() => Some(m.get_ref().clone()),
            Some(m) => {
                self.push(m, "store.master_name".into(), "must not be empty".into());
                None
            }
            None => {
                self.push(
                    &s.sentinels[0],
                    "store.master_name".into(),
                    "sentinels need master_name = \"...\" (the name the sentinels monitor)".into(),
                );
                None
            }
        };
        let master_name = master_name.filter(|_| self.errors.len() == before)?;
        Some(floodgate_store::redis::RedisTarget::Sentinel {
            sentinels: s.sentinels.iter().map(|u| u.get_ref().clone()).collect(),
            master_name,
        })
    }

    /// `tls_ca_file`, `tls_cert_file`, `tls_key_file`: read and checked (PEM that parses, a
    /// certificate with its key, `rediss://` URLs); errors pushed naming the field.
    fn redis_tls(&mut self, s: &raw::RawStore) -> floodgate_store::redis::RedisTls {
        let dir = Path::new(self.src.file).parent();
        let mut read = |value: &Option<Spanned<String>>, field: &str| -> Option<Vec<u8>> {
            let v = value.as_ref()?;
            let path = dir.map_or_else(
                || Path::new(v.get_ref()).to_path_buf(),
                |d| d.join(v.get_ref()),
            );
            match std::fs::read(&path) {
                Ok(bytes) => Some(bytes),
                Err(e) => {
                    self.push(
                        v,
                        format!("store.{field}"),
                        format!("cannot read {:?}: {e}", path.display().to_string()),
                    );
                    None
                }
            }
        };
        let tls = floodgate_store::redis::RedisTls {
            ca_pem: read(&s.tls_ca_file, "tls_ca_file"),
            client_cert_pem: read(&s.tls_cert_file, "tls_cert_file"),
            client_key_pem: read(&s.tls_key_file, "tls_key_file"),
        };
        let given = [
            (&s.tls_ca_file, "tls_ca_file"),
            (&s.tls_cert_file, "tls_cert_file"),
            (&s.tls_key_file, "tls_key_file"),
        ];
        let all_tls = s
            .url
            .iter()
            .chain(&s.nodes)
            .chain(&s.sentinels)
            .all(|u| u.get_ref().starts_with("rediss://"));
        if let Some((v, field)) = given.iter().find_map(|(v, f)| v.as_ref().map(|v| (v, *f))) {
            if !all_tls {
                self.push(
                    v,
                    format!("store.{field}"),
                    "TLS files need rediss:// URLs (url or every one of nodes)".into(),
                );
            }
        }
        match (&s.tls_cert_file, &s.tls_key_file) {
            (Some(v), None) => self.push(
                v,
                "store.tls_key_file".into(),
                "tls_cert_file needs tls_key_file (the client certificate's private key)".into(),
            ),
            (None, Some(v)) => self.push(
                v,
                "store.tls_cert_file".into(),
                "tls_key_file needs tls_cert_file (the client certificate)".into(),
            ),
            _ => {
                if let Err((field, e)) = tls.check() {
                    let (value, name) = match field {
                        "ca_pem" => (&s.tls_ca_file, "tls_ca_file"),
                        "client_cert_pem" => (&s.tls_cert_file, "tls_cert_file"),
                        _ => (&s.tls_key_file, "tls_key_file"),
                    };
                    if let Some(v) = value {
                        self.push(v, format!("store.{name}"), e);
                    }
                }
            }
        }
        tls
    }

    /// Validates one rule; `None` when it has errors (already pushed).
    fn rule(&mut self, at: &str, r: &RawRule) -> Option<RuleConfig> {
        let before = self.errors.len();
        let name = r.name.get_ref();
        if name.is_empty()
            || name.len() > MAX_RULE_NAME_BYTES
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        {
            self.push(
                &r.name,
                format!("{at}.name"),
                format!(
                    "invalid rule name {name:?}: use 1 to {MAX_RULE_NAME_BYTES} characters from \
                     A-Z a-z 0-9 _ - ."
                ),
            );
        }
        let kind = match &r.algorithm {
            None => AlgorithmKind::TokenBucket,
            Some(a) => match a.get_ref().parse::<AlgorithmKind>() {
                Ok(k) => k,
                Err(msg) => {
                    self.push(a, format!("{at}.algorithm"), msg);
                    AlgorithmKind::TokenBucket
                }
            },
        };
        let policy = self.quota(at, r).and_then(|quota| {
            if kind == AlgorithmKind::SlidingLog && quota.limit() > MAX_SLIDING_LOG_LIMIT {
                self.push(
                    &r.limit,
                    format!("{at}.limit"),
                    format!(
                        "the sliding log keeps one entry per admitted unit; its limit must be at \
                         most {MAX_SLIDING_LOG_LIMIT}, got {} (use sliding_window for large limits)",
                        quota.limit()
                    ),
                );
                return None;
            }
            match Policy::new(kind, quota) {
                Ok(p) => Some(p),
                // A burst too small for a sub-microsecond rate names the burst (where it was
                // given on its own).
                Err(e @ QuotaError::BurstTooSmall { .. }) => {
                    match &r.burst {
                        Some(b) => self.push(b, format!("{at}.burst"), e.to_string()),
                        None => self.push(&r.limit, format!("{at}.burst"), e.to_string()),
                    }
                    None
                }
                Err(e) => {
                    self.push(&r.limit, format!("{at}.limit"), e.to_string());
                    None
                }
            }
        });
        let key = match &r.key {
            None => KeySource::ClientIp,
            Some(k) => match parse_key_value(k.get_ref()) {
                Ok(key) => key,
                Err(msg) => {
                    self.push(k, format!("{at}.key"), msg);
                    KeySource::ClientIp
                }
            },
        };
        let matcher = self.matcher(at, r);
        let cost = self.cost(at, r, policy.as_ref().map(Policy::capacity));
        let descriptor = self.descriptor_rule(at, r);
        let failure_mode = match &r.failure_mode {
            None => FailureMode::Open,
            Some(f) => match f.get_ref().as_str() {
                "open" => FailureMode::Open,
                "closed" => FailureMode::Closed,
                other => {
                    self.push(
                        f,
                        format!("{at}.failure_mode"),
                        format!("unknown value {other:?}; expected \"open\" or \"closed\""),
                    );
                    FailureMode::Open
                }
            },
        };
        let delay = self.delay(at, r, policy.as_ref());
        if self.errors.len() > before {
            return None;
        }
        Some(RuleConfig {
            name: name.clone(),
            matcher,
            key,
            policy: policy?,
            cost,
            shadow: r.shadow,
            failure_mode,
            delay,
            descriptor,
            override_of: None,
            max_keys: self.rule_max_keys(at, r),
        })
    }

    /// `delay = "500ms"`: more than 0, within what the policy can ever schedule (its horizon,
    /// [`Policy::max_wait`]), on a rule that forward-auth and the proxy apply.
    fn delay(&mut self, at: &str, r: &RawRule, policy: Option<&Policy>) -> Option<u64> {
        let d = r.delay.as_ref()?;
        let field = format!("{at}.delay");
        // A bare "0" is the zero the next arm refuses, not a unit missing.
        let text = match d.get_ref().trim() {
            "0" => "0s",
            text => text,
        };
        let micros = match floodgate_core::quota::parse_period(text) {
            Ok(0) => {
                self.push(
                    d,
                    field,
                    "must be more than 0 (leave `delay` out to refuse at once)".into(),
                );
                return None;
            }
            Ok(micros) => micros,
            Err(msg) => {
                let text = d.get_ref().trim();
                let msg = if text.starts_with(|c: char| c.is_ascii_digit()) {
                    msg.replacen("period", "delay", 1)
                } else {
                    format!(
                        "must be a whole number and a unit, such as \"500ms\" or \"2s\", got {text:?}"
                    )
                };
                self.push(d, field, msg);
                return None;
            }
        };
        if r.shadow {
            self.push(
                d,
                field,
                "a shadow rule never refuses a request, so it never holds one: remove `delay` \
                 or `shadow`"
                    .into(),
            );
            return None;
        }
        if r.domain.is_some() {
            self.push(
                d,
                field,
                "a rule with a `domain` answers only Envoy descriptors and /v1/check, never \
                 forward-auth or proxied requests, so it holds none: remove `delay`"
                    .into(),
            );
            return None;
        }
        let policy = policy?;
        let horizon = policy.max_wait();
        if micros > horizon {
            let (why, remedy) = match policy.kind() {
                AlgorithmKind::FixedWindow
                | AlgorithmKind::SlidingWindow
                | AlgorithmKind::SlidingLog => (
                    "one period".to_string(),
                    "lower the delay or lengthen the period (a window's burst does not move it)",
                ),
                _ => (
                    format!("the time its burst of {} refills", policy.quota().burst()),
                    "lower the delay or raise the burst",
                ),
            };
            self.push(
                d,
                field,
                format!(
                    "{} can never be reached: this rule schedules a request at most {} ahead \
                     ({why}); {remedy}",
                    d.get_ref().trim(),
                    format_micros(horizon)
                ),
            );
            return None;
        }
        Some(micros)
    }

    /// A rule's `max_keys`: 1 to `[store] max_keys`, memory store only (errors pushed).
    fn rule_max_keys(&mut self, at: &str, r: &RawRule) -> Option<u64> {
        let max = r.max_keys.as_ref()?;
        let n = *max.get_ref();
        let field = format!("{at}.max_keys");
        if self.store_kind_redis {
            self.push(
                max,
                field,
                "only for the memory store ([store] kind = \"memory\"): Redis holds keys until \
                 their TTL and has no key cap"
                    .into(),
            );
            return None;
        }
        if n < 1 || n as u64 > self.store_max_keys {
            self.push(
                max,
                field,
                format!(
                    "must be a whole number between 1 and [store] max_keys ({}), got {n}",
                    self.store_max_keys
                ),
            );
            return None;
        }
        Some(n as u64)
    }

    /// `domain`, `descriptors`, `replaces` and `limit_overrides` of a rule.
    fn descriptor_rule(&mut self, at: &str, r: &RawRule) -> Option<descriptors::DescriptorRule> {
        let Some(domain) = &r.domain else {
            if let Some(first) = r.descriptors.first() {
                self.push(
                    &first.key,
                    format!("{at}.descriptors"),
                    "descriptors need a domain (domain = \"...\")".into(),
                );
            }
            for (field, span) in [
                ("replaces", r.replaces.first().map(Spanned::span)),
                (
                    "limit_overrides",
                    r.limit_overrides.first().map(Spanned::span),
                ),
            ] {
                if let Some(span) = span {
                    self.errors.push(self.src.error(
                        span,
                        format!("{at}.{field}"),
                        "only for a rule with a domain and descriptors",
                    ));
                }
            }
            return None;
        };
        let before = self.errors.len();
        if domain.get_ref().is_empty() {
            self.push(domain, format!("{at}.domain"), "must not be empty".into());
        }
        if r.descriptors.is_empty() {
            self.push(
                domain,
                format!("{at}.descriptors"),
                "a rule with a domain needs descriptors = [{ key = \"...\", value = \"...\" }, ...]"
                    .into(),
            );
        }
        // The descriptor's values are the key and the request's hits_addend the cost: the HTTP
        // request settings do not apply.
        let http_only = [
            r.key.as_ref().map(|k| (k.span(), "key")),
            r.matcher.path_prefix.as_ref().map(|p| (p.span(), "match")),
            r.cost.as_ref().map(|c| (c.span(), "cost")),
            r.cost_header.as_ref().map(|c| (c.span(), "cost_header")),
            r.route_costs
                .first()
                .map(|c| (c.path_prefix.span(), "route_costs")),
        ];
        for (span, field) in http_only.into_iter().flatten() {
            self.errors.push(self.src.error(
                span,
                format!("{at}.{field}"),
                "not for a rule with a domain: its key is the descriptor's values and its cost \
                 the request's hits_addend",
            ));
        }
        let mut entries = Vec::with_capacity(r.descriptors.len());
        for (i, d) in r.descriptors.iter().enumerate() {
            if d.key.get_ref().is_empty() {
                self.push(
                    &d.key,
                    format!("{at}.descriptors[{i}].key"),
                    "must not be empty".into(),
                );
            }
            entries.push(descriptors::EntryMatch {
                key: d.key.get_ref().clone(),
                value: descriptors::ValueMatch::parse(
                    d.value.as_ref().map(|v| v.get_ref().as_str()),
                ),
            });
        }
        let mut overrides = Vec::new();
        for (i, o) in r.limit_overrides.iter().enumerate() {
            match o.get_ref().parse::<Quota>() {
                Ok(q) if q.burst() == q.limit() => overrides.push(q),
                Ok(_) => self.push(
                    o,
                    format!("{at}.limit_overrides[{i}]"),
                    "an override is a limit per period, without a burst".into(),
                ),
                Err(e) => self.push(o, format!("{at}.limit_overrides[{i}]"), e.to_string()),
            }
        }
        (self.errors.len() == before).then(|| descriptors::DescriptorRule {
            domain: domain.get_ref().clone(),
            entries,
            limit_name: Some(r.name.get_ref().clone()),
            replaces: r.replaces.iter().map(|n| n.get_ref().clone()).collect(),
            overrides,
        })
    }

    /// The descriptor tree of the rules with a domain, and the rules of their limit overrides
    /// (appended to `rules`).
    fn descriptor_index(
        &mut self,
        raw: &RawConfig,
        raw_of: &[usize],
        rules: &mut Vec<RuleConfig>,
    ) -> descriptors::DescriptorIndex {
        let mut index = descriptors::DescriptorIndex::default();
        let base = rules.len();
        for i in 0..base {
            let Some(d) = rules[i].descriptor.clone() else {
                continue;
            };
            let r = &raw.rules[raw_of[i]];
            if let Err(dup) = index.insert(&d.domain, &d.entries, descriptors::Leaf::Rule(i)) {
                self.push(
                    &r.name,
                    format!("rules[{}].descriptors", raw_of[i]),
                    format!(
                        "another rule has the same domain and descriptors ({})",
                        dup.path
                    ),
                );
            }
            for quota in &d.overrides {
                let at = rules.len();
                let mut rule = override_rule(&rules[i], quota);
                rule.override_of = Some(i);
                rules.push(rule);
                index.allow_override(i, quota, at);
            }
        }
        index
    }

    /// `limit = "10/10s"`, or `limit = 10` with `period = "10s"`; `burst` in either form.
    fn quota(&mut self, at: &str, r: &RawRule) -> Option<Quota> {
        let field = format!("{at}.limit");
        let burst = match &r.burst {
            None => None,
            Some(b) if *b.get_ref() >= 1 => Some(*b.get_ref() as u64),
            Some(b) => {
                self.push(
                    b,
                    format!("{at}.burst"),
                    format!("must be a whole number of at least 1, got {}", b.get_ref()),
                );
                return None;
            }
        };
        let quota = match r.limit.get_ref() {
            toml::Value::String(text) => {
                if let Some(p) = &r.period {
                    self.push(
                        p,
                        format!("{at}.period"),
                        format!(
                            "`period` is only used with a numeric limit; the quota text {text:?} \
                             already gives the period"
                        ),
                    );
                    return None;
                }
                let q = match text.parse::<Quota>() {
                    Ok(q) => q,
                    Err(e) => {
                        self.push(&r.limit, field, e.to_string());
                        return None;
                    }
                };
                match burst {
                    None => Ok(q),
                    Some(_) if q.burst() != q.limit() || text.contains("burst") => {
                        let b = r.burst.as_ref().expect("burst is set");
                        self.push(
                            b,
                            format!("{at}.burst"),
                            format!("the quota text {text:?} already gives a burst; give it once"),
                        );
                        return None;
                    }
                    Some(b) => q.burst_of(b),
                }
            }
            toml::Value::Integer(n) => {
                let Some(p) = &r.period else {
                    self.push(
                        &r.limit,
                        field,
                        format!(
                            "a numeric limit needs `period` (e.g. period = \"10s\"), or write \
                             limit = \"{n}/10s\""
                        ),
                    );
                    return None;
                };
                if *n < 1 {
                    self.push(
                        &r.limit,
                        field,
                        format!("limit must be a whole number of at least 1, got {n}"),
                    );
                    return None;
                }
                let period = match floodgate_core::quota::parse_period(p.get_ref()) {
                    Ok(period) => period,
                    Err(msg) => {
                        self.push(p, format!("{at}.period"), msg);
                        return None;
                    }
                };
                Quota::with_burst(*n as u64, period, burst.unwrap_or(*n as u64))
            }
            other => {
                self.push(
                    &r.limit,
                    field,
                    format!(
                        "expected quota text like \"10/10s\" or a whole number with `period`, \
                         got a {}",
                        other.type_str()
                    ),
                );
                return None;
            }
        };
        match quota {
            Ok(q) => Some(q),
            Err(e) => {
                self.push(&r.limit, format!("{at}.limit"), e.to_string());
                None
            }
        }
    }

    fn matcher(&mut self, at: &str, r: &RawRule) -> Matcher {
        let m = &r.matcher;
        let mut out = Matcher::default();
        if let Some(p) = &m.path_prefix {
            if p.get_ref().starts_with('/') {
                out.path_prefix = Some(p.get_ref().clone());
            } else {
                self.push(
                    p,
                    format!("{at}.match.path_prefix"),
                    format!("must start with '/', got {:?}", p.get_ref()),
                );
            }
        }
        for (i, method) in m.methods.iter().enumerate() {
            match parse_method(method.get_ref()) {
                Ok(me) => out.methods.push(me),
                Err(msg) => self.push(method, format!("{at}.match.methods[{i}]"), msg),
            }
        }
        if let Some(h) = &m.host {
            let host = h.get_ref().to_ascii_lowercase();
            if host.is_empty() || host.contains(['/', ' ', ':']) {
                self.push(
                    h,
                    format!("{at}.match.host"),
                    format!("expected a host name without port, got {:?}", h.get_ref()),
                );
            } else {
                out.host = Some(host);
            }
        }
        if let Some(h) = &m.header {
            let name = match HeaderName::from_bytes(h.name.get_ref().as_bytes()) {
                Ok(n) => Some(n),
                Err(_) => {
                    self.push(
                        &h.name,
                        format!("{at}.match.header.name"),
                        format!("invalid header name {:?}", h.name.get_ref()),
                    );
                    None
                }
            };
            let value = match &h.value {
                None => Some(None),
                Some(v) => match HeaderValue::from_str(v.get_ref()) {
                    Ok(v) => Some(Some(v)),
                    Err(_) => {
                        self.push(
                            v,
                            format!("{at}.match.header.value"),
                            format!("invalid header value {:?}", v.get_ref()),
                        );
                        None
                    }
                },
            };
            match (name, value) {
                (Some(n), Some(Some(v))) => out.headers.push(HeaderMatch::Equals(n, v)),
                (Some(n), Some(None)) => out.headers.push(HeaderMatch::Present(n)),
                _ => {}
            }
        }
        out
    }

    /// `cost`, `cost_header`, `[[rules.route_costs]]`; costs above the policy's capacity are
    /// errors here, not silent forever-denials at run time.
    fn cost(&mut self, at: &str, r: &RawRule, capacity: Option<u64>) -> CostSource {
        let mut default = 1;
        let mut header = None;
        let mut routes = Vec::new();
        if let Some(c) = &r.cost {
            match self.one_cost(format!("{at}.cost"), c, capacity) {
                // A rule whose requests cost nothing never limits anything.
                Some(0) => self.push(
                    c,
                    format!("{at}.cost"),
                    "must be at least 1: a rule whose requests cost 0 never limits (remove the \
                     rule, or make it shadow = true to only observe)"
                        .to_string(),
                ),
                Some(cost) => default = cost,
                None => {}
            }
        }
        if let Some(h) = &r.cost_header {
            match HeaderName::from_bytes(h.get_ref().as_bytes()) {
                Ok(n) => header = Some(n),
                Err(_) => self.push(
                    h,
                    format!("{at}.cost_header"),
                    format!("invalid header name {:?}", h.get_ref()),
                ),
            }
        }
        for (i, rc) in r.route_costs.iter().enumerate() {
            let base = format!("{at}.route_costs[{i}]");
            if !rc.path_prefix.get_ref().starts_with('/') {
                self.push(
                    &rc.path_prefix,
                    format!("{base}.path_prefix"),
                    format!("must start with '/', got {:?}", rc.path_prefix.get_ref()),
                );
                continue;
            }
            let method = match &rc.method {
                None => None,
                Some(m) => match parse_method(m.get_ref()) {
                    Ok(m) => Some(m),
                    Err(msg) => {
                        self.push(m, format!("{base}.method"), msg);
                        continue;
                    }
                },
            };
            if *rc.cost.get_ref() == 0 {
                self.push(
                    &rc.cost,
                    format!("{base}.cost"),
                    "a route cost must be at least 1 (exclude free routes with [rules.match])"
                        .into(),
                );
                continue;
            }
            if let Some(cost) = self.one_cost(format!("{base}.cost"), &rc.cost, capacity) {
                routes.push(RouteCost {
                    matcher: Matcher {
                        path_prefix: Some(rc.path_prefix.get_ref().clone()),
                        methods: method.into_iter().collect(),
                        ..Matcher::default()
                    },
                    cost,
                });
            }
        }
        // A header cost is at most what the rule can ever admit (an invalid quota has no
        // capacity; its error is reported already).
        let max = capacity.unwrap_or(MAX_COST);
        match (routes.is_empty(), header) {
            (false, header) => CostSource::Routes {
                routes,
                header,
                default,
                max,
            },
            (true, Some(name)) => CostSource::Header { name, default, max },
            (true, None) => CostSource::Fixed(default),
        }
    }

    fn one_cost(&mut self, field: String, c: &Spanned<i64>, capacity: Option<u64>) -> Option<u64> {
        let n = *c.get_ref();
        if n < 0 || n as u64 > MAX_COST {
            self.push(
                c,
                field,
                format!("must be a whole number between 0 and {MAX_COST}, got {n}"),
            );
            return None;
        }
        let n = n as u64;
        if let Some(cap) = capacity {
            if n > cap {
                self.push(
                    c,
                    field,
                    format!(
                        "cost {n} exceeds the rule's capacity of {cap} units: such a request \
                         could never be admitted (raise the limit or burst)"
                    ),
                );
                return None;
            }
        }
        Some(n)
    }
}

fn parse_method(text: &str) -> Result<Method, String> {
    let upper = text.to_ascii_uppercase();
    if upper.is_empty() || !upper.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(format!("invalid HTTP method {text:?}"));
    }
    Method::from_bytes(upper.as_bytes()).map_err(|_| format!("invalid HTTP method {text:?}"))
}

/// `key = "SOURCE"`, `key = "SOURCE | SOURCE"` (the first present one) or
/// `key = ["SOURCE", "SOURCE"]` (all together), where SOURCE is one of `client_ip`,
/// `user:HEADER`, `api_key:HEADER`, `header:HEADER`, `client_net:V4/V6` (the client address
/// grouped by these prefix lengths), `method`, `path`, `route`, `global`.
fn parse_key_value(value: &toml::Value) -> Result<KeySource, String> {
    match value {
        toml::Value::String(text) => parse_key(text),
        toml::Value::Array(items) if !items.is_empty() => {
            let mut all = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    toml::Value::String(text) => all.push(parse_key(text)?),
                    other => {
                        return Err(format!(
                            "expected key source strings in the list, got a {}",
                            other.type_str()
                        ))
                    }
                }
            }
            Ok(if all.len() == 1 {
                all.remove(0)
            } else {
                KeySource::All(all)
            })
        }
        other => Err(format!(
            "expected a key source like \"client_ip\" or a list of them, got {}",
            if matches!(other, toml::Value::Array(_)) {
                "an empty list".to_string()
            } else {
                format!("a {}", other.type_str())
            }
        )),
    }
}

/// One key source, or a fallback chain `a | b | c` (the first present one).
///
/// # Errors
/// A message naming the accepted sources.
fn parse_key(text: &str) -> Result<KeySource, String> {
    let mut chain = Vec::new();
    for part in text.split('|') {
        chain.push(parse_key_source(part.trim())?);
    }
    Ok(if chain.len() == 1 {
        chain.remove(0)
    } else {
        KeySource::FirstOf(chain)
    })
}

fn parse_key_source(text: &str) -> Result<KeySource, String> {
    let header = |name: &str| {
        HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| format!("invalid header name {name:?} in key source {text:?}"))
    };
    Ok(match text {
        "client_ip" => KeySource::ClientIp,
        "global" => KeySource::Constant("global".into()),
        "method" => KeySource::Method,
        "path" => KeySource::Path,
        "route" => KeySource::Route,
        _ => match text.split_once(':') {
            Some(("user", h)) => KeySource::User { header: header(h)? },
            Some(("api_key", h)) => KeySource::ApiKey { header: header(h)? },
            Some(("header", h)) => KeySource::Header { name: header(h)? },
            Some(("client_net", prefixes)) => {
                let parsed = prefixes.split_once('/').and_then(|(v4, v6)| {
                    let v4: u8 = v4.trim().parse().ok().filter(|&p| p <= 32)?;
                    let v6: u8 = v6.trim().parse().ok().filter(|&p| p <= 128)?;
                    Some((v4, v6))
                });
                let (ipv4_prefix, ipv6_prefix) = parsed.ok_or_else(|| {
                    format!(
                        "invalid prefixes in key source {text:?}: expected \
                         client_net:IPV4_PREFIX/IPV6_PREFIX, e.g. client_net:24/48"
                    )
                })?;
                KeySource::ClientNet {
                    ipv4_prefix,
                    ipv6_prefix,
                }
            }
            _ => {
                return Err(format!(
                    "unknown key source {text:?}; expected client_ip, user:HEADER, \
                     api_key:HEADER, header:HEADER, client_net:V4/V6, method, path, route or \
                     global"
                ))
            }
        },
    })
}

/// The configuration spelling of a key source (inverse of [`parse_key`] for one source).
pub(crate) fn describe_key(key: &KeySource) -> String {
    match key {
        KeySource::ClientIp => "client_ip".into(),
        KeySource::User { header } => format!("user:{header}"),
        KeySource::ApiKey { header } => format!("api_key:{header}"),
        KeySource::Header { name } => format!("header:{name}"),
        KeySource::Method => "method".into(),
        KeySource::Path => "path".into(),
        KeySource::Route => "route".into(),
        KeySource::Constant(_) => "global".into(),
        KeySource::ClientNet {
            ipv4_prefix,
            ipv6_prefix,
        } => format!("client_net:{ipv4_prefix}/{ipv6_prefix}"),
        KeySource::FirstOf(chain) => chain
            .iter()
            .map(describe_key)
            .collect::<Vec<_>>()
            .join(" | "),
        KeySource::All(all) => format!(
            "[{}]",
            all.iter().map(describe_key).collect::<Vec<_>>().join(", ")
        ),
        _ => format!("{key:?}"),
    }
}

/// An address or CIDR: `10.0.0.0/8`, `127.0.0.1` (a single address), `::1`.
///
/// # Errors
/// A message with an example of the accepted form.
fn parse_net(text: &str) -> Result<IpNet, String> {
    if let Ok(net) = text.parse::<IpNet>() {
        return Ok(net.trunc());
    }
    text.parse::<std::net::IpAddr>()
        .map(IpNet::from)
        .map_err(|_| format!("invalid address or CIDR {text:?}, e.g. \"10.0.0.0/8\" or \"::1\""))
}

/// An `http://host:port` upstream (no path, query or TLS).
///
/// # Errors
/// A message saying which part is not accepted.
pub(crate) fn parse_upstream(text: &str) -> Result<Uri, String> {
    let uri: Uri = text
        .parse()
        .map_err(|e| format!("invalid upstream URL {text:?}: {e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!(
            "upstream {text:?} must start with http:// (TLS to the upstream is not supported)"
        ));
    }
    if uri.authority().is_none() {
        return Err(format!("upstream {text:?} has no host"));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(format!(
            "upstream {text:?} must not have a path or query: requests keep their own path"
        ));
    }
    Ok(uri)
}

#[cfg(test)]
mod tests;

/// A duration in microseconds as the largest whole unit (`1s`, `1500ms`, `250us`).
fn format_micros(micros: u64) -> String {
    let text = floodgate_core::quota::format_period(micros);
    // format_period writes a lone unit without its count (`s`, `min`).
    if text.starts_with(|c: char| c.is_ascii_digit()) {
        text
    } else {
        format!("1{text}")
    }
}
