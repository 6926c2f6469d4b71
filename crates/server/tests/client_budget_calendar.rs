//! `floodgate-client`'s `Budget` against a calendar rule: a Pacific-time daily quota spent on
//! the 23-hour 2027-03-14 is exhausted `until` local midnight (2027-03-15T07:00Z), not 00:00
//! UTC nor 24 hours after the day began.

mod serve_support;

use std::sync::Arc;

use floodgate_client::{Budget, Client, ManualClock, SpendError};
use serve_support::{advance, client, Floodgate, START_US};

const HOUR: u64 = 3_600_000_000;
/// 2027-03-14T00:00:00-08:00.
const SHORT_DAY: u64 = 1_805_011_200_000_000;

#[tokio::test]
async fn a_budget_spent_on_the_short_day_frees_at_local_midnight() {
    let fg = Floodgate::with_config(
        "[[rules]]\nname = \"per-day\"\nalgorithm = \"fixed_window\"\nlimit = \"10/day\"\n\
         calendar = \"America/Los_Angeles\"\n",
        &[],
    );
    let now = SHORT_DAY + HOUR;
    advance(&client(), &fg, now - START_US).await;
    let c = Client::builder(&fg.api)
        .clock(Arc::new(ManualClock::new(now)))
        .build()
        .unwrap();
    let budget = Budget::new(c, "per-day", "paid-api");
    budget.spend(6).await.unwrap();
    budget.spend(4).await.unwrap();
    match budget.spend(1).await {
        Err(SpendError::Exhausted(e)) => {
            assert_eq!((e.remaining, e.until), (0, SHORT_DAY + 23 * HOUR));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(budget.spent(), 10);
}
