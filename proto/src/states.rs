//! The states Kura stores as text — turn, approval, session, effect class, decision
//! outcome — as enums, so an unknown stored value is an error, never a silent default.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A stored state text that names no known state: corruption, not input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {text:?}")]
pub struct UnknownState {
    /// Which vocabulary (`turn state`, `approval state`, ...).
    pub kind: &'static str,
    /// The text found.
    pub text: String,
}

macro_rules! text_enum {
    ($(#[$meta:meta])* $name:ident, $kind:literal, { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
        #[serde(rename_all = "lowercase")]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// The stored (and wire) spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl FromStr for $name {
            type Err = UnknownState;
            fn from_str(s: &str) -> Result<Self, UnknownState> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(UnknownState { kind: $kind, text: other.to_owned() }),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        #[cfg(feature = "sql")]
        impl rusqlite::types::ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(rusqlite::types::ToSqlOutput::from(self.as_str()))
            }
        }

        #[cfg(feature = "sql")]
        impl rusqlite::types::FromSql for $name {
            fn column_result(v: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
                v.as_str()?.parse().map_err(|e| rusqlite::types::FromSqlError::Other(Box::new(e)))
            }
        }
    };
}

text_enum!(
    /// Where a turn is in its life.
    TurnState, "turn state", {
    /// Waiting for a worker.
    Pending = "pending",
    /// Claimed by a worker (whose lease may have expired).
    Running = "running",
    /// Parked until an approval decision lands; no worker holds it.
    Waiting = "waiting",
    /// Output sealed.
    Done = "done",
});

text_enum!(
    /// Where an approval request is.
    ApprovalState, "approval state", {
    /// Filed, not yet seen by policy.
    Pending = "pending",
    /// Waiting for people.
    Asked = "asked",
    /// Allowed (by policy or people).
    Approved = "approved",
    /// Refused (by policy, people or expiry).
    Denied = "denied",
});

impl ApprovalState {
    /// Whether the request is decided (no further decision counts).
    pub fn is_decided(self) -> bool {
        matches!(self, ApprovalState::Approved | ApprovalState::Denied)
    }
}

text_enum!(
    /// What a rule — and the gate — decides on a tool call.
    Verdict, "verdict", {
    /// Run it.
    Allow = "allow",
    /// Refuse it.
    Deny = "deny",
    /// Ask people.
    Ask = "ask",
});

text_enum!(
    /// Where a plan's step is (`plan_steps.state`), and a plan as a whole (`plans.state`:
    /// running, done or failed).
    StepState, "plan step state", {
    /// Waiting for the steps it comes after.
    Waiting = "waiting",
    /// Its session runs.
    Running = "running",
    /// Delivered.
    Done = "done",
    /// Ended without a deliverable (or its validator failed it).
    Failed = "failed",
    /// Never started: the plan failed first, or the request's tree ran out of turns.
    Skipped = "skipped",
});

text_enum!(
    /// A session's status.
    SessionStatus, "session status", {
    /// Work may still come.
    Active = "active",
    /// Its last request is done.
    Complete = "complete",
    /// Its last request ended without a deliverable anyone accepted: its validator failed it,
    /// it ran out of turns before one could judge it, or its plan ended unfinished.
    Failed = "failed",
});

impl SessionStatus {
    /// Whether its work has ended (complete or failed): nothing runs in it until a new
    /// request.
    pub fn is_ended(self) -> bool {
        !matches!(self, SessionStatus::Active)
    }
}

text_enum!(
    /// What running a tool can do to the world; decides what may be re-run after a crash.
    Effect, "effect class", {
    /// Only reads: safe to run again.
    Read = "read",
    /// Changes local state (files): never re-run blindly.
    Write = "write",
    /// Reaches outside (processes, network): never re-run blindly.
    External = "external",
    /// Cannot be undone (deleting, sending, paying): a call config marks so (`[[tools.irreversible]]`
    /// or an outside agent's declaration). A writ's ceiling must name it to allow it.
    Irreversible = "irreversible",
});

impl Effect {
    /// Its place in the order writ ceilings use: read < write < external < irreversible.
    pub fn rank(self) -> u8 {
        match self {
            Effect::Read => 0,
            Effect::Write => 1,
            Effect::External => 2,
            Effect::Irreversible => 3,
        }
    }
}

text_enum!(
    /// A decision on a tool call, by policy or by a person.
    Outcome, "decision outcome", {
    /// Run it.
    Allow = "allow",
    /// Refuse it.
    Deny = "deny",
});

text_enum!(
    /// A person's vote on a request, as signed and sent (`approve` or `deny`).
    Vote, "vote", {
    /// Let the call run.
    Approve = "approve",
    /// Refuse it.
    Deny = "deny",
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_round_trips_and_unknown_text_is_refused() {
        for s in [
            TurnState::Pending,
            TurnState::Running,
            TurnState::Waiting,
            TurnState::Done,
        ] {
            assert_eq!(s.as_str().parse::<TurnState>(), Ok(s));
            assert_eq!(
                serde_json::to_value(s).expect("json"),
                serde_json::json!(s.as_str())
            );
        }
        assert_eq!(
            "finished".parse::<TurnState>(),
            Err(UnknownState {
                kind: "turn state",
                text: "finished".into()
            })
        );
        assert!("Approved".parse::<ApprovalState>().is_err(), "case matters");
        assert!(ApprovalState::Denied.is_decided() && !ApprovalState::Asked.is_decided());
        assert_eq!("external".parse::<Effect>(), Ok(Effect::External));
        assert_eq!("deny".parse::<Outcome>(), Ok(Outcome::Deny));
    }
}
