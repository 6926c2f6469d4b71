//! Which traffic a rule applies to ([`Scope`]): HTTP requests (the tower layer, forward-auth,
//! the proxy), explicit decision calls naming the rule (`/v1/check`), gRPC rate limit requests.
//! The engine's one answer to "does this rule apply here", asked by every front end.

use std::fmt;

/// One kind of traffic a rule may apply to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Traffic {
    /// HTTP requests, matched by the rule's [`Matcher`](crate::Matcher) and keyed by its
    /// [`KeySource`](crate::KeySource): the tower layer, forward-auth and the proxy
    /// ([`RateLimiter::plan`](crate::RateLimiter::plan)).
    Http,
    /// Decision calls naming the rule and the key themselves (`POST /v1/check`, `/v1/peek`).
    Api,
    /// Rate limit requests selecting the rule by domain and descriptors (Envoy's gRPC rate
    /// limit service and its JSON twin).
    Grpc,
}

impl Traffic {
    /// Every kind, in the order they are written.
    pub const ALL: [Traffic; 3] = [Traffic::Http, Traffic::Api, Traffic::Grpc];

    /// The name in configuration (`applies_to = ["http", "api", "grpc"]`).
    pub fn as_str(self) -> &'static str {
        match self {
            Traffic::Http => "http",
            Traffic::Api => "api",
            Traffic::Grpc => "grpc",
        }
    }

    /// The kind named `name` (`"http"`, `"api"`, `"grpc"`).
    pub fn parse(name: &str) -> Option<Traffic> {
        Traffic::ALL.into_iter().find(|t| t.as_str() == name)
    }

    fn bit(self) -> u8 {
        match self {
            Traffic::Http => 1,
            Traffic::Api => 2,
            Traffic::Grpc => 4,
        }
    }
}

impl fmt::Display for Traffic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The set of [`Traffic`] a rule applies to. The default, [`Scope::HTTP_AND_API`], is what a
/// rule without a scope has always done: it limits matching HTTP requests and answers
/// decision calls naming it.
///
/// ```
/// use floodgate_limiter::{Scope, Traffic};
/// let api_only = Scope::of(&[Traffic::Api]);
/// assert!(api_only.contains(Traffic::Api));
/// assert!(!api_only.contains(Traffic::Http));
/// assert_eq!(api_only.to_string(), "api");
/// assert_eq!(Scope::default().to_string(), "http, api");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Scope(u8);

impl Scope {
    /// HTTP requests and decision calls: a rule's default.
    pub const HTTP_AND_API: Scope = Scope(1 | 2);
    /// gRPC rate limit requests and decision calls: the default of a rule with descriptors.
    pub const GRPC_AND_API: Scope = Scope(4 | 2);
    /// Nothing.
    pub const NONE: Scope = Scope(0);

    /// The set holding `traffic` (repeats are harmless).
    pub fn of(traffic: &[Traffic]) -> Scope {
        Scope(traffic.iter().fold(0, |bits, t| bits | t.bit()))
    }

    /// Whether the set holds `traffic`.
    pub fn contains(self, traffic: Traffic) -> bool {
        self.0 & traffic.bit() != 0
    }

    /// The set without `traffic`.
    pub fn without(self, traffic: Traffic) -> Scope {
        Scope(self.0 & !traffic.bit())
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The kinds held, in [`Traffic::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = Traffic> {
        Traffic::ALL.into_iter().filter(move |t| self.contains(*t))
    }
}

impl Default for Scope {
    fn default() -> Self {
        Scope::HTTP_AND_API
    }
}

impl fmt::Display for Scope {
    /// `http, api`; `nothing` for the empty set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("nothing");
        }
        let names: Vec<&str> = self.iter().map(Traffic::as_str).collect();
        f.write_str(&names.join(", "))
    }
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Scope({self})")
    }
}

/// Why [`RuleSet::find`](crate::RuleSet::find) found no rule to decide with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FindError {
    /// No rule has this name.
    Unknown,
    /// The rule exists but does not apply to this traffic: it applies only to `scope`.
    OutOfScope {
        /// What the rule applies to.
        scope: Scope,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sets_print_in_order() {
        for t in Traffic::ALL {
            assert_eq!(Traffic::parse(t.as_str()), Some(t));
        }
        assert_eq!(Traffic::parse("HTTP"), None);
        let all = Scope::of(&[Traffic::Grpc, Traffic::Http, Traffic::Api, Traffic::Grpc]);
        assert_eq!(all.to_string(), "http, api, grpc");
        assert_eq!(all.without(Traffic::Http), Scope::GRPC_AND_API);
        assert_eq!(Scope::NONE.to_string(), "nothing");
    }
}
