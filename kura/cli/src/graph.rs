//! `kura log --graph`: a session's ledgers as lanes, like `git log --graph`. A reset leaves
//! its abandoned ledgers on a side lane; a fork's first ledger says where it grew from, and a
//! ledger other sessions grew from says so. A plan's steps are drawn with the session that
//! planned them, each ledger tagged with its step: the fan-out from the plan and the joins.

use proto::{LedgerId, SessionId};
use std::collections::{HashMap, HashSet};

use kura_store::Store;
use kura_store::store::Session;
use proto::ledger::Ledger;
use serde::Serialize;

use crate::output::Out;

/// `kura log --graph --json`.
#[derive(Serialize)]
struct GraphJson<'a> {
    /// The session's ledgers, newest first.
    ledgers: Vec<Node<'a>>,
    /// The session.
    session: &'a Session,
}

/// One ledger of `kura log --graph --json`.
#[derive(Serialize)]
struct Node<'a> {
    /// Sessions forked from it.
    forked_to: Vec<SessionId>,
    /// It is the session's head.
    head: bool,
    /// Its label.
    label: &'a str,
    /// The ledger.
    ledger_id: LedgerId,
    /// Its parents.
    parents: &'a [LedgerId],
    /// A reset left it behind.
    unreachable: bool,
    /// The plan step whose session it is in, when it is not the session's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    step: Option<&'a str>,
}

/// A session's ledgers and how they hang together.
struct Graph {
    session: Session,
    ledgers: Vec<Ledger>,
    /// Left behind by a reset.
    lost: HashSet<LedgerId>,
    /// Ledger → the sessions forked from it.
    forked_to: HashMap<LedgerId, Vec<SessionId>>,
    /// The session's own ledgers, and its plans' steps'.
    mine: HashSet<LedgerId>,
    /// A plan step's session → its step id.
    steps: HashMap<SessionId, String>,
}

/// At most this many step sessions are drawn with a session (a plan has at most a few
/// dozen; a nested one a few more).
const MAX_STEP_SESSIONS: usize = 256;

/// Draws `session_id`'s ledgers, newest first.
pub fn draw(store: &Store, out: &mut Out, json: bool, session_id: SessionId) -> anyhow::Result<()> {
    let session = store.read_session(session_id)?;
    let mut ledgers = store.session_ledgers(session_id)?;
    let steps: HashMap<SessionId, String> =
        kura_work::plans::step_sessions(store, session_id, MAX_STEP_SESSIONS)?
            .into_iter()
            .map(|(step, s)| (s, step))
            .collect();
    for s in steps.keys() {
        ledgers.extend(store.session_ledgers(*s)?);
    }
    // Newest first across sessions (UUIDv7: a child is newer than its parents).
    ledgers.sort_by_key(|l| std::cmp::Reverse(l.ledger_id));
    let lost = kura_store::branch::unreachable(store.conn(), session_id)?;
    let mut forked_to: HashMap<LedgerId, Vec<SessionId>> = HashMap::new();
    // A step's session grows from the plan, and is drawn here.
    for f in kura_serve::history::fork::forks_of(store.conn(), session_id)? {
        if !steps.contains_key(&f.session_id) {
            forked_to.entry(f.origin).or_default().push(f.session_id);
        }
    }
    let mine: HashSet<LedgerId> = ledgers.iter().map(|l| l.ledger_id).collect();
    let g = Graph {
        lost,
        session,
        ledgers,
        forked_to,
        mine,
        steps,
    };
    if json {
        return draw_json(out, &g);
    }
    out.line(format!(
        "session {} ({}, {})",
        g.session.session_id, g.session.label, g.session.status
    ))?;
    // Each lane holds the ledger it expects next; ids descend (UUIDv7: a child is newer than
    // its parents), so walking newest first meets every parent after its children.
    let mut lanes: Vec<Option<LedgerId>> = Vec::new();
    for l in &g.ledgers {
        let col = column(&mut lanes, l.ledger_id);
        join_lanes(out, &mut lanes, col, l.ledger_id)?;
        row(out, store, &g, &lanes, col, l)?;
        let mut parents = l.parent_ids.iter().filter(|p| g.mine.contains(p));
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

fn draw_json(out: &mut Out, g: &Graph) -> anyhow::Result<()> {
    let nodes: Vec<_> = g
        .ledgers
        .iter()
        .map(|l| Node {
            forked_to: g.forked_to.get(&l.ledger_id).cloned().unwrap_or_default(),
            head: g.session.head_ledger_id == Some(l.ledger_id),
            label: &l.label,
            ledger_id: l.ledger_id,
            parents: &l.parent_ids,
            unreachable: g.lost.contains(&l.ledger_id),
            step: g.steps.get(&l.session_id).map(String::as_str),
        })
        .collect();
    out.json_sorted(&GraphJson {
        ledgers: nodes,
        session: &g.session,
    })
}

/// The lane `ledger` is drawn in: the lane expecting it, else a free or new one (a tip: the
/// head, or a ledger a reset left behind).
fn column(lanes: &mut Vec<Option<LedgerId>>, ledger: LedgerId) -> usize {
    if let Some(c) = lanes.iter().position(|x| *x == Some(ledger)) {
        return c;
    }
    match lanes.iter().position(Option::is_none) {
        Some(free) => free,
        None => {
            lanes.push(None);
            lanes.len() - 1
        }
    }
}

/// Other lanes waiting for this same ledger join it here, like git's `|/`.
fn join_lanes(
    out: &mut Out,
    lanes: &mut Vec<Option<LedgerId>>,
    col: usize,
    ledger: LedgerId,
) -> std::io::Result<()> {
    let joined: Vec<usize> = lanes
        .iter()
        .enumerate()
        .filter(|(i, x)| *i != col && **x == Some(ledger))
        .map(|(i, _)| i)
        .collect();
    if joined.is_empty() {
        return Ok(());
    }
    // The side lane closes into this ledger's lane.
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
    Ok(())
}

/// The ledger's own line (lanes, `*`, id, label, tags) and where it was forked from or to.
fn row(
    out: &mut Out,
    store: &Store,
    g: &Graph,
    lanes: &[Option<LedgerId>],
    col: usize,
    l: &Ledger,
) -> anyhow::Result<()> {
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
    if g.session.head_ledger_id == Some(l.ledger_id) {
        tags.push("HEAD".to_owned());
    }
    if g.lost.contains(&l.ledger_id) {
        tags.push("unreachable".to_owned());
    }
    tags.push(l.state.as_str().to_owned());
    let step = match g.steps.get(&l.session_id) {
        Some(step) => format!("[step {}] ", proto::text::escape_controls(step)),
        None => String::new(),
    };
    out.line(format!(
        "{row}{} {step}{} ({})",
        l.ledger_id,
        l.label,
        tags.join(", ")
    ))?;
    for p in l.parent_ids.iter().filter(|p| !g.mine.contains(p)) {
        let from = store.read_ledger(*p)?;
        out.line(format!(
            "{}  forked from ledger {} ({}) of session {}",
            pad(lanes.len()),
            p,
            from.label,
            from.session_id
        ))?;
    }
    for s in g.forked_to.get(&l.ledger_id).into_iter().flatten() {
        out.line(format!("{}  session {s} grew from here", pad(lanes.len())))?;
    }
    Ok(())
}

fn pad(lanes: usize) -> String {
    "| ".repeat(lanes.max(1))
}
