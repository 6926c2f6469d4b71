//! `floodgate audit`: the command line of the `floodgate-audit` library (`http` and `redis`);
//! every probe, check and renderer lives in the library.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use floodgate_audit::http::headers::DeclaredLimit;
use floodgate_audit::http::HttpOptions;
use floodgate_audit::redis::{FloodgateRules, RedisOptions, RuleSpec};
use floodgate_core::Quota;
use floodgate_tower::KeySource;

const EXAMPLES: &str = "\
Exit status: 0 no danger found, 1 at least one danger found, 2 the audit could not run
(bad arguments, unreachable, refused without --yes).

Examples:
  floodgate audit http http://127.0.0.1:8080/api --limit 100/s --yes
  floodgate audit http http://lb.internal/api --new-connections --yes --format svg --output probe.svg
  floodgate audit redis redis://127.0.0.1:6379 --pattern 'rate*'
  floodgate audit redis redis://127.0.0.1:7000 --config floodgate.toml --key key=alice";

/// Flags of `floodgate audit`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXAMPLES)]
pub(crate) struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Probe a live limiter over HTTP: declared limit, multiplication over instances, window
    /// edge, honest Retry-After, shape of a denial. Sends requests only to URL, within
    /// --max-requests and --max-seconds.
    Http(HttpArgs),
    /// Audit the rate-limit keys of a Redis or Redis Cluster, read-only and sampled: types,
    /// TTLs, bytes, keys without TTL, sorted-set logs, eviction policy, cluster slots.
    Redis(RedisArgs),
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Format {
    Table,
    Json,
    Svg,
}

