//! Writing results: text for people, JSON for machines; a closed pipe ends output quietly.

use proto::LedgerId;
use std::io::{self, Write};

use kura_serve::tlog::storage::LogStorage as _;
use kura_store::store::{RefLogEntry, Session};
use proto::ledger::{Ledger, LedgerState};
use proto::record::Record;
use proto::text::escape_controls;
use serde::Serialize;

/// Buffered stdout that surfaces write errors (so a broken pipe is seen, not panicked on).
pub struct Out {
    /// Locked, buffered standard output.
    w: io::BufWriter<io::StdoutLock<'static>>,
}

impl Out {
    /// Standard output.
    pub fn new() -> Self {
        Out {
            w: io::BufWriter::new(io::stdout().lock()),
        }
    }

    /// One protocol message (already JSON, so nothing in it can move a cursor) as a line,
    /// flushed at once: `kura mcp`'s answers to its client.
    pub fn message(&mut self, text: &str) -> io::Result<()> {
        self.w.write_all(text.as_bytes())?;
        self.w.write_all(b"\n")?;
        self.w.flush()
    }

    /// A request body exactly as a model was sent it, with nothing added, so its SHA-256
    /// is the recorded one — to a pipe or a file. To a terminal, characters that move the
    /// cursor or hide text (which JSON does not escape: C1 controls, bidi overrides) are
    /// escaped like every other line `kura` prints.
    pub fn body(&mut self, json: &[u8]) -> io::Result<()> {
        use std::io::IsTerminal as _;
        if io::stdout().is_terminal() {
            let text = String::from_utf8_lossy(json);
            self.w.write_all(escape_controls(&text).as_bytes())?;
            return self.w.write_all(b"\n");
        }
        self.w.write_all(json)
    }

    /// One line of text, with control characters escaped: much of what `kura` prints was
    /// written by a model, and must not move the cursor, retitle the terminal or hide text.
    pub fn line(&mut self, text: impl AsRef<str>) -> io::Result<()> {
        self.w
            .write_all(escape_controls(text.as_ref()).as_bytes())?;
        self.w.write_all(b"\n")
    }

    /// A value as pretty JSON. A failed write comes back as the `io::Error` it was (serde_json's
    /// error hides it from a cause chain), so a closed pipe is recognised as one.
    pub fn json<T: Serialize>(&mut self, value: &T) -> anyhow::Result<()> {
        serde_json::to_writer_pretty(&mut self.w, value).map_err(|e| {
            if e.is_io() {
                anyhow::Error::from(io::Error::from(e))
            } else {
                anyhow::Error::from(e)
            }
        })?;
        self.w.write_all(b"\n")?;
        Ok(())
    }

    /// A value as pretty JSON with every object's keys sorted, as `serde_json::json!` printed
    /// them: the typed replies of commands that used to build their JSON by hand keep their
    /// bytes (scripts and tests read them).
    pub fn json_sorted<T: Serialize>(&mut self, value: &T) -> anyhow::Result<()> {
        self.json(&serde_json::to_value(value)?)
    }

    /// Flushes; call before exiting.
    pub fn finish(mut self) -> io::Result<()> {
        self.w.flush()
    }
}

/// First `n` characters of a hash (or `-`).
pub fn short(hash: Option<&str>, n: usize) -> String {
    hash.map(|h| h.chars().take(n).collect())
        .unwrap_or_else(|| "-".into())
}

/// A one-line preview of record content.
pub fn preview(record: &Record) -> String {
    let text = match record.content.get("text").and_then(|t| t.as_str()) {
        Some(t) => t.to_owned(),
        None => record.content.to_string(),
    };
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > 72 {
        format!("{}…", one_line.chars().take(71).collect::<String>())
    } else {
        one_line
    }
}

/// A record in the indented list form used by `log --records` and `show <ledger>`.
pub fn record_line(position: usize, r: &Record) -> String {
    format!(
        "    [{position}] {:<17} {:<16} {}  {}",
        r.record_type.as_str(),
        r.author_id,
        short(Some(&r.hash), 12),
        preview(r)
    )
}

