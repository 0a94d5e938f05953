//! `kura log --graph`: a session's ledgers as lanes, like `git log --graph`. A reset leaves
//! its abandoned ledgers on a side lane; a fork's first ledger says where it grew from, and a
//! ledger other sessions grew from says so.

use std::collections::HashMap;

use kura_store::Store;
use serde_json::json;
use uuid::Uuid;

use crate::output::Out;

/// Draws `session_id`'s ledgers, newest first.
pub fn draw(store: &Store, out: &mut Out, json: bool, session_id: Uuid) -> anyhow::Result<()> {
    let session = store.read_session(session_id)?;
    let ledgers = store.session_ledgers(session_id)?;
    let lost = kura_store::branch::unreachable(store.conn(), session_id)?;
    let mut forked_to: HashMap<Uuid, Vec<Uuid>> = HashMap::new();
    for f in kura_store::branch::forks_of(store.conn(), session_id)? {
        forked_to.entry(f.origin).or_default().push(f.session_id);
    }
    let mine: std::collections::HashSet<Uuid> = ledgers.iter().map(|l| l.ledger_id).collect();
    if json {
        let nodes: Vec<_> = ledgers
            .iter()
            .map(|l| {
                json!({
                    "ledger_id": l.ledger_id, "label": l.label, "parents": l.parent_ids,
                    "head": session.head_ledger_id == Some(l.ledger_id),
                    "unreachable": lost.contains(&l.ledger_id),
                    "forked_to": forked_to.get(&l.ledger_id).cloned().unwrap_or_default(),
                })
            })
            .collect();
        out.json(&json!({"session": session, "ledgers": nodes}))?;
        return Ok(());
    }
    out.line(format!(
        "session {} ({}, {})",
        session.session_id, session.label, session.status
    ))?;
    // Each lane holds the ledger it expects next; ids descend (UUIDv7: a child is newer than
    // its parents), so walking newest first meets every parent after its children.
    let mut lanes: Vec<Option<Uuid>> = Vec::new();
    for l in &ledgers {
        let col = match lanes.iter().position(|x| *x == Some(l.ledger_id)) {
            Some(c) => c,
            None => {
                // A tip: the head, or a ledger a reset left behind.
                match lanes.iter().position(Option::is_none) {
                    Some(free) => free,
                    None => {
                        lanes.push(None);
                        lanes.len() - 1
                    }
                }
            }
        };
        // Other lanes waiting for this same ledger join it here.
        let joined: Vec<usize> = lanes
            .iter()
            .enumerate()
            .filter(|(i, x)| *i != col && **x == Some(l.ledger_id))
            .map(|(i, _)| i)
            .collect();
        if !joined.is_empty() {
            // Like git's `|/`: the side lane closes into this ledger's lane.
            let mut join = vec![' '; lanes.len() * 2];
            for (i, lane) in lanes.iter().enumerate() {
                if joined.contains(&i) {
                    // Always right of the ledger's own lane (which is the first match).
                    join[(2 * i).saturating_sub(1)] = '/';
                } else if lane.is_some() {
                    join[2 * i] = '|';
                }
            }
            out.line(join.into_iter().collect::<String>().trim_end())?;
            for j in &joined {
                lanes[*j] = None;
            }
            while lanes.last() == Some(&None) {
                lanes.pop();
            }
        }
        let mut row = String::new();
        for (i, lane) in lanes.iter().enumerate() {
            row.push(if i == col {
                '*'
            } else if lane.is_some() {
                '|'
            } else {
                ' '
            });
            row.push(' ');
        }
        let mut tags = Vec::new();
        if session.head_ledger_id == Some(l.ledger_id) {
            tags.push("HEAD".to_owned());
        }
        if lost.contains(&l.ledger_id) {
            tags.push("unreachable".to_owned());
        }
        tags.push(l.state.as_str().to_owned());
        out.line(format!(
            "{row}{} {} ({})",
            l.ledger_id,
            l.label,
            tags.join(", ")
        ))?;
        for p in l.parent_ids.iter().filter(|p| !mine.contains(p)) {
            let from = store.read_ledger(*p)?;
            out.line(format!(
                "{}  forked from ledger {} ({}) of session {}",
                pad(lanes.len()),
                p,
                from.label,
                from.session_id
            ))?;
        }
        for s in forked_to.get(&l.ledger_id).into_iter().flatten() {
            out.line(format!("{}  session {s} grew from here", pad(lanes.len())))?;
        }
        let mut parents = l.parent_ids.iter().filter(|p| mine.contains(p));
        lanes[col] = parents.next().copied();
        for p in parents {
            if !lanes.contains(&Some(*p)) {
                lanes.push(Some(*p));
            }
        }
        while lanes.last() == Some(&None) {
            lanes.pop();
        }
    }
    Ok(())
}

fn pad(lanes: usize) -> String {
    "| ".repeat(lanes.max(1))
}
