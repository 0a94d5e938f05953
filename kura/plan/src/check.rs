//! The checks a plan passes before minato runs any of it: well-formed steps, known roles and
//! dependencies, no cycle, and within every bound of `[roster.limits]`. A plan is a model's
//! output, so everything here is about what a hostile one could make minato start.

use std::collections::BTreeMap;

use proto::RoleName;
use proto::plan::PlanContent;

use crate::roster::{RosterConfig, is_name};

/// Longest instruction one step may carry.
pub const MAX_INSTRUCTION_BYTES: usize = 16 * 1024;

/// Why a plan is refused (recorded as a `sys.error` in the planning session).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The record is not a plan's content (the parser's reason, bounded).
    #[error("not a plan: {0}")]
    NotAPlan(String),
    /// No steps.
    #[error("the plan has no steps")]
    Empty,
    /// More steps than `max_steps`.
    #[error("the plan has {n} steps; at most {max} are allowed ([roster.limits] max_steps)")]
    TooManySteps {
        /// Steps given.
        n: usize,
        /// The bound.
        max: usize,
    },
    /// A step's id is not a name, or is used twice.
    #[error("step id {0:?} is malformed or used twice (1-64 letters, digits, _ or -, unique)")]
    BadId(String),
    /// A step names no instruction, or one too long.
    #[error("step {0:?}: the instruction is empty or longer than 16 KiB")]
    BadInstruction(String),
    /// A step names a role the roster does not have.
    #[error("step {step:?}: unknown role {role:?} (the roster has: {known})")]
    UnknownRole {
        /// The step.
        step: String,
        /// The role it names.
        role: RoleName,
        /// The roles there are.
        known: String,
    },
    /// A step's validator is malformed or names an unknown role.
    #[error("step {step:?}: {why}")]
    BadValidator {
        /// The step.
        step: String,
        /// What is wrong.
        why: String,
    },
    /// A step waits on a step the plan does not have (or on itself, or twice on one).
    #[error(
        "step {step:?} waits on {after:?}, which is not another step of the plan (or is named twice)"
    )]
    UnknownStep {
        /// The step.
        step: String,
        /// What it waits on.
        after: String,
    },
    /// The dependencies go round.
    #[error("the plan has a cycle: {}", .0.join(" -> "))]
    Cycle(Vec<String>),
    /// A chain of dependencies longer than `max_depth`.
    #[error(
        "the plan's longest chain has {depth} steps; at most {max} ([roster.limits] max_depth)"
    )]
    TooDeep {
        /// Its length.
        depth: usize,
        /// The bound.
        max: usize,
    },
    /// Too many steps wait on one step, or start at once.
    #[error("{what} has {n} steps; at most {max} ([roster.limits] max_fanout)")]
    FanOut {
        /// `step "x"`'s dependents, or the steps that start at once.
        what: String,
        /// How many.
        n: usize,
        /// The bound.
        max: usize,
    },
    /// The request's tree of work would take more turns than allowed.
    #[error(
        "the plan's {steps} steps after {used} turns would pass the request's {max} ([roster.limits] max_turns)"
    )]
    TooManyTurns {
        /// Turns taken so far by the request and its plans.
        used: i64,
        /// Steps in this plan.
        steps: usize,
        /// The bound.
        max: i64,
    },
    /// A plan inside too many plans.
    #[error("a plan nested {depth} deep; at most {max} ([roster.limits] max_nesting)")]
    Nested {
        /// Its nesting (1: a top-level session's plan).
        depth: usize,
        /// The bound.
        max: usize,
    },
}

/// A plan that passed: its steps in an order where each comes after those it waits on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Step indexes, dependencies first.
    pub order: Vec<usize>,
    /// The longest chain.
    pub depth: usize,
}

