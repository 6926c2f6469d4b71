//! SlidingWindow (not yet implemented).

use crate::algorithm::{Algorithm, AlgorithmKind};
use crate::decision::Decision;
use crate::error::QuotaError;
use crate::quota::Quota;
use crate::time::Timestamp;

/// SlidingWindow prepared for one quota.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlidingWindow {
    quota: Quota,
}

/// SlidingWindow state of one key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SlidingWindowState {}

impl Algorithm for SlidingWindow {
    type State = SlidingWindowState;
    const KIND: AlgorithmKind = AlgorithmKind::SlidingWindow;

    fn new(quota: Quota) -> Result<Self, QuotaError> {
        Ok(Self { quota })
    }

    fn quota(&self) -> &Quota {
        &self.quota
    }

    fn capacity(&self) -> u64 {
        self.quota.limit()
    }

    fn initial_state(&self) -> SlidingWindowState {
        SlidingWindowState::default()
    }

    fn decide(
        &self,
        _state: &mut SlidingWindowState,
        _now: Timestamp,
        _cost: u64,
        _consume: bool,
    ) -> Decision {
        todo!()
    }
}
