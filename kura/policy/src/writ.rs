//! Checking writs, pure: a signature under the right key, a delegation no wider than its
//! parent on any axis, and a call inside a writ's scope, ceiling, time and budget. The
//! store keeps the writs and what was spent; this module decides.

use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};
use proto::Effect;
use proto::WritId;
use proto::writ::{
    Budget, MAX_FIELD_BYTES, MAX_SCOPES, REDACTION_KIND, REVOCATION_KIND, Redaction, RedactionBody,
    Revocation, RevocationBody, WRIT_KIND, Writ, WritBody, check_holder,
};
use serde_json::{Map, Value};

use crate::glob;

/// Why a writ, a delegation, a revocation or a call under a writ is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WritError {
    /// Not a writ: a wrong kind, a field out of bounds, a bad time.
    #[error("malformed writ: {0}")]
    Malformed(String),
    /// The signature is not the named key's over these bytes.
    #[error(
        "the signature does not verify (forged or altered); sign it again with `kura writ grant`"
    )]
    BadSignature,
    /// The key is not a trusted issuer's (`[writs] issuers`), or not the parent's
    /// `delegate_key`.
    #[error("{0}")]
    Untrusted(String),
    /// A delegation wider than its parent on one axis.
    #[error("the delegated writ is wider than its parent: {0}")]
    Wider(String),
    /// Revoked (itself or an ancestor).
    #[error("writ {0} was revoked")]
    Revoked(WritId),
    /// Past its expiry, or before its issue time.
    #[error("writ {id} is not valid now: {why}")]
    Expired {
        /// The writ.
        id: WritId,
        /// Expired, or not yet valid.
        why: String,
    },
    /// The call's tool or a path is outside the writ's scope.
    #[error("outside writ {id}'s scope: {why}")]
    OutOfScope {
        /// The writ.
        id: WritId,
        /// Which tool or path.
        why: String,
    },
    /// The call's effect class is above the writ's ceiling.
    #[error("a {effect} call is above writ {id}'s ceiling ({ceiling})")]
    AboveCeiling {
        /// The writ.
        id: WritId,
        /// The call's class.
        effect: Effect,
        /// The writ's ceiling.
        ceiling: Effect,
    },
    /// Its id is already granted (a writ is stored once: no replay under a taken id).
    #[error("writ {0} is already granted; a new grant needs a new id")]
    Taken(WritId),
    /// Not found.
    #[error("no writ {0} here (list them with `kura writ list`)")]
    Unknown(String),
    /// A budget axis is spent.
    #[error("writ {id}'s {axis} budget is spent ({used} of {limit})")]
    BudgetSpent {
        /// The writ.
        id: WritId,
        /// `tool_calls`, `tokens`, `money_micros` or `wall_ms`.
        axis: &'static str,
        /// Spent so far.
        used: u64,
        /// Its limit.
        limit: u64,
    },
}

/// A person who may grant writs (`[writs] issuers` in hashi's, aegis's and serve's config).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Issuer {
    /// Their name; their grants say `user:<name>`.
    pub name: String,
    /// Hex Ed25519 public key (their approver key file's `public_key`).
    pub public_key: String,
}

/// The `[writs]` table of hashi's, aegis's and serve's config.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WritsConfig {
    /// The people whose grants are trusted; empty, every writ is refused (and sessions
    /// without one run as before, under the installed policy).
    pub issuers: Vec<Issuer>,
}

/// What was spent under a writ so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spent {
    /// Tool calls.
    pub tool_calls: u64,
    /// Model tokens.
    pub tokens: u64,
    /// Money, millionths.
    pub money_micros: u64,
    /// Since the first call (ms), 0 before it.
    pub wall_ms: u64,
}

/// Unix milliseconds of an RFC 3339 time.
pub fn parse_time(text: &str) -> Result<i64, WritError> {
    let t = humantime::parse_rfc3339(text)
        .map_err(|e| WritError::Malformed(format!("time {text:?}: {e}")))?;
    let ms = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| WritError::Malformed(format!("time {text:?} is before 1970")))?
        .as_millis();
    i64::try_from(ms).map_err(|_| WritError::Malformed(format!("time {text:?} is too far")))
}

