//! Records on a page: one record (its content cut to what a page shows, with the way to read
//! the rest), a record read a chunk at a time, and a diff a page of each section at a time.

use maud::{Markup, html};

use crate::records::{CHUNK_BYTES, Chunk, DIFF_PER_PAGE, DiffView, RecordView, Section};
use crate::text::{flag, short, t, when};

/// One record as a row of a history; `base` prefixes its links (`/fleet/<pi>` on a replica).
pub fn record(r: &RecordView, base: &str) -> Markup {
    // Whole small records are pretty-printed; a cut one is shown as stored, up to the cut.
    let text = if r.complete() {
        serde_json::from_str::<serde_json::Value>(&r.content)
            .and_then(|v| serde_json::to_string_pretty(&v))
            .unwrap_or_else(|_| r.content.clone())
    } else {
        r.content.clone()
    };
    html! {
        div class={ "record t-" (r.record_type.replace('.', "-")) } {
            div.meta {
                span.pos { "[" (r.position) "]" }
                span.type { (t(&r.record_type)) }
                span.author { (t(&r.author_id)) }
                (when(&r.created_at))
                code.hash title=(r.hash) { (short(&r.hash)) }
            }
            (flag(&text))
            pre.content { (t(&text)) }
            // A model's answer: what it was shown, rebuilt and checked (local history only:
            // a replica holds no turns to rebuild from).
            @if let (Some(sha), "") = (&r.prompt, base) {
                p.prompt {
                    a href={ "/prompt/" (r.record_id) } { "what the model was shown" }
                    " · request SHA-256 " code title=(sha) { (short(sha)) }
                }
            }
            @if !r.complete() {
                p.cut {
                    (r.bytes) " bytes, shown first " (r.content.len()) " · "
                    a href={ (base) "/r/" (r.record_id) "?from=0" } { "read it all, " (CHUNK_BYTES / 1024) " KiB at a time" }
                }
            }
        }
    }
}

/// A record read a chunk at a time (`base` as in [`record`]).
pub fn chunk(c: &Chunk, base: &str) -> Markup {
    let r = &c.record;
    let to = c.from + r.content.len() as u64;
    html! {
        h1 { "Record " code { (short(&r.record_id)) } }
        p.sub {
            (t(&r.record_type)) " by " (t(&r.author_id)) " · " (when(&r.created_at))
            " · hash " code title=(r.hash) { (short(&r.hash)) }
        }
        p.sub { "bytes " (c.from) "–" (to) " of " (r.bytes) " (the content as stored, RFC 8785 JSON)" }
        (flag(&r.content))
        pre.content { (t(&r.content)) }
        nav.pager {
            @if c.from > 0 {
                a href={ (base) "/r/" (r.record_id) "?from=" (c.from.saturating_sub(CHUNK_BYTES as u64)) } { "← previous chunk" }
            }
            @if to < r.bytes {
                a href={ (base) "/r/" (r.record_id) "?from=" (to) } { "next chunk →" }
            }
        }
    }
}

/// `kura diff` as a page: each section a page at a time.
pub fn diff(d: &DiffView, files: Option<&kura_history::workspace::FileDiff>) -> Markup {
    let (a, b) = (d.a.ledger_id, d.b.ledger_id);
    let side = |title: &str, class: &str, s: &Section| {
        html! {
            h2 { (title) " (" (s.total) ")" }
            div class=(class) { @for r in &s.records { (record(r, "")) } }
        }
    };
    let more = [&d.only_a, &d.only_b, &d.both]
        .iter()
        .any(|s| s.total > (d.page + 1) * DIFF_PER_PAGE);
    html! {
        h1 { "Diff" }
        p.sub {
            (t(&d.a.label)) " " code title=(a) { (short(&a.to_string())) }
            " → " (t(&d.b.label)) " " code title=(b) { (short(&b.to_string())) }
        }
        (side(&format!("Only in {}", t(&d.a.label)), "only-a", &d.only_a))
        (side(&format!("Only in {}", t(&d.b.label)), "only-b", &d.only_b))
        (side("In both", "both", &d.both))
        @if let Some(f) = files.filter(|f| f.tree_a.is_some() || f.tree_b.is_some()) {
            h2 { "Files (" (f.files.len()) ")" }
            div.files {
                @for x in &f.files {
                    details.file open {
                        summary { span class=(x.change.change.as_str()) { (x.change.change.as_str()) } " " code { (t(&x.change.path)) } }
                        @match &x.diff {
                            Some(text) => pre.udiff { (t(text)) },
                            None => p.sub { "binary, or bytes not stored" },
                        }
                    }
                }
            }
        }
        nav.pager {
            @if d.page > 0 { a href={ "/diff?a=" (a) "&b=" (b) "&page=" (d.page - 1) } { "← previous" } }
            @if more { a href={ "/diff?a=" (a) "&b=" (b) "&page=" (d.page + 1) } { "more →" } }
        }
    }
}

/// What a model was shown for the answer `record` begins: the request rebuilt from the
/// store, and whether it hashes to what the record says was sent.
pub fn prompt(record: &str, recorded: &str, proven: &kura_model::prompt::Proven) -> Markup {
    // Bounded like a record chunk: a long turn's request can be large. A small body is
    // pretty-printed; a large one is shown as sent, cut (pretty-printing megabytes to show
    // a quarter of one would cost the page more than it shows).
    const SHOWN: usize = 256 * 1024;
    let text = if proven.body.len() <= SHOWN {
        serde_json::from_slice::<serde_json::Value>(&proven.body)
            .and_then(|v| serde_json::to_string_pretty(&v))
            .unwrap_or_else(|_| String::from_utf8_lossy(&proven.body).into_owned())
    } else {
        String::from_utf8_lossy(&proven.body[..SHOWN]).into_owned()
    };
    let mut end = text.len().min(SHOWN);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let ok = proven.verdict == kura_model::prompt::Verdict::Ok;
    html! {
        h1 { "What the model was shown" }
        p.sub { "model.prompt record " code { (short(record)) } " · rebuilt from its turn's sealed context ledger and the records before it" }
        @if ok {
            p.ok { "verified: the rebuilt request hashes to " code { (proven.sha256) } ", the SHA-256 the record says was sent, and its ledgers verify" }
        } @else {
            p.fail { "FAIL: " (proven.verdict) " (rebuilt " code { (short(&proven.sha256)) } ", recorded " code { (short(recorded)) } ")" }
        }
        pre.content { (t(&text[..end])) }
        @if proven.body.len() > SHOWN || text.len() > end {
            p.cut { (proven.body.len()) " bytes sent; shown cut (`kura show --prompt` prints it all)" }
        }
    }
}
