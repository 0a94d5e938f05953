//! One function per subcommand: open the store, do the work, print the result.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use anyhow::{Context, bail};
use kura_store::store::{Query, parse_id};
use kura_store::verify::{Report, Scope};
use kura_store::{Store, StoreOptions};
use proto::proof::InclusionProof;
use proto::record::{MAX_CONTENT_BYTES, NewRecord, RecordType};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::args::{Args, Command, LedgerCmd, LogKeyCmd, Outcome, RecordCmd, SessionCmd};
use crate::output::{self, Out};

/// Runs the parsed command.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let options = StoreOptions {
        synchronous: args.synchronous.parse()?,
        ..StoreOptions::default()
    };
    let mut out = Out::new();
    let json = args.json;
    let (db, db_given) = (args.db(), args.db_given.clone());
    let outcome = match args.command {
        Command::Init => {
            let existed = db.exists();
            let store = Store::create(&db, &options)?;
            if json {
                out.json(&json!({"db": store.path(), "created": !existed}))?;
            } else if existed {
                out.line(format!("Kura database ready at {}", db.display()))?;
            } else {
                out.line(format!("Initialized Kura database at {}", db.display()))?;
            }
            Outcome::Ok
        }
        Command::Keys(cmd) => crate::keys::run(&mut out, json, db_given.as_deref(), cmd)?,
        Command::LogKey(LogKeyCmd::Init {
            out: path,
            name,
            witness,
        }) => {
            crate::tlog::init_key(&mut out, json, &path, &name, witness)?;
            Outcome::Ok
        }
        Command::LogKey(LogKeyCmd::Show { key, witness }) => {
            let key = kura_tlog::checkpoint::LogKey::load(&key)?;
            out.line(crate::tlog::verifier_of(&key, witness))?;
            Outcome::Ok
        }
        Command::VerifyProof {
            file,
            root,
            log_key,
        } => verify_proof(&mut out, json, &file, root.as_deref(), log_key)?,
        Command::Bench {
            dir,
            quick,
            no_nats,
            nats,
            only,
        } => bench(&mut out, json, &db, dir, quick, !no_nats, nats, only)?,
        Command::BenchPeer {
            nats,
            count,
            seed,
            ca,
        } => {
            crate::bench::peer(&crate::bench::PeerArgs {
                nats_url: nats,
                db: db.clone(),
                count,
                seed,
                ca,
            })?;
            Outcome::Ok
        }
        Command::Serve {
            config,
            print_default_config,
        } => {
            if print_default_config {
                out.line(
                    kura_runtime::to_toml(&crate::serve_config::ServeConfig::default()).trim_end(),
                )?;
            } else {
                let (mut config, rt) = kura_runtime::start::<crate::serve_config::ServeConfig>(
                    "kura",
                    config.as_deref(),
                )?;
                if let Some(db) = db_given {
                    config.common.db = db;
                }
                rt.block_on(crate::serve::serve(config, kura_runtime::shutdown_signal()))?;
            }
            Outcome::Ok
        }
        command => {
            let mut store = Store::open(&db, &options)?;
            with_store(&mut store, &mut out, json, command)?
        }
    };
    out.finish()?;
    Ok(outcome)
}

fn id(text: &str) -> anyhow::Result<Uuid> {
    Ok(parse_id(text)?)
}

