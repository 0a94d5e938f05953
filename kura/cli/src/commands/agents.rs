//! `kura keys add-agent | list-agents | remove-agent | rotate-agent`: outside agents'
//! bearer tokens, shown once and kept only as hashes in the keys directory's `agents.toml`.

use std::path::Path;

use kura_serve::agents::registry;
use serde::Serialize;

use crate::output::Out;

/// What an agent command did, for `--json`.
#[derive(Serialize)]
struct Issued<'a> {
    /// The agent.
    name: &'a str,
    /// Its records' author.
    author: String,
    /// The token (shown this once).
    token: &'a str,
    /// The agents file `kura serve` reads (`[agents] registry`).
    registry: &'a Path,
}

/// `remove-agent --json`.
#[derive(Serialize)]
struct Removed<'a> {
    /// The agent removed.
    removed: &'a str,
}

fn issued(out: &mut Out, json: bool, name: &str, token: &str, path: &Path) -> anyhow::Result<()> {
    if json {
        return out.json_sorted(&Issued {
            name,
            author: format!("agent:{name}"),
            token,
            registry: path,
        });
    }
    out.line(format!(
        "agent {name}: its records are authored agent:{name}"
    ))?;
    out.line(format!(
        "token (shown this once; Kura keeps only its hash): {token}"
    ))?;
    out.line(format!(
        "kura serve reads {} ([agents] registry in serve.toml); the agent sends \
         Authorization: Bearer <token> to /mcp or /agent/v1/",
        path.display()
    ))?;
    Ok(())
}

/// `add-agent`.
pub fn add(out: &mut Out, json: bool, dir: &Path, name: &str) -> anyhow::Result<()> {
    let path = registry::path_in(dir);
    let token = registry::add(&path, name)?;
    issued(out, json, name, &token, &path)
}

/// `rotate-agent`.
pub fn rotate(out: &mut Out, json: bool, dir: &Path, name: &str) -> anyhow::Result<()> {
    let path = registry::path_in(dir);
    let token = registry::rotate(&path, name)?;
    issued(out, json, name, &token, &path)
}

/// `remove-agent`.
pub fn remove(out: &mut Out, json: bool, dir: &Path, name: &str) -> anyhow::Result<()> {
    registry::remove(&registry::path_in(dir), name)?;
    if json {
        return out.json_sorted(&Removed { removed: name });
    }
    out.line(format!(
        "agent {name} removed: kura serve refuses its token from its next call"
    ))?;
    Ok(())
}

/// `list-agents`.
pub fn list(out: &mut Out, json: bool, dir: &Path) -> anyhow::Result<()> {
    let agents = registry::list(&registry::path_in(dir))?;
    if json {
        return out.json_sorted(&agents);
    }
    if agents.is_empty() {
        out.line("no agents; `kura keys add-agent --name NAME` issues a token")?;
    }
    for a in agents {
        out.line(format!(
            "{:<24} agent:{:<24} token issued {}",
            a.name, a.name, a.issued_at
        ))?;
    }
    Ok(())
}
