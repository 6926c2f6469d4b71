//! LeakyBucket (not yet implemented).

use crate::algorithm::{Algorithm, AlgorithmKind};
use crate::decision::Decision;
use crate::error::QuotaError;
use crate::quota::Quota;
use crate::time::Timestamp;

/// LeakyBucket prepared for one quota.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeakyBucket {
    quota: Quota,
}

/// LeakyBucket state of one key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeakyBucketState {}

impl Algorithm for LeakyBucket {
    type State = LeakyBucketState;
    const KIND: AlgorithmKind = AlgorithmKind::LeakyBucket;

    fn new(quota: Quota) -> Result<Self, QuotaError> {
        Ok(Self { quota })
    }

    fn quota(&self) -> &Quota {
        &self.quota
    }

    fn capacity(&self) -> u64 {
        self.quota.limit()
    }

    fn initial_state(&self) -> LeakyBucketState {
        LeakyBucketState::default()
    }

    fn decide(
        &self,
        _state: &mut LeakyBucketState,
        _now: Timestamp,
        _cost: u64,
        _consume: bool,
    ) -> Decision {
        todo!()
    }
}
