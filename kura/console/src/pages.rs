//! The console's HTML, rendered on the server with maud (which escapes every value: records
//! hold model output, which is untrusted). The pages work without JavaScript for reading;
//! the script adds live updates, login, enrolment and in-browser signing.

use maud::{DOCTYPE, Markup, html};

use crate::auth::Login;
use crate::data::{History, SessionRow, Waiting};
use crate::records::RecordView;
use crate::text::{flag, short, t, when};
use crate::views::record;

/// The frame around every page. `login` is `None` on the login and enrol pages.
pub fn layout(title: &str, login: Option<&Login>, waiting: i64, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if let Some(l) = login { meta name="kura-csrf" content=(l.csrf); }
                title { "Kura · " (title) }
                link rel="stylesheet" href="/assets/console.css";
                script src="/assets/console.js" defer {}
            }
            body data-live=[login.map(|_| "1")] {
                header {
                    a.brand href="/" { "Kura" }
                    @if let Some(l) = login {
                        nav {
                            a href="/" { "Sessions" }
                            a href="/approvals" {
                                "Approvals"
                                @if waiting > 0 { " " span.badge { (waiting) } }
                            }
                            a href="/verify" { "Verification" }
                            a href="/status" { "Status" }
                            a href="/memory" { "Memory" }
                            a href="/fleet" { "Fleet" }
                            a href="/writs" { "Writs" }
                        }
                        span.who { (l.name) " · " button.link #logout type="button" { "log out" } }
                    }
                }
                main #main { (body) }
            }
        }
    }
}

/// The sessions list.
pub fn sessions(rows: &[SessionRow], page: i64, more: bool, base: &str) -> Markup {
    let pages = format!("{}/?page=", base);
    html! {
        @if base.is_empty() { h1 { "Sessions" } } @else { h1 { "Sessions of " (t(base.trim_start_matches("/fleet/"))) } p.sub { "A verified, read-only replica of another Pi." } }
        @if rows.is_empty() { p.empty { "No sessions yet. Submit one with " code { "minato submit" } "." } }
        table.sessions {
            thead { tr { th { "Label" } th { "Status" } th { "Turns" } th { "Waiting" } th { "Created" } th { "Session" } } }
            tbody {
                @for s in rows {
                    tr {
                        td.label {
                            a href={ (base) "/s/" (s.id) } { (t(&s.label)) } (flag(&s.label))
                            @if let Some(agent) = &s.agent { " " span.agent title="an outside agent's session" { (t(agent)) } }
                        }
                        td { span class={ "status " (s.status) } { (s.status) } }
                        td.num { (s.turns) }
                        td.num { @if s.waiting > 0 { a.badge href="/approvals" { (s.waiting) } } @else { "0" } }
                        td { (when(&s.created_at)) }
                        td { a href={ (base) "/s/" (s.id) } { code { (short(&s.id)) } } }
                    }
                }
            }
        }
        (pager(&pages, page, more))
    }
}

fn pager(base: &str, page: i64, more: bool) -> Markup {
    html! {
        nav.pager {
            @if page > 0 { a href={ (base) (page - 1) } { "← newer" } }
            @if more { a href={ (base) (page + 1) } { "older →" } }
        }
    }
}

