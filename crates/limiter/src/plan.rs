//! [`Plan`]: the per-request work decided before the store is asked.

use std::sync::Arc;

use floodgate_core::{Micros, Policy};
use http::HeaderMap;

use crate::answer_modes::AnswerModes;
use crate::key::KeyContext;
use crate::metrics::Outcome;
use crate::rule::{CostError, RuleSet};
use crate::small_list::SmallList;

/// The per-request work decided before talking to the store: which rules apply, with which key
/// and cost. Owns everything it needs, so the store call borrows nothing from the request.
///
/// Made by [`RateLimiter::plan`](crate::RateLimiter::plan) from a request, or by [`Plan::new`] and [`Plan::push`] from
/// explicit items (a decision API naming rules and keys itself).
#[derive(Debug, Clone)]
pub struct Plan {
    rules: Arc<RuleSet>,
    /// The usual request meets at most one rule: kept inline (no `Vec`).
    checks: SmallList<PlannedCheck>,
    /// The first item whose cost is refused before the store is asked.
    pub(crate) refusal: Option<Refusal>,
    /// The longest the caller can wait for the answer ([`Plan::limit_delay`]).
    delay_limit: Option<Micros>,
    /// The block list entries the request matched ([`Plan::block`]).
    blocked: Vec<Arc<str>>,
    /// Quota mode and global shadow mode ([`crate::modes`]).
    pub(crate) modes: AnswerModes,
}

/// Why a plan is refused before the store is asked (answered 400; nothing is charged).
#[derive(Debug, Clone)]
pub(crate) struct Refusal {
    /// The rule (a position in the rule set).
    pub(crate) rule: usize,
    /// The item, for explicit items.
    pub(crate) item: Option<usize>,
    /// What was wrong.
    pub(crate) error: CostRefusal,
}

#[derive(Debug, Clone)]
pub(crate) enum CostRefusal {
    /// The rule counts by client IP and the request has no peer address.
    NoClientAddress,
    /// The request carries a header the rule counts by more than once.
    AmbiguousKey(http::HeaderName),
    /// A cost header that is not a positive whole number.
    Invalid(http::HeaderName),
    /// A cost above the rule's capacity.
    ExceedsCapacity { cost: u64, capacity: u64 },
}

#[derive(Debug, Clone)]
pub(crate) struct PlannedCheck {
    pub(crate) rule: usize,
    pub(crate) key: String,
    pub(crate) cost: u64,
    /// A policy deciding this item instead of the rule's ([`Plan::push_item`]); boxed, as
    /// it is rare and large.
    pub(crate) policy: Option<Box<Policy>>,
    /// The `descriptor` label its decision is also counted under ([`Plan::push_item`]).
    pub(crate) label: Option<Arc<str>>,
    /// [`ItemOptions::quota_mode`].
    pub(crate) quota_mode: bool,
}

/// What [`Plan::push_item`] adds beside the rule, key and cost.
#[derive(Debug, Clone, Default)]
pub struct ItemOptions {
    /// Decide the item by this policy instead of the rule's (a request's own limit, such as
    /// Envoy's `RateLimitDescriptor.limit`); the store keeps its state apart from the rule's.
    pub policy: Option<Policy>,
    /// Also count the decision in `floodgate_descriptor_decisions_total{rule, descriptor,
    /// outcome}` under this label (bounded by the caller).
    pub label: Option<Arc<str>>,
    /// envoyproxy/ratelimit's `quota_mode`: this item being over its limit refuses the request
    /// only when every quota-mode item is over (see [`Plan::block_in_quota_mode`]).
    pub quota_mode: bool,
}

impl Plan {
    /// An empty plan over `rules` (take them from [`RateLimiter::rules`](crate::RateLimiter::rules), so that the items'
    /// rule positions and the evaluation see the same generation of rules).
    pub fn new(rules: Arc<RuleSet>) -> Self {
        Self {
            rules,
            checks: SmallList::Empty,
            refusal: None,
            delay_limit: None,
            blocked: Vec::new(),
            modes: AnswerModes::default(),
        }
    }

    /// Adds a check of `cost` units on `key` (the store key, used as it is: encode client
    /// input with [`crate::encode_key`]) for the rule at `rule_index`, its position in the plan's
    /// [`RuleSet::rules`]. Items are decided in the order they are pushed (enforcing items as
    /// one all-or-nothing batch); [`RuleOutcome::item`](crate::RuleOutcome::item) is an item's position.
    ///
    /// A cost above the rule's capacity refuses the whole plan
    /// ([`Action::CostExceedsCapacity`](crate::Action::CostExceedsCapacity) naming this item) before anything is charged.
    ///
    /// # Panics
    /// When `rule` is not a position in the plan's rules.
    pub fn push(&mut self, rule: usize, key: String, cost: u64) {
        self.push_item(rule, key, cost, ItemOptions::default());
    }

