//! The window length a table's expiry counts with: the quota's period, or for a calendar policy
//! the longest period of its unit (a 25-hour day must not forget its count after 24 hours).

use floodgate_core::{Algorithm, FixedWindow, Micros, SlidingWindow};

/// A window algorithm that may count in calendar periods.
pub(super) trait WindowPeriod {
    /// The longest window: the quota's period, or the calendar unit's longest period.
    fn longest_window(&self) -> Micros;
}

impl WindowPeriod for FixedWindow {
    fn longest_window(&self) -> Micros {
        self.calendar()
            .map_or(self.quota().period(), |c| c.calendar().unit().max_period())
    }
}

impl WindowPeriod for SlidingWindow {
    fn longest_window(&self) -> Micros {
        self.calendar()
            .map_or(self.quota().period(), |c| c.calendar().unit().max_period())
    }
}

/// [`WindowPeriod::longest_window`].
pub(super) fn period(a: &impl WindowPeriod) -> Micros {
    a.longest_window()
}
