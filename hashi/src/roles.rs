//! The roles a turn can run as (`[roster]`): each its own provider — the worker's
//! `[provider]` with the role's system prompt, model or script — and the tools it is shown
//! and may call. A turn names its role; one this worker does not know ends the turn.

use std::collections::BTreeMap;
use std::sync::Arc;

use kura_model::{self as provider, Provider, ToolSpec};
use kura_plan::{DEFAULT_ROLE, RosterConfig};
use proto::RoleName;

/// What a turn in one role runs with.
#[derive(Clone)]
pub struct RoleRun {
    /// Its name.
    pub name: RoleName,
    /// The model.
    pub provider: Arc<dyn Provider>,
    /// The tools the model is shown.
    pub specs: Arc<[ToolSpec]>,
    /// Tool-name globs it may call; empty: any the worker has.
    pub tools: Vec<String>,
}

impl RoleRun {
    /// Whether this role may call `tool`.
    pub fn allows(&self, tool: &str) -> bool {
        self.tools.is_empty() || self.tools.iter().any(|g| kura_policy::glob(g, tool))
    }
}

/// Every role this worker runs, and the default.
pub struct Roles {
    base: RoleRun,
    by_name: BTreeMap<RoleName, RoleRun>,
    default_role: RoleName,
}

impl Roles {
    /// Only the default role: the worker's own provider and tools.
    pub fn single(provider: Arc<dyn Provider>, specs: Arc<[ToolSpec]>) -> Roles {
        Roles {
            base: RoleRun {
                name: DEFAULT_ROLE.into(),
                provider,
                specs,
                tools: Vec::new(),
            },
            by_name: BTreeMap::new(),
            default_role: DEFAULT_ROLE.into(),
        }
    }

    /// The roster's roles over the worker's `[provider]` and tools (`base`, `specs`).
    pub fn build(
        config: &provider::ProviderConfig,
        roster: &RosterConfig,
        base: Arc<dyn Provider>,
        specs: Arc<[ToolSpec]>,
        handle: &tokio::runtime::Handle,
    ) -> anyhow::Result<Roles> {
        roster.check()?;
        let mut roles = Roles::single(base, specs.clone());
        roles.default_role = roster.default_role.clone();
        for r in &roster.roles {
            let mut c = config.clone();
            if let Some(kind) = &r.provider {
                c.kind = serde_json::from_value(serde_json::Value::String(kind.clone()))
                    .map_err(|_| {
                        anyhow::anyhow!(
                            "[roster] role {}: provider {kind:?} is not scripted, openai, anthropic or command",
                            r.name
                        )
                    })?;
            }
            if let Some(u) = &r.base_url {
                c.base_url = u.clone();
            }
            // A role on another server sends its own key, never the worker's.
            if r.provider.is_some() || r.base_url.is_some() {
                c.api_key_env = r.api_key_env.clone();
            }
            if let Some(k) = &r.api_key_env {
                c.api_key_env = Some(k.clone());
            }
            if let Some(p) = &r.system_prompt {
                c.system_prompt = p.clone();
            }
            if let Some(m) = &r.model {
                c.model = m.clone();
            }
            if let Some(s) = &r.script {
                c.script = s.clone();
            }
            if let Some(t) = r.prompt_tokens {
                c.prompt_tokens = t;
            }
            let provider: Arc<dyn Provider> = Arc::from(
                provider::build(&c, handle.clone())
                    .map_err(|e| anyhow::anyhow!("[roster] role {}: {e:#}", r.name))?,
            );
            let allows = |name: &str| {
                r.tools.is_empty() || r.tools.iter().any(|g| kura_policy::glob(g, name))
            };
            let mut shown: Vec<ToolSpec> =
                specs.iter().filter(|s| allows(&s.name)).cloned().collect();
            if r.plans {
                shown.push(provider::plan_spec());
            }
            roles.by_name.insert(
                r.name.clone(),
                RoleRun {
                    name: r.name.clone(),
                    provider,
                    specs: shown.into(),
                    tools: r.tools.clone(),
                },
            );
        }
        Ok(roles)
    }

    /// What a turn naming `role` runs with (none: the default role); `Err` says why a role
    /// cannot run here.
    pub fn get(&self, role: Option<&str>) -> Result<&RoleRun, UnknownRole> {
        let name = role.unwrap_or(&self.default_role);
        match self.by_name.get(name) {
            Some(r) => Ok(r),
            None if name == DEFAULT_ROLE => Ok(&self.base),
            None => Err(UnknownRole(name.into())),
        }
    }
}

/// A role a turn names that this worker does not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "role {0:?} is not in this worker's [roster]; add it to [[roster.roles]] (hashi and minato read the same table)"
)]
pub struct UnknownRole(pub RoleName);

#[cfg(test)]
mod tests {
    use super::*;
    use kura_plan::Role;
    use proto::record::RecordType;

    /// Each role answers with its own provider: here the base script and a role's script.
    #[test]
    fn a_role_runs_its_own_provider_and_sees_only_its_tools() {
        let dir = tempfile::tempdir().expect("dir");
        let script = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(
                &path,
                format!(r#"{{"turns": [[{{"deliver": "{text}"}}]]}}"#),
            )
            .expect("script");
            path.display().to_string()
        };
        let config = provider::ProviderConfig {
            script: script("base.json", "from the base"),
            ..provider::ProviderConfig::default()
        };
        let roster = RosterConfig {
            roles: vec![Role {
                name: "looker".into(),
                script: Some(script("looker.json", "from the looker")),
                provider: Some("scripted".into()),
                tools: vec!["fs.read".into()],
                plans: true,
                ..Role::default()
            }],
            ..RosterConfig::default()
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("rt");
        let base: Arc<dyn Provider> =
            Arc::from(provider::build(&config, rt.handle().clone()).expect("base"));
        let spec = |n: &str| ToolSpec {
            name: n.into(),
            description: String::new(),
            parameters: serde_json::json!({}),
        };
        let specs: Arc<[ToolSpec]> = vec![spec("fs.read"), spec("fs.write")].into();
        let roles = Roles::build(&config, &roster, base, specs, rt.handle()).expect("roles");
        let record = proto::Record {
            record_id: proto::RecordId::new(),
            hash: String::new(),
            record_type: RecordType::TaskInstruction,
            content: serde_json::json!({"text": "x"}),
            author_id: "user:oles".into(),
            metadata: Default::default(),
            created_at: String::new(),
        };
        let said = |role: Option<&str>| {
            let r = roles.get(role).expect("role");
            let input = kura_model::TurnInput {
                session_id: proto::SessionId::new(),
                seq: 1,
                context: std::slice::from_ref(&record),
                history: &[],
                tools: &r.specs,
                max_tokens: None,
            };
            match r.provider.next(&input).expect("steps").pop() {
                Some(kura_model::Step::Deliver { text, .. }) => text,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(said(None), "from the base");
        assert_eq!(said(Some("looker")), "from the looker");
        let looker = roles.get(Some("looker")).expect("looker");
        let names: Vec<&str> = looker.specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["fs.read", kura_model::PLAN_TOOL]);
        assert!(looker.allows("fs.read") && !looker.allows("fs.write"));
        assert!(roles.get(Some("ghost")).is_err());
        let bad = RosterConfig {
            roles: vec![Role {
                name: "x".into(),
                provider: Some("gpt".into()),
                ..Role::default()
            }],
            ..RosterConfig::default()
        };
        let base: Arc<dyn Provider> =
            Arc::from(provider::build(&config, rt.handle().clone()).expect("base"));
        assert!(Roles::build(&config, &bad, base, vec![].into(), rt.handle()).is_err());
    }
}