    /// [`Plan::push`] with [`ItemOptions`]: a policy of the item's own, a metric label.
    ///
    /// # Panics
    /// When `rule` is not a position in the plan's rules.
    pub fn push_item(&mut self, rule: usize, key: String, cost: u64, options: ItemOptions) {
        assert!(rule < self.rules.rules.len(), "no rule at position {rule}");
        let capacity = options
            .policy
            .as_ref()
            .unwrap_or(&self.rules.rules[rule].policy)
            .capacity();
        if cost > capacity && self.refusal.is_none() {
            self.refusal = Some(Refusal {
                rule,
                item: Some(self.len()),
                error: CostRefusal::ExceedsCapacity { cost, capacity },
            });
        }
        self.checks.push(PlannedCheck {
            rule,
            key,
            cost,
            policy: options.policy.map(Box::new),
            label: options.label,
            quota_mode: options.quota_mode,
        });
        self.modes.quota_items = self
            .modes
            .quota_items
            .saturating_add(u32::from(options.quota_mode));
    }

    /// Whether item `item` together with the earlier items of the same rule and key costs
    /// more than the rule's capacity: `Some((together, capacity))` when there are such
    /// earlier items and the sum (theirs and this item's cost) is above it. Items of one rule
    /// and key are decided in order, each seeing the earlier ones' consumption, so such a
    /// plan could never be admitted (the store refuses it too, naming the whole group); a
    /// decision API calls this after each [`Plan::push`] to name the item that does not fit.
    /// `None` for an item alone on its rule and key (its own cost is [`Plan::push`]'s) and
    /// for a position past the end.
    pub fn over_capacity_with_earlier(&self, item: usize) -> Option<(u64, u64)> {
        let checks: &[PlannedCheck] = &self.checks;
        let this = checks.get(item)?;
        let before: u64 = checks[..item]
            .iter()
            .filter(|o| o.rule == this.rule && o.key == this.key)
            .map(|o| o.cost)
            .sum();
        let capacity = self.rules.rules[this.rule].policy.capacity();
        let together = before.saturating_add(this.cost);
        (before > 0 && together > capacity).then_some((together, capacity))
    }

    /// The first item whose rule counts in calendar periods (`Policy::with_calendar`), which
    /// takes no reservation: its periods are counted at once, and a settle could not give
    /// units back into a period that has ended. A reservation (`Mode::Reserve`) of such a
    /// plan is refused before the store is asked, on every store alike
    /// ([`Action::NoReservation`](crate::Action::NoReservation)), and such an item never holds
    /// a request in the delay mode ([`Plan::delay`] is 0: the plan is decided as a check).
    pub fn calendar_item(&self) -> Option<usize> {
        self.checks.iter().position(|c| {
            c.policy
                .as_deref()
                .unwrap_or(&self.rules.rules[c.rule].policy)
                .calendar()
                .is_some()
        })
    }

    /// The longest the plan's request may be held in the delay mode, in microseconds: the
    /// smallest [`Rule::delay`](crate::Rule::delay) of its enforcing items (each clamped to
    /// its policy's horizon, [`floodgate_core::Policy::max_wait`]); 0 (decide as a check)
    /// when an enforcing item's rule has no delay, when there is no enforcing item, or when
    /// the plan is refused before the store is asked, or when an item counts in calendar
    /// periods ([`Plan::calendar_item`]: it schedules nothing for later); at most
    /// [`Plan::limit_delay`]'s bound. Shadow items never hold a request.
    pub fn delay(&self) -> Micros {
        if self.refusal.is_some() || self.is_blocked() || self.calendar_item().is_some() {
            return 0;
        }
        let rules = &self.rules.rules;
        self.checks
            .iter()
            .map(|c| &rules[c.rule])
            .filter(|rule| !rule.shadow)
            .map(|rule| rule.delay.map_or(0, |d| d.min(rule.policy.max_wait())))
            .min()
            .unwrap_or(0)
            .min(self.delay_limit.unwrap_or(Micros::MAX))
    }

    /// Holds this request in the delay mode for at most `max` microseconds, whatever its rules'
    /// `delay`: the caller cannot wait longer (a proxy in front announced its timeout, as
    /// Envoy's `x-envoy-expected-rq-timeout-ms`). A request whose slot is further away is
    /// refused at once, with `Retry-After`, instead of being held past the caller's patience.
    /// Only ever shortens: the smallest of several limits holds. 0 decides as a check.
    pub fn limit_delay(&mut self, max: Micros) {
        self.delay_limit = Some(self.delay_limit.map_or(max, |d| d.min(max)));
    }

