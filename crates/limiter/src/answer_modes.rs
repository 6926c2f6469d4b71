//! [`AnswerModes`]: what a plan asks of its answer beyond its items (decided in
//! [`crate::modes`]); a leaf below the plan and the modes.

/// What a plan asks of the answer (counts in `u32`: a plan is moved with every request, and
/// these stay small) beyond its items ([`Plan::shadow_all`](crate::Plan::shadow_all),
/// [`Plan::block_in_quota_mode`](crate::Plan::block_in_quota_mode), [`Plan::pass_quota`](crate::Plan::pass_quota), [`ItemOptions::quota_mode`](crate::ItemOptions::quota_mode)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct AnswerModes {
    /// Every denial is answered as an admission.
    pub(crate) shadow_all: bool,
    /// Block list entries in quota mode (always over their limit).
    pub(crate) quota_blocks: u32,
    /// Quota-mode descriptors that selected no limit (never over).
    pub(crate) quota_passes: u32,
    /// Items in quota mode.
    pub(crate) quota_items: u32,
}

impl AnswerModes {
    /// Whether the plan is decided as any plan.
    pub(crate) fn is_plain(&self) -> bool {
        *self == AnswerModes::default()
    }
}