/// A session's history, `kura log --records` in a page, with a diff picker.
pub fn history(h: &History, page: usize, per_page: usize, per_ledger: usize, base: &str) -> Markup {
    let sid = format!("{base}/s/{}", h.session.session_id);
    let short_sid = h.session.session_id.to_string();
    html! {
        h1 { "Session " code { (short(&short_sid)) } }
        p.sub { (t(&h.session.label)) " · " span class={ "status " (h.session.status.as_str()) } { (h.session.status.as_str()) } " · " (h.total_ledgers) " ledgers" }
        @if let Some((a, i, o, m)) = h.spent { p.sub.spent { "Spent: " (a) " model answers, " (i) "+" (o) " tokens, " (m) " millionths" } }
        @if !h.writs.is_empty() { p.sub { "Its calls ran under writ " @for w in &h.writs { code { (t(w)) } " " } "(" a href="/writs" { "writs" } ")" } }
        @if base.is_empty() { form.diff method="get" action="/diff" {
            label { "Diff " select name="a" { @for l in &h.ledgers { option value=(l.ledger.ledger_id) { (t(&l.ledger.label)) } } } }
            label { " against " select name="b" { @for l in h.ledgers.iter().rev() { option value=(l.ledger.ledger_id) { (t(&l.ledger.label)) } } } }
            button type="submit" { "Diff" }
        } }
        @for l in &h.ledgers {
            section.ledger {
                h2 {
                    (t(&l.ledger.label)) " "
                    span class={ "state " (l.ledger.state.as_str()) } { (l.ledger.state.as_str()) }
                }
                p.sub {
                    code { (l.ledger.ledger_id) } " · " (l.ledger.record_count) " records"
                    @if let Some(hash) = &l.ledger.ledger_hash { " · hash " code title=(hash) { (short(hash)) } }
                    @if let Some(s) = &l.sealer { " · sealed by " strong.sealer { (t(s)) } }
                }
                @for r in &l.records { (record(r, base)) }
                @let shown_to = l.from + l.records.len() as u64;
                nav.pager {
                    @if l.from > 0 {
                        a href={ (sid) "?page=" (page) "&ledger=" (l.ledger.ledger_id) "&from=" (l.from.saturating_sub(per_ledger as u64)) } { "← earlier records" }
                    }
                    @if shown_to < l.ledger.record_count {
                        a href={ (sid) "?page=" (page) "&ledger=" (l.ledger.ledger_id) "&from=" (shown_to) } { "later records →" }
                    }
                }
            }
        }
        nav.pager {
            @if page > 0 { a href={ (sid) "?page=" (page - 1) } { "← newer ledgers" } }
            @if (page + 1) * per_page < h.total_ledgers { a href={ (sid) "?page=" (page + 1) } { "older ledgers →" } }
        }
    }
}

/// Requests waiting for people. The request's content is handed to the script as an
/// attribute, exactly as stored: the page shows the tool and arguments only after the browser
/// has re-hashed that text and found the request's hash.
pub fn approvals(items: &[Waiting], me: &Login) -> Markup {
    html! {
        h1 { "Approvals" }
        @if items.is_empty() { p.empty { "Nothing is waiting for a decision." } }
        @for w in items {
            @let a = &w.approval;
            @let mine = w.votes.iter().any(|(who, _)| who == &format!("user:{}", me.name));
            article.approval
                data-request-id=(a.request_id)
                data-request-hash=(a.request_hash)
                data-author=(w.author_id)
                data-content=(w.content)
                data-approver=(me.name)
                data-session=(a.session_id) {
                h2 { (t(&a.tool_name)) " for " a href={ "/s/" (a.session_id) } { (t(&w.session_label)) } }
                p.task { "Task: " q { (t(&w.instruction)) } (flag(&w.instruction)) }
                p.sub {
                    "rule " code { (t(a.rule.as_deref().unwrap_or_default())) }
                    " · needs " (a.required) " approval" @if a.required != 1 { "s" }
                    " · filed " (when(&a.created_at)) " by " code.by { (t(&w.author_id)) }
                    " · request " code title=(a.request_id) { (short(&a.request_id.to_string())) }
                }
                p.votes {
                    @if w.votes.is_empty() { "No votes yet." }
                    @else {
                        "So far: "
                        @for (who, vote) in &w.votes { span class={ "vote " (vote) } { (t(who)) " " (t(vote)) "d" } " " }
                    }
                    @if let Some(e) = &a.edited_arguments { br; "Bound to edited arguments: " code { (t(e)) } }
                }
                p.hidden-chars hidden { }
                div.verified hidden { }
                p.check { "Checking the request's hash in this browser…" }
                @if !mine && a.tool_name == proto::content::PERSON_ASK {
                    // A question: the person answers it (signed, like any decision).
                    form.decide.answer hidden {
                        p.question { "Question: " q.question {} }
                        label { "Your answer " input name="answer" maxlength="4096" autocomplete="off" list={ "choices-" (a.request_id) }; }
                        datalist id={ "choices-" (a.request_id) } {}
                        input type="hidden" name="note" value="";
                        textarea name="arguments" hidden {}
                        div.buttons {
                            button.answer type="button" data-decision="answer" { "Answer" }
                            button.deny type="button" data-decision="deny" { "Decline" }
                        }
                        p.outcome role="status" {}
                    }
                } @else if !mine {
                    form.decide hidden {
                        label { "Note or reason " input name="note" maxlength="200" autocomplete="off"; }
                        details.edit {
                            summary { "Edit the arguments" }
                            textarea name="arguments" rows="6" spellcheck="false" {}
                        }
                        div.buttons {
                            button.approve type="button" data-decision="approve" { "Approve" }
                            button.edit-approve type="button" data-decision="approve-edited" { "Approve edited" }
                            button.deny type="button" data-decision="deny" { "Deny" }
                        }
                        p.outcome role="status" {}
                    }
                } @else {
                    p.sub { "You have voted on this request." }
                }
            }
        }
    }
}

