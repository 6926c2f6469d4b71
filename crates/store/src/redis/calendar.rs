//! Calendar quotas on Redis: `lua/calendar.lua`, one script call per batch.
//!
//! The boundary follows Redis' clock. The service cannot know Redis' time, so for each item it
//! computes six consecutive period starts around its own now
//! ([`Calendar::boundaries_around`](floodgate_core::calendar::Calendar::boundaries_around)) and
//! the script places Redis' `TIME` in them (the previous, current or next period of the
//! service's view): instances whose clocks differ by less than a period decide every request in
//! the period Redis' clock says, so they agree exactly. Further off, the script answers
//! `calendar_out_of_range` and writes nothing (a store failure, counted and handled by the
//! failure mode). State: one string key `"window_start count previous_count"` with a TTL of
//! `ceil(reset_after / 1000)` ms, named by a hash of the rule, the calendar quota and the key (plus
//! `RedisStoreConfig::ttl_extra`).

use std::sync::LazyLock;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use floodgate_core::calendar::CalendarError;
use floodgate_core::{AlgorithmKind, Decision, Timestamp};
use sha2::{Digest, Sha256};

use super::connection::{duration_ms, ScriptCall};
use super::{keys, RedisStore};
use crate::calendar::{identity, validate_calendar_batch, CalendarBatch, CalendarItem};
use crate::StoreError;

/// The script's source.
pub const CALENDAR_SOURCE: &str = include_str!("../../lua/calendar.lua");

static CALENDAR: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(CALENDAR_SOURCE));

/// The Redis key of a calendar item: `<prefix>c` and 11 base64url characters of SHA-256 over
/// its identity (rule, algorithm, limit, unit, zone, first weekday, key).
pub fn calendar_key(prefix: &str, item: &CalendarItem<'_>) -> String {
    let digest = Sha256::digest(identity(item).as_bytes());
    let mut name = String::with_capacity(prefix.len() + 12);
    name.push_str(prefix);
    name.push('c');
    name.push_str(&URL_SAFE_NO_PAD.encode(&digest[..9])[..11]);
    name
}