/// RFC 3339 UTC (seconds) of unix milliseconds.
pub fn format_time(ms: i64) -> String {
    // RFC 3339 has four-digit years: a later time is written as the last one it can say.
    let ms = ms.clamp(0, 253_402_300_799_000);
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

fn key_of(hex_key: &str) -> Result<VerifyingKey, WritError> {
    let bytes: [u8; 32] = hex::decode(hex_key)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| WritError::Malformed("key is not 32 bytes of hex".into()))?;
    VerifyingKey::from_bytes(&bytes).map_err(|e| WritError::Malformed(format!("key: {e}")))
}

fn verify_bytes(hex_key: &str, signature: &str, bytes: &[u8]) -> Result<(), WritError> {
    let key = key_of(hex_key)?;
    let sig: [u8; 64] = hex::decode(signature)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(WritError::BadSignature)?;
    key.verify(bytes, &Signature::from_bytes(&sig))
        .map_err(|_| WritError::BadSignature)
}

/// Signs `body` with `key`.
pub fn sign_writ(key: &SigningKey, body: WritBody) -> Writ {
    let signature = hex::encode(key.sign(&body.signing_bytes()).to_bytes());
    Writ {
        body,
        key: hex::encode(key.verifying_key().to_bytes()),
        signature,
    }
}

/// Signs a revocation `body` with `key`.
pub fn sign_revocation(key: &SigningKey, body: RevocationBody) -> Revocation {
    let signature = hex::encode(key.sign(&body.signing_bytes()).to_bytes());
    Revocation {
        body,
        key: hex::encode(key.verifying_key().to_bytes()),
        signature,
    }
}

fn bounded(what: &str, items: &[String]) -> Result<(), WritError> {
    if items.is_empty() || items.len() > MAX_SCOPES {
        return Err(WritError::Malformed(format!(
            "{what}: 1 to {MAX_SCOPES} globs"
        )));
    }
    match items
        .iter()
        .find(|g| g.is_empty() || g.len() > MAX_FIELD_BYTES || g.chars().any(char::is_control))
    {
        Some(g) => Err(WritError::Malformed(format!("{what}: invalid glob {g:?}"))),
        None => Ok(()),
    }
}

/// The writ's shape: kind, id, holder, globs, times.
pub fn check_shape(w: &WritBody) -> Result<(), WritError> {
    if w.kind != WRIT_KIND {
        return Err(WritError::Malformed(format!(
            "kind {:?} is not {WRIT_KIND}",
            w.kind
        )));
    }
    check_holder(&w.holder).map_err(|e| WritError::Malformed(e.to_string()))?;
    bounded("tools", &w.tools)?;
    bounded("paths", &w.paths)?;
    let (from, to) = (parse_time(&w.issued_at)?, parse_time(&w.expires_at)?);
    if to <= from {
        return Err(WritError::Malformed(
            "expires_at is not after issued_at".into(),
        ));
    }
    let expected_issuer = match &w.parent {
        Some(p) => format!("writ:{p}"),
        None => w.issuer.clone(),
    };
    if w.issuer != expected_issuer || (w.parent.is_none() && !w.issuer.starts_with("user:")) {
        return Err(WritError::Malformed(format!(
            "issuer {:?}: a grant is issued by user:<name>, a delegation by writ:<parent>",
            w.issuer
        )));
    }
    Ok(())
}

/// Whether `w` is signed by the key it names (who that key may be is another question).
pub fn verify_signed(w: &Writ) -> Result<(), WritError> {
    check_shape(&w.body)?;
    verify_bytes(&w.key, &w.signature, &w.body.signing_bytes())
}

