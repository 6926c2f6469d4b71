//! [`RuleSet::find`] and [`RuleSet::applies`]: the rules a kind of traffic may use, by their
//! [`Scope`] (apart from `scope`, which `rule` imports).

use crate::rule::RuleSet;
#[cfg(doc)]
use crate::scope::Scope;
use crate::scope::{FindError, Traffic};

impl RuleSet {
    /// The position of the rule named `name` when it applies to `traffic` (a decision call
    /// asks with [`Traffic::Api`]).
    ///
    /// # Errors
    /// [`FindError::Unknown`] when no rule has the name, [`FindError::OutOfScope`] when the
    /// rule's [`Scope`] does not hold `traffic`.
    pub fn find(&self, name: &str, traffic: Traffic) -> Result<usize, FindError> {
        let index = self
            .rules
            .iter()
            .position(|r| *r.name == *name)
            .ok_or(FindError::Unknown)?;
        let scope = self.rules[index].scope;
        if scope.contains(traffic) {
            Ok(index)
        } else {
            Err(FindError::OutOfScope { scope })
        }
    }

    /// Whether rule `index` (a position in [`RuleSet::rules`]) applies to `traffic`; `false`
    /// for a position past the end.
    pub fn applies(&self, index: usize, traffic: Traffic) -> bool {
        self.rules
            .get(index)
            .is_some_and(|r| r.scope.contains(traffic))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scope::Scope;
    use crate::{KeySource, Rule};
    use floodgate_core::{AlgorithmKind, Policy};

    fn rule(name: &str, scope: Scope) -> Rule {
        let policy = Policy::new(AlgorithmKind::Gcra, "1/s".parse().unwrap()).unwrap();
        Rule::new(name, policy, KeySource::ClientIp).with_scope(scope)
    }

    #[test]
    fn find_names_the_rule_only_for_the_traffic_it_applies_to() {
        let rules = RuleSet::new(vec![
            rule("per-ip", Scope::of(&[Traffic::Http])),
            rule("per-day", Scope::of(&[Traffic::Api])),
        ]);
        assert_eq!(rules.find("per-day", Traffic::Api), Ok(1));
        assert_eq!(
            rules.find("per-ip", Traffic::Api),
            Err(FindError::OutOfScope {
                scope: Scope::of(&[Traffic::Http])
            })
        );
        assert_eq!(rules.find("nope", Traffic::Api), Err(FindError::Unknown));
        assert!(rules.applies(0, Traffic::Http));
        assert!(!rules.applies(1, Traffic::Http));
        assert!(!rules.applies(2, Traffic::Http));
    }
}
