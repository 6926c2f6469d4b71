//! `lease = "20ms"` and `lease_share = 0.1` of a `[[rules]]` entry: quota leases
//! (`docs/spec/leases.md`).

use floodgate_core::Policy;
use floodgate_limiter::{Lease, LeaseError, DEFAULT_LEASE_SHARE};

use super::validator::Validator;
use crate::config::raw::RawRule;

impl Validator<'_> {
    /// The rule's lease: `lease` a duration above 0 and below the period, `lease_share` a
    /// number above 0 and at most 1 (default [`DEFAULT_LEASE_SHARE`]); not on a shadow rule
    /// (never leased), and `lease_share` only with `lease`.
    pub(super) fn lease(
        &mut self,
        at: &str,
        r: &RawRule,
        policy: Option<&Policy>,
    ) -> Option<Lease> {
        let Some(l) = r.lease.as_ref() else {
            if let Some(share) = &r.lease_share {
                self.push(
                    share,
                    format!("{at}.lease_share"),
                    "only applies with `lease`: add `lease = \"20ms\"` or remove it".into(),
                );
            }
            return None;
        };
        let field = format!("{at}.lease");
        let lifetime = match floodgate_core::quota::parse_period(l.get_ref().trim()) {
            Ok(micros) => micros,
            Err(_) => {
                self.push(
                    l,
                    field,
                    format!(
                        "must be a whole number and a unit, such as \"20ms\" or \"1s\", got {:?}",
                        l.get_ref().trim()
                    ),
                );
                return None;
            }
        };
        if r.shadow {
            self.push(
                l,
                field,
                "a shadow rule only observes and is never leased: remove `lease` or `shadow`"
                    .into(),
            );
            return None;
        }
        if policy.is_some_and(|p| p.calendar().is_some()) {
            self.push(
                l,
                field,
                "a calendar rule is not leased (a lease is a reservation, which calendar \
                 periods do not take on Redis): remove `lease` or `calendar`"
                    .into(),
            );
            return None;
        }
        let share = match &r.lease_share {
            None => DEFAULT_LEASE_SHARE,
            Some(s) => match s.get_ref() {
                toml::Value::Float(f) => *f,
                // A whole number: 1 is the whole capacity; anything else is refused below.
                #[allow(clippy::cast_precision_loss)]
                toml::Value::Integer(i) => *i as f64,
                other => {
                    self.push(
                        s,
                        format!("{at}.lease_share"),
                        format!("must be a number above 0 and at most 1, got {other}"),
                    );
                    return None;
                }
            },
        };
        let policy = policy?;
        match Lease::new(lifetime, policy, share) {
            Ok(lease) => Some(lease),
            Err(e @ LeaseError::Lifetime { .. }) => {
                let msg = match e {
                    LeaseError::Lifetime { lifetime: 0, .. } => {
                        "must be more than 0 (leave `lease` out to ask the store every time)"
                            .to_string()
                    }
                    _ => format!(
                        "{} is not shorter than the period ({}): a lease must end within one \
                         window",
                        l.get_ref().trim(),
                        crate::config::units::format_micros(policy.quota().period())
                    ),
                };
                self.push(l, field, msg);
                None
            }
            Err(e @ LeaseError::Share { .. }) => {
                if let Some(s) = &r.lease_share {
                    self.push(s, format!("{at}.lease_share"), e.to_string());
                }
                None
            }
        }
    }
}
