//! TokenBucket (not yet implemented).

use crate::algorithm::{Algorithm, AlgorithmKind};
use crate::decision::Decision;
use crate::error::QuotaError;
use crate::quota::Quota;
use crate::time::Timestamp;

/// TokenBucket prepared for one quota.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBucket {
    quota: Quota,
}

/// TokenBucket state of one key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TokenBucketState {}

impl Algorithm for TokenBucket {
    type State = TokenBucketState;
    const KIND: AlgorithmKind = AlgorithmKind::TokenBucket;

    fn new(quota: Quota) -> Result<Self, QuotaError> {
        Ok(Self { quota })
    }

    fn quota(&self) -> &Quota {
        &self.quota
    }

    fn capacity(&self) -> u64 {
        self.quota.limit()
    }

    fn initial_state(&self) -> TokenBucketState {
        TokenBucketState::default()
    }

    fn decide(
        &self,
        _state: &mut TokenBucketState,
        _now: Timestamp,
        _cost: u64,
        _consume: bool,
    ) -> Decision {
        todo!()
    }
}