impl RedisStore {
    /// Decides calendar `items` all-or-nothing: at Redis' own time when `now` is `None`, else
    /// at `now` (tests); `commit = false` is a peek. The boundaries sent are computed around
    /// `now` or this store's clock.
    ///
    /// Items naming one `(rule, quota, key)` more than once are decided as one item of their
    /// summed cost (the script reads each key once), each answered with that decision. One
    /// script call decides the batch when its keys share a slot (always on one server). On a
    /// Redis Cluster, a batch over several slots is decided one slot at a time: each slot's
    /// items are peeked, and only when every slot admits are they checked, slot after slot.
    /// Nothing is consumed when a peek denies; when a concurrent request takes the last units
    /// of a later slot between its peek and its check, the slots checked before it stay
    /// charged for a refused request (one request too many is counted, never one too few, as
    /// for a batch mixing calendar and other items).
    ///
    /// # Errors
    /// [`StoreError::InsufficientCapacity`] before anything is sent;
    /// [`StoreError::Unavailable`] / [`StoreError::Timeout`] from Redis, and when Redis' time
    /// is more than a period away from the service's (`calendar_out_of_range`).
    pub async fn calendar_check_at(
        &self,
        items: &[CalendarItem<'_>],
        now: Option<Timestamp>,
        commit: bool,
    ) -> Result<CalendarBatch, StoreError> {
        validate_calendar_batch(items)?;
        if items.is_empty() {
            return Ok(CalendarBatch {
                allowed: true,
                decisions: Vec::new(),
            });
        }
        // One item per key (the script decides each item from the stored state: two items on
        // one key would both read it, and the second write would drop the first's units).
        let mut merged: Vec<CalendarItem<'_>> = Vec::with_capacity(items.len());
        let mut names: Vec<String> = Vec::with_capacity(items.len());
        let mut of_item = Vec::with_capacity(items.len());
        for item in items {
            let name = calendar_key(&self.config.prefix, item);
            if let Some(at) = names.iter().position(|n| *n == name) {
                merged[at].cost = merged[at].cost.saturating_add(item.cost);
                of_item.push(at);
            } else {
                of_item.push(merged.len());
                merged.push(*item);
                names.push(name);
            }
        }
        // The slots' groups, in the order their first item comes.
        let mut groups: Vec<(Option<redis::cluster_routing::Slot>, Vec<usize>)> = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let slot = self.is_cluster().then(|| keys::slot(name.as_bytes()));
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, members)) => members.push(i),
                None => groups.push((slot, vec![i])),
            }
        }
        let decided = if groups.len() == 1 {
            self.calendar_call(&merged, &names, now, commit).await?
        } else {
            self.calendar_by_slot(&merged, &names, &groups, now, commit)
                .await?
        };
        Ok(CalendarBatch {
            allowed: decided.allowed,
            decisions: of_item.iter().map(|&at| decided.decisions[at]).collect(),
        })
    }

    /// [`RedisStore::calendar_check_at`] over several cluster slots (`groups`: each slot's
    /// indices into `items` and `names`): every slot peeked, then, when all admit and `commit`,
    /// every slot checked in turn until one denies. Decisions in `items`' order.
    async fn calendar_by_slot(
        &self,
        items: &[CalendarItem<'_>],
        names: &[String],
        groups: &[(Option<redis::cluster_routing::Slot>, Vec<usize>)],
        now: Option<Timestamp>,
        commit: bool,
    ) -> Result<CalendarBatch, StoreError> {
        let mut decisions: Vec<Option<Decision>> = vec![None; items.len()];
        let mut allowed = true;
        for pass in [false, true] {
            if pass && !(commit && allowed) {
                break;
            }
            for (_, members) in groups {
                let part: Vec<CalendarItem<'_>> = members.iter().map(|&i| items[i]).collect();
                let part_names: Vec<String> = members.iter().map(|&i| names[i].clone()).collect();
                let answer = self.calendar_call(&part, &part_names, now, pass).await?;
                for (&i, d) in members.iter().zip(answer.decisions) {
                    decisions[i] = Some(d);
                }
                if !answer.allowed {
                    allowed = false;
                    if pass {
                        // The slots after this one keep their peeks.
                        break;
                    }
                }
            }
        }
        let decisions = decisions
            .into_iter()
            .map(|d| {
                d.ok_or_else(|| StoreError::Unavailable {
                    reason: "a calendar slot went undecided".into(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CalendarBatch { allowed, decisions })
    }

    /// One script call deciding `items` (on distinct keys `names`, all in one slot).
    async fn calendar_call(
        &self,
        items: &[CalendarItem<'_>],
        names: &[String],
        now: Option<Timestamp>,
        commit: bool,
    ) -> Result<CalendarBatch, StoreError> {
        let service_now = now.unwrap_or_else(|| self.clock.now());
        let mut args = Vec::with_capacity(2 + 9 * items.len());
        args.push(u64::from(commit));
        args.push(duration_ms(self.config.ttl_extra));
        for item in items {
            let q = item.quota;
            let bounds = q.calendar().boundaries_around(service_now).ok_or_else(|| {
                StoreError::Unavailable {
                    reason: CalendarError::OutOfRange(service_now).to_string(),
                }
            })?;
            args.push(if q.kind() == AlgorithmKind::FixedWindow {
                1
            } else {
                3
            });
            args.push(q.limit());
            args.push(item.cost);
            args.extend_from_slice(&bounds.0);
        }
        let call = ScriptCall {
            script: &CALENDAR,
            source: CALENDAR_SOURCE,
            keys: names,
            args,
            now,
        };
        let reply: Vec<i64> = self
            .guarded_keys(names.iter().map(String::as_str), self.conn.invoke(&call))
            .await?;
        parse_reply(&reply, items)
    }
}

fn parse_reply(reply: &[i64], items: &[CalendarItem<'_>]) -> Result<CalendarBatch, StoreError> {
    let bad = || StoreError::Unavailable {
        reason: format!("calendar script replied {reply:?}"),
    };
    if reply.len() != 1 + 4 * items.len() {
        return Err(bad());
    }
    let number = |v: i64| u64::try_from(v).map_err(|_| bad());
    let decisions = reply[1..]
        .chunks_exact(4)
        .zip(items)
        .map(|(r, item)| {
            Ok(Decision {
                allowed: r[0] == 1,
                limit: item.quota.limit(),
                remaining: number(r[1])?,
                reset_after: number(r[2])?,
                // -1: none (a denial always has a retry_after >= 1)
                retry_after: if r[3] < 0 { None } else { Some(number(r[3])?) },
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(CalendarBatch {
        allowed: reply[0] == 1,
        decisions,
    })
}
