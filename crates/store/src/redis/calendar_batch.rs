//! Check batches holding calendar policies ([`Policy::with_calendar`]) on Redis: their items go
//! to `lua/calendar.lua` ([`RedisStore::calendar_check_at`]), the others to the batch script.
//!
//! A batch of calendar items only is one script call, all-or-nothing. A batch mixing both
//! (a request matching a calendar rule and another rule) takes up to three calls: a peek of the
//! other items, then the calendar check, then the other items' check, each only when the one
//! before admitted. Nothing is consumed when the peek or the calendar check denies; when a
//! concurrent request takes the last units of another item between the peek and its check,
//! the calendar units stay charged for a request that was refused (it counts one request too
//! many, never one too few).
//!
//! [`Policy::with_calendar`]: floodgate_core::Policy::with_calendar

use std::future::Future;
use std::pin::Pin;

use floodgate_core::{Decision, Timestamp};

use super::RedisStore;
use crate::calendar::{CalendarBatch, CalendarItem};
use crate::{BatchDecision, CheckItem, StoreError};

type Answer<'a> = Pin<Box<dyn Future<Output = Result<BatchDecision, StoreError>> + Send + 'a>>;

/// Whether any item counts in calendar periods.
pub(super) fn has_calendar(items: &[CheckItem<'_>]) -> bool {
    items.iter().any(|i| i.policy.calendar().is_some())
}

impl RedisStore {
    /// Decides a batch holding calendar items (see the [module docs](self)); `now` as
    /// [`RedisStore::check_at`] takes it (`None`: the configured time source).
    pub(super) fn calendar_batch<'a>(
        &'a self,
        items: &'a [CheckItem<'a>],
        now: Option<Timestamp>,
        commit: bool,
    ) -> Answer<'a> {
        Box::pin(async move {
            let now = self.now_arg(now);
            let mut calendar = Vec::new();
            let mut plain = Vec::new();
            for item in items {
                match item.policy.calendar() {
                    Some(quota) => calendar.push(CalendarItem {
                        rule: item.rule,
                        quota,
                        key: item.key,
                        cost: item.cost,
                    }),
                    None => plain.push(*item),
                }
            }
            if plain.is_empty() {
                let c = self.calendar_check_at(&calendar, now, commit).await?;
                return Ok(merge(items, c, None));
            }
            let peek = self.run(&plain, now, false).await?;
            if !commit || !peek.allowed {
                let c = self.calendar_check_at(&calendar, now, false).await?;
                return Ok(merge(items, c, Some(peek)));
            }
            let c = self.calendar_check_at(&calendar, now, true).await?;
            if !c.allowed {
                return Ok(merge(items, c, Some(peek)));
            }
            let checked = self.run(&plain, now, true).await?;
            Ok(merge(items, c, Some(checked)))
        })
    }
}

/// The batch's answer in item order: admitted when both parts admitted.
fn merge(
    items: &[CheckItem<'_>],
    calendar: CalendarBatch,
    plain: Option<BatchDecision>,
) -> BatchDecision {
    let allowed = calendar.allowed && plain.as_ref().is_none_or(|p| p.allowed);
    let store_full = plain.as_ref().and_then(|p| p.store_full);
    let mut calendar = calendar.decisions.into_iter();
    let mut plain = plain.map(|p| p.decisions).unwrap_or_default().into_iter();
    let decisions: Vec<Decision> = items
        .iter()
        .filter_map(|item| {
            if item.policy.calendar().is_some() {
                calendar.next()
            } else {
                plain.next()
            }
        })
        .collect();
    BatchDecision {
        allowed,
        decisions,
        store_full,
    }
}