#[derive(Debug, clap::Args)]
struct HttpArgs {
    /// The limited endpoint, `http://host:port/path` (the only address contacted).
    url: String,
    /// The limit to test against, LIMIT/PERIOD (e.g. 100/s, 10/10s, 5/min burst 10), when the
    /// endpoint declares none or to override what it declares.
    #[arg(long, value_name = "LIMIT/PERIOD")]
    limit: Option<Quota>,
    /// Most requests to send in all.
    #[arg(long, default_value_t = 5_000)]
    max_requests: u64,
    /// Most seconds to probe for.
    #[arg(long, default_value_t = 60)]
    max_seconds: u64,
    /// Send more than 100 requests (the plan is printed when this is missing).
    #[arg(long)]
    yes: bool,
    /// Requests in flight at once during a burst.
    #[arg(long, default_value_t = 50)]
    concurrency: usize,
    /// A new connection for every request, so a load balancer spreads them over instances.
    #[arg(long)]
    new_connections: bool,
    /// The largest multiple of the limit the burst can tell apart (it sends one more).
    #[arg(long, default_value_t = 4)]
    max_multiple: u64,
    /// The request method.
    #[arg(long, default_value = "GET")]
    method: String,
    /// An extra request header, `NAME: VALUE` (repeatable), e.g. an API key.
    #[arg(long = "header", short = 'H', value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// Timeout of one request in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    timeout_ms: u64,
    /// A status that means "denied" besides 429 (repeatable), e.g. 503 for nginx's limit_req.
    #[arg(long = "deny-status", value_name = "CODE", value_parser = clap::value_parser!(u16).range(100..=599))]
    deny_statuses: Vec<u16>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Write the output to FILE instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct RedisArgs {
    /// `redis://[user:password@]host:port[/db]`: a standalone server or any node of a cluster.
    url: String,
    /// Redis glob of the keys to audit [default: Floodgate's prefix, `fg:*` or the --config
    /// file's `[store] prefix` followed by `*`]; `rate*` and other limiters' conventions work.
    #[arg(long)]
    pattern: Option<String>,
    /// Most keys to inspect (TYPE, PTTL, MEMORY USAGE, OBJECT ENCODING), over all masters.
    #[arg(long, default_value_t = 10_000)]
    sample: u64,
    /// Most names SCAN may examine per master before the totals are projected.
    #[arg(long, default_value_t = 1_000_000)]
    scan_max: u64,
    /// Floodgate configuration: attribute Floodgate's keys to its rules (and use its prefix).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// A partition key whose names to recompute under every rule, e.g. `key=alice`,
    /// `ip=203.0.113.7` (repeatable; with --config).
    #[arg(long = "key", value_name = "KEY", requires = "config")]
    keys: Vec<String>,
    /// Timeout of one Redis command in milliseconds.
    #[arg(long, default_value_t = 2_000)]
    timeout_ms: u64,
    /// Output format (svg is for `audit http`).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Write the output to FILE instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// Runs `floodgate audit`: exit status 0 without danger, 1 with one.
///
/// # Errors
/// The audit could not run (the binary then exits with status 2).
pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let (text, danger, output) = match args.what {
        What::Http(a) => {
            let opts = http_options(&a)?;
            let report = rt.block_on(floodgate_audit::http::audit(
                &opts,
                &floodgate_audit::timeline::RealTime::start(),
            ))?;
            let text = match a.format {
                Format::Table => floodgate_audit::http::table(&report),
                Format::Json => report.to_json(),
                Format::Svg => floodgate_audit::http::svg(&report),
            };
            (text, report.has_danger(), a.output)
        }
        What::Redis(a) => {
            let opts = redis_options(&a)?;
            let report = rt.block_on(floodgate_audit::redis::audit(&opts))?;
            let text = match a.format {
                Format::Table => floodgate_audit::redis::table(&report),
                Format::Json => report.to_json(),
                Format::Svg => anyhow::bail!("--format svg is for `floodgate audit http`"),
            };
            (text, report.has_danger(), a.output)
        }
    };
    match output {
        Some(path) => {
            std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?
        }
        None => crate::cli::write_stdout(&text)?,
    }
    Ok(if danger {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn http_options(a: &HttpArgs) -> anyhow::Result<HttpOptions> {
    let mut o = HttpOptions::new(&a.url);
    o.limit = a.limit.map(|q| DeclaredLimit {
        limit: q.limit(),
        window_us: Some(q.period()),
        burst: (q.burst() != q.limit()).then_some(q.burst()),
        source: format!("--limit {q}"),
    });
    o.max_requests = a.max_requests;
    o.max_seconds = a.max_seconds;
    o.confirmed = a.yes;
    o.concurrency = a.concurrency;
    o.new_connections = a.new_connections;
    o.max_multiple = a.max_multiple.max(1);
    o.method = a.method.clone();
    o.request_timeout_ms = a.timeout_ms;
    o.deny_statuses = a.deny_statuses.clone();
    o.progress = true;
    for h in &a.headers {
        let (k, v) = h
            .split_once(':')
            .with_context(|| format!("--header {h:?}: expected NAME: VALUE"))?;
        o.headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    Ok(o)
}

/// The partition key of a rule keyed by a constant (`key = "global"`), as the limiter encodes
/// it; `None` for keys that depend on the request.
fn constant_key(source: &KeySource) -> Option<String> {
    if !matches!(source, KeySource::Constant(_)) {
        return None;
    }
    let (method, uri, headers) = (
        http::Method::GET,
        http::Uri::from_static("/"),
        http::HeaderMap::new(),
    );
    source.key(&floodgate_tower::KeyContext {
        method: &method,
        uri: &uri,
        headers: &headers,
        client_ip: None,
        client_addr: None,
        client_unparsed: None,
    })
}

fn redis_options(a: &RedisArgs) -> anyhow::Result<RedisOptions> {
    let mut o = RedisOptions::new(&a.url);
    o.sample = a.sample;
    o.scan_max = a.scan_max;
    o.timeout_ms = a.timeout_ms;
    o.progress = true;
    if let Some(path) = &a.config {
        let config = crate::config::load(path).map_err(|errors| {
            anyhow::anyhow!(
                "{}",
                errors
                    .0
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        })?;
        let prefix = config
            .store
            .redis
            .as_ref()
            .map_or_else(|| "fg:".to_string(), |r| r.prefix.clone());
        let rules = config
            .rules
            .iter()
            .map(|r| RuleSpec {
                name: r.name.clone(),
                policy: r.policy.clone(),
                known_keys: constant_key(&r.key).into_iter().collect(),
            })
            .collect();
        o.pattern = format!("{}*", glob_escape(&prefix));
        o.floodgate = Some(FloodgateRules {
            prefix,
            rules,
            known_keys: a.keys.clone(),
        });
    }
    if let Some(p) = &a.pattern {
        o.pattern = p.clone();
    }
    Ok(o)
}

/// `prefix` with the glob's special characters escaped, so that `prefix*` matches it literally.
fn glob_escape(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len());
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
