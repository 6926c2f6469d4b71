//! The service's shared state: the limiter (rules + store), the configuration in force, the
//! clock, and the reload logic that swaps rules without touching unchanged rules' counters.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use floodgate_core::{Clock, ManualClock};
use floodgate_limiter::{RateLimiter, RuleSet};
use floodgate_store::{AnyStore, Store};
use http::Uri;
use metrics_exporter_prometheus::PrometheusHandle;
use parking_lot::Mutex;

use crate::config::{self, Config, ConfigErrors, RuleConfig};
use crate::rules::rule_set;

/// One configuration generation: the configuration and the rule set built from it, made
/// together and swapped as one on reload, so that a request reading one snapshot never sees a
/// configuration and rules that disagree. Derefs to the [`Config`].
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// The configuration.
    pub(crate) config: Arc<Config>,
    /// The rule set built from it (the one the limiter decides with).
    pub(crate) rules: Arc<RuleSet>,
}

impl Snapshot {
    fn new(config: Config) -> Self {
        let rules = Arc::new(rule_set(&config));
        Self {
            config: Arc::new(config),
            rules,
        }
    }
}

impl std::ops::Deref for Snapshot {
    type Target = Config;

    fn deref(&self) -> &Config {
        &self.config
    }
}

/// Everything the handlers share. One per process.
#[derive(Debug)]
pub(crate) struct AppState {
    /// Rules + store: the one place requests are decided. Its rule set is swapped on reload;
    /// the store identifies state by (rule name, policy, key), so a reloaded rule with the same
    /// name, algorithm and quota keeps its counters and a changed one starts fresh.
    pub(crate) limiter: RateLimiter<AnyStore>,
    /// The time source of the store (the system clock, or the test-only manual clock).
    pub(crate) clock: Arc<dyn Clock>,
    /// `Some` only with the hidden test-only `--manual-clock` flag.
    pub(crate) manual_clock: Option<ManualClock>,
    /// Renders `/metrics`.
    pub(crate) prometheus: PrometheusHandle,
    /// Set when SIGTERM/SIGINT arrived: `/readyz` answers 503.
    pub(crate) shutting_down: AtomicBool,
    /// Reverse-proxy upstream, when in proxy mode.
    pub(crate) upstream: Option<Uri>,
    /// BENCH ONLY (hidden `--bench-baseline`): serve `POST /v1/bench/bare`.
    pub(crate) bench_baseline: bool,
    /// The web page's live view; `None` when the page is off (`--no-ui`, `[server] ui = false`).
    pub(crate) ui: Option<Arc<crate::ui::live::Live>>,
    /// Signs and opens reservation tokens (`[server] reservation_secret` and
    /// `reservation_ttl`, read once at start; a random secret when none is configured).
    pub(crate) reservations: crate::http::settle::Signer,
    /// The configuration generation in force (configuration and rule set, swapped as one):
    /// read on every proxied request, a lock-free load, not a lock.
    snapshot: ArcSwap<Snapshot>,
    /// Serialises reloads (each reads the old configuration and replaces it).
    reload_lock: Mutex<()>,
    config_path: Option<PathBuf>,
    admin_token_override: Option<String>,
    /// `--api-token` / `FLOODGATE_API_TOKEN` (see [`AppState::api_token`]); set after `new`.
    pub(crate) api_token_override: Option<String>,
    /// `--envoy-*` flags (see [`config::parse_sources`]): applied on every reload too.
    pub(crate) envoy_flags: config::envoy::EnvoyArgs,
    /// `--envoy-ratelimit-env`: the environment's store and gRPC settings, put into every
    /// configuration read (at start and on reloads) as they were at start.
    pub(crate) envoy_env: Option<Arc<config::envoy_env::EnvoyEnv>>,
    /// The descriptor labels each rule has used (bounded per rule; see
    /// [`crate::grpc::labels`]).
    pub(crate) descriptor_labels: crate::grpc::labels::Labels,
    generation: AtomicU64,
}