fn with_store(
    store: &mut Store,
    out: &mut Out,
    json: bool,
    command: Command,
) -> anyhow::Result<Outcome> {
    match command {
        Command::Checkpoint {
            key,
            state,
            trust_current,
        } => {
            let db = store.path().to_path_buf();
            let signing = crate::tlog::Signing {
                key: key.as_deref(),
                state: state.as_deref(),
                trust_current,
            };
            crate::tlog::checkpoint(out, store, &db, &signing)?;
        }
        Command::ProveConsistency { old, new } => {
            crate::tlog::prove_consistency(out, store, &old, new.as_deref())?;
        }
        Command::Status => {
            let st = kura_store::ops::status(store)?;
            if json {
                out.json(&st)?;
            } else {
                print_status(out, &st)?;
                out.line(crate::tlog::anchoring(store.path()))?;
            }
        }
        Command::Init
        | Command::VerifyProof { .. }
        | Command::Keys(_)
        | Command::LogKey(_)
        | Command::Serve { .. }
        | Command::Bench { .. }
        | Command::BenchPeer { .. } => {
            bail!("internal: init and verify-proof run without an open store")
        }
        Command::Session(SessionCmd::New { label }) => {
            let s = store.create_session(&label)?;
            if json {
                out.json(&s)?;
            } else {
                out.line(s.session_id.to_string())?;
            }
        }
        Command::Session(SessionCmd::List) => {
            let sessions = store.sessions()?;
            if json {
                out.json(&sessions)?;
            } else {
                for s in sessions {
                    let head = s
                        .head_ledger_id
                        .map(|h| h.to_string())
                        .unwrap_or_else(|| "-".into());
                    out.line(format!(
                        "{}  {:<8} head {}  {}",
                        s.session_id, s.status, head, s.label
                    ))?;
                }
            }
        }
        Command::Ledger(LedgerCmd::Open {
            session,
            label,
            parents,
        }) => {
            let parents = parents
                .iter()
                .map(|p| id(p))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let l = store.open_ledger(id(&session)?, &label, &parents)?;
            if json {
                out.json(&l)?;
            } else {
                out.line(l.ledger_id.to_string())?;
            }
        }
        Command::Session(SessionCmd::Reset {
            session,
            ledger,
            reason,
        }) => {
            let e = store.reset_head(id(&session)?, id(&ledger)?, &reason)?;
            if json {
                out.json(&e)?;
            } else {
                out.line(format!(
                    "session {} reset: head {} -> {} (ref log entry {})",
                    e.session_id,
                    e.old_head.as_deref().unwrap_or("-"),
                    e.new_head,
                    e.seq
                ))?;
            }
        }
        Command::Session(SessionCmd::Fork {
            ledger,
            label,
            sealer_key,
        }) => {
            use_sealer(store, sealer_key.as_deref())?;
            let (s, first) = store.fork(id(&ledger)?, &label)?;
            if json {
                out.json(&json!({"session": s, "first_ledger": first}))?;
            } else {
                out.line(s.session_id.to_string())?;
            }
        }
        Command::Ledger(LedgerCmd::Seal { ledger, sealer_key }) => {
            use_sealer(store, sealer_key.as_deref())?;
            let (l, newly) = store.seal_ledger(id(&ledger)?)?;
            if json {
                out.json(&json!({"ledger": l, "newly_sealed": newly}))?;
            } else {
                let verb = if newly { "sealed" } else { "already sealed" };
                out.line(format!(
                    "{} {verb}: {} records, root {}, hash {}",
                    l.ledger_id,
                    l.record_count,
                    l.root_hash.as_deref().unwrap_or("-"),
                    l.ledger_hash.as_deref().unwrap_or("-")
                ))?;
            }
        }
        Command::Record(RecordCmd::Add {
            ledger,
            record_type,
            author,
            text,
            content,
            content_file,
            meta,
        }) => {
            let record_type: RecordType = record_type.parse()?;
            let content = match (text, content, content_file) {
                (Some(t), None, None) => json!({ "text": t }),
                (None, Some(c), None) => parse_json(&c).context("--content")?,
                (None, None, Some(f)) => parse_json(&read_input(&f)?)
                    .with_context(|| format!("--content-file {}", f.display()))?,
                _ => bail!("give the content with one of --text, --content or --content-file"),
            };
            let mut metadata = BTreeMap::new();
            for m in meta {
                let Some((k, v)) = m.split_once('=') else {
                    bail!("--meta {m:?}: expected KEY=VALUE");
                };
                if k.is_empty() || metadata.insert(k.to_owned(), v.to_owned()).is_some() {
                    bail!("--meta {m:?}: key is empty or given twice");
                }
            }
            let new = NewRecord {
                record_type,
                content,
                author_id: author,
                metadata,
            };
            let appended = store.append(id(&ledger)?, &new)?;
            if json {
                out.json(&json!({
                    "record": appended.record,
                    "position": appended.position,
                    "deduplicated": appended.deduplicated,
                }))?;
            } else {
                let note = if appended.deduplicated {
                    " (existing record, same content)"
                } else {
                    ""
                };
                out.line(format!("{}{note}", appended.record.record_id))?;
            }
        }
        Command::Log {
            session,
            graph: true,
            ..
        } => crate::graph::draw(store, out, json, id(&session)?)?,
        Command::Log {
            session, records, ..
        } => log(store, out, json, id(&session)?, records)?,
        Command::Diff { ledger_a, ledger_b } => {
            let d = kura_store::diff::diff(store, id(&ledger_a)?, id(&ledger_b)?)?;
            if json {
                out.json(&d)?;
            } else {
                out.line(format!("--- {}\n+++ {}", d.ledger_a, d.ledger_b))?;
                for r in &d.only_a {
                    out.line(format!(
                        "- {} {:<17} {}",
                        output::short(Some(&r.hash), 12),
                        r.record_type.as_str(),
                        output::preview(r)
                    ))?;
                }
                for r in &d.only_b {
                    out.line(format!(
                        "+ {} {:<17} {}",
                        output::short(Some(&r.hash), 12),
                        r.record_type.as_str(),
                        output::preview(r)
                    ))?;
                }
                for r in &d.both {
                    out.line(format!(
                        "  {} {:<17} {}",
                        output::short(Some(&r.hash), 12),
                        r.record_type.as_str(),
                        output::preview(r)
                    ))?;
                }
                out.line(format!(
                    "{} only in A, {} only in B, {} in both",
                    d.only_a.len(),
                    d.only_b.len(),
                    d.both.len()
                ))?;
            }
        }
        Command::Show { id: text } => show(store, out, json, id(&text)?)?,
        Command::Verify {
            id: target,
            all,
            trusted_head,
            checkpoints,
            witnesses,
            log_key,
            keyring,
        } => {
            let scope = match (target, all) {
                (_, true) => Scope::All,
                (Some(t), false) => {
                    let uid = id(&t)?;
                    match store.kind_of(uid)? {
                        Some("ledger") => Scope::Ledger(uid),
                        Some("session") => Scope::Session(uid),
                        Some(kind) => {
                            bail!("{uid} is a {kind}; verify a ledger, a session or --all")
                        }
                        None => bail!("no ledger or session {uid}"),
                    }
                }
                (None, false) => bail!("give a ledger or session id, or --all"),
            };
            let trust = crate::tlog::Trust::resolve(log_key, checkpoints, witnesses, store.path())?;
            let keyring = crate::tlog::keyring(keyring)?;
            let mut report = kura_store::verify::verify(
                store,
                &scope,
                trusted_head.as_deref(),
                keyring.as_ref(),
            )?;
            let used = trust.check(store, &mut report)?;
            print_report(out, json, &report)?;
            // After the verdict: which checkpoint held the store, or that nothing did.
            if let Some(used) = used
                && !json
            {
                out.line(used)?;
            }
            return Ok(if report.ok() {
                Outcome::Ok
            } else {
                Outcome::VerifyFailed
            });
        }
        Command::Export {
            session,
            format: _,
            out: dir,
        } => {
            let e = crate::export::export_git(store, id(&session)?, &dir)?;
            if json {
                out.json(&e)?;
            } else {
                out.line(format!(
                    "exported {} commits to {} (main = {})",
                    e.commits,
                    dir.display(),
                    e.head_commit
                ))?;
            }
        }
        Command::Query {
            record_type,
            since,
            author,
            session,
            limit,
        } => {
            let q = Query {
                record_type: record_type.as_deref().map(str::parse).transpose()?,
                since: since
                    .as_deref()
                    .map(kura_store::time::parse_since)
                    .transpose()?,
                author_id: author,
                session_id: session.as_deref().map(id).transpose()?,
                limit: Some(limit),
            };
            let records = store.query(&q)?;
            if json {
                out.json(&records)?;
            } else {
                for r in &records {
                    out.line(format!(
                        "{}  {}  {:<17} {:<16} {}",
                        r.record_id,
                        r.created_at,
                        r.record_type.as_str(),
                        r.author_id,
                        output::preview(r)
                    ))?;
                }
            }
        }
        Command::Search {
            query,
            record_type,
            session,
            limit,
            embeddings_url,
            embeddings_model,
        } => {
            let query_vector = match embeddings_url.filter(|u| !u.is_empty()) {
                None => None,
                Some(url) => {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?;
                    Some(
                        rt.block_on(kura_model::embed(&url, &embeddings_model, &query))
                            .map_err(|e| anyhow::anyhow!("embedding the query: {e}"))?,
                    )
                }
            };
            let record_type: Option<RecordType> =
                record_type.as_deref().map(str::parse).transpose()?;
            if let Some(t) = record_type
                && !matches!(t, RecordType::MemoryFact | RecordType::MemoryDecision)
            {
                bail!("--type must be memory.fact or memory.decision");
            }
            let hits = kura_store::memory::search(
                store.conn(),
                &kura_store::memory::Search {
                    query,
                    record_type,
                    session_id: session.as_deref().map(id).transpose()?,
                    limit,
                    query_vector,
                },
            )?;
            if json {
                out.json(&hits)?;
            } else {
                if hits.is_empty() {
                    out.line("no memory matches")?;
                }
                for h in &hits {
                    let mark = if h.superseded { " (superseded)" } else { "" };
                    out.line(format!(
                        "{:.3}  {}  {:<15} {}{mark}",
                        h.score,
                        h.record.record_id,
                        h.record.record_type.as_str(),
                        output::preview(&h.record)
                    ))?;
                }
            }
        }
        Command::Prove {
            record,
            ledger,
            checkpoint,
            log_key,
        } => {
            let mut proof = kura_store::proof::prove(store, id(&record)?, id(&ledger)?)?;
            if let Some(file) = checkpoint {
                let vkey = crate::tlog::log_verifier(log_key)?;
                let note = std::fs::read_to_string(&file)
                    .with_context(|| format!("cannot read {}", file.display()))?;
                kura_store::proof::link_to_checkpoint(store, &mut proof, &note, &vkey)?;
            }
            out.json(&proof)?;
        }
    }
    Ok(Outcome::Ok)
}

