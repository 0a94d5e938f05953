//! The roster: the roles a request or a plan step can be given (each with its own system
//! prompt, model, tools), the keyword rules that route a request to one, and the bounds a
//! plan is held to. The same `[roster]` table is read by minato (routing, plan checks) and
//! hashi (what each role's turns run with); `KURA_ROSTER__ROLES` sets it for both.

use proto::RoleName;
use serde::{Deserialize, Serialize};

/// The role a request runs as when nothing names one: today's agent, with the worker's own
/// `[provider]` settings.
pub const DEFAULT_ROLE: &str = "agent";

/// `[roster]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RosterConfig {
    /// The roles, in the order keyword rules are tried.
    pub roles: Vec<Role>,
    /// The role a request without a match runs as.
    pub default_role: RoleName,
    /// A role whose model picks the role when no keyword matches (its deliverable names
    /// one: `"role": "<name>"`, or the name alone as its text); unset: the default role.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub router_role: Option<RoleName>,
    /// Bounds on every plan.
    pub limits: PlanLimits,
}

impl Default for RosterConfig {
    fn default() -> Self {
        RosterConfig {
            roles: Vec::new(),
            default_role: DEFAULT_ROLE.into(),
            router_role: None,
            limits: PlanLimits::default(),
        }
    }
}

/// One role.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Role {
    /// Its name: 1–64 of `A-Z a-z 0-9 _ -`.
    pub name: RoleName,
    /// Its provider (`scripted`, `openai`, `anthropic` or `command`), instead of
    /// `[provider] kind`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Its server (the openai or anthropic provider's), instead of `[provider] base_url`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The environment variable holding its server's API key. A role that names its own
    /// provider or server sends this key or none — never the worker's `[provider]` key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Its system prompt (the openai provider's), instead of `[provider] system_prompt`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Its model (the openai provider's), instead of `[provider] model`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Its script (the scripted provider's), instead of `[provider] script`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// Its prompt budget in tokens, instead of `[provider] prompt_tokens`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    /// Tool-name globs it may call (`*` any run); empty: every tool the worker has.
    pub tools: Vec<String>,
    /// Words that route a request to it (whole words, any case).
    pub keywords: Vec<String>,
    /// Its model is offered the plan tool (`kura.plan`) and may plan; the scripted
    /// provider's `plan` steps need no offer.
    pub plans: bool,
}

/// How large a plan may be: a model's plan is untrusted input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlanLimits {
    /// Most steps in one plan.
    pub max_steps: usize,
    /// Most steps on one chain of dependencies.
    pub max_depth: usize,
    /// Most steps that wait on one step, and most steps that start at once.
    pub max_fanout: usize,
    /// Most plans inside plans (a step's sub-session planning again), the top one counting 1.
    pub max_nesting: usize,
    /// Most turns one request may take, its plans' steps and their sub-sessions included.
    pub max_turns: i64,
}

impl Default for PlanLimits {
    fn default() -> Self {
        PlanLimits {
            max_steps: 16,
            max_depth: 6,
            max_fanout: 8,
            max_nesting: 2,
            max_turns: 64,
        }
    }
}

/// Whether `name` is a well-formed role or step name.
pub fn is_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A roster's own fault, refused at a daemon's start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RosterError {
    /// A role name that is not 1-64 letters, digits, `_` or `-`.
    #[error("[roster] role {0:?}: a name is 1-64 letters, digits, _ or -")]
    BadName(RoleName),
    /// A role listed twice.
    #[error("[roster] role {0:?} is listed twice")]
    Twice(RoleName),
    /// A router role that is not a role here.
    #[error("[roster] router_role {0:?} is not a role here; add it to [[roster.roles]]")]
    UnknownRouter(RoleName),
    /// A default role that is not a role here.
    #[error("[roster] default_role {0:?} is not a role here; add it to [[roster.roles]]")]
    UnknownDefault(RoleName),
}

impl RosterConfig {
    /// The roster's own faults (a bad or repeated name, an unknown default), for a daemon
    /// to refuse at start.
    pub fn check(&self) -> Result<(), RosterError> {
        for (i, r) in self.roles.iter().enumerate() {
            if !is_name(&r.name) {
                return Err(RosterError::BadName(r.name.clone()));
            }
            if self.roles[..i].iter().any(|o| o.name == r.name) {
                return Err(RosterError::Twice(r.name.clone()));
            }
        }
        if let Some(r) = &self.router_role
            && !self.knows(r)
        {
            return Err(RosterError::UnknownRouter(r.clone()));
        }
        if !self.knows(&self.default_role) {
            return Err(RosterError::UnknownDefault(self.default_role.clone()));
        }
        Ok(())
    }

    /// Whether `name` is a role here (the built-in default always is).
    pub fn knows(&self, name: &str) -> bool {
        name == DEFAULT_ROLE || self.role(name).is_some()
    }

    /// The role called `name`, if configured.
    pub fn role(&self, name: &str) -> Option<&Role> {
        self.roles.iter().find(|r| r.name == name)
    }

    /// The role a request goes to, and why: the one it names, else the first whose keyword
    /// is a word of the instruction, else the default.
    pub fn route(&self, named: Option<&str>, instruction: &str) -> (RoleName, String) {
        let (role, reason, _) = self.route_how(named, instruction);
        (role, reason)
    }

    /// [`RosterConfig::route`], saying also whether a name or a keyword decided it (`false`:
    /// the default, which a router role may overrule).
    pub fn route_how(&self, named: Option<&str>, instruction: &str) -> (RoleName, String, bool) {
        if let Some(n) = named {
            return (n.into(), "named by the request".into(), true);
        }
        let words: Vec<String> = instruction
            .split(|c: char| !c.is_alphanumeric() && c != '_' && c != '-')
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        for r in &self.roles {
            if let Some(k) = r
                .keywords
                .iter()
                .find(|k| words.contains(&k.to_lowercase()))
            {
                return (
                    r.name.clone(),
                    format!("keyword {k:?} of role {}", r.name),
                    true,
                );
            }
        }
        (
            self.default_role.clone(),
            "no keyword matched: the default role".into(),
            false,
        )
    }

    /// The role a router's deliverable picks (`"role": "<name>"`, or its text being a role's
    /// name), and why; one that is not a role here gives the default.
    pub fn routed_by_model(&self, router: &str, picked: Option<&str>) -> (RoleName, String) {
        match picked.map(str::trim) {
            Some(p) if self.knows(p) => (p.into(), format!("chosen by the router role {router}")),
            Some(p) => {
                let shown: String = p.chars().take(64).collect();
                (
                    self.default_role.clone(),
                    format!(
                        "the router role {router} named {shown:?}, which is not a role here: the default role"
                    ),
                )
            }
            None => (
                self.default_role.clone(),
                format!("the router role {router} named no role: the default role"),
            ),
        }
    }
}