impl AppState {
    /// State for `config` (already validated).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        config: Config,
        config_path: Option<PathBuf>,
        admin_token_override: Option<String>,
        store: AnyStore,
        clock: Arc<dyn Clock>,
        manual_clock: Option<ManualClock>,
        prometheus: PrometheusHandle,
        upstream: Option<Uri>,
    ) -> Self {
        apply_key_caps(&store, None, &config);
        let snapshot = Snapshot::new(config);
        let limiter = RateLimiter::with_shared_rules(
            Arc::new(store),
            Arc::new(ArcSwap::new(Arc::clone(&snapshot.rules))),
        );
        let reservations = crate::http::settle::Signer::new(
            snapshot.config.server.reservation_secret.as_deref(),
            snapshot.config.server.reservation_ttl,
        );
        Self {
            limiter,
            clock,
            manual_clock,
            prometheus,
            shutting_down: AtomicBool::new(false),
            upstream,
            bench_baseline: false,
            ui: None,
            reservations,
            snapshot: ArcSwap::from_pointee(snapshot),
            reload_lock: Mutex::new(()),
            config_path,
            admin_token_override: admin_token_override.filter(|t| !t.is_empty()),
            api_token_override: None,
            envoy_flags: config::envoy::EnvoyArgs::default(),
            envoy_env: None,
            descriptor_labels: crate::grpc::labels::Labels::default(),
            generation: AtomicU64::new(1),
        }
    }

    /// The store (memory or Redis), for housekeeping and readiness.
    pub(crate) fn store(&self) -> &AnyStore {
        self.limiter.store()
    }

    /// The configuration in force.
    pub(crate) fn config(&self) -> Arc<Config> {
        Arc::clone(&self.snapshot.load().config)
    }

    /// The configuration generation in force: configuration and rule set of one generation.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    /// The configuration generation in force (it derefs to the [`Config`]), for a short read
    /// on the request path: no reference count is taken (see [`arc_swap::Guard`]); do not
    /// hold it across an `.await`.
    pub(crate) fn config_now(&self) -> arc_swap::Guard<Arc<Snapshot>> {
        self.snapshot.load()
    }

    /// How many configurations have been in force (1 at start, +1 per successful reload).
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The config file, when one was given.
    pub(crate) fn config_path(&self) -> Option<&PathBuf> {
        self.config_path.as_ref()
    }

    /// The admin bearer token: `--admin-token` / `FLOODGATE_ADMIN_TOKEN`, else
    /// `[server] admin_token`; `None` disables the admin API.
    pub(crate) fn admin_token(&self) -> Option<String> {
        self.admin_token_override
            .clone()
            .or_else(|| self.config().server.admin_token.clone())
    }

    /// The decision API's bearer token: `--api-token` / `FLOODGATE_API_TOKEN`, else
    /// `[server] api_token`; `None` leaves the decision API open to whoever reaches it.
    pub(crate) fn api_token(&self) -> Option<String> {
        self.api_token_override
            .clone()
            .or_else(|| self.config_now().server.api_token.clone())
    }

    /// The rule named `name` in the configuration in force.
    pub(crate) fn rule(&self, name: &str) -> Option<(Arc<Config>, usize)> {
        let config = self.config();
        let index = config.rules.iter().position(|r| r.name == name)?;
        Some((config, index))
    }

    /// Validates `sources` (what [`config::read_sources`] read: a TOML file, a YAML file, or a
    /// directory of YAML files; `file` names the configuration) and, when valid, makes them the
    /// configuration in force: the rules are swapped atomically; counters of rules with the
    /// same name, algorithm and quota are kept. Logs and counts the result in
    /// `floodgate_config_reloads_total{result}`.
    ///
    /// # Errors
    /// [`ConfigErrors`] when the sources are invalid; the old configuration stays in force.
    pub(crate) fn reload_from_sources(
        &self,
        file: &str,
        sources: &[(String, String)],
    ) -> Result<(), ConfigErrors> {
        match config::parse_sources(file, sources, &self.envoy_flags) {
            Ok(mut new) => {
                if let Some(env) = &self.envoy_env {
                    env.apply_to(&mut new);
                }
                let guard = self.reload_lock.lock();
                let old = self.config();
                warn_about_restart_only_changes(&old, &new);
                let (kept, fresh) = diff_rules(&old, &new);
                apply_key_caps(self.store(), Some(&old), &new);
                let snapshot = Arc::new(Snapshot::new(new));
                self.limiter
                    .shared_rules()
                    .store(Arc::clone(&snapshot.rules));
                self.snapshot.store(snapshot);
                drop(guard);
                // A rule's new quota or lease starts cold: every lease goes back to the store.
                if let (true, Ok(runtime)) = (
                    self.limiter.leased_keys() > 0,
                    tokio::runtime::Handle::try_current(),
                ) {
                    let limiter = self.limiter.clone();
                    runtime.spawn(async move { limiter.return_leases().await });
                }
                let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
                metrics::counter!("floodgate_config_reloads_total", "result" => "ok").increment(1);
                tracing::info!(
                    file,
                    generation,
                    kept = ?kept,
                    fresh = ?fresh,
                    "configuration reloaded"
                );
                config::describe::log_rules(&self.config());
                Ok(())
            }
            Err(errors) => {
                metrics::counter!("floodgate_config_reloads_total", "result" => "error")
                    .increment(1);
                for e in &errors.0 {
                    tracing::error!(error = %e, "configuration rejected; the previous one stays in force");
                }
                Err(errors)
            }
        }
    }
}

