//! SlidingLog (not yet implemented).

use crate::algorithm::{Algorithm, AlgorithmKind};
use crate::decision::Decision;
use crate::error::QuotaError;
use crate::quota::Quota;
use crate::time::Timestamp;

/// SlidingLog prepared for one quota.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlidingLog {
    quota: Quota,
}

/// SlidingLog state of one key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SlidingLogState {}

impl Algorithm for SlidingLog {
    type State = SlidingLogState;
    const KIND: AlgorithmKind = AlgorithmKind::SlidingLog;

    fn new(quota: Quota) -> Result<Self, QuotaError> {
        Ok(Self { quota })
    }

    fn quota(&self) -> &Quota {
        &self.quota
    }

    fn capacity(&self) -> u64 {
        self.quota.limit()
    }

    fn initial_state(&self) -> SlidingLogState {
        SlidingLogState::default()
    }

    fn decide(
        &self,
        _state: &mut SlidingLogState,
        _now: Timestamp,
        _cost: u64,
        _consume: bool,
    ) -> Decision {
        todo!()
    }
}
