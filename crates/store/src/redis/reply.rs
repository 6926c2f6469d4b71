//! A batch's slot groups, the arguments of its scripts and their replies: what `batch.rs`,
//! `reserve.rs` and the coalescer send and read.

use floodgate_core::{AlgorithmKind, Decision};
use redis::RedisError;

use super::scripts;
use super::shards::Shards;
use crate::{BatchDecision, CheckItem, StoreError};

/// One slot group of a batch: the keys it touches and the batch items it decides.
#[derive(Clone)]
pub(super) struct Group {
    /// Distinct key names, in first-use order.
    pub(super) keys: Vec<String>,
    /// Batch indices of the items in this group, in batch order.
    pub(super) items: Vec<usize>,
    /// For each entry of `items`: its key's 1-based index into `keys` (Lua's KEYS[i]).
    pub(super) key_index: Vec<usize>,
}

/// One item's answer from the batch script.
#[derive(Debug, Clone, Copy)]
pub(super) struct ItemReply {
    pub(super) peek: Decision,
    pub(super) consumed: Decision,
    pub(super) mark: u64,
}

/// One group's answer from the batch script.
pub(super) struct GroupReply {
    pub(super) all_allowed: bool,
    pub(super) items: Vec<ItemReply>,
}

/// The one algorithm of every item of `group`, if they share one (a smaller script then).
pub(super) fn single_kind(items: &[CheckItem<'_>], group: &Group) -> Option<AlgorithmKind> {
    let first = items[group.items[0]].policy.kind();
    group
        .items
        .iter()
        .all(|&i| items[i].policy.kind() == first)
        .then_some(first)
}

/// The batch's decision from its groups' replies: admitted when every group admitted; then
/// each item's decision after consumption (for a check), else each item's peek.
pub(super) fn assemble(
    items: &[CheckItem<'_>],
    groups: &[Group],
    replies: Vec<GroupReply>,
    commit: bool,
) -> BatchDecision {
    let all_allowed = replies.iter().all(|r| r.all_allowed);
    let mut decisions = vec![None; items.len()];
    for (group, reply) in groups.iter().zip(replies) {
        for (&i, r) in group.items.iter().zip(reply.items) {
            decisions[i] = Some(if all_allowed && commit {
                r.consumed
            } else {
                r.peek
            });
        }
    }
    BatchDecision {
        allowed: all_allowed,
        decisions: decisions
            .into_iter()
            .map(|d| d.expect("every item belongs to one group"))
            .collect(),
        store_full: None,
    }
}

/// The 8 per-item arguments of `batch.lua` (and the first 8 of `refund.lua`).
pub(super) fn push_item_args(args: &mut Vec<u64>, key_index: usize, item: &CheckItem<'_>) {
    let quota = item.policy.quota();
    let (num, den) = quota.emission_interval();
    args.extend([
        key_index as u64,
        u64::from(scripts::algorithm_code(item.policy.kind())),
        quota.limit(),
        quota.period(),
        quota.burst(),
        num,
        den,
        item.cost,
    ]);
}

pub(super) fn parse_group_reply(
    reply: &[i64],
    group: &Group,
    items: &[CheckItem<'_>],
) -> Result<GroupReply, RedisError> {
    const PER_ITEM: usize = 9;
    if reply.len() != 2 + PER_ITEM * group.items.len() {
        return Err(RedisError::from((
            redis::ErrorKind::Parse,
            "unexpected reply length from the batch script",
        )));
    }
    let decision = |limit: u64, v: &[i64]| Decision {
        allowed: v[0] == 1,
        limit,
        remaining: v[1].max(0) as u64,
        reset_after: v[2].max(0) as u64,
        retry_after: (v[3] >= 0).then_some(v[3] as u64),
    };
    let items = group
        .items
        .iter()
        .enumerate()
        .map(|(j, &i)| {
            let v = &reply[2 + j * PER_ITEM..2 + (j + 1) * PER_ITEM];
            let limit = items[i].policy.capacity();
            ItemReply {
                peek: decision(limit, &v[0..4]),
                consumed: decision(limit, &v[4..8]),
                mark: v[8].max(0) as u64,
            }
        })
        .collect();
    Ok(GroupReply {
        all_allowed: reply[0] == 1,
        items,
    })
}

/// A cluster call's failure names the slot(s) of its keys and their master as the client's
/// slot map last named it ("slot 2513 on 127.0.0.1:7001"; see [`Shards::node_of`]), so
/// that an operator can tell which shard fails; the key names are hashes, never a client's
/// key. Timeouts carry no text and stay as they are.
pub(super) fn name_slots(e: StoreError, groups: &[Group], shards: Option<&Shards>) -> StoreError {
    match e {
        StoreError::Unavailable { reason } => StoreError::Unavailable {
            reason: format!("{reason} ({})", slots_text(groups, shards)),
        },
        other => other,
    }
}

/// `cluster slot 2513 on 10.0.0.1:7000` (or `cluster slots 1, 2 on ...` for several groups;
/// a slot whose master is unknown is named alone).
pub(super) fn slots_text(groups: &[Group], shards: Option<&Shards>) -> String {
    let slots: Vec<String> = groups
        .iter()
        .map(|g| {
            let slot = slot_number(g.keys[0].as_bytes());
            match shards.and_then(|s| s.node_of(slot)) {
                Some(node) => format!("{slot} on {node}"),
                None => slot.to_string(),
            }
        })
        .collect();
    let s = if slots.len() == 1 { "" } else { "s" };
    format!("cluster slot{s} {}", slots.join(", "))
}

/// The cluster slot of a key name without braces (ours never have any): CRC16-XMODEM of the
/// whole name mod 16384, the number behind [`keys::slot`](super::keys::slot) (the `redis`
/// crate does not show it).
pub(super) fn slot_number(name: &[u8]) -> u16 {
    let crc = name.iter().fold(0u16, |crc, &b| {
        (0..8).fold(crc ^ (u16::from(b) << 8), |c, _| {
            if c & 0x8000 != 0 {
                (c << 1) ^ 0x1021
            } else {
                c << 1
            }
        })
    });
    crc % 16_384
}

#[cfg(test)]
mod slot_tests {
    use super::*;
    use crate::redis::keys;
    use redis::cluster_routing::Slot;

    #[test]
    fn slot_number_is_the_slot_of_the_key() {
        // CRC16-XMODEM's check value: "123456789" -> 0x31C3.
        assert_eq!(slot_number(b"123456789"), 0x31C3);
        for name in ["fg:UL7fKu3wove", "fg:claim:x", "", "a"] {
            assert_eq!(
                Slot::new(slot_number(name.as_bytes())),
                Some(keys::slot(name.as_bytes())),
                "{name:?}"
            );
        }
    }
}