/// Gives the store each rule's own key cap (`[[rules]] max_keys`), and takes it off the rules
/// of `old` that no longer have one ([`Store::set_rule_max_keys`]). A store without caps per
/// rule (Redis) ignores them: caps given anyway (a memory configuration run with
/// `--store redis://...`) are logged.
fn apply_key_caps(store: &AnyStore, old: Option<&Config>, new: &Config) {
    let mut kept = true;
    // A set, not a scan per rule: a reload of 50,000 rules compared every pair (minutes).
    let names: HashSet<&str> = new.rules.iter().map(|r| r.name.as_str()).collect();
    for rule in old.iter().flat_map(|c| &c.rules) {
        if !names.contains(rule.name.as_str()) {
            kept &= store.set_rule_max_keys(&rule.name, None);
        }
    }
    for rule in &new.rules {
        let cap = rule
            .max_keys
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        kept &= store.set_rule_max_keys(&rule.name, cap);
    }
    if !kept {
        if let Some(rule) = new.rules.iter().find(|r| r.max_keys.is_some()) {
            tracing::warn!(
                rule = %rule.name,
                store = store.kind(),
                "rules' max_keys apply to the memory store only; this store ignores them"
            );
        }
    }
}

/// Names of rules whose counters carry over (same name, algorithm and quota) and of rules that
/// start fresh: linear in the rules (the old ones by name in a map).
fn diff_rules(old: &Config, new: &Config) -> (Vec<String>, Vec<String>) {
    let by_name: HashMap<&str, &RuleConfig> =
        old.rules.iter().map(|r| (r.name.as_str(), r)).collect();
    let mut kept = Vec::new();
    let mut fresh = Vec::new();
    for rule in &new.rules {
        let same = by_name
            .get(rule.name.as_str())
            .is_some_and(|o| o.same_state(rule));
        if same {
            kept.push(rule.name.clone());
        } else {
            fresh.push(rule.name.clone());
        }
    }
    (kept, fresh)
}

fn warn_about_restart_only_changes(old: &Config, new: &Config) {
    if old.store != new.store {
        tracing::warn!("[store] changes take effect at the next restart");
    }
    if old.server.reservation_secret != new.server.reservation_secret
        || old.server.reservation_ttl != new.server.reservation_ttl
    {
        tracing::warn!(
            "[server] reservation_secret/reservation_ttl changes take effect at the next restart"
        );
    }
    if old.server.listen != new.server.listen
        || old.server.upstream != new.server.upstream
        || old.server.grpc_listen != new.server.grpc_listen
    {
        tracing::warn!(
            "[server] listen/upstream/grpc_listen changes take effect at the next restart"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(n: usize, limit: &str) -> Config {
        let mut text = String::new();
        for i in 0..n {
            text.push_str(&format!(
                "[[rules]]\nname = \"r{i}\"\nlimit = \"{limit}\"\n"
            ));
        }
        config::parse("f.toml", &text).unwrap()
    }

    #[test]
    fn rules_are_kept_by_name_and_quota() {
        let old = config(3, "10/s");
        let mut new = config(4, "10/s");
        new.rules[1] = config(2, "20/s").rules[1].clone();
        let (kept, fresh) = diff_rules(&old, &new);
        assert_eq!(kept, ["r0", "r2"]);
        assert_eq!(fresh, ["r1", "r3"]);
    }
}