/// Who sealed `ledger`: the keyring's name for the key and the key, or the key alone.
pub fn sealer_name(
    store: &kura_store::Store,
    keyring: Option<&kura_serve::tlog::sealer::Keyring>,
    ledger: LedgerId,
) -> anyhow::Result<Option<String>> {
    let Some(nkey) = store.seal_log().sealer_of(&ledger.to_string())? else {
        return Ok(None);
    };
    Ok(Some(match keyring.and_then(|k| k.get(&nkey)) {
        Some(name) => format!("{name} ({nkey})"),
        None => nkey,
    }))
}

/// A ledger as a `git log`-style block.
/// `sealer`: who signed the seal, as [`sealer_name`] gives it.
pub fn ledger_block(
    out: &mut Out,
    l: &Ledger,
    is_head: bool,
    sealer: Option<&str>,
) -> io::Result<()> {
    let state = match l.state {
        LedgerState::Open => "open",
        LedgerState::Sealed => "sealed",
    };
    let head = if is_head { "HEAD, " } else { "" };
    out.line(format!("ledger {} ({head}{state})", l.ledger_id))?;
    out.line(format!("Label:   {}", l.label))?;
    out.line(format!("Created: {}", l.created_at))?;
    if let Some(s) = &l.sealed_at {
        out.line(format!("Sealed:  {s}"))?;
        out.line(format!("Sealer:  {}", sealer.unwrap_or("- (unsigned)")))?;
    }
    out.line(format!("Records: {}", l.record_count))?;
    out.line(format!(
        "Root:    {}",
        l.root_hash.as_deref().unwrap_or("-")
    ))?;
    out.line(format!(
        "Hash:    {}",
        l.ledger_hash.as_deref().unwrap_or("-")
    ))?;
    let parents: Vec<String> = l.parent_ids.iter().map(|p| p.to_string()).collect();
    out.line(format!(
        "Parents: {}",
        if parents.is_empty() {
            "-".into()
        } else {
            parents.join(" ")
        }
    ))
}

/// A record in full.
pub fn record_block(out: &mut Out, r: &Record, ledgers: &[LedgerId]) -> anyhow::Result<()> {
    out.line(format!("record {}", r.record_id))?;
    out.line(format!("Type:    {}", r.record_type))?;
    out.line(format!("Author:  {}", r.author_id))?;
    out.line(format!("Created: {}", r.created_at))?;
    out.line(format!("Hash:    {}", r.hash))?;
    for (k, v) in &r.metadata {
        out.line(format!("Meta:    {k}={v}"))?;
    }
    let ledgers: Vec<String> = ledgers.iter().map(|l| l.to_string()).collect();
    out.line(format!(
        "Ledgers: {}",
        if ledgers.is_empty() {
            "-".into()
        } else {
            ledgers.join(" ")
        }
    ))?;
    out.line("")?;
    match r.content.get("text").and_then(|t| t.as_str()) {
        Some(t) if r.content.as_object().is_some_and(|o| o.len() == 1) => {
            for line in t.lines() {
                out.line(format!("    {line}"))?;
            }
        }
        _ => {
            for line in serde_json::to_string_pretty(&r.content)?.lines() {
                out.line(format!("    {line}"))?;
            }
        }
    }
    Ok(())
}

/// A session header and its ref log.
pub fn session_block(out: &mut Out, s: &Session, reflog: &[RefLogEntry]) -> io::Result<()> {
    out.line(format!("session {}", s.session_id))?;
    out.line(format!("Label:   {}", s.label))?;
    out.line(format!("Status:  {}", s.status))?;
    out.line(format!("Created: {}", s.created_at))?;
    out.line(format!(
        "Head:    {}",
        s.head_ledger_id
            .map(|h| h.to_string())
            .unwrap_or_else(|| "-".into())
    ))?;
    out.line("Ref log:")?;
    for e in reflog {
        out.line(format!(
            "    {:>3} {} {} -> {} ({})",
            e.seq,
            e.at,
            e.old_head
                .as_deref()
                .map(|h| &h[..h.len().min(13)])
                .unwrap_or("(none)"),
            e.new_head,
            e.reason
        ))?;
    }
    Ok(())
}
