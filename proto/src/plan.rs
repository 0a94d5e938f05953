//! Plans: the content of an `agent.plan` record (steps, each a role and an instruction, and
//! the steps it waits for), and of the records minato writes about them — a route (which
//! role a request went to, and why) and a verdict (a validator's pass or fail).

use crate::RoleName;
use serde::{Deserialize, Serialize};

/// An `agent.plan` record's content: a DAG of steps minato runs as sub-sessions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanContent {
    /// What the plan is for, one line (shown in `kura log`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    /// The steps, in the order the model gave them.
    pub steps: Vec<PlanStep>,
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanStep {
    /// Its name within the plan: 1–64 of `A-Z a-z 0-9 _ -`.
    pub id: String,
    /// The role that does it (`[roster]`); none: the default role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<RoleName>,
    /// What the step's sub-session is asked to do.
    pub instruction: String,
    /// The steps whose outputs it needs: it starts when they are done, and their output
    /// ledgers are the parents of its context (a join).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// What must pass its deliverable before the step counts as done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validator: Option<Validator>,
}

/// What judges a deliverable before its session completes: a role (its deliverable says
/// `"verdict": "pass"` or `"fail"`) or a command run in the session's workspace in the
/// sandbox, like `shell.run` (exit 0 passes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Validator {
    /// The validating role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<RoleName>,
    /// The command's argv.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
}

/// Most arguments a validator command has, and bytes in one.
pub const MAX_VALIDATOR_ARGS: usize = 64;
/// See [`MAX_VALIDATOR_ARGS`].
pub const MAX_VALIDATOR_ARG_BYTES: usize = 4096;

/// Why a validator is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValidatorError {
    /// Both a role and a command, or neither.
    #[error("a validator is a role or a command, one of them")]
    RoleOrCommand,
    /// A command over the bounds.
    #[error(
        "a validator command has at most {MAX_VALIDATOR_ARGS} arguments of {MAX_VALIDATOR_ARG_BYTES} bytes, without NUL"
    )]
    CommandTooLarge,
}

impl Validator {
    /// Exactly one of a role and a command, the command bounded.
    pub fn check(&self) -> Result<(), ValidatorError> {
        match (&self.role, self.command.is_empty()) {
            (Some(_), false) | (None, true) => Err(ValidatorError::RoleOrCommand),
            (Some(_), true) => Ok(()),
            (None, false) => {
                if self.command.len() > MAX_VALIDATOR_ARGS
                    || self
                        .command
                        .iter()
                        .any(|a| a.len() > MAX_VALIDATOR_ARG_BYTES || a.contains('\0'))
                {
                    return Err(ValidatorError::CommandTooLarge);
                }
                Ok(())
            }
        }
    }

    /// Who judges, as a verdict names it: `role:<name>` or `command:<program>`.
    pub fn by(&self) -> String {
        match &self.role {
            Some(r) => format!("role:{r}"),
            None => format!(
                "command:{}",
                self.command.first().map(String::as_str).unwrap_or("")
            ),
        }
    }
}

/// How a request's role was chosen (the content of its `task.route` record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteContent {
    /// The role chosen.
    pub role: RoleName,
    /// Why: named by the request or the plan, a keyword rule, the default.
    pub reason: String,
}

/// A validator's verdict on a deliverable (the content of a `task.verdict` record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerdictContent {
    /// Whether the deliverable passed.
    pub pass: bool,
    /// The deliverable judged.
    pub deliverable: String,
    /// Who judged: `role:<name>` or `command:<argv[0]>`.
    pub by: String,
    /// Why, in the validator's words (cut to a few KiB).
    pub reason: String,
}
