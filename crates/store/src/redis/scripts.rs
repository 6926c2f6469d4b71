//! The Lua scripts, assembled at compile time from `crates/store/lua/*.lua`.
//!
//! Redis scripts cannot include one another, so each script sent to Redis is the concatenation
//! `common.lua` + the six algorithm files + a driver (`batch.lua` or `refund.lua`). Every file
//! documents its KEYS/ARGV and the spec section it implements. [`redis::Script`] sends them with
//! `EVALSHA` and, on a `NOSCRIPT` reply (the script cache is emptied by a restart, a failover or
//! `SCRIPT FLUSH`), loads the script and retries once, so callers never see `NOSCRIPT`.

use std::sync::LazyLock;

use floodgate_core::AlgorithmKind;

/// `common.lua` and the six algorithm files, in the order the drivers expect.
macro_rules! library {
    () => {
        concat!(
            include_str!("../../lua/common.lua"),
            "\n",
            include_str!("../../lua/fixed_window.lua"),
            "\n",
            include_str!("../../lua/sliding_log.lua"),
            "\n",
            include_str!("../../lua/sliding_window.lua"),
            "\n",
            include_str!("../../lua/token_bucket.lua"),
            "\n",
            include_str!("../../lua/leaky_bucket.lua"),
            "\n",
            include_str!("../../lua/gcra.lua"),
            "\n",
        )
    };
}

/// The source of the batch script (library + `batch.lua`).
pub const BATCH_SOURCE: &str = concat!(library!(), include_str!("../../lua/batch.lua"));

/// The source of the refund script (library + `refund.lua`).
pub const REFUND_SOURCE: &str = concat!(library!(), include_str!("../../lua/refund.lua"));

/// The batch script: decides one slot group of a batch all-or-nothing.
pub static BATCH: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(BATCH_SOURCE));

/// The refund script: gives back a committed slot group's consumption.
pub static REFUND: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(REFUND_SOURCE));

/// The algorithm number the scripts use (`ALGORITHMS` in `batch.lua`).
pub fn algorithm_code(kind: AlgorithmKind) -> u8 {
    match kind {
        AlgorithmKind::FixedWindow => 1,
        AlgorithmKind::SlidingLog => 2,
        AlgorithmKind::SlidingWindow => 3,
        AlgorithmKind::TokenBucket => 4,
        AlgorithmKind::LeakyBucket => 5,
        AlgorithmKind::Gcra => 6,
    }
}