/// A person's grant: its shape, and a signature by the trusted issuer it names.
pub fn verify_grant(w: &Writ, issuers: &[Issuer]) -> Result<(), WritError> {
    check_shape(&w.body)?;
    let name = w.body.issuer.trim_start_matches("user:");
    let named: Vec<&Issuer> = issuers.iter().filter(|i| i.name == name).collect();
    if named.is_empty() {
        return Err(WritError::Untrusted(format!(
            "{} is not a writ issuer here; add them to [writs] issuers (name and public_key)",
            w.body.issuer
        )));
    }
    // A person may be listed with more than one key (a new one beside the old).
    if !named
        .iter()
        .any(|i| i.public_key.eq_ignore_ascii_case(&w.key))
    {
        return Err(WritError::Untrusted(format!(
            "signed with a key that is not {}'s issuer key",
            w.body.issuer
        )));
    }
    verify_bytes(&w.key, &w.signature, &w.body.signing_bytes())
}

/// Whether every text `child` matches is also matched by `parent` — decided only where it is
/// sure (equal, `*`, or a literal prefix then `*` covering the child's literal start); any
/// other pair counts as wider, so a delegation can be refused but never widened.
fn glob_covers(parent: &str, child: &str) -> bool {
    if parent == "*" || parent == child {
        return true;
    }
    match parent.strip_suffix('*') {
        Some(prefix) if !prefix.contains(['*', '?']) => child.starts_with(prefix),
        _ => !child.contains(['*', '?']) && glob(parent, child),
    }
}

fn within(axis: &str, parent: &[String], child: &[String]) -> Result<(), WritError> {
    match child
        .iter()
        .find(|c| !parent.iter().any(|p| glob_covers(p, c)))
    {
        Some(c) => Err(WritError::Wider(format!(
            "{axis} {c:?} is not within the parent's"
        ))),
        None => Ok(()),
    }
}