    /// The rules the plan was made with.
    pub fn rules(&self) -> &Arc<RuleSet> {
        &self.rules
    }

    /// Number of rules that will be checked.
    pub fn len(&self) -> usize {
        self.checks.len()
    }

    /// Whether no rule applies.
    pub fn is_empty(&self) -> bool {
        self.checks.is_empty()
    }

    /// [`RateLimiter::plan`](crate::RateLimiter::plan) with `rules`.
    pub(crate) fn for_request(
        rules: Arc<RuleSet>,
        method: &http::Method,
        uri: &http::Uri,
        headers: &HeaderMap,
        extensions: &http::Extensions,
    ) -> Plan {
        // Matching, keys and costs read the path as the upstream routes it (crate::path_params).
        let stripped = match rules.path_parameters {
            crate::PathParameters::Strip => crate::path_params::without_parameters(uri),
            crate::PathParameters::Keep => None,
        };
        let uri = stripped.as_ref().unwrap_or(uri);
        let mut checks = SmallList::Empty;
        let mut refusal = None;
        let mut client = None;
        let mut client_addr = None;
        let mut client_ip = None;
        let mut client_ip_resolved = false;
        for (index, rule) in rules.rules.iter().enumerate() {
            if !rule.scope.contains(crate::Traffic::Http)
                || !rule.matcher.matches(method, uri, headers)
            {
                continue;
            }
            if let Some(header) = rule.key.repeated_header(headers) {
                refusal.get_or_insert(Refusal {
                    rule: index,
                    item: None,
                    error: CostRefusal::AmbiguousKey(header.clone()),
                });
                continue;
            }
            if rule.key.uses_client_ip() {
                if !client_ip_resolved {
                    client_ip_resolved = true;
                    client = crate::ip::peer_addr(extensions)
                        .map(|peer| rules.client_ip.client(peer.ip(), headers));
                    client_addr = client.as_ref().and_then(crate::ip::Client::addr);
                    client_ip = client_addr.map(|addr| rules.client_ip.group(addr));
                }
                if client.is_none() {
                    // Without a peer address a client-IP rule would skip every request: the
                    // app is served without one, which must be loud, not "nothing limited".
                    refusal.get_or_insert(Refusal {
                        rule: index,
                        item: None,
                        error: CostRefusal::NoClientAddress,
                    });
                    continue;
                }
            }
            let cx = KeyContext {
                method,
                uri,
                headers,
                client_ip,
                client_addr,
                client_unparsed: client.as_ref().and_then(crate::ip::Client::unparsed_text),
            };
            match rule.key.key(&cx) {
                Some(key) => match rule.cost.cost(method, uri, headers) {
                    Ok(cost) => checks.push(PlannedCheck {
                        rule: index,
                        key,
                        cost,
                        policy: None,
                        label: None,
                        quota_mode: false,
                    }),
                    Err(error) => {
                        refusal.get_or_insert(Refusal {
                            rule: index,
                            item: None,
                            error: match error {
                                CostError::Invalid { header } => CostRefusal::Invalid(header),
                                CostError::ExceedsCapacity { cost, capacity, .. } => {
                                    CostRefusal::ExceedsCapacity { cost, capacity }
                                }
                            },
                        });
                    }
                },
                None => rules.count(index, Outcome::Skipped),
            }
        }
        Plan {
            rules,
            checks,
            refusal,
            delay_limit: None,
            blocked: Vec::new(),
            modes: AnswerModes::default(),
        }
    }

    /// Adds a block list entry named `name` that the request matched (a descriptor of the gRPC
    /// rate limit service configured `blocked`): the evaluation then consumes nothing (its
    /// items are peeked, for the answer's numbers), refuses the request ([`Action::Deny`] unless
    /// the store failed or the plan is refused) and counts the entry
    /// `floodgate_decisions_total{rule = name, outcome = "denied"}`, as any decision it makes.
    /// A blocked request is never held in the delay mode.
    ///
    /// [`Action::Deny`]: crate::Action::Deny
    pub fn block(&mut self, name: Arc<str>) {
        self.blocked.push(name);
    }

    /// Whether a block list entry matched ([`Plan::block`]).
    pub fn is_blocked(&self) -> bool {
        !self.blocked.is_empty()
    }

    /// The block list entries, in the order they were added.
    pub(crate) fn blocked(&self) -> &[Arc<str>] {
        &self.blocked
    }

    /// The planned items, in order.
    pub(crate) fn checks(&self) -> &[PlannedCheck] {
        &self.checks
    }
}
