//! Tool-call policy, pure: rules over tool name (globs), effect class, argument patterns and
//! session decide `allow`, `deny` or `ask`; the first match wins; what matches nothing gets
//! the default for its effect (`allow` for read, `ask` for write and external). aegis and
//! hashi both rule with it (hashi at once, in the transaction that records a call; aegis on
//! what people edit), on arguments in the one [`path`] normal form. The store only keeps
//! the policy that was published.

pub mod path;
pub mod writ;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Why a policy cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// It says something a policy must not mean (e.g. zero approvers).
    #[error("invalid policy: {0}")]
    Invalid(String),
    /// It has no RFC 8785 form (cannot happen for a parsed policy; kept as a kind).
    #[error("policy: {0}")]
    Canonical(String),
}

/// What a rule decides (the wire's vocabulary, so an agent is answered in it).
pub use proto::Verdict;

/// One rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Recorded with every decision it makes.
    pub name: String,
    /// Tool name glob (`*` and `?`); default `*`.
    #[serde(default = "star")]
    pub tool: String,
    /// Only calls of this effect class (`read`, `write`, `external`).
    #[serde(default)]
    pub effect: Option<String>,
    /// Argument globs: each named argument (a string, or the JSON text of other values)
    /// must match.
    #[serde(default)]
    pub args: BTreeMap<String, String>,
    /// Only in sessions whose id matches this glob.
    #[serde(default)]
    pub session: Option<String>,
    /// Only calls filed by an author matching this glob: `agent:*` for every outside agent,
    /// `agent:laptop` for one (Kura's own worker files as `agent:hashi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// The verdict.
    pub decision: Verdict,
    /// For `ask`: how many distinct approvers must approve (M of N).
    #[serde(default = "one")]
    pub approvers: i64,
}

fn star() -> String {
    "*".into()
}
fn one() -> i64 {
    1
}

/// Defaults per effect class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Defaults {
    /// For read-only tools.
    pub read: Verdict,
    /// For tools that write.
    pub write: Verdict,
    /// For tools that reach outside.
    pub external: Verdict,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            read: Verdict::Allow,
            write: Verdict::Ask,
            external: Verdict::Ask,
        }
    }
}

/// A policy file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Policy {
    /// What matches no rule.
    pub defaults: Defaults,
    /// Checked in order; the first match wins.
    pub rules: Vec<Rule>,
}

/// A call as policy sees it.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The tool's name.
    pub tool: &'a str,
    /// Its effect class.
    pub effect: proto::Effect,
    /// Its arguments (a JSON object).
    pub args: &'a Value,
    /// The session it runs in.
    pub session: &'a str,
    /// Who filed it: `agent:hashi`, `agent:<name>` for an outside agent.
    pub author: &'a str,
    /// Who the work is for, when another filed it: the submitter of the turn's request
    /// (an outside agent that delegated it, a person). An `author` rule matches either, so
    /// delegating a task does not get around a rule written for its submitter.
    pub on_behalf_of: Option<&'a str>,
}

/// The outcome of evaluating a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ruling {
    /// The verdict.
    pub verdict: Verdict,
    /// The rule that decided (`default:<effect>` when none matched).
    pub rule: String,
    /// Approvals needed for `ask`.
    pub approvers: i64,
}

impl Ruling {
    /// For a replay asking to repeat a side effect: only a person may say yes (a deny stands).
    pub fn for_rerun(mut self) -> Ruling {
        if self.verdict != Verdict::Deny {
            self.verdict = Verdict::Ask;
            self.rule = "replay-rerun".into();
            self.approvers = self.approvers.max(1);
        }
        self
    }
}

/// `*` matches any run of characters, `?` any one character.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

impl Policy {
    /// Refuses what a policy file may spell but must not mean.
    pub fn check(&self) -> Result<(), PolicyError> {
        match self.rules.iter().find(|r| r.approvers < 1) {
            Some(r) => Err(PolicyError::Invalid(format!(
                "rule {}: approvers must be at least 1",
                r.name
            ))),
            None => Ok(()),
        }
    }

    /// RFC 8785 JSON of the policy and its SHA-256: what decisions name.
    pub fn canonical(&self) -> Result<(String, String), PolicyError> {
        let body =
            proto::canonical_json(self).map_err(|e| PolicyError::Canonical(e.to_string()))?;
        let hash = proto::sha256_hex(body.as_bytes());
        Ok((hash, body))
    }

