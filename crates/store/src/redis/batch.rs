//! The batch protocol of the [module docs](super): a batch split into slot groups, one script
//! per group (or one coalesced call), refunds when a cross-slot check is not admitted
//! everywhere, and the peek answer of a Redis out of memory.

use std::sync::Arc;

use floodgate_core::Timestamp;
use redis::cluster_routing::Slot;
use redis::RedisError;

use super::coalesce;
use super::connection::{duration_ms, is_out_of_memory, ScriptCall};
use super::reply::{
    assemble, name_slots, parse_group_reply, push_item_args, single_kind, slot_number, slots_text,
    Group, GroupReply,
};
use super::store::RedisStore;
use super::{keys, scripts};
use crate::{BatchDecision, CheckItem, StoreError};

/// A failed cluster call, logged with its slot and master at `warn` at most once a second
/// per process (the rest counted in the next line's `suppressed`): a timeout's error carries
/// no text, so Floodgate's own store-failure line cannot name them.
fn log_cluster_failure(
    error: &StoreError,
    groups: &[Group],
    shards: Option<&super::shards::Shards>,
) {
    use floodgate_core::{Clock, SystemClock};
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST_US: AtomicU64 = AtomicU64::new(0);
    static SUPPRESSED: AtomicU64 = AtomicU64::new(0);
    let now = SystemClock.now();
    let last = LAST_US.load(Ordering::Relaxed);
    if now.saturating_sub(last) >= 1_000_000
        && LAST_US
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        let suppressed = SUPPRESSED.swap(0, Ordering::Relaxed);
        let at = slots_text(groups, shards);
        tracing::warn!(%error, suppressed, "redis cluster call failed: {at}");
    } else {
        SUPPRESSED.fetch_add(1, Ordering::Relaxed);
    }
}

impl RedisStore {
    /// Splits a batch into slot groups (one group on standalone Redis).
    pub(super) fn groups(&self, items: &[CheckItem<'_>]) -> Vec<Group> {
        let cluster = self.is_cluster();
        // Standalone: one group, slot `None`.
        let mut groups: Vec<(Option<Slot>, Group)> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let name = keys::state_key(&self.config.prefix, item.rule, item.policy, item.key);
            let slot = cluster.then(|| keys::slot(name.as_bytes()));
            let g = match groups.iter().position(|(s, _)| *s == slot) {
                Some(g) => g,
                None => {
                    groups.push((
                        slot,
                        Group {
                            keys: Vec::new(),
                            items: Vec::new(),
                            key_index: Vec::new(),
                        },
                    ));
                    groups.len() - 1
                }
            };
            let group = &mut groups[g].1;
            let k = match group.keys.iter().position(|k| *k == name) {
                Some(k) => k,
                None => {
                    group.keys.push(name);
                    group.keys.len() - 1
                }
            };
            group.items.push(i);
            group.key_index.push(k + 1);
        }
        groups.into_iter().map(|(_, g)| g).collect()
    }

