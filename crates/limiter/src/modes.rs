//! envoyproxy/ratelimit's two answer modes, decided and counted here so that the gRPC service
//! only translates a [`Verdict`] (its `src/service/ratelimit.go`, `shouldRateLimitWorker`):
//!
//! - **quota mode** (a descriptor's `quota_mode: true`, or every descriptor with `QUOTA_MODE`):
//!   such an item counts, but being over its limit refuses the request only when *every*
//!   quota-mode item (and quota-mode block list entry) is over; any other item over its limit
//!   refuses it as ever. A request admitted although some quota-mode items are over is charged
//!   to its other items, and those over are counted `denied` (their outcomes stay denials, so
//!   their descriptor statuses say `OVER_LIMIT`). Upstream counts each descriptor on its own;
//!   here the items that are charged are still one all-or-nothing batch, decided after a peek
//!   of the whole plan (two store calls, only for plans with quota-mode items).
//! - **global shadow mode** (`SHADOW_MODE`, [`Plan::shadow_all`]): a denial is answered as an
//!   admission ([`Action::Admit`]) after being decided and counted as ever (nothing more is
//!   charged), and counted in `floodgate_grpc_global_shadow_mode_total`.
//!
//! Quota mode applies to [`Mode::Check`]; a peek, a reservation or a plan without quota-mode
//! items is decided as any plan.

use std::sync::Arc;

use floodgate_store::Store;

use crate::evaluate::{evaluate, DenialObserver};
use crate::metrics::Outcome;
use crate::plan::{ItemOptions, Plan};
use crate::verdict::{Action, Mode, RuleOutcome, Verdict};

impl Plan {
    /// Answers a denial of this plan as an admission (envoyproxy/ratelimit's global
    /// `SHADOW_MODE`): the plan is decided, charged and counted exactly as without it, then
    /// the verdict's [`Action::Deny`] becomes [`Action::Admit`] (its outcomes unchanged) and
    /// `floodgate_grpc_global_shadow_mode_total` counts it.
    pub fn shadow_all(&mut self) {
        self.modes.shadow_all = true;
    }

    /// [`Plan::block`] for a block list entry in quota mode: it is over its limit, but
    /// refuses the request only when every quota-mode item is over too (see
    /// [`ItemOptions::quota_mode`]).
    pub fn block_in_quota_mode(&mut self, name: Arc<str>) {
        self.block(name);
        self.modes.quota_blocks = self.modes.quota_blocks.saturating_add(1);
    }

    /// Notes a quota-mode descriptor that selected no limit (envoyproxy/ratelimit's
    /// `QUOTA_MODE` counts it as a quota descriptor that is not over): while it stands, the
    /// quota-mode items are never all over.
    pub fn pass_quota(&mut self) {
        self.modes.quota_passes = self.modes.quota_passes.saturating_add(1);
    }

    /// Whether a block list entry not in quota mode matched.
    fn blocks_plainly(&self) -> bool {
        self.blocked().len() > self.modes.quota_blocks as usize
    }
}

/// [`evaluate`] with the plan's answer modes applied (see the [module docs](self)).
pub(crate) async fn evaluate_modes<S: Store>(
    store: &S,
    leases: &crate::lease::Leases,
    observer: Option<&dyn DenialObserver>,
    plan: &Plan,
    mode: Mode,
) -> Verdict {
    let quota = plan.modes.quota_items + plan.modes.quota_blocks > 0;
    let mut verdict = if quota && mode == Mode::Check {
        quota_mode(store, leases, observer, plan).await
    } else {
        evaluate(store, leases, observer, plan, mode).await
    };
    if plan.modes.shadow_all && verdict.action == Action::Deny {
        verdict.action = Action::Admit;
        ::metrics::counter!("floodgate_grpc_global_shadow_mode_total").increment(1);
    }
    verdict
}

/// A check of a plan with quota-mode items or block list entries.
async fn quota_mode<S: Store>(
    store: &S,
    leases: &crate::lease::Leases,
    observer: Option<&dyn DenialObserver>,
    plan: &Plan,
) -> Verdict {
    // A peek counts and charges nothing: it only tells which items are over.
    let peek = evaluate(store, leases, None, plan, Mode::Peek).await;
    let over_items: Vec<usize> = match &peek.action {
        Action::Admit | Action::Deny if peek.store_error.is_none() => peek
            .outcomes
            .iter()
            .filter(|o| !o.shadow && !o.decision.allowed)
            .map(|o| o.item)
            .collect(),
        // A refusal or a failing store: decided (and counted) as any plan.
        _ => return evaluate(store, leases, observer, plan, Mode::Check).await,
    };
    let checks = plan.checks();
    let quota_over: Vec<usize> = over_items
        .iter()
        .copied()
        .filter(|&i| checks[i].quota_mode)
        .collect();
    let modes = &plan.modes;
    let rate_over = over_items.len() > quota_over.len() || plan.blocks_plainly();
    let quota_total =
        modes.quota_items as usize + modes.quota_blocks as usize + modes.quota_passes as usize;
    let quota_failed = quota_over.len() + modes.quota_blocks as usize;
    let refused = rate_over || (quota_total > 0 && quota_failed == quota_total);
    if refused || quota_failed == 0 {
        // Nothing to set apart: every item admits (charged as any plan), or the request is
        // refused (denied as any plan: nothing is charged).
        return evaluate(store, leases, observer, plan, Mode::Check).await;
    }
    // Admitted although some quota-mode items are over: the others are charged.
    let mut rest = Plan::new(Arc::clone(plan.rules()));
    let mut position = Vec::with_capacity(checks.len());
    for (i, c) in checks.iter().enumerate() {
        if !quota_over.contains(&i) {
            position.push(i);
            let options = ItemOptions {
                policy: c.policy.as_deref().cloned(),
                label: c.label.clone(),
                quota_mode: c.quota_mode,
            };
            rest.push_item(c.rule, c.key.clone(), c.cost, options);
        }
    }
    let mut verdict = evaluate(store, leases, observer, &rest, Mode::Check).await;
    for o in verdict.outcomes.iter_mut() {
        o.item = position[o.item];
    }
    if verdict.action == Action::Admit {
        let set = &**plan.rules();
        let denied: Vec<RuleOutcome> = peek
            .outcomes
            .into_iter()
            .filter(|o| quota_over.contains(&o.item))
            .collect();
        for o in &denied {
            let c = &checks[o.item];
            set.count(c.rule, Outcome::Denied);
            if let Some(label) = &c.label {
                crate::metrics::count_labelled(&set.rules[c.rule].name, label, Outcome::Denied);
            }
            if let Some(observer) = observer {
                observer.denied(&set.rules[c.rule].name, &c.key);
            }
        }
        for name in plan.blocked() {
            crate::metrics::counter(name, Outcome::Denied).increment(1);
        }
        verdict.outcomes.extend(denied);
        verdict.outcomes.sort_by_key(|o| o.item);
    }
    verdict
}