    /// Decides a call by `author` (who filed it).
    pub fn evaluate(&self, call: &Call<'_>) -> Ruling {
        let Call {
            tool,
            effect,
            args,
            session,
            author,
            on_behalf_of,
        } = *call;
        for r in &self.rules {
            let arg_ok = r.args.iter().all(|(k, pat)| {
                let text = match args.get(k) {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => return false,
                };
                glob(pat, &text)
            });
            if glob(&r.tool, tool)
                // An irreversible call is an external one that cannot be undone: a rule for
                // `external` calls holds it too.
                && r.effect.as_deref().is_none_or(|e| {
                    e == effect.as_str()
                        || (e == "external" && effect == proto::Effect::Irreversible)
                })
                && r.session.as_deref().is_none_or(|s| glob(s, session))
                && r.author
                    .as_deref()
                    .is_none_or(|a| glob(a, author) || on_behalf_of.is_some_and(|b| glob(a, b)))
                && arg_ok
            {
                return Ruling {
                    verdict: r.decision,
                    rule: r.name.clone(),
                    approvers: r.approvers,
                };
            }
        }
        let verdict = match effect {
            proto::Effect::Read => self.defaults.read,
            proto::Effect::Write => self.defaults.write,
            proto::Effect::External | proto::Effect::Irreversible => self.defaults.external,
        };
        Ruling {
            verdict,
            rule: format!("default:{}", effect.as_str()),
            approvers: 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn globs() {
        assert!(glob("fs.*", "fs.write"));
        assert!(glob("*", ""));
        assert!(glob("notes/*.md", "notes/a.md"));
        assert!(!glob("notes/*.md", "notes/a.txt"));
        assert!(glob("*rm*", "[\"rm\",\"-rf\"]"));
        assert!(glob("fs.?ead", "fs.read"));
        assert!(!glob("fs.read", "fs.reader"));
    }

    #[test]
    fn first_match_wins_then_defaults() {
        let p: Policy = toml::from_str(
            r#"
            [[rules]]
            name = "no-rm"
            tool = "shell.run"
            args = { argv = "*rm*" }
            decision = "deny"
            [[rules]]
            name = "notes-ok"
            tool = "fs.write"
            args = { path = "notes/*" }
            decision = "allow"
            [[rules]]
            name = "two-for-shell"
            tool = "shell.*"
            effect = "external"
            decision = "ask"
            approvers = 2
            [[rules]]
            name = "lab-session"
            session = "0190*"
            decision = "allow"
            "#,
        )
        .expect("policy");
        let r = |t: &str, e: &str, a: Value, s: &str| {
            let call = Call {
                tool: t,
                effect: e.parse().expect("effect"),
                args: &a,
                session: s,
                author: "agent:hashi",
                on_behalf_of: None,
            };
            let x = p.evaluate(&call);
            (x.verdict, x.rule, x.approvers)
        };
        assert_eq!(
            r(
                "shell.run",
                "external",
                json!({"argv": ["rm", "-rf", "/"]}),
                "s"
            ),
            (Verdict::Deny, "no-rm".into(), 1)
        );
        assert_eq!(
            r("shell.run", "external", json!({"argv": ["ls"]}), "s"),
            (Verdict::Ask, "two-for-shell".into(), 2)
        );
        assert_eq!(
            r("fs.write", "write", json!({"path": "notes/a"}), "s"),
            (Verdict::Allow, "notes-ok".into(), 1)
        );
        assert_eq!(
            r("fs.write", "write", json!({"path": "etc/a"}), "s"),
            (Verdict::Ask, "default:write".into(), 1)
        );
        assert_eq!(
            r("fs.write", "write", json!({"path": "etc/a"}), "0190abc"),
            (Verdict::Allow, "lab-session".into(), 1)
        );
        assert_eq!(
            r("fs.read", "read", json!({"path": "x"}), "s"),
            (Verdict::Allow, "default:read".into(), 1)
        );
        assert_eq!(
            r("fs.write", "write", json!({}), "s"),
            (Verdict::Ask, "default:write".into(), 1),
            "a missing argument does not match"
        );
    }

    /// An operator's per-agent rules: the `author` glob picks who filed the call.
    #[test]
    fn rules_by_author_apply_to_that_author_only() {
        let p: Policy = toml::from_str(
            r#"
            [[rules]]
            name = "laptop-may-not-push"
            tool = "Bash"
            author = "agent:laptop"
            args = { command = "git push*" }
            decision = "deny"
            [[rules]]
            name = "outside-agents-ask"
            author = "agent:*"
            effect = "read"
            decision = "ask"
            "#,
        )
        .expect("policy");
        let args = json!({"command": "git push origin main"});
        let rule = |author: &str, tool: &str, effect: &str| {
            let call = Call {
                tool,
                effect: effect.parse().expect("effect"),
                args: &args,
                session: "s",
                author,
                on_behalf_of: None,
            };
            p.evaluate(&call).rule
        };
        // Kura's worker running a task the laptop agent delegated is held to the laptop's rule.
        let delegated = Call {
            tool: "Bash",
            effect: proto::Effect::External,
            args: &args,
            session: "s",
            author: "agent:hashi",
            on_behalf_of: Some("agent:laptop"),
        };
        assert_eq!(p.evaluate(&delegated).rule, "laptop-may-not-push");
        assert_eq!(
            rule("agent:laptop", "Bash", "external"),
            "laptop-may-not-push"
        );
        assert_eq!(rule("agent:desk", "Bash", "external"), "default:external");
        assert_eq!(rule("agent:desk", "Read", "read"), "outside-agents-ask");
        assert_eq!(rule("user:ana", "Read", "read"), "default:read");
        // A rule without `author` serializes as before: published policy hashes do not move.
        let plain: Policy =
            toml::from_str("[[rules]]\nname = \"x\"\ndecision = \"deny\"\n").expect("p");
        assert!(
            !serde_json::to_string(&plain)
                .expect("json")
                .contains("author")
        );
    }
}
