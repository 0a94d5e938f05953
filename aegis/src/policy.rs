//! The policy file: TOML on disk, the shared [`Policy`] in the store (where hashi applies it).

use std::path::Path;

use anyhow::Context;

pub use kura_policy::{Defaults, Policy, Rule, Ruling, Verdict, glob};

/// Reads a policy file (TOML).
pub fn load(path: &Path) -> anyhow::Result<Policy> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read policy {}", path.display()))?;
    let p: Policy =
        toml::from_str(&text).with_context(|| format!("invalid policy {}", path.display()))?;
    p.check()?;
    Ok(p)
}