fn budget_within(parent: &Budget, child: &Budget) -> Result<(), WritError> {
    let axes = [
        ("tool_calls", parent.tool_calls, child.tool_calls),
        ("tokens", parent.tokens, child.tokens),
        ("money_micros", parent.money_micros, child.money_micros),
        ("wall_ms", parent.wall_ms, child.wall_ms),
    ];
    for (axis, p, c) in axes {
        match (p, c) {
            (Some(_), None) => {
                return Err(WritError::Wider(format!(
                    "{axis}: unlimited under a limited parent"
                )));
            }
            (Some(p), Some(c)) if c > p => {
                return Err(WritError::Wider(format!("{axis}: {c} is more than {p}")));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A delegation: its shape, the parent's `delegate_key` as signer, and no axis wider than
/// the parent's (tools, paths, ceiling, every budget, expiry).
pub fn verify_delegation(child: &Writ, parent: &Writ) -> Result<(), WritError> {
    check_shape(&child.body)?;
    let (c, p) = (&child.body, &parent.body);
    if c.parent != Some(p.id) {
        return Err(WritError::Malformed("its parent is another writ".into()));
    }
    let Some(dk) = &p.delegate_key else {
        return Err(WritError::Untrusted(format!(
            "writ {} names no delegate_key, so it cannot be delegated",
            p.id
        )));
    };
    if !dk.eq_ignore_ascii_case(&child.key) {
        return Err(WritError::Untrusted(format!(
            "a delegation of writ {} must be signed with its delegate_key",
            p.id
        )));
    }
    verify_bytes(&child.key, &child.signature, &c.signing_bytes())?;
    within("tool", &p.tools, &c.tools)?;
    within("path", &p.paths, &c.paths)?;
    if c.ceiling.rank() > p.ceiling.rank() {
        return Err(WritError::Wider(format!(
            "ceiling {} is above the parent's {}",
            c.ceiling, p.ceiling
        )));
    }
    budget_within(&p.budget, &c.budget)?;
    if parse_time(&c.expires_at)? > parse_time(&p.expires_at)? {
        return Err(WritError::Wider("it expires after its parent".into()));
    }
    Ok(())
}

/// A revocation's signature: by a trusted issuer, or (for a delegated writ) by the key its
/// parent let delegate.
pub fn verify_revocation(
    r: &Revocation,
    issuers: &[Issuer],
    parent: Option<&Writ>,
) -> Result<(), WritError> {
    if r.body.kind != REVOCATION_KIND {
        return Err(WritError::Malformed(format!("kind {:?}", r.body.kind)));
    }
    if r.body.reason.len() > MAX_FIELD_BYTES {
        return Err(WritError::Malformed("reason is too long".into()));
    }
    parse_time(&r.body.revoked_at)?;
    let trusted = match r.body.by.strip_prefix("user:") {
        Some(name) => issuers
            .iter()
            .any(|i| i.name == name && i.public_key.eq_ignore_ascii_case(&r.key)),
        None => parent.is_some_and(|p| {
            r.body.by == format!("writ:{}", p.body.id)
                && p.body
                    .delegate_key
                    .as_deref()
                    .is_some_and(|k| k.eq_ignore_ascii_case(&r.key))
        }),
    };
    if !trusted {
        return Err(WritError::Untrusted(format!(
            "{} may not revoke this writ with that key",
            r.body.by
        )));
    }
    verify_bytes(&r.key, &r.signature, &r.body.signing_bytes())
}

/// Signs a redaction `body` with `key`.
pub fn sign_redaction(key: &SigningKey, body: RedactionBody) -> Redaction {
    let signature = hex::encode(key.sign(&body.signing_bytes()).to_bytes());
    Redaction {
        body,
        key: hex::encode(key.verifying_key().to_bytes()),
        signature,
    }
}

/// A redaction: its shape, signed by the trusted person (`[writs] issuers`) it names.
pub fn verify_redaction(r: &Redaction, people: &[Issuer]) -> Result<(), WritError> {
    let b = &r.body;
    if b.kind != REDACTION_KIND {
        return Err(WritError::Malformed(format!(
            "kind {:?} is not {REDACTION_KIND}",
            b.kind
        )));
    }
    if b.reason.len() > MAX_FIELD_BYTES || b.record_hash.len() != 64 {
        return Err(WritError::Malformed(
            "reason too long, or not a record hash".into(),
        ));
    }
    parse_time(&b.redacted_at)?;
    let trusted = b.by.strip_prefix("user:").is_some_and(|name| {
        people
            .iter()
            .any(|i| i.name == name && i.public_key.eq_ignore_ascii_case(&r.key))
    });
    if !trusted {
        return Err(WritError::Untrusted(format!(
            "{} is not one of the people who may redact here ([writs] issuers), or signed with another key",
            b.by
        )));
    }
    verify_bytes(&r.key, &r.signature, &b.signing_bytes())
}

/// A path's normal form as a writ's globs see it ([`crate::path::normal`]); `None` for a
/// path that has none: no glob may match it.
pub fn writ_path(p: &str) -> Option<String> {
    crate::path::normal(p).ok()
}

/// A call's place in one writ, budgets aside: time, tool, every path, ceiling.
pub fn check_scope(
    w: &WritBody,
    tool: &str,
    effect: Effect,
    args: &Map<String, Value>,
    now_ms: i64,
) -> Result<(), WritError> {
    let id = w.id;
    if now_ms < parse_time(&w.issued_at)? {
        let why = format!("issued for {}", w.issued_at);
        return Err(WritError::Expired { id, why });
    }
    if now_ms >= parse_time(&w.expires_at)? {
        let why = format!("expired at {}", w.expires_at);
        return Err(WritError::Expired { id, why });
    }
    if !w.tools.iter().any(|g| glob(g, tool)) {
        let why = format!("tool {tool:?}");
        return Err(WritError::OutOfScope { id, why });
    }
    let mut paths: Vec<(&str, &str)> = crate::path::paths_of(args).collect();
    // `fs.list` with no path lists the workspace's root.
    if paths.is_empty() && tool == "fs.list" {
        paths.push(("path", "."));
    }
    // A call that names no path, or runs a command (`shell.run`, an agent's `Bash`), can reach
    // any file: under narrowed paths it runs only when the writ names the tool itself, not
    // through a glob — a path argument beside the command bounds nothing.
    if (paths.is_empty() || runs_a_command(args))
        && !w.paths.iter().any(|g| g == "*")
        && !w.tools.iter().any(|t| t == tool)
    {
        let why = format!(
            "tool {tool:?} names no path these paths can bound; a writ with narrowed paths allows it only by naming it"
        );
        return Err(WritError::OutOfScope { id, why });
    }
    if !w.paths.iter().any(|g| g == "*") {
        places(tool, args, &mut paths).map_err(|key| WritError::OutOfScope {
            id,
            why: format!(
                "argument {key:?} may name a place and is not a path or a list of paths these paths can bound"
            ),
        })?;
    }
    for (key, p) in paths {
        let Some(normal) = writ_path(p) else {
            let why = format!(
                "argument {key:?}: path {p:?} has no normal form (it climbs out, or holds a NUL)"
            );
            return Err(WritError::OutOfScope { id, why });
        };
        if !w.paths.iter().any(|g| covers(g, &normal, effect)) {
            let why = format!("argument {key:?}: path {normal:?}");
            return Err(WritError::OutOfScope { id, why });
        }
    }
    if effect.rank() > w.ceiling.rank() {
        return Err(WritError::AboveCeiling {
            id,
            effect,
            ceiling: w.ceiling,
        });
    }
    Ok(())
}

/// Whether writ path glob `g` covers `path` for a call of `effect`: by the glob, or, for
/// `dir/*` and a call that only reads, the directory itself (listing or searching the root
/// a writ grants is within it; writing to that name is not).
fn covers(g: &str, path: &str, effect: Effect) -> bool {
    glob(g, path) || (effect == Effect::Read && g.strip_suffix("/*").is_some_and(|dir| dir == path))
}

/// Words in an argument's name that say it may name a place (besides the path keys):
/// `destination`, `target_dir`, `src`, `output_file`, `cwd`, … Matched in the lowercased name.
const PLACE_WORDS: [&str; 14] = [
    "path", "dir", "dest", "dst", "target", "tgt", "file", "src", "source", "folder", "cwd",
    "root", "output", "location",
];
/// Argument names that are a place by themselves.
const PLACE_NAMES: [&str; 4] = ["to", "from", "into", "out"];
/// Arguments that carry free text, not places (their strings are not read as paths). A
/// command's words (`command`, `argv`) are not bounded by paths at all: a tool that runs one
/// is allowed under narrowed paths only when the writ names it.
const FREE_TEXT: [&str; 18] = [
    "content",
    "pattern",
    "text",
    "new_string",
    "old_string",
    "new_source",
    "cell_source",
    "description",
    "prompt",
    "query",
    "message",
    "body",
    "command",
    "argv",
    "cmd",
    "script",
    "code",
    "reason",
];
/// Arguments that run something (their reach no path argument bounds).
const COMMANDS: [&str; 5] = ["command", "argv", "cmd", "script", "code"];
/// Names that contain a place word but name a choice, not a place (NotebookEdit's
/// `new_source`; any `…_mode`, like Grep's `output_mode`).
const NOT_PLACES: [&str; 2] = ["new_source", "cell_source"];

/// Whether an argument's name says it may name a place.
fn place_name(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    if NOT_PLACES.contains(&k.as_str()) || k.ends_with("_mode") {
        return false;
    }
    PLACE_NAMES.contains(&k.as_str()) || PLACE_WORDS.iter().any(|w| k.contains(w))
}

/// Whether a call runs a command (its reach no path argument bounds).
fn runs_a_command(args: &Map<String, Value>) -> bool {
    COMMANDS.iter().any(|k| args.contains_key(*k))
}

/// Adds to `paths` every other place the arguments name: each string under a name that says
/// it may name a place (at any depth, in lists and objects), and any other string that reads
/// as a path (`/…`, `~…`, `../…`, `file:…`) outside free-text arguments. `Err` names a path
/// argument that is not a string, which no path glob can bound.
fn places<'a>(
    tool: &str,
    args: &'a Map<String, Value>,
    paths: &mut Vec<(&'a str, &'a str)>,
) -> Result<(), &'a str> {
    for (key, value) in args {
        // A file glob (Grep's `glob`, a Glob tool's `pattern`) reaches where it says from a
        // path already held to the writ: absolute it is one more path; climbing out (`..`) or
        // braces (`{/etc/x,y}`) it cannot be bounded.
        let file_glob =
            key == "glob" || (key == "pattern" && tool.to_ascii_lowercase().contains("glob"));
        if let (true, Value::String(g)) = (file_glob, value) {
            if g.contains('{') || g.split('/').any(|part| part == "..") {
                return Err(key);
            }
            if g.starts_with('/') || g.starts_with('~') {
                paths.push((key, g));
            }
            continue;
        }
        if crate::path::PATH_KEYS.contains(&key.as_str()) {
            // A string one is already held to the paths; anything else cannot be.
            if !value.is_string() {
                return Err(key);
            }
            continue;
        }
        walk(key, value, place_name(key), paths)?;
    }
    Ok(())
}

/// [`places`] inside one argument's value; `Err` names a place no path glob can bound (a
/// `file:` URL with a host or escapes).
fn walk<'a>(
    key: &'a str,
    value: &'a Value,
    place: bool,
    paths: &mut Vec<(&'a str, &'a str)>,
) -> Result<(), &'a str> {
    match value {
        Value::String(s) => {
            let free = FREE_TEXT.contains(&key.to_ascii_lowercase().as_str());
            // A URL scheme is case-blind (`FILE:///etc/passwd`).
            let scheme = s.get(..5).is_some_and(|p| p.eq_ignore_ascii_case("file:"));
            let looks = scheme || ["/", "~", "../"].iter().any(|p| s.starts_with(p));
            if place || (looks && !free) {
                let path = match s.get(5..).filter(|_| scheme) {
                    Some(rest) => {
                        let authority = rest.starts_with("//");
                        let rest = rest.strip_prefix("//").unwrap_or(rest);
                        // `file://host/…` or `%2e%2e`: not a path in its one spelling.
                        if authority && !rest.starts_with('/') || rest.contains('%') {
                            return Err(key);
                        }
                        rest
                    }
                    None => s,
                };
                paths.push((key, path));
            }
        }
        Value::Array(items) => {
            for item in items {
                walk(key, item, place, paths)?;
            }
        }
        Value::Object(fields) => {
            for (k, v) in fields {
                let p = place || place_name(k) || crate::path::PATH_KEYS.contains(&k.as_str());
                walk(k, v, p, paths)?;
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
    Ok(())
}

/// A call against one writ: its scope, and room in every budget for one more call
/// (`spent` before it).
pub fn check_call(
    w: &WritBody,
    tool: &str,
    effect: Effect,
    args: &Map<String, Value>,
    spent: Spent,
    now_ms: i64,
) -> Result<(), WritError> {
    check_scope(w, tool, effect, args, now_ms)?;
    check_budget(w, spent, 1)
}

/// Whether `spent` leaves room for `calls` more tool calls and is under every other limit.
pub fn check_budget(w: &WritBody, spent: Spent, calls: u64) -> Result<(), WritError> {
    let b = &w.budget;
    let axes = [
        ("tool_calls", b.tool_calls, spent.tool_calls, calls.max(1)),
        ("tokens", b.tokens, spent.tokens, 1),
        ("money_micros", b.money_micros, spent.money_micros, 1),
        ("wall_ms", b.wall_ms, spent.wall_ms, 1),
    ];
    for (axis, limit, used, more) in axes {
        // Spent, plus what is about to be spent, must fit: a call needs one more tool
        // call, anything needs at least one more token, millionth and millisecond.
        if let Some(l) = limit
            && used.saturating_add(more) > l
        {
            return Err(WritError::BudgetSpent {
                id: w.id,
                axis,
                used,
                limit: l,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "writ_tests.rs"]
mod tests;