/// Checks `plan`, made inside a plan `nesting` deep (1 for a top-level session's), against
/// `roster` and its limits.
pub fn check(
    plan: &PlanContent,
    roster: &RosterConfig,
    nesting: usize,
) -> Result<Checked, PlanError> {
    let limits = &roster.limits;
    if nesting > limits.max_nesting {
        return Err(PlanError::Nested {
            depth: nesting,
            max: limits.max_nesting,
        });
    }
    let steps = &plan.steps;
    if steps.is_empty() {
        return Err(PlanError::Empty);
    }
    if steps.len() > limits.max_steps {
        return Err(PlanError::TooManySteps {
            n: steps.len(),
            max: limits.max_steps,
        });
    }
    let mut index = BTreeMap::new();
    for (i, s) in steps.iter().enumerate() {
        if !is_name(&s.id) || index.insert(s.id.as_str(), i).is_some() {
            return Err(PlanError::BadId(s.id.clone()));
        }
        if s.instruction.trim().is_empty() || s.instruction.len() > MAX_INSTRUCTION_BYTES {
            return Err(PlanError::BadInstruction(s.id.clone()));
        }
        if let Some(v) = &s.validator {
            // A command runs in the sandbox as shell.run: a person names one
            // (`minato submit --validate-cmd`), never a model's plan.
            let why = v
                .check()
                .err()
                .map(|e| e.to_string())
                .or_else(|| {
                    (!v.command.is_empty()).then(|| {
                        "a plan's validator is a role; a command validator is named by a person \
                     (minato submit --validate-cmd)"
                            .to_owned()
                    })
                })
                .or_else(|| {
                    v.role
                        .as_ref()
                        .filter(|r| !roster.knows(r))
                        .map(|r| format!("unknown validator role {r:?}"))
                });
            if let Some(why) = why {
                return Err(PlanError::BadValidator {
                    step: s.id.clone(),
                    why,
                });
            }
        }
        if let Some(role) = &s.role
            && !roster.knows(role)
        {
            let mut known: Vec<&str> = roster.roles.iter().map(|r| r.name.as_str()).collect();
            known.push(crate::roster::DEFAULT_ROLE);
            return Err(PlanError::UnknownRole {
                step: s.id.clone(),
                role: role.clone(),
                known: known.join(", "),
            });
        }
    }
    // Edges, each checked: a known other step, named once.
    let mut waits_on: Vec<Vec<usize>> = Vec::with_capacity(steps.len());
    let mut dependents = vec![0usize; steps.len()];
    for (i, s) in steps.iter().enumerate() {
        let mut mine = Vec::new();
        for a in &s.after {
            match index.get(a.as_str()) {
                Some(&j) if j != i && !mine.contains(&j) => {
                    mine.push(j);
                    dependents[j] += 1;
                }
                _ => {
                    return Err(PlanError::UnknownStep {
                        step: s.id.clone(),
                        after: a.clone(),
                    });
                }
            }
        }
        waits_on.push(mine);
    }
    let order = topological(steps.len(), &waits_on).map_err(|cycle| {
        PlanError::Cycle(cycle.into_iter().map(|i| steps[i].id.clone()).collect())
    })?;
    // The longest chain ending at each step, in dependency order.
    let mut chain = vec![1usize; steps.len()];
    for &i in &order {
        chain[i] = 1 + waits_on[i].iter().map(|&j| chain[j]).max().unwrap_or(0);
    }
    let depth = chain.iter().copied().max().unwrap_or(0);
    if depth > limits.max_depth {
        return Err(PlanError::TooDeep {
            depth,
            max: limits.max_depth,
        });
    }
    let roots = waits_on.iter().filter(|w| w.is_empty()).count();
    if roots > limits.max_fanout {
        return Err(PlanError::FanOut {
            what: "the first wave".into(),
            n: roots,
            max: limits.max_fanout,
        });
    }
    if let Some((j, &n)) = dependents
        .iter()
        .enumerate()
        .find(|(_, n)| **n > limits.max_fanout)
    {
        return Err(PlanError::FanOut {
            what: format!("step {:?}", steps[j].id),
            n,
            max: limits.max_fanout,
        });
    }
    Ok(Checked { order, depth })
}

/// Kahn's order of `n` nodes where `waits_on[i]` must come before `i`; on a cycle, the
/// nodes of one cycle, in order.
fn topological(n: usize, waits_on: &[Vec<usize>]) -> Result<Vec<usize>, Vec<usize>> {
    let mut pending: Vec<usize> = waits_on.iter().map(Vec::len).collect();
    let mut ready: Vec<usize> = (0..n).filter(|&i| pending[i] == 0).rev().collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop() {
        order.push(i);
        for (k, w) in waits_on.iter().enumerate() {
            if w.contains(&i) {
                pending[k] -= 1;
                if pending[k] == 0 {
                    ready.push(k);
                }
            }
        }
    }
    if order.len() == n {
        return Ok(order);
    }
    // Every node left waits on another node left: walk back until one repeats.
    let left = |i: usize| pending[i] > 0;
    let Some(mut at) = (0..n).find(|&i| left(i)) else {
        return Err(Vec::new());
    };
    let mut path = Vec::new();
    while !path.contains(&at) {
        path.push(at);
        match waits_on[at].iter().copied().find(|&j| left(j)) {
            Some(j) => at = j,
            None => break,
        }
    }
    let start = path.iter().position(|&p| p == at).unwrap_or(0);
    let mut cycle: Vec<usize> = path[start..].to_vec();
    cycle.reverse();
    if let Some(&first) = cycle.first() {
        cycle.push(first);
    }
    Err(cycle)
}
