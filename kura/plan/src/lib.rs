//! Kura's roster and plans, pure (no SQLite): the roles work can be given, how a request is
//! routed to one, and the checks an `agent.plan` passes before minato starts any step.

pub mod check;
pub mod roster;

#[cfg(test)]
mod tests;

pub use check::{Checked, PlanError, check};
pub use roster::{DEFAULT_ROLE, PlanLimits, Role, RosterConfig};
