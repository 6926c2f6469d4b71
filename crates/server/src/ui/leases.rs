//! The live view's leased rules (`docs/spec/leases.md`): for every rule in force with a
//! `lease`, its lifetime, the most units one lease holds and the bound on how far clients may
//! be admitted beyond the exact algorithm, for one instance and as the formula in `N`. The
//! `leases` field of `GET /v1/ui/live`, shown by the page's "Leased rules" element.

use serde_json::{json, Value};

use crate::config::RuleConfig;

/// `[{rule, lease_us, max_units, bound_one_instance, bound}]` for the leased rules of `rules`,
/// in order (empty when none is leased).
pub(crate) fn leased_rules(rules: &[RuleConfig]) -> Value {
    rules
        .iter()
        .filter_map(|r| {
            let lease = r.lease?;
            Some(json!({
                "rule": r.name,
                "lease_us": lease.lifetime,
                "max_units": lease.max_units,
                "bound_one_instance": lease.bound(&r.policy, 1),
                "bound": lease.describe_bound(&r.policy),
            }))
        })
        .collect::<Vec<_>>()
        .into()
}
