//! FixedWindow (not yet implemented).

use crate::algorithm::{Algorithm, AlgorithmKind};
use crate::decision::Decision;
use crate::error::QuotaError;
use crate::quota::Quota;
use crate::time::Timestamp;

/// FixedWindow prepared for one quota.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixedWindow {
    quota: Quota,
}

/// FixedWindow state of one key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FixedWindowState {}

impl Algorithm for FixedWindow {
    type State = FixedWindowState;
    const KIND: AlgorithmKind = AlgorithmKind::FixedWindow;

    fn new(quota: Quota) -> Result<Self, QuotaError> {
        Ok(Self { quota })
    }

    fn quota(&self) -> &Quota {
        &self.quota
    }

    fn capacity(&self) -> u64 {
        self.quota.limit()
    }

    fn initial_state(&self) -> FixedWindowState {
        FixedWindowState::default()
    }

    fn decide(
        &self,
        _state: &mut FixedWindowState,
        _now: Timestamp,
        _cost: u64,
        _consume: bool,
    ) -> Decision {
        todo!()
    }
}
