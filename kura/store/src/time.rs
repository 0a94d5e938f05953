//! Timestamps: fixed-width RFC 3339 UTC with microseconds, so text order is time order.

use std::time::{Duration, SystemTime};

use crate::error::{Result, StoreError};

/// Now, e.g. `2026-11-21T22:00:00.123456Z`.
pub fn now() -> String {
    format(SystemTime::now())
}

/// Formats a time the way Kura stores it.
pub fn format(t: SystemTime) -> String {
    humantime::format_rfc3339_micros(t).to_string()
}

/// Reads a user's `--since`: an RFC 3339 time (`2026-11-21T00:00:00Z`) or an age (`2h`,
/// `3days`), returned in stored form so it compares correctly as text.
pub fn parse_since(text: &str) -> Result<String> {
    if let Ok(t) = humantime::parse_rfc3339_weak(text) {
        return Ok(format(t));
    }
    if let Ok(age) = humantime::parse_duration(text) {
        // Stored times start at 1970; an age reaching further back is a typo, not a query.
        return SystemTime::now()
            .checked_sub(age)
            .filter(|t| *t >= SystemTime::UNIX_EPOCH)
            .map(format)
            .ok_or_else(|| StoreError::Invalid(format!("age {text:?} reaches back before 1970")));
    }
    Err(StoreError::Invalid(format!(
        "invalid time {text:?}: expected RFC 3339 (2026-11-21T08:00:00Z) or an age (90m, 2h, 3days)"
    )))
}

/// Seconds since the epoch of a stored time, for tools (git) that want an integer.
pub fn unix_seconds(stored: &str) -> Option<u64> {
    humantime::parse_rfc3339(stored)
        .ok()?
        .duration_since(SystemTime::UNIX_EPOCH)
        .ok()
        .map(|d: Duration| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_form_is_fixed_width_and_sortable() {
        let a = format(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        let b = format(SystemTime::UNIX_EPOCH + Duration::from_micros(1_700_000_000_000_001));
        assert_eq!(a, "2023-11-14T22:13:20.000000Z");
        assert_eq!(a.len(), b.len());
        assert!(a < b);
    }

    /// Regression: `kura query --since 300000years` panicked formatting a time before 1970.
    #[test]
    fn since_older_than_the_epoch_is_an_error_not_a_panic() {
        for text in ["300000years", "100000000000days"] {
            let err = parse_since(text).expect_err(text);
            assert!(
                matches!(err, StoreError::Invalid(ref m) if m.contains("before 1970")),
                "{err}"
            );
        }
    }

    #[test]
    fn since_accepts_times_and_ages() {
        assert_eq!(
            parse_since("2023-11-14T22:13:20Z").expect("rfc3339"),
            "2023-11-14T22:13:20.000000Z"
        );
        assert!(parse_since("2h").expect("age") < now());
        assert!(parse_since("yesterday-ish").is_err());
        assert_eq!(
            unix_seconds("2023-11-14T22:13:20.000000Z"),
            Some(1_700_000_000)
        );
    }
}