fn parse_json(text: &str) -> anyhow::Result<Value> {
    serde_json::from_str(text).map_err(|e| anyhow::anyhow!("invalid JSON: {e}"))
}

fn read_input(path: &Path) -> anyhow::Result<String> {
    let mut buf = Vec::new();
    let limit = MAX_CONTENT_BYTES as u64 + 1;
    if path == Path::new("-") {
        std::io::stdin()
            .take(limit)
            .read_to_end(&mut buf)
            .context("reading stdin")?;
    } else {
        std::fs::File::open(path)
            .with_context(|| format!("cannot read {}", path.display()))?
            .take(limit)
            .read_to_end(&mut buf)
            .with_context(|| format!("cannot read {}", path.display()))?;
    }
    if buf.len() as u64 >= limit {
        bail!(
            "{} is larger than the {MAX_CONTENT_BYTES}-byte content limit",
            path.display()
        );
    }
    String::from_utf8(buf).map_err(|_| anyhow::anyhow!("{} is not UTF-8 text", path.display()))
}

/// Seals with the nkey seed at `path`, when given. On an install whose serve config names a
/// keyring, `verify` checks who sealed every ledger: an unsigned seal would exit 0 here and
/// fail there, so it is refused before anything is written.
fn use_sealer(store: &mut Store, path: Option<&Path>) -> anyhow::Result<()> {
    let Some(path) = path else {
        if let Some(ring) = crate::tlog::serve_config()?.and_then(|c| c.serve.keyring) {
            bail!(
                "this install checks who seals ([serve] keyring = {}): give --sealer-key with a \
                 service seed, e.g. /etc/kura/keys/operator.nk",
                ring.display()
            );
        }
        return Ok(());
    };
    let key = kura_runtime::identity::read_seed(path)?;
    store.set_sealer(Some(kura_tlog::sealer::Sealer::new(std::sync::Arc::new(
        key,
    ))?));
    Ok(())
}