/// Why the console could not vouch for the last checkpoint, in the words the page shows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// No checkpoint has been signed.
    #[error(
        "No checkpoint signed yet (kura serve signs one when it holds the log key): nothing to \
         check against the pinned log key."
    )]
    NotSigned,
    /// No log key is pinned to check it with.
    #[error("not checked: no log key is pinned ([serve] log_verifier)")]
    NotPinned,
    /// The note does not open under the pinned key.
    #[error("REFUSED: {0}")]
    Refused(String),
    /// Signed, but this database's seal log does not extend it.
    #[error("ALARM: signed by {signer}, but {why}")]
    Alarm {
        /// The log key's name.
        signer: String,
        /// What does not match.
        why: String,
    },
    /// The database could not be compared with it.
    #[error("cannot compare with this database: {0}")]
    Compare(String),
    /// The database could not be read.
    #[error("{0}")]
    Unread(String),
}

/// Checks the signer's last checkpoint against the pinned log key and the store: what a
/// person may trust, said in words (`Err` says why not).
pub fn check_checkpoint(
    store: &kura_store::Store,
    note: Option<&str>,
    vkey: Option<&str>,
) -> Result<String, CheckpointError> {
    use kura_tlog::checkpoint::{extends, open};
    let note = note.ok_or(CheckpointError::NotSigned)?;
    let Some(vkey) = vkey else {
        return Err(CheckpointError::NotPinned);
    };
    let name = vkey.split('+').next().unwrap_or_default();
    let cp = open(note, vkey).map_err(|e| CheckpointError::Refused(e.to_string()))?;
    match extends(&store.seal_log(), &cp) {
        Ok(Ok(())) => Ok(format!(
            "Checked by this console against the pinned log key {name}: signed, {} seals, \
             and this database's seal log still extends it.",
            cp.size
        )),
        Ok(Err(why)) => Err(CheckpointError::Alarm {
            signer: name.to_owned(),
            why: why.to_string(),
        }),
        Err(e) => Err(CheckpointError::Compare(e.to_string())),
    }
}

/// Verification state: the last sweep, the last checkpoint (checked here against the pinned
/// log key) and its witnesses, any alarm.
pub fn verification(
    sweep: Option<&kura_work::ops::Sweep>,
    checkpoint: Option<&str>,
    checked: &Result<String, CheckpointError>,
    trust: &crate::Trust,
    alarm: Option<&str>,
) -> Markup {
    html! {
        h1 { "Verification" }
        @if let Some(a) = alarm { p.fail { (t(a)) } }
        h2 { "Integrity sweep" }
        @match sweep {
            Some(s) if s.ok => p.ok { "OK, " (when(&s.at)) ": " (t(&s.summary)) },
            Some(s) => p.fail { "FAILED, " (when(&s.at)) ": " (t(&s.summary)) },
            None => p.empty { "No sweep has run yet (kura serve runs one soon after it starts)." },
        }
        h2 { "Signed checkpoint" }
        @match checked {
            Ok(m) => p.ok.checked { (t(m)) },
            Err(m) => p.fail.checked { (t(&m.to_string())) },
        }
        @if let Some(c) = checkpoint {
            details { summary { "The signed note" } pre.checkpoint { (t(c)) } }
        }
        h2 { "Witnesses" }
        @if trust.witnesses.is_empty() && trust.peers.is_empty() { p.empty { "None configured." } }
        ul {
            @for w in &trust.witnesses { li { "directory " code { (t(w)) } } }
            @for p in &trust.peers { li { "peer " (t(p)) " (cosigns over the bus)" } }
        }
    }
}

