//! NATS subject builders: `{prefix}.{project}.cmd.{target}.{action}` and `{prefix}.{project}.evt.{source}.{event}`.

/// The default subject prefix.
pub const DEFAULT_PREFIX: &str = "oclaw.v1";

/// A subject token was empty or held a character NATS treats specially.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid subject token {0:?}: must be non-empty without '.', '*', '>' or whitespace")]
pub struct SubjectError(pub String);

fn check_token(token: &str) -> Result<(), SubjectError> {
    let bad = token.is_empty()
        || token
            .chars()
            .any(|c| c == '.' || c == '*' || c == '>' || c.is_whitespace() || c.is_control());
    if bad {
        Err(SubjectError(token.to_owned()))
    } else {
        Ok(())
    }
}

/// Builds subjects under one (configurable) prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subjects {
    /// Dotted prefix, `oclaw.v1` by default; lets two installations share one NATS.
    prefix: String,
}

impl Default for Subjects {
    fn default() -> Self {
        Subjects {
            prefix: DEFAULT_PREFIX.to_owned(),
        }
    }
}

impl Subjects {
    /// Subjects under `prefix` (each dot-separated token is checked).
    pub fn new(prefix: &str) -> Result<Self, SubjectError> {
        prefix.split('.').try_for_each(check_token)?;
        Ok(Subjects {
            prefix: prefix.to_owned(),
        })
    }

    /// The prefix in use.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A work subject: `{prefix}.{project}.cmd.{target}.{action}`.
    pub fn cmd(&self, project: &str, target: &str, action: &str) -> Result<String, SubjectError> {
        self.build(project, "cmd", target, action)
    }

    /// A broadcast subject: `{prefix}.{project}.evt.{source}.{event}`.
    pub fn evt(&self, project: &str, source: &str, event: &str) -> Result<String, SubjectError> {
        self.build(project, "evt", source, event)
    }

    fn build(&self, project: &str, kind: &str, a: &str, b: &str) -> Result<String, SubjectError> {
        for t in [project, a, b] {
            check_token(t)?;
        }
        Ok(format!("{}.{project}.{kind}.{a}.{b}", self.prefix))
    }

    fn fixed(&self, rest: &str) -> String {
        format!("{}.{rest}", self.prefix)
    }

    /// `…hashi.cmd.worker.dispatch` — a turn is ready `{turn_id}`.
    pub fn worker_dispatch(&self) -> String {
        self.fixed("hashi.cmd.worker.dispatch")
    }
    /// `…hashi.evt.worker.complete` — a turn's output is sealed `{turn_id, ledger_id}`.
    pub fn worker_complete(&self) -> String {
        self.fixed("hashi.evt.worker.complete")
    }
    /// `…minato.cmd.session.create` — start a session `{record_id}`.
    pub fn session_create(&self) -> String {
        self.fixed("minato.cmd.session.create")
    }
    /// `…minato.evt.session.complete` — a session finished `{session_id}`.
    pub fn session_complete(&self) -> String {
        self.fixed("minato.evt.session.complete")
    }
    /// `…mikado.evt.record.written` — a memory record was stored `{record_id}`.
    pub fn record_written(&self) -> String {
        self.fixed("mikado.evt.record.written")
    }
    /// `…aegis.cmd.tool.approve` — a tool call needs a decision `{request_id}`.
    pub fn tool_approve(&self) -> String {
        self.fixed("aegis.cmd.tool.approve")
    }
    /// `…aegis.evt.approval.decided` — a request was decided `{request_id}`.
    pub fn approval_decided(&self) -> String {
        self.fixed("aegis.evt.approval.decided")
    }
    /// `…aegis.cmd.approval.decide` — a person's signed decision (request/reply).
    pub fn approval_decide(&self) -> String {
        self.fixed("aegis.cmd.approval.decide")
    }
    /// `…aegis.cmd.approval.pending` — a person asks what is waiting (request/reply).
    pub fn approval_pending(&self) -> String {
        self.fixed("aegis.cmd.approval.pending")
    }
    /// `…aegis.cmd.approval.fetch` — a piece of a large request's record (request/reply).
    pub fn approval_fetch(&self) -> String {
        self.fixed("aegis.cmd.approval.fetch")
    }
    /// `…kura.cmd.witness.add-checkpoint` — another Kura asks this one to cosign its
    /// checkpoint (c2sp.org/tlog-witness, request/reply).
    pub fn witness_add_checkpoint(&self) -> String {
        self.fixed("kura.cmd.witness.add-checkpoint")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_design_subjects() {
        let s = Subjects::default();
        assert_eq!(s.worker_dispatch(), "oclaw.v1.hashi.cmd.worker.dispatch");
        assert_eq!(s.worker_complete(), "oclaw.v1.hashi.evt.worker.complete");
        assert_eq!(s.record_written(), "oclaw.v1.mikado.evt.record.written");
        assert_eq!(s.session_create(), "oclaw.v1.minato.cmd.session.create");
        assert_eq!(s.tool_approve(), "oclaw.v1.aegis.cmd.tool.approve");
        assert_eq!(
            s.cmd("hashi", "worker", "dispatch").as_deref(),
            Ok("oclaw.v1.hashi.cmd.worker.dispatch")
        );
        assert_eq!(
            s.evt("mikado", "record", "written").as_deref(),
            Ok("oclaw.v1.mikado.evt.record.written")
        );
    }

    #[test]
    fn prefix_is_configurable_and_checked() {
        let s = Subjects::new("lab.v2").expect("valid prefix");
        assert_eq!(s.worker_dispatch(), "lab.v2.hashi.cmd.worker.dispatch");
        for bad in ["", "a..b", "a.*", "a.>", "a b"] {
            assert!(Subjects::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn wildcards_and_dots_are_refused_in_tokens() {
        let s = Subjects::default();
        assert!(s.cmd("hashi", "worker.x", "dispatch").is_err());
        assert!(s.cmd("hashi", "*", "dispatch").is_err());
        assert!(s.evt("mikado", "record", ">").is_err());
        assert!(s.evt("", "record", "x").is_err());
    }
}
