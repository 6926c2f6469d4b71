//! Reservations and settles on Redis ([`Store::reserve`](crate::Store::reserve),
//! [`Store::settle`](crate::Store::settle)): `reserve.lua` and `settle.lua`, decided exactly as
//! the memory store decides them (docs/spec/reservations.md).
//!
//! A batch in one slot (every batch on standalone Redis) is one script call that finds the
//! wait and reserves. A cross-slot batch takes more rounds: each slot finds its shortest wait
//! without writing; the slots whose wait is shorter than the longest are asked (without
//! writing) whether they fit at the longest; then every slot reserves for it. Without
//! concurrent writers this decides exactly as the memory store. If a slot's keys changed in
//! between so that it no longer fits, the slots that reserved are settled with an actual cost
//! of 0 and the batch is denied: exact for the sliding log and the windows' counts, up to the
//! scheduled time's fraction of a microsecond for the buckets, and a fixed window closed by
//! a reservation into the next window stays closed.

use floodgate_core::{Decision, Micros, Timestamp};
use redis::RedisError;

use super::connection::{duration_ms, ScriptCall};
use super::reply::{push_item_args, Group};
use super::scripts;
use super::store::RedisStore;
use crate::{BatchDecision, BatchReservation, CheckItem, SettleItem, StoreError};

/// One slot group's answer from `reserve.lua`.
struct GroupReservation {
    granted: bool,
    wait: Micros,
    peeks: Vec<Decision>,
    after: Vec<Decision>,
    scheduled_at: Vec<Timestamp>,
}