fn log(
    store: &Store,
    out: &mut Out,
    json: bool,
    session_id: Uuid,
    with_records: bool,
) -> anyhow::Result<()> {
    let session = store.read_session(session_id)?;
    let ledgers = store.session_ledgers(session_id)?;
    // Left behind by a reset, like commits only the reflog still names.
    let lost = kura_store::branch::unreachable(store.conn(), session_id)?;
    // A keyring that cannot be read only costs the names, never the log.
    let ring = crate::tlog::keyring(None).unwrap_or_default();
    if json {
        let mut items = Vec::new();
        for l in &ledgers {
            let mut v = serde_json::to_value(l)?;
            if let Some(obj) = v.as_object_mut() {
                obj.insert(
                    "head".into(),
                    json!(session.head_ledger_id == Some(l.ledger_id)),
                );
                obj.insert("unreachable".into(), json!(lost.contains(&l.ledger_id)));
                obj.insert(
                    "sealer".into(),
                    json!(kura_tlog::sealer::sealer_of(
                        store.conn(),
                        &l.ledger_id.to_string()
                    )?),
                );
                if with_records {
                    obj.insert(
                        "records".into(),
                        serde_json::to_value(store.hydrate(l.ledger_id)?)?,
                    );
                }
            }
            items.push(v);
        }
        out.json(&json!({"session": session, "ledgers": items}))?;
        return Ok(());
    }
    out.line(format!(
        "session {} ({}, {})",
        session.session_id, session.label, session.status
    ))?;
    if ledgers.is_empty() {
        out.line("(no ledgers yet)")?;
    }
    for l in &ledgers {
        out.line("")?;
        let sealer = output::sealer_name(store, ring.as_ref(), l.ledger_id)?;
        output::ledger_block(
            out,
            l,
            session.head_ledger_id == Some(l.ledger_id),
            sealer.as_deref(),
        )?;
        if lost.contains(&l.ledger_id) {
            out.line(
                "Note:    unreachable (the head was reset past it; see `kura show <session>`)",
            )?;
        }
        if with_records {
            for (i, r) in store.hydrate(l.ledger_id)?.iter().enumerate() {
                out.line(output::record_line(i, r))?;
            }
        }
    }
    Ok(())
}