    pub(super) async fn run(
        &self,
        items: &[CheckItem<'_>],
        now: Option<Timestamp>,
        commit: bool,
    ) -> Result<BatchDecision, StoreError> {
        crate::validate_batch(items)?;
        if items.is_empty() {
            return Ok(BatchDecision {
                allowed: true,
                decisions: Vec::new(),
                store_full: None,
            });
        }
        if super::calendar_batch::has_calendar(items) {
            return self.calendar_batch(items, now, commit).await;
        }
        let now = self.now_arg(now);
        if let (Some(cache), false) = (
            &self.deny_cache,
            commit && items.len() == 1 && items[0].cost == 1,
        ) {
            cache.observe(now.unwrap_or_else(|| self.clock.now()));
        }
        // The key names (one SHA-256 each), also the deny cache's.
        let groups = self.groups(items);
        // The deny cache: one cost-1 check, on the decision clock (the store's clock at
        // sending time for Redis' clock, see `deny_cache`).
        let cached = match &self.deny_cache {
            Some(cache) if commit && items.len() == 1 && items[0].cost == 1 => {
                let name = groups[0].keys[0].clone();
                let at = now.unwrap_or_else(|| self.clock.now());
                match cache.lookup(&name, at) {
                    Ok(d) => {
                        metrics::counter!("floodgate_store_deny_cache_hits_total").increment(1);
                        return Ok(BatchDecision {
                            allowed: false,
                            decisions: vec![d],
                            store_full: None,
                        });
                    }
                    Err(generation) => Some((cache, name, at, generation)),
                }
            }
            _ => None,
        };
        let result = self
            .guarded_keys(groups.iter().map(|g| g.keys[0].as_str()), async {
                let result = match &self.coalescer {
                    // Standalone: always one group.
                    Some(c) if groups.len() == 1 => {
                        self.decide_coalesced(c, items, groups[0].clone(), now, commit)
                            .await
                    }
                    _ => self.decide_groups(items, &groups, now, commit).await,
                };
                match result {
                    Err(e) if is_out_of_memory(&e) => {
                        self.decide_out_of_memory(items, &groups, now, commit, e)
                            .await
                    }
                    other => other,
                }
            })
            .await;
        self.record_shards(&groups, result.as_ref().err());
        let result = match result {
            Err(e) if self.is_cluster() => {
                log_cluster_failure(&e, &groups, self.shards.as_deref());
                Err(name_slots(e, &groups, self.shards.as_deref()))
            }
            other => other,
        };
        if let (Some((cache, name, at, generation)), Ok(batch)) = (cached, &result) {
            if !batch.allowed {
                cache.insert(&name, at, batch.decisions[0], generation);
            }
        }
        result
    }

    /// Cluster: counts the call under the master of each of its slots (readiness per shard).
    fn record_shards(&self, groups: &[Group], error: Option<&StoreError>) {
        if let Some(shards) = &self.shards {
            let slots = groups.iter().map(|g| slot_number(g.keys[0].as_bytes()));
            shards.record_slots(self.clock.now(), slots, error);
        }
    }

    /// Redis refused the batch with `OOM` (over `maxmemory` with `noeviction`): peek it with
    /// [`scripts::PEEK_OOM`], which Redis runs even then. A peek, or a check that is denied
    /// anyway (a denial writes nothing), is answered; a check that would be admitted needs a
    /// write and fails with the `OOM` error, into the failure mode.
    async fn decide_out_of_memory(
        &self,
        items: &[CheckItem<'_>],
        groups: &[Group],
        now: Option<Timestamp>,
        commit: bool,
        error: RedisError,
    ) -> Result<BatchDecision, RedisError> {
        let replies = futures_util::future::join_all(groups.iter().map(|g| {
            self.run_group_script(
                items,
                g,
                now,
                false,
                (&scripts::PEEK_OOM, scripts::PEEK_OOM_SOURCE),
            )
        }))
        .await;
        let Ok(replies) = replies.into_iter().collect::<Result<Vec<_>, _>>() else {
            return Err(error);
        };
        if commit && replies.iter().all(|r| r.all_allowed) {
            return Err(error);
        }
        metrics::counter!("floodgate_store_redis_out_of_memory_answers_total").increment(1);
        Ok(assemble(items, groups, replies, commit))
    }

    /// One batch (one group) through the [`coalesce`] queue.
    async fn decide_coalesced(
        &self,
        coalescer: &Arc<coalesce::Coalescer>,
        items: &[CheckItem<'_>],
        group: Group,
        now: Option<Timestamp>,
        commit: bool,
    ) -> Result<BatchDecision, RedisError> {
        let mut item_args = Vec::with_capacity(8 * group.items.len());
        for (&i, &k) in group.items.iter().zip(&group.key_index) {
            push_item_args(&mut item_args, k, &items[i]);
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        coalescer
            .submit(coalesce::Pending {
                keys: group.keys.clone(),
                item_args,
                commit,
                now,
                kind: single_kind(items, &group),
                tx,
            })
            .await;
        let reply = rx.await.map_err(|_| {
            RedisError::from(std::io::Error::other(
                "redis store: the coalesced call was dropped",
            ))
        })??;
        let reply = if reply.first() == Some(&-1) {
            // This batch raised an error inside the coalesced script (nothing of it was
            // written): run it alone, so that its caller gets its own error.
            self.run_group(items, &group, now, commit).await?
        } else {
            parse_group_reply(&reply, &group, items)?
        };
        Ok(assemble(items, &[group], vec![reply], commit))
    }

    /// The batch protocol of the module docs: one script per group, all sent at once; refunds
    /// when a multi-group check is not admitted everywhere.
    async fn decide_groups(
        &self,
        items: &[CheckItem<'_>],
        groups: &[Group],
        now: Option<Timestamp>,
        commit: bool,
    ) -> Result<BatchDecision, RedisError> {
        let replies = futures_util::future::join_all(
            groups.iter().map(|g| self.run_group(items, g, now, commit)),
        )
        .await;
        let all_allowed = replies
            .iter()
            .all(|r| matches!(r, Ok(reply) if reply.all_allowed));
        if groups.len() > 1 && commit && !all_allowed {
            // Cross-slot batch not admitted everywhere: refund the groups that committed.
            let committed: Vec<(&Group, &GroupReply)> = groups
                .iter()
                .zip(&replies)
                .filter_map(|(g, r)| match r {
                    Ok(reply) if reply.all_allowed => Some((g, reply)),
                    _ => None,
                })
                .collect();
            if !committed.is_empty() {
                metrics::counter!("floodgate_store_redis_refunds_total")
                    .increment(committed.len() as u64);
                let refunds = futures_util::future::join_all(
                    committed
                        .iter()
                        .map(|(g, reply)| self.refund_group(items, g, reply, now)),
                )
                .await;
                for r in refunds {
                    if let Err(e) = r {
                        tracing::warn!(error = %e, "redis store: refund of a cross-slot batch failed; \
                            its units stay consumed until the keys expire");
                    }
                }
            }
        }
        let replies = replies.into_iter().collect::<Result<Vec<_>, _>>()?;
        Ok(assemble(items, groups, replies, commit))
    }

    async fn run_group(
        &self,
        items: &[CheckItem<'_>],
        group: &Group,
        now: Option<Timestamp>,
        commit: bool,
    ) -> Result<GroupReply, RedisError> {
        let script = scripts::batch_script(single_kind(items, group));
        self.run_group_script(items, group, now, commit, script)
            .await
    }

    /// [`run_group`](Self::run_group) with another batch script (same arguments and reply).
    async fn run_group_script(
        &self,
        items: &[CheckItem<'_>],
        group: &Group,
        now: Option<Timestamp>,
        commit: bool,
        (script, source): (&redis::Script, &'static str),
    ) -> Result<GroupReply, RedisError> {
        let mut args = Vec::with_capacity(2 + 8 * group.items.len());
        args.push(u64::from(commit));
        args.push(duration_ms(self.config.ttl_extra));
        for (&i, &k) in group.items.iter().zip(&group.key_index) {
            push_item_args(&mut args, k, &items[i]);
        }
        let call = ScriptCall {
            script,
            source,
            keys: &group.keys,
            args,
            now,
        };
        let reply: Vec<i64> = self.conn.invoke(&call).await?;
        parse_group_reply(&reply, group, items)
    }

    async fn refund_group(
        &self,
        items: &[CheckItem<'_>],
        group: &Group,
        reply: &GroupReply,
        now: Option<Timestamp>,
    ) -> Result<i64, RedisError> {
        let mut args = Vec::with_capacity(9 * group.items.len());
        for ((&i, &k), r) in group.items.iter().zip(&group.key_index).zip(&reply.items) {
            // Only what was consumed is refunded (cost 0 consumed nothing).
            let cost = if r.peek.allowed { items[i].cost } else { 0 };
            push_item_args(&mut args, k, &CheckItem { cost, ..items[i] });
            args.push(r.mark);
        }
        let call = ScriptCall {
            script: &scripts::REFUND,
            source: scripts::REFUND_SOURCE,
            keys: &group.keys,
            args,
            now,
        };
        self.conn.invoke(&call).await
    }
}