impl RedisStore {
    /// [`Store::reserve`](crate::Store::reserve) at a caller-supplied `now`, whatever the
    /// configured time source.
    ///
    /// # Errors
    /// As [`Store::check`](crate::Store::check).
    pub async fn reserve_at(
        &self,
        items: &[CheckItem<'_>],
        now: Timestamp,
        max_wait: Micros,
    ) -> Result<BatchReservation, StoreError> {
        self.reserve_run(items, Some(now), max_wait).await
    }

    /// [`Store::settle`](crate::Store::settle) at a caller-supplied `now`.
    ///
    /// # Errors
    /// As [`Store::settle`](crate::Store::settle).
    pub async fn settle_at(
        &self,
        items: &[SettleItem<'_>],
        now: Timestamp,
    ) -> Result<Vec<Decision>, StoreError> {
        self.settle_run(items, Some(now)).await
    }

    pub(super) async fn reserve_run(
        &self,
        items: &[CheckItem<'_>],
        now: Option<Timestamp>,
        max_wait: Micros,
    ) -> Result<BatchReservation, StoreError> {
        crate::validate_batch(items)?;
        if super::calendar_batch::has_calendar(items) {
            return Err(StoreError::Unsupported {
                operation: "reservations of calendar rules on Redis",
            });
        }
        let now = self.now_arg(now);
        if let Some(cache) = &self.deny_cache {
            cache.observe(now.unwrap_or_else(|| self.clock.now()));
        }
        if items.is_empty() {
            return Ok(BatchReservation {
                batch: BatchDecision {
                    allowed: true,
                    decisions: Vec::new(),
                    store_full: None,
                },
                wait: Some(0),
                scheduled_at: Vec::new(),
            });
        }
        let groups = self.groups(items);
        let result = self
            .guarded_keys(
                groups.iter().map(|g| g.keys[0].as_str()),
                self.reserve_groups(items, &groups, now, max_wait),
            )
            .await;
        if let Some(cache) = &self.deny_cache {
            // A granted reservation consumes units at its scheduled time, possibly after a
            // cached denial's `retry_after`: that denial's numbers no longer hold. (A failed
            // call may have been granted in Redis too.)
            if result.as_ref().map_or(true, |r| r.wait.is_some()) {
                for name in groups.iter().flat_map(|g| &g.keys) {
                    cache.invalidate(name);
                }
            }
        }
        result
    }

    async fn reserve_groups(
        &self,
        items: &[CheckItem<'_>],
        groups: &[Group],
        now: Option<Timestamp>,
        max_wait: Micros,
    ) -> Result<BatchReservation, RedisError> {
        if let [group] = groups {
            let reply = self
                .reserve_group(items, group, now, max_wait, 0, true)
                .await?;
            return Ok(assemble(items, groups, &[reply]));
        }
        // `target` is 0 (find the wait) or 1 + the wait to reserve for.
        let reserve_all = |target: u64, commit: bool| {
            futures_util::future::join_all(
                groups
                    .iter()
                    .map(move |g| self.reserve_group(items, g, now, max_wait, target, commit)),
            )
        };
        let plans = reserve_all(0, false)
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        if !plans.iter().all(|p| p.granted) {
            return Ok(assemble(items, groups, &plans));
        }
        let wait = plans.iter().map(|p| p.wait).max().unwrap_or(0);
        // A slot whose own wait is shorter may not fit at the longer one (a window that
        // rolls): ask those slots first, so that a denial writes nothing anywhere.
        let checks = futures_util::future::join_all(
            groups
                .iter()
                .zip(&plans)
                .filter(|(_, p)| p.wait < wait)
                .map(|(g, _)| self.reserve_group(items, g, now, max_wait, wait + 1, false)),
        )
        .await;
        for check in checks {
            if !check?.granted {
                let denied: Vec<GroupReservation> = plans
                    .into_iter()
                    .map(|p| GroupReservation {
                        granted: false,
                        ..p
                    })
                    .collect();
                return Ok(assemble(items, groups, &denied));
            }
        }
        let replies = reserve_all(wait + 1, true).await;
        if replies.iter().all(|r| matches!(r, Ok(r) if r.granted)) {
            let replies = replies.into_iter().collect::<Result<Vec<_>, _>>()?;
            return Ok(assemble(items, groups, &replies));
        }
        // Some slot could not fit at the common time: give back what the others reserved.
        let undo = groups
            .iter()
            .zip(&replies)
            .filter_map(|(g, r)| match r {
                Ok(r) if r.granted => Some((g, r)),
                _ => None,
            })
            .map(|(g, r)| {
                let settles: Vec<SettleItem<'_>> = g
                    .items
                    .iter()
                    .zip(&r.scheduled_at)
                    .map(|(&i, &at)| SettleItem {
                        rule: items[i].rule,
                        policy: items[i].policy,
                        key: items[i].key,
                        reserved: items[i].cost,
                        actual: 0,
                        scheduled_at: at,
                    })
                    .collect();
                async move {
                    let group = Group {
                        keys: g.keys.clone(),
                        items: (0..settles.len()).collect(),
                        key_index: g.key_index.clone(),
                    };
                    self.settle_group(&settles, &group, now).await
                }
            });
        for r in futures_util::future::join_all(undo).await {
            if let Err(e) = r {
                tracing::warn!(error = %e, "redis store: undoing a cross-slot reservation failed; \
                    its units stay reserved until the keys expire");
            }
        }
        let replies = replies.into_iter().collect::<Result<Vec<_>, _>>()?;
        let denied: Vec<GroupReservation> = replies
            .into_iter()
            .map(|r| GroupReservation {
                granted: false,
                ..r
            })
            .collect();
        Ok(assemble(items, groups, &denied))
    }

    async fn reserve_group(
        &self,
        items: &[CheckItem<'_>],
        group: &Group,
        now: Option<Timestamp>,
        max_wait: Micros,
        target: u64,
        commit: bool,
    ) -> Result<GroupReservation, RedisError> {
        let mut args = Vec::with_capacity(4 + 8 * group.items.len());
        args.extend([
            max_wait,
            duration_ms(self.config.ttl_extra),
            target,
            u64::from(commit),
        ]);
        for (&i, &k) in group.items.iter().zip(&group.key_index) {
            push_item_args(&mut args, k, &items[i]);
        }
        let call = ScriptCall {
            script: &scripts::RESERVE,
            source: scripts::RESERVE_SOURCE,
            keys: &group.keys,
            args,
            now,
        };
        let reply: Vec<i64> = self.conn.invoke(&call).await?;
        const PER_ITEM: usize = 9;
        if reply.len() != 3 + PER_ITEM * group.items.len() {
            return Err(RedisError::from((
                redis::ErrorKind::Parse,
                "unexpected reply length from the reservation script",
            )));
        }
        let mut peeks = Vec::with_capacity(group.items.len());
        let mut after = Vec::with_capacity(group.items.len());
        let mut scheduled_at = Vec::with_capacity(group.items.len());
        for (j, &i) in group.items.iter().enumerate() {
            let v = &reply[3 + j * PER_ITEM..3 + (j + 1) * PER_ITEM];
            let limit = items[i].policy.capacity();
            peeks.push(decision(limit, &v[0..4]));
            after.push(decision(limit, &v[4..8]));
            scheduled_at.push(v[8].max(0) as u64);
        }
        Ok(GroupReservation {
            granted: reply[0] == 1,
            wait: reply[2].max(0) as u64,
            peeks,
            after,
            scheduled_at,
        })
    }

    pub(super) async fn settle_run(
        &self,
        items: &[SettleItem<'_>],
        now: Option<Timestamp>,
    ) -> Result<Vec<Decision>, StoreError> {
        crate::validate_settle(items)?;
        if items.iter().any(|i| i.policy.calendar().is_some()) {
            return Err(StoreError::Unsupported {
                operation: "settling reservations of calendar rules on Redis",
            });
        }
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.now_arg(now);
        if let Some(cache) = &self.deny_cache {
            cache.observe(now.unwrap_or_else(|| self.clock.now()));
            // A refund gives units back: a cached denial of these keys may no longer hold.
            for s in items {
                cache.invalidate(&self.key_name(s.rule, s.policy, s.key));
            }
        }
        let as_checks: Vec<CheckItem<'_>> = items
            .iter()
            .map(|s| CheckItem {
                rule: s.rule,
                policy: s.policy,
                key: s.key,
                cost: s.reserved,
            })
            .collect();
        let groups = self.groups(&as_checks);
        let result = self
            .guarded_keys(groups.iter().map(|g| g.keys[0].as_str()), async {
                let replies = futures_util::future::join_all(
                    groups.iter().map(|g| self.settle_group(items, g, now)),
                )
                .await;
                let mut standings = vec![None; items.len()];
                for (g, reply) in groups.iter().zip(replies) {
                    for (&i, d) in g.items.iter().zip(reply?) {
                        standings[i] = Some(d);
                    }
                }
                Ok(standings
                    .into_iter()
                    .map(|d| d.expect("every item belongs to one group"))
                    .collect())
            })
            .await;
        // Again once done (or failed): a check answered before the refund caches nothing.
        if let Some(cache) = &self.deny_cache {
            for name in groups.iter().flat_map(|g| &g.keys) {
                cache.invalidate(name);
            }
        }
        result
    }

    async fn settle_group(
        &self,
        items: &[SettleItem<'_>],
        group: &Group,
        now: Option<Timestamp>,
    ) -> Result<Vec<Decision>, RedisError> {
        let mut args = Vec::with_capacity(1 + 10 * group.items.len());
        args.push(duration_ms(self.config.ttl_extra));
        for (&i, &k) in group.items.iter().zip(&group.key_index) {
            let s = &items[i];
            let check = CheckItem {
                rule: s.rule,
                policy: s.policy,
                key: s.key,
                cost: s.reserved,
            };
            push_item_args(&mut args, k, &check);
            args.extend([s.actual, s.scheduled_at]);
        }
        let call = ScriptCall {
            script: &scripts::SETTLE,
            source: scripts::SETTLE_SOURCE,
            keys: &group.keys,
            args,
            now,
        };
        let reply: Vec<i64> = self.conn.invoke(&call).await?;
        if reply.len() != 2 * group.items.len() {
            return Err(RedisError::from((
                redis::ErrorKind::Parse,
                "unexpected reply length from the settle script",
            )));
        }
        Ok(group
            .items
            .iter()
            .enumerate()
            .map(|(j, &i)| Decision {
                allowed: true,
                limit: items[i].policy.capacity(),
                remaining: reply[2 * j].max(0) as u64,
                reset_after: reply[2 * j + 1].max(0) as u64,
                retry_after: None,
            })
            .collect())
    }
}

fn decision(limit: u64, v: &[i64]) -> Decision {
    Decision {
        allowed: v[0] == 1,
        limit,
        remaining: v[1].max(0) as u64,
        reset_after: v[2].max(0) as u64,
        retry_after: (v[3] >= 0).then_some(v[3] as u64),
    }
}

/// The batch's reservation from its groups' replies: granted when every group granted (for one
/// scheduled time); then each item's decision after the reservation, else each item's peek.
fn assemble(
    items: &[CheckItem<'_>],
    groups: &[Group],
    replies: &[GroupReservation],
) -> BatchReservation {
    let granted = replies.iter().all(|r| r.granted);
    let mut decisions = vec![None; items.len()];
    let mut scheduled_at = vec![0; items.len()];
    for (group, reply) in groups.iter().zip(replies) {
        let chosen = if granted { &reply.after } else { &reply.peeks };
        for ((&i, d), &at) in group.items.iter().zip(chosen).zip(&reply.scheduled_at) {
            decisions[i] = Some(*d);
            scheduled_at[i] = at;
        }
    }
    let wait = replies.iter().map(|r| r.wait).max().unwrap_or(0);
    BatchReservation {
        batch: BatchDecision {
            allowed: granted,
            decisions: decisions
                .into_iter()
                .map(|d| d.expect("every item belongs to one group"))
                .collect(),
            store_full: None,
        },
        wait: granted.then_some(wait),
        scheduled_at: if granted { scheduled_at } else { Vec::new() },
    }
}
