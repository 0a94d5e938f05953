//! `kura record add`: append a record to an open ledger.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, bail};
use proto::record::{NewRecord, Record, RecordType, TextContent};
use serde::Serialize;
use serde_json::Value;

use super::Outcome;
use super::{Ctx, id, parse_json, read_input};

/// `kura record ...`
#[derive(Debug, clap::Subcommand)]
pub enum RecordCmd {
    /// Append a record to an open ledger.
    Add {
        /// The open ledger.
        #[arg(long)]
        ledger: String,
        /// Record type, e.g. task.instruction, agent.thought, tool.call.
        #[arg(long = "type", value_name = "TYPE")]
        record_type: String,
        /// Author, kind:name (user:oles, agent:hashi).
        #[arg(long)]
        author: String,
        /// Text content (stored as {"text": ...}).
        #[arg(long, group = "body")]
        text: Option<String>,
        /// JSON content.
        #[arg(long, group = "body")]
        content: Option<String>,
        /// JSON content from a file (`-` for stdin).
        #[arg(long, group = "body")]
        content_file: Option<PathBuf>,
        /// Metadata key=value (repeatable).
        #[arg(long = "meta", value_name = "KEY=VALUE")]
        meta: Vec<String>,
    },
}

/// `kura record add --json`.
#[derive(Serialize)]
struct Added<'a> {
    /// True when the ledger already held a record with this content.
    deduplicated: bool,
    /// Its position in the ledger.
    position: u64,
    /// The stored record.
    record: &'a Record,
}

impl RecordCmd {
    /// Runs one `kura record` subcommand.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let mut store = ctx.open_store()?;
        let (out, json) = (&mut ctx.out, ctx.json);
        let RecordCmd::Add {
            ledger,
            record_type,
            author,
            text,
            content,
            content_file,
            meta,
        } = self;
        let record_type: RecordType = record_type.parse()?;
        let new = NewRecord {
            record_type,
            content: content_of(text, content, content_file)?,
            author_id: author,
            metadata: metadata_of(meta)?,
        };
        let appended = store.append(id(&ledger)?, &new)?;
        if json {
            out.json_sorted(&Added {
                deduplicated: appended.deduplicated,
                position: appended.position,
                record: &appended.record,
            })?;
        } else {
            let note = if appended.deduplicated {
                " (existing record, same content)"
            } else {
                ""
            };
            out.line(format!("{}{note}", appended.record.record_id))?;
        }
        Ok(Outcome::Ok)
    }
}

/// The content from whichever of --text, --content and --content-file was given.
fn content_of(
    text: Option<String>,
    content: Option<String>,
    content_file: Option<PathBuf>,
) -> anyhow::Result<Value> {
    Ok(match (text, content, content_file) {
        (Some(text), None, None) => serde_json::to_value(TextContent { text })?,
        (None, Some(c), None) => parse_json(&c).context("--content")?,
        (None, None, Some(f)) => parse_json(&read_input(&f)?)
            .with_context(|| format!("--content-file {}", f.display()))?,
        _ => bail!("give the content with one of --text, --content or --content-file"),
    })
}

/// A record's metadata: key to value.
type Metadata = BTreeMap<String, String>;

/// `--meta KEY=VALUE` pairs, each key once.
fn metadata_of(meta: Vec<String>) -> anyhow::Result<Metadata> {
    let mut metadata = BTreeMap::new();
    for m in meta {
        let Some((k, v)) = m.split_once('=') else {
            bail!("--meta {m:?}: expected KEY=VALUE");
        };
        if k.is_empty() || metadata.insert(k.to_owned(), v.to_owned()).is_some() {
            bail!("--meta {m:?}: key is empty or given twice");
        }
    }
    Ok(metadata)
}