fn show(store: &Store, out: &mut Out, json: bool, uid: Uuid) -> anyhow::Result<()> {
    match store.kind_of(uid)? {
        Some("record") => {
            let r = store.read_record(uid)?;
            let ledgers = store.ledgers_containing(uid)?;
            if json {
                out.json(&json!({"record": r, "ledgers": ledgers}))?;
            } else {
                output::record_block(out, &r, &ledgers)?;
            }
        }
        Some("ledger") => {
            let l = store.read_ledger(uid)?;
            let records = store.hydrate(uid)?;
            let head = store.read_session(l.session_id)?.head_ledger_id == Some(uid);
            if json {
                out.json(&json!({"ledger": l, "head": head, "records": records}))?;
            } else {
                let ring = crate::tlog::keyring(None).unwrap_or_default();
                let sealer = output::sealer_name(store, ring.as_ref(), uid)?;
                output::ledger_block(out, &l, head, sealer.as_deref())?;
                out.line(format!("Session: {}", l.session_id))?;
                for (i, r) in records.iter().enumerate() {
                    out.line(output::record_line(i, r))?;
                }
            }
        }
        Some(_) => {
            let s = store.read_session(uid)?;
            let reflog = store.reflog(uid)?;
            let forks = kura_store::branch::forks_of(store.conn(), uid)?;
            if json {
                out.json(&json!({"session": s, "reflog": reflog, "forks": forks}))?;
            } else {
                output::session_block(out, &s, &reflog)?;
                for f in &forks {
                    out.line(format!(
                        "Fork:    session {} grew from ledger {}",
                        f.session_id, f.origin
                    ))?;
                }
            }
        }
        None => bail!("no record, ledger or session {uid}"),
    }
    Ok(())
}

fn print_report(out: &mut Out, json: bool, report: &Report) -> anyhow::Result<()> {
    if json {
        out.json(&json!({
            "ok": report.ok(),
            "records_checked": report.records_checked,
            "ledgers_checked": report.ledgers_checked,
            "sessions_checked": report.sessions_checked,
            "problems": report.problems,
        }))?;
        return Ok(());
    }
    for p in &report.problems {
        out.line(format!("FAIL {p}"))?;
    }
    let plural = |n: u64, one: &str| format!("{n} {one}{}", if n == 1 { "" } else { "s" });
    let summary = format!(
        "{}, {}, {} checked",
        plural(report.records_checked, "record"),
        plural(report.ledgers_checked, "ledger"),
        plural(report.sessions_checked, "session")
    );
    if report.ok() {
        out.line(format!("verified: {summary}; every hash matches"))?;
    } else {
        out.line(format!(
            "VERIFICATION FAILED: {} problems; {summary}",
            report.problems.len()
        ))?;
    }
    Ok(())
}

