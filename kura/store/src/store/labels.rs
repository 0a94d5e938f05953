//! Human labels of ledgers and sessions: bounded, printable. Shared by both, so neither
//! module reaches into the other for it.

use crate::error::{Result, StoreError};

/// Longest label accepted for ledgers and sessions.
pub(crate) const MAX_LABEL_BYTES: usize = 200;

/// Checks a human label.
pub(crate) fn check_label(label: &str) -> Result<()> {
    if label.trim().is_empty()
        || label.len() > MAX_LABEL_BYTES
        || label.chars().any(char::is_control)
    {
        return Err(StoreError::Invalid(format!(
            "invalid label {label:?}: must be 1..{MAX_LABEL_BYTES} bytes without control characters"
        )));
    }
    Ok(())
}
