//! Calendar math of the leaderboards: UTC days, weeks from Monday, and the wall clock.

/// Milliseconds per UTC day: leaderboard days are UTC days of the order's `created_ms`.
pub const MS_PER_DAY: i64 = 86_400_000;
/// Days from 1970-01-01 (a Thursday) back to the Monday that starts its week.
const EPOCH_WEEKDAY_OFFSET_DAYS: i64 = 3;
/// Days per leaderboard week (Monday to Sunday, UTC).
const DAYS_PER_WEEK: i64 = 7;

/// The UTC day number (days since 1970-01-01) of a millisecond timestamp.
pub fn day_of(ms: i64) -> i64 {
    ms.div_euclid(MS_PER_DAY)
}

/// The first day (a Monday, UTC) of the week that contains `day`.
pub fn week_start(day: i64) -> i64 {
    day - (day + EPOCH_WEEKDAY_OFFSET_DAYS).rem_euclid(DAYS_PER_WEEK)
}

/// Milliseconds since the Unix epoch, by the wall clock (0 if the clock is before 1970).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weeks_start_on_monday() {
        // 1970-01-05 (day 4) was a Monday.
        assert_eq!(week_start(4), 4);
        assert_eq!(week_start(10), 4);
        assert_eq!(week_start(11), 11);
        assert_eq!(week_start(0), -3);
    }
}