/// `kura status` as a page.
pub fn status(st: &kura_work::ops::Status, alarm: &kura_history::ungated::Alarm) -> Markup {
    html! {
        h1 { "Status" }
        @if !alarm.newest.is_empty() {
            section.ungated {
                p.fail { "ALARM: " (alarm.count) " tool call(s) ran ungated in the last day: an agent's PreToolUse hook was missing, killed or timed out, and nobody ruled on them." }
                ul { @for u in &alarm.newest {
                    li { code { (t(&u.tool)) } " by " (t(&u.by)) " in " a href={ "/s/" (u.session_id) } { (t(&u.session_label)) } " at " (t(&u.at)) " — " a href={ "/r/" (u.record_id) } { "the record" } }
                } }
            }
        }
        table.daemons {
            thead { tr { th { "Daemon" } th { "Kind" } th { "Up" } th { "Last beat" } th { "NATS" } th { "Detail" } } }
            tbody {
                @for d in &st.daemons {
                    tr class=(if d.up { "up" } else { "down" }) {
                        td { (t(&d.instance)) } td { (t(&d.kind)) }
                        td { @if d.up { "up" } @else { span.fail { "down" } } }
                        td.num { (d.last_beat_s) " s ago" }
                        td { @if d.nats_connected { "connected" } @else { "not connected" } }
                        td { @if let Some(x) = &d.detail {
                            @if d.alarm { span.fail { (t(x)) } } @else { (t(x)) }
                        } }
                    }
                }
            }
        }
        h2 { "Work" }
        ul {
            li { "queued requests: " (st.backlog.queued_requests) }
            li { "pending turns: " (st.backlog.pending_turns) }
            li { "running turns: " (st.backlog.running_turns) }
            li { "turns waiting for approval: " (st.backlog.waiting_turns) }
            li { "open approvals: " (st.backlog.open_approvals) }
        }
        p.sub { "database " (st.db_bytes / 1024) " KiB, WAL " (st.wal_bytes / 1024) " KiB" }
    }
}

/// Memory search.
pub fn memory(q: &str, hits: &[kura_memory::Hit]) -> Markup {
    html! {
        h1 { "Memory" }
        form method="get" action="/memory" {
            input name="q" value=(q) placeholder="search facts and outputs" autocomplete="off";
            button type="submit" { "Search" }
        }
        @if !q.is_empty() && hits.is_empty() { p.empty { "Nothing found." } }
        @for h in hits {
            div.hit {
                (record(&RecordView::of(&h.record, 0), ""))
                p.sub { "score " (format!("{:.3}", h.score)) @if h.superseded { " · superseded" } }
            }
        }
    }
}

/// The login page: the browser's key signs a challenge.
pub fn login(challenge: &str) -> Markup {
    html! {
        h1 { "Log in" }
        p { "This browser signs in with the key it keeps for this console (nothing to type)." }
        div #login data-challenge=(challenge) {
            button #login-button type="button" { "Log in with this browser's key" }
            p.outcome role="status" {}
        }
        p.sub { "No key in this browser yet? " a href="/enrol" { "Enrol this browser" } "." }
    }
}