fn verify_proof(
    out: &mut Out,
    json: bool,
    file: &Path,
    root: Option<&str>,
    log_key: Option<String>,
) -> anyhow::Result<Outcome> {
    let text = read_input(file)?;
    let proof: InclusionProof = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{} is not a Kura inclusion proof: {e}", file.display()))?;
    let vkey = match proof.seal_log {
        Some(_) => Some(crate::tlog::log_verifier(log_key)?),
        None => None,
    };
    let mut chained = None;
    let result = proof.verify(root).and_then(|()| match &vkey {
        Some(v) => kura_tlog::proof::verify_link(&proof, v)
            .map(|c| chained = Some(c))
            .map_err(|e| e.to_string()),
        None => Ok(()),
    });
    if json {
        out.json(&json!({
            "ok": result.is_ok(),
            "record_id": proof.record.record_id,
            "ledger_id": proof.ledger_id,
            "root_hash": proof.root_hash,
            "ledger_hash": proof.ledger_hash,
            "checkpoint": chained.as_ref().map(|c| json!({
                "origin": c.origin, "size": c.size, "leaf_index": c.leaf_index,
            })),
            "error": result.as_ref().err(),
        }))?;
    } else {
        match &result {
            Ok(()) => out.line(format!(
                "proof ok: record {} is leaf {} of {} in ledger {} (root {}, ledger hash {}){}",
                proof.record.record_id,
                proof.leaf_index,
                proof.tree_size,
                proof.ledger_id,
                proof.root_hash,
                proof.ledger_hash,
                if root.is_some() {
                    ", which is the trusted hash"
                } else {
                    ""
                }
            ))
            .and_then(|()| match &chained {
                Some(c) => out.line(format!(
                    "chain ok: the ledger is leaf {} of the seal log in checkpoint {} of size {}, signed by the log key",
                    c.leaf_index, c.origin, c.size
                )),
                None => Ok(()),
            })?,
            Err(e) => out.line(format!("PROOF FAILED: {e}"))?,
        }
    }
    Ok(if result.is_ok() {
        Outcome::Ok
    } else {
        Outcome::VerifyFailed
    })
}

fn print_status(out: &mut Out, st: &kura_store::ops::Status) -> anyhow::Result<()> {
    out.line("daemons:")?;
    if st.daemons.is_empty() {
        out.line("  (none has started yet)")?;
    }
    for d in &st.daemons {
        let nats = if d.kind == "kura" {
            "-"
        } else if d.nats_connected {
            "nats ok"
        } else {
            "no nats"
        };
        let detail = d
            .detail
            .as_deref()
            .map(|t| format!("  {t}"))
            .unwrap_or_default();
        out.line(format!(
            "  {:<7} {:<22} pid {:<7} {:<5} last beat {}s ago  {nats}{detail}",
            d.kind,
            d.instance,
            d.pid,
            if d.up { "UP" } else { "DOWN" },
            d.last_beat_s
        ))?;
    }
    let b = &st.backlog;
    out.line(format!(
        "backlog: {} queued requests, {} pending / {} running / {} waiting turns, {} open approvals, {} outputs not yet read for memory",
        b.queued_requests, b.pending_turns, b.running_turns, b.waiting_turns, b.open_approvals, b.unextracted_outputs
    ))?;
    match &st.last_sweep {
        Some(s) => out.line(format!(
            "last integrity sweep: {} {} ({})",
            s.at,
            if s.ok { "OK" } else { "FAILED" },
            s.summary
        ))?,
        None => out.line("last integrity sweep: never (is `kura serve` running?)")?,
    }
    match &st.last_backup {
        Some(s) => out.line(format!("last backup: {} {}", s.at, s.summary))?,
        None => out.line("last backup: never")?,
    }
    out.line(format!(
        "database: {} bytes (+ {} bytes WAL)",
        st.db_bytes, st.wal_bytes
    ))?;
    Ok(())
}

/// `kura bench`: the figures as a table (or JSON), with progress on stderr.
#[allow(clippy::too_many_arguments)]
fn bench(
    out: &mut Out,
    json: bool,
    db: &Path,
    dir: Option<std::path::PathBuf>,
    quick: bool,
    doorbell: bool,
    nats_url: Option<String>,
    only: String,
) -> anyhow::Result<Outcome> {
    let dir = dir.unwrap_or_else(|| match db.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    });
    let args = crate::bench::BenchArgs {
        dir,
        sizes: if quick {
            crate::bench::Sizes::quick()
        } else {
            crate::bench::Sizes::full()
        },
        doorbell,
        nats_url,
        only,
    };
    let report = crate::bench::run(&args, |name| eprintln!("kura bench: {name} ..."))
        .context("benchmark failed")?;
    if json {
        out.json(&report)?;
    } else {
        out.line(format!("Scratch databases in {}", report.dir))?;
        out.line(crate::bench::table(&report).trim_end())?;
    }
    Ok(Outcome::Ok)
}
