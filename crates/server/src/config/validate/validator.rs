//! The [`Validator`]: the errors of one file, and what a later section needs of an earlier one.

use toml::Spanned;

use crate::config::error::{ConfigError, Source};

/// The validation of one file: where errors are collected, and what a later section needs
/// of an earlier one.
pub(super) struct Validator<'a> {
    pub(super) src: &'a Source<'a>,
    pub(super) errors: Vec<ConfigError>,
    /// `[store] kind = "redis"` (rules' `max_keys` are for the memory store only).
    pub(super) store_kind_redis: bool,
    /// `[store] max_keys` as validated (the bound of a rule's `max_keys`).
    pub(super) store_max_keys: u64,
}

impl Validator<'_> {
    pub(super) fn push<T>(&mut self, at: &Spanned<T>, field: String, message: String) {
        self.errors.push(self.src.error(at.span(), field, message));
    }

    /// A duration setting in milliseconds, `min` to 60,000: its value, or `default` when it is
    /// absent or out of range (then the error is pushed, naming `field`).
    pub(super) fn millis(
        &mut self,
        value: &Option<Spanned<i64>>,
        field: &str,
        min: u64,
        default: u64,
    ) -> u64 {
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
}