/// The enrol page: make a key in the browser and show what the operator must trust.
pub fn enrol() -> Markup {
    html! {
        h1 { "Enrol this browser" }
        p { "The browser makes an Ed25519 key it can use but never reveal (WebCrypto, kept in this browser's storage). Give its public key to the operator." }
        div #enrol {
            label { "Your approver name " input #enrol-name autocomplete="off" maxlength="64"; }
            button #enrol-button type="button" { "Make this browser's key" }
            div.result hidden {
                p { "Public key: " code #enrol-key {} }
                p { "The operator trusts it for the console (" code { "serve.toml" } ") and for approvals (aegis's config), then restarts both:" }
                pre #enrol-config {}
                a href="/login" { "Then log in →" }
            }
            p.outcome role="status" {}
        }
    }
}

/// A page saying what went wrong, with nothing from the request echoed unescaped.
pub fn error(message: &str) -> Markup {
    html! { h1 { "Not available" } p.fail { (t(message)) } p { a href="/" { "Back to the sessions" } } }
}

/// The fleet: this Pi and each replica — what is sealed, what the hub holds, the checkpoint
/// each replica was verified against, and any ALARM.
pub fn fleet(pis: &[kura_fleet::status::PiStatus]) -> Markup {
    html! {
        h1 { "Fleet" }
        @if pis.is_empty() { p.empty { "This Pi is not in a fleet ([fleet] in serve.toml; README: A fleet of Pis)." } }
        table.daemons {
            thead { tr { th { "Pi" } th { "Leaves" } th { "Hub / checkpoint" } th { "Last seal" } th { "State" } } }
            tbody {
                @for p in pis {
                    tr {
                        td.label {
                            @if p.role == "self" { strong { (t(&p.name)) } " (this Pi)" }
                            @else { a href={ "/fleet/" (p.name) } { (t(&p.name)) } }
                        }
                        td.num { (p.leaves) }
                        td.num {
                            @if p.role == "self" { (p.published) " on the hub" }
                            @else { "verified to " (p.published) }
                        }
                        td { @if let Some(w) = &p.last_seal { (when(w)) } @else { "never" } }
                        td {
                            @if let Some(a) = &p.alarm { span.fail { "ALARM: " (t(a)) } }
                            @else if p.role == "self" { (p.leaves.saturating_sub(p.published)) " to publish" }
                            @else if let Some(v) = &p.verified_at { "verified " (when(v)) }
                            @else { "nothing yet" }
                        }
                    }
                }
            }
        }
    }
}

/// Every writ: who holds it, what it allows, what was spent and refused, and whether it is
/// live; for a `[writs] issuers` person, a form to grant one and a button to revoke each,
/// signed in the browser (the page shows the exact statement before it is signed).
pub fn writs(
    all: &[kura_work::writs::StoredWrit],
    now_ms: i64,
    me: &Login,
    issuer: bool,
) -> Markup {
    let limit = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
    html! {
        h1 { "Writs" }
        @if issuer { (grant_form(me)) }
        @else { p.sub { "You are not one of [writs] issuers here, so you can read writs but not grant or revoke them." } }
        @if all.is_empty() { p.empty { "No writs: sessions run under the installed policy." } }
        table.daemons {
            thead { tr { th { "Writ" } th { "Holder" } th { "Allows" } th { "Spent" } th { "Refused" } th { "State" } } }
            tbody {
                @for w in all {
                    @let b = &w.writ.body;
                    @let expired = kura_policy::writ::parse_time(&b.expires_at).is_ok_and(|e| now_ms >= e);
                    tr {
                        td.label { code title=(b.id) { (short(&b.id.to_string())) } @if let Some(p) = &b.parent { br; "from " code title=(p) { (short(&p.to_string())) } } }
                        td { (t(&b.holder)) br; "by " (t(&b.issuer)) }
                        td { (t(&b.tools.join(", "))) " · paths " (t(&b.paths.join(", "))) " · up to " (b.ceiling.as_str()) }
                        td.num { (w.calls_used) "/" (limit(b.budget.tool_calls)) " calls · " (w.tokens_used) "/" (limit(b.budget.tokens)) " tokens · " (w.money_used) "/" (limit(b.budget.money_micros)) " millionths" }
                        td.num { (w.refused) }
                        td {
                            @if w.revoked_by.is_some() { span.fail { "revoked" } }
                            @else if expired { "expired " (when(&b.expires_at)) }
                            @else {
                                "live until " (when(&b.expires_at))
                                @if issuer {
                                    form.revoke data-writ=(b.id) data-by=(format!("user:{}", me.name)) {
                                        input name="reason" maxlength="200" autocomplete="off" placeholder="why";
                                        button type="button" { "Sign and revoke" }
                                        p.outcome role="status" {}
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The grant form: the script builds the writ from it, shows the statement, and signs it.
fn grant_form(me: &Login) -> Markup {
    html! {
        details.grant {
            summary { "Grant a writ" }
            form #grant data-issuer=(format!("user:{}", me.name)) {
                label { "Holder " input name="holder" maxlength="200" autocomplete="off" placeholder="session:ID, agent:NAME, user:NAME or role:NAME"; }
                label { "Tools " input name="tools" maxlength="2000" autocomplete="off" placeholder="fs.read, fs.*"; }
                label { "Paths " input name="paths" maxlength="2000" autocomplete="off" value="*"; }
                label { "Up to "
                    select name="ceiling" {
                        option value="read" selected { "read" }
                        option value="write" { "write" }
                        option value="external" { "external" }
                        option value="irreversible" { "irreversible" }
                    }
                }
                label { "Tool calls " input name="tool_calls" inputmode="numeric" autocomplete="off"; }
                label { "Tokens " input name="tokens" inputmode="numeric" autocomplete="off"; }
                label { "Money (millionths) " input name="money_micros" inputmode="numeric" autocomplete="off"; }
                label { "Wall time (minutes) " input name="wall_minutes" inputmode="numeric" autocomplete="off"; }
                label { "Delegate key " input name="delegate_key" maxlength="64" autocomplete="off" placeholder="optional: the holder's public key"; }
                label { "Lasts (hours) " input name="hours" inputmode="numeric" autocomplete="off" value="24"; }
                p.sub { "You sign exactly this statement:" }
                pre #writ-preview {}
                button type="button" #grant-button { "Sign and grant" }
                p.outcome role="status" {}
            }
        }
    }
}
