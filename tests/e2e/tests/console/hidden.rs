//! Attack: a model shows a person something other than what they would sign. Bidi overrides
//! and zero-width characters reorder or hide text on the page, so every string from a model,
//! a tool or the bus is shown with them escaped (as the CLI does), and a request holding any
//! is flagged on its approval card.

use kura_testkit::free_port;
use kura_testkit::stack::Stack;
use serde_json::Value;

use super::browser::{enrolled, eval, shot, until};

// `sh -c "cat photo_<RLO>gnp.sh<PDF>"` renders as `cat photo_hs.png`; the thought hides a
// word behind zero-width characters and an Arabic letter mark.
const SCRIPT: &str = r#"{"turns": [[
  {"thought": "all \u200bfine\u2060 here\u061c\ufeff \u2066isolated\u2069"},
  {"tool": "shell.run", "args": {"argv": ["sh", "-c", "cat photo_\u202egnp.sh\u202c"]}},
  {"deliver": "done"}
]]}"#;

const POLICY: &str = r#"
[defaults]
read = "allow"
write = "ask"
external = "ask"

[[rules]]
name = "shell-asks"
tool = "shell.run"
decision = "ask"
"#;

/// Any character that hides or reorders text, in what the page shows a person.
const HIDDEN: &str = r"/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]/";

#[test]
fn console_shows_a_bidi_override_escaped_and_flagged() {
    let mut s = Stack::new(SCRIPT);
    std::fs::write(s.path("policy.toml"), POLICY).expect("policy");
    let port = free_port();
    let b = enrolled(&mut s, port);
    s.submit("show the \u{200b}photo");
    let c = &b.c;
    let session = b.run(async {
        c.goto(&format!("{}/approvals", b.url)).await.expect("approvals");
        until(c, "a verified request", "document.querySelector('article.approval .verified:not([hidden]) pre')").await;
        let shown = eval(c, "document.querySelector('article.approval .verified pre').textContent").await;
        let shown = shown.as_str().unwrap_or_default().to_owned();
        assert!(
            shown.contains(r"cat photo_\u{202e}gnp.sh\u{202c}"),
            "the override is shown as an escape: {shown}"
        );
        let flag = eval(c, "document.querySelector('article.approval .hidden-chars:not([hidden])')?.textContent || ''").await;
        assert!(
            flag.as_str().is_some_and(|f| f.contains("hidden") && f.contains("202e")),
            "the card flags the request: {flag}"
        );
        let raw = eval(c, &format!("{HIDDEN}.test(document.body.innerText) || {HIDDEN}.test(document.querySelector('article.approval textarea')?.value || '')")).await;
        assert_eq!(raw, Value::Bool(false), "nothing hidden reaches the approvals page");
        shot(c, "approvals-hidden").await;
        eval(c, "document.querySelector('article.approval').dataset.session").await
    });
    let session = session
        .as_str()
        .expect("the card names its session")
        .to_owned();
    b.run(async {
        c.goto(&format!("{}/s/{session}", b.url))
            .await
            .expect("history");
        until(
            c,
            "the history",
            "document.querySelector('.t-agent-thought pre')",
        )
        .await;
        let thought = eval(
            c,
            "document.querySelector('.t-agent-thought pre').textContent",
        )
        .await;
        assert!(
            thought.as_str().is_some_and(
                |t| t.contains(r"\u{200b}fine\u{2060}") && t.contains(r"\u{2066}isolated")
            ),
            "{thought}"
        );
        for page in [format!("/s/{session}"), "/".into()] {
            c.goto(&format!("{}{page}", b.url)).await.expect("page");
            until(c, &page, "document.querySelector('main h1')").await;
            let raw = eval(c, &format!("{HIDDEN}.test(document.body.innerText)")).await;
            assert_eq!(raw, Value::Bool(false), "nothing hidden reaches {page}");
        }
    });
    drop(b);
    s.shutdown_cleanly();
}
