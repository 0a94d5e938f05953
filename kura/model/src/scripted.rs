//! The scripted provider: deterministic steps from a JSON file, for demos, tests and
//! offline use. Its position is derived from the records already written, so a resumed
//! turn continues where the last worker stopped. `{instruction}` in a thought or deliverable
//! stands for the turn's instruction.
//!
//! ```text
//! {"turns": [
//!   [{"thought": "list the notes"},
//!    {"tool": "fs.list", "args": {}},
//!    {"deliver": "3 notes", "final": false}],
//!   [{"deliver": "done", "delay_ms": 100}]
//! ]}
//! ```
//!
//! A step may also be a plan, which minato runs as sub-sessions:
//!
//! ```text
//! {"plan": {"steps": [{"id": "a", "role": "writer", "instruction": "draft it"},
//!                     {"id": "b", "instruction": "check it", "after": ["a"]}]}}
//! ```

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{Provider, ProviderError, Step, TurnInput};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Script {
    turns: Vec<Vec<ScriptStep>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptStep {
    thought: Option<String>,
    tool: Option<String>,
    #[serde(default)]
    args: Map<String, Value>,
    deliver: Option<String>,
    /// A plan (`{"steps": [{"id", "role", "instruction", "after"}]}`).
    plan: Option<proto::plan::PlanContent>,
    #[serde(rename = "final", default = "yes")]
    is_final: bool,
    /// Simulated model time before this step.
    #[serde(default)]
    delay_ms: u64,
    /// With `deliver`: facts to remember.
    #[serde(default)]
    facts: Option<Value>,
    /// With `deliver`: decisions to remember.
    #[serde(default)]
    decisions: Option<Value>,
}

fn yes() -> bool {
    true
}

/// Steps from a file.
#[derive(Debug)]
pub struct Scripted {
    /// Per turn, its steps.
    turns: Vec<Vec<(Step, u64)>>,
}

impl Scripted {
    /// Loads and checks a script.
    pub fn load(path: &Path) -> anyhow::Result<Scripted> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read script {}", path.display()))?;
        Scripted::parse(&text).with_context(|| format!("invalid script {}", path.display()))
    }

    fn parse(text: &str) -> anyhow::Result<Scripted> {
        let script: Script = serde_json::from_str(text)?;
        let mut turns = Vec::new();
        for (t, steps) in script.turns.into_iter().enumerate() {
            let mut out = Vec::new();
            for (i, s) in steps.into_iter().enumerate() {
                let step = match (s.thought, s.tool, s.deliver, s.plan) {
                    (Some(t), None, None, None) => Step::Thought(t),
                    (None, Some(name), None, None) => Step::ToolCall {
                        name,
                        arguments: s.args,
                    },
                    (None, None, None, Some(plan)) => Step::Plan(plan),
                    (None, None, Some(text), None) => {
                        let mut extra = Map::new();
                        if let Some(f) = s.facts {
                            extra.insert("facts".into(), f);
                        }
                        if let Some(d) = s.decisions {
                            extra.insert("decisions".into(), d);
                        }
                        Step::Deliver {
                            text,
                            is_final: s.is_final,
                            extra,
                        }
                    }
                    _ => anyhow::bail!(
                        "turn {} step {}: give exactly one of thought, tool, plan, deliver",
                        t + 1,
                        i + 1
                    ),
                };
                out.push((step, s.delay_ms));
            }
            if !matches!(out.last(), Some((Step::Deliver { .. }, _))) {
                anyhow::bail!("turn {} must end with a deliver step", t + 1);
            }
            turns.push(out);
        }
        if turns.is_empty() {
            anyhow::bail!("the script has no turns");
        }
        Ok(Scripted { turns })
    }
}

impl Provider for Scripted {
    fn next(&self, input: &TurnInput<'_>) -> Result<Vec<Step>, ProviderError> {
        let turn = usize::try_from(input.seq - 1)
            .unwrap_or(0)
            .min(self.turns.len() - 1);
        let steps = &self.turns[turn];
        let (step, delay) = steps.get(input.steps_taken()).ok_or_else(|| {
            ProviderError::Fatal(format!(
                "script turn {} has no step {}",
                turn + 1,
                input.steps_taken() + 1
            ))
        })?;
        if *delay > 0 {
            std::thread::sleep(Duration::from_millis(*delay));
        }
        // `{instruction}` in a text stands for the turn's instruction.
        let fill = |t: &str| t.replace("{instruction}", &input.instruction());
        Ok(vec![match step.clone() {
            Step::Thought(t) => Step::Thought(fill(&t)),
            Step::Deliver {
                text,
                is_final,
                extra,
            } => Step::Deliver {
                text: fill(&text),
                is_final,
                extra,
            },
            other => other,
        }])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_are_checked() {
        assert!(Scripted::parse(r#"{"turns": [[{"deliver": "x"}]]}"#).is_ok());
        assert!(Scripted::parse(r#"{"turns": []}"#).is_err());
        assert!(
            Scripted::parse(r#"{"turns": [[{"thought": "x"}]]}"#).is_err(),
            "must end with deliver"
        );
        assert!(Scripted::parse(r#"{"turns": [[{"thought": "x", "deliver": "y"}]]}"#).is_err());
        assert!(Scripted::parse(r#"{"turns": [[{"deliver": "x", "colour": 1}]]}"#).is_err());
    }
}
