//! Writs and budgets in the worker: every call checked against the turn's writ before
//! anything runs (a refusal a recorded, counted `sys.error`), model usage recorded on the
//! step and debited on the session and the writ, and a spent budget ending the run with a
//! deliverable that names it.

use ed25519_dalek::SigningKey;
use kura_policy::writ::{Issuer, sign_revocation, sign_writ};
use proto::Effect;
use proto::writ::{REVOCATION_KIND, RevocationBody, Usage, WritBody};

use super::*;
use crate::tools::CallPattern;

fn key(b: u8) -> SigningKey {
    SigningKey::from_bytes(&[b; 32])
}

/// The issuer every worker of these tests trusts: "ana", key 1.
pub(super) fn issuers() -> Vec<Issuer> {
    vec![Issuer {
        name: "ana".into(),
        public_key: hex::encode(key(1).verifying_key().to_bytes()),
    }]
}

/// A model that calls `tool` on `path` in every answer until its turn has made `calls`
/// calls, then delivers; each answer reports 30 tokens in and 30 out.
struct Spender {
    tool: &'static str,
    path: &'static str,
    calls: usize,
    /// Calls per answer.
    burst: usize,
}

impl Provider for Spender {
    fn next(&self, input: &TurnInput<'_>) -> Result<Vec<Step>, ProviderError> {
        let made = input
            .history
            .iter()
            .filter(|r| r.record_type == RecordType::ToolCall)
            .count();
        if made >= self.calls {
            return Ok(vec![Step::Deliver {
                text: "done".into(),
                is_final: true,
                extra: Default::default(),
            }]);
        }
        let arguments = json!({"path": self.path, "content": "x"});
        Ok((0..self.burst.max(1))
            .map(|_| Step::ToolCall {
                name: self.tool.into(),
                arguments: arguments.as_object().cloned().unwrap_or_default(),
            })
            .collect())
    }

    fn answer(&self, input: &TurnInput<'_>) -> Result<kura_model::Answer, ProviderError> {
        Ok(kura_model::Answer {
            steps: self.next(input)?,
            usage: Some(Usage {
                provider: "openai".into(),
                model: "small-1".into(),
                tokens_in: 30,
                tokens_out: 30,
                money_micros: 9,
            }),
            prompt: None,
        })
    }
}

const WRIT: &str = "01930000-0000-7000-8000-00000000000a";

fn grant(store: &mut Store, f: impl FnOnce(&mut WritBody)) {
    let mut body = WritBody::fixture(WRIT, "user:oles");
    f(&mut body);
    let w = sign_writ(&key(1), body);
    store
        .write(|tx| kura_work::writs::grant(tx, &w, "user:ana", None))
        .expect("grant")
        .expect("stored");
}

/// Runs one turn of `instruction` by `model` with `tools`; returns its records and the
/// workspace.
fn run(
    store: &mut Store,
    dir: &std::path::Path,
    model: Spender,
    config: WorkerConfig,
    tools: ToolsConfig,
) -> (Vec<proto::record::Record>, std::path::PathBuf) {
    let turn_id = kura_testkit::pending_turn(store, "spend");
    let ws_root = dir.join("ws");
    let (rt, mut worker) = worker_on(store.path(), &ws_root, "w", Arc::new(model), config);
    worker.tools = Arc::new(Toolbox::with_state(
        ToolsConfig {
            workspace_root: ws_root.display().to_string(),
            ..tools
        },
        std::path::PathBuf::from("hashi"),
        crate::sandbox::SandboxState::Off,
    ));
    let _guard = rt.enter();
    assert!(worker.step().expect("step"));
    let session = turn(store.conn(), turn_id).expect("turn").session_id;
    (
        records_of(store, turn_id),
        ws_root.join(session.to_string()),
    )
}

fn texts(out: &[proto::record::Record], t: RecordType) -> Vec<String> {
    out.iter()
        .filter(|r| r.record_type == t)
        .map(|r| r.content["text"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn fresh() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::create(dir.path().join("w.db"), &StoreOptions::default()).expect("db");
    (dir, store)
}

fn spend(tool: &'static str, path: &'static str, calls: usize) -> Spender {
    Spender {
        tool,
        path,
        calls,
        burst: 1,
    }
}

#[test]
fn a_call_outside_the_writs_scope_is_refused_before_it_runs() {
    let (dir, mut store) = fresh();
    grant(&mut store, |w| w.tools = vec!["fs.read".into()]);
    let (out, ws) = run(
        &mut store,
        dir.path(),
        spend("fs.write", "a.txt", 1),
        WorkerConfig::default(),
        ToolsConfig::default(),
    );
    assert!(!ws.join("a.txt").exists(), "the write did not run");
    let errors = texts(&out, RecordType::SysError);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("outside writ") && e.contains("fs.write")),
        "{errors:?}"
    );
    let call = out
        .iter()
        .find(|r| r.record_type == RecordType::ToolCall)
        .expect("call");
    assert_eq!(call.content["writ"], WRIT, "the call names its writ");
    let w = kura_work::writs::writ(&store, WRIT.parse().expect("id"))
        .expect("read")
        .expect("writ");
    assert_eq!(
        (w.refused, w.calls_used),
        (1, 0),
        "refused and counted, nothing spent"
    );
}

#[test]
fn a_path_outside_the_writs_scope_is_refused_before_it_runs() {
    let (dir, mut store) = fresh();
    grant(&mut store, |w| w.paths = vec!["notes/*".into()]);
    let (out, ws) = run(
        &mut store,
        dir.path(),
        spend("fs.write", "notes/../a.txt", 1),
        WorkerConfig::default(),
        ToolsConfig::default(),
    );
    assert!(!ws.join("a.txt").exists(), "the write did not run");
    assert!(
        texts(&out, RecordType::SysError)
            .iter()
            .any(|e| e.contains("path \"a.txt\""))
    );
}

#[test]
fn a_call_above_the_writs_ceiling_is_refused_before_it_runs() {
    let (dir, mut store) = fresh();
    grant(&mut store, |w| w.ceiling = Effect::Write);
    let tools = ToolsConfig {
        irreversible: vec![CallPattern {
            tool: "fs.write".into(),
            args: [("path".to_owned(), "keep/*".to_owned())].into(),
        }],
        ..ToolsConfig::default()
    };
    let (out, ws) = run(
        &mut store,
        dir.path(),
        spend("fs.write", "keep/a.txt", 1),
        WorkerConfig::default(),
        tools,
    );
    assert!(
        !ws.join("keep/a.txt").exists(),
        "the irreversible write did not run"
    );
    let errors = texts(&out, RecordType::SysError);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("irreversible call is above")),
        "{errors:?}"
    );
    let call = out
        .iter()
        .find(|r| r.record_type == RecordType::ToolCall)
        .expect("call");
    assert_eq!(
        call.metadata.get("effect").map(String::as_str),
        Some("irreversible")
    );
}

#[test]
fn a_call_past_the_writs_tool_call_budget_is_refused() {
    let (dir, mut store) = fresh();
    grant(&mut store, |w| w.budget.tool_calls = Some(2));
    // Three calls in one answer: the third finds the budget spent.
    let (out, _) = run(
        &mut store,
        dir.path(),
        Spender {
            burst: 3,
            ..spend("fs.read", "a.txt", 3)
        },
        WorkerConfig::default(),
        ToolsConfig::default(),
    );
    let errors = texts(&out, RecordType::SysError);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("refused by writ")
                && e.contains("tool_calls budget is spent (2 of 2)")),
        "{errors:?}"
    );
    let w = kura_work::writs::writ(&store, WRIT.parse().expect("id"))
        .expect("read")
        .expect("writ");
    assert_eq!((w.calls_used, w.refused), (2, 1));
    // And the model is not asked again: no call is left, so the run ends saying why.
    assert!(
        errors
            .iter()
            .any(|e| e.contains("its writ ended the run") && e.contains("tool_calls")),
        "{errors:?}"
    );
}

#[test]
fn a_call_right_after_revocation_is_refused() {
    let (dir, mut store) = fresh();
    grant(&mut store, |_| {});
    let rev = sign_revocation(
        &key(1),
        RevocationBody {
            kind: REVOCATION_KIND.into(),
            writ_id: WRIT.parse().expect("id"),
            by: "user:ana".into(),
            reason: "enough".into(),
            revoked_at: "2026-11-26T12:00:00Z".into(),
        },
    );
    store
        .write(|tx| kura_work::writs::revoke(tx, &rev, &issuers(), "user:ana", None))
        .expect("tx")
        .expect("revoked");
    let (out, ws) = run(
        &mut store,
        dir.path(),
        spend("fs.write", "a.txt", 1),
        WorkerConfig::default(),
        ToolsConfig::default(),
    );
    assert!(!ws.join("a.txt").exists());
    // The model is not even asked: the run ends at once, saying why.
    let errors = texts(&out, RecordType::SysError);
    assert!(
        errors.iter().any(|e| e.contains("was revoked")),
        "{errors:?}"
    );
    assert!(out.iter().all(|r| r.record_type != RecordType::ToolCall));
}

#[test]
fn a_run_past_its_writs_expiry_stops() {
    let (dir, mut store) = fresh();
    grant(&mut store, |w| w.expires_at = "2026-01-02T00:00:00Z".into());
    let (out, _) = run(
        &mut store,
        dir.path(),
        spend("fs.read", "a.txt", 1),
        WorkerConfig::default(),
        ToolsConfig::default(),
    );
    let errors = texts(&out, RecordType::SysError);
    assert!(
        errors.iter().any(|e| e.contains("expired at 2026-01-02")),
        "{errors:?}"
    );
}

#[test]
fn a_token_budget_stops_the_run_with_a_deliverable_naming_it_and_usage_is_recorded() {
    let (dir, mut store) = fresh();
    grant(&mut store, |w| w.budget.tokens = Some(100));
    let (out, _) = run(
        &mut store,
        dir.path(),
        spend("fs.read", "a.txt", 10),
        WorkerConfig::default(),
        ToolsConfig::default(),
    );
    // Two answers (120 tokens) pass the 100 budget: no third answer is asked for.
    let calls = out
        .iter()
        .filter(|r| r.record_type == RecordType::ToolCall)
        .count();
    assert_eq!(calls, 2);
    let last = out
        .iter()
        .rev()
        .find(|r| r.record_type == RecordType::TaskDeliverable)
        .expect("deliverable");
    let text = last.content["text"].as_str().unwrap_or("");
    assert!(
        text.contains("tokens budget is spent (120 of 100)"),
        "{text}"
    );
    assert_eq!(last.content["final"], true);
    // Each answer's first record names the model and what it cost.
    let first = out
        .iter()
        .find(|r| r.record_type == RecordType::ToolCall)
        .expect("call");
    assert_eq!(
        first.metadata.get("model").map(String::as_str),
        Some("small-1")
    );
    assert_eq!(
        first.metadata.get("tokens_in").map(String::as_str),
        Some("30")
    );
    assert_eq!(
        first.metadata.get("money_micros").map(String::as_str),
        Some("9")
    );
    let session = store
        .sessions()
        .expect("sessions")
        .into_iter()
        .find(|s| s.label == "s")
        .expect("s")
        .session_id;
    assert_eq!(
        kura_work::writs::session_usage(&store, session).expect("usage"),
        Some((2, 60, 60, 18))
    );
    let w = kura_work::writs::writ(&store, WRIT.parse().expect("id"))
        .expect("read")
        .expect("writ");
    assert_eq!((w.tokens_used, w.money_used), (120, 18));
}

#[test]
fn a_session_token_budget_stops_a_run_without_a_writ() {
    let (dir, mut store) = fresh();
    let config = WorkerConfig {
        session_tokens: 150,
        ..WorkerConfig::default()
    };
    let (out, _) = run(
        &mut store,
        dir.path(),
        spend("fs.read", "a.txt", 10),
        config,
        ToolsConfig::default(),
    );
    assert_eq!(
        out.iter()
            .filter(|r| r.record_type == RecordType::ToolCall)
            .count(),
        3
    );
    let errors = texts(&out, RecordType::SysError);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("session's token budget ended the run (180 of 150")),
        "{errors:?}"
    );
}

#[test]
fn a_session_without_a_writ_runs_as_before() {
    let (dir, mut store) = fresh();
    let (out, ws) = run(
        &mut store,
        dir.path(),
        spend("fs.write", "a.txt", 1),
        WorkerConfig::default(),
        ToolsConfig::default(),
    );
    assert!(ws.join("a.txt").exists());
    let call = out
        .iter()
        .find(|r| r.record_type == RecordType::ToolCall)
        .expect("call");
    assert!(call.content.get("writ").is_none());
    assert!(texts(&out, RecordType::SysError).is_empty());
}

/// Attack (issue 34's review): a worker with approvals off files no request, yet the gate
/// still refuses a path with no normal form before any tool sees it — the refusal recorded
/// as with approvals on, not left to the tool's own confinement.
#[test]
fn with_approvals_off_a_path_that_climbs_is_refused_by_the_gate() {
    let (dir, mut store) = fresh();
    let (out, ws) = run(
        &mut store,
        dir.path(),
        spend("fs.write", "../escape.txt", 1),
        WorkerConfig {
            approvals: Approvals::Off,
            ..WorkerConfig::default()
        },
        ToolsConfig::default(),
    );
    let outside = ws.parent().map(|p| p.join("escape.txt"));
    assert!(outside.is_some_and(|p| !p.exists()), "nothing was written");
    let errors = texts(&out, RecordType::SysError);
    assert!(
        errors
            .iter()
            .any(|e| e == "refused: path \"../escape.txt\" leaves the workspace (..)"),
        "{errors:?}"
    );
}

/// [`Spender`], remembering the `max_tokens` each ask carried.
struct Bounded {
    inner: Spender,
    seen: std::sync::Mutex<Vec<Option<u64>>>,
}

impl Provider for Bounded {
    fn next(&self, input: &TurnInput<'_>) -> Result<Vec<Step>, ProviderError> {
        self.inner.next(input)
    }

    fn answer(&self, input: &TurnInput<'_>) -> Result<kura_model::Answer, ProviderError> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(input.max_tokens);
        self.inner.answer(input)
    }
}

/// Issue 36: nothing bounded an answer by what was left of the budget, so a run could
/// overshoot it by a whole answer. Each ask now carries what is left of the writ's tokens
/// (100, then 40 after an answer of 60) as `max_tokens`.
#[test]
fn each_ask_is_bounded_by_the_tokens_the_writ_has_left() {
    let (dir, mut store) = fresh();
    grant(&mut store, |w| w.budget.tokens = Some(100));
    let turn_id = kura_testkit::pending_turn(&mut store, "spend");
    let ws_root = dir.path().join("ws");
    let model = Arc::new(Bounded {
        inner: spend("fs.read", "a.txt", 10),
        seen: std::sync::Mutex::default(),
    });
    let (rt, mut worker) = worker_on(
        store.path(),
        &ws_root,
        "w",
        model.clone(),
        WorkerConfig::default(),
    );
    worker.tools = Arc::new(Toolbox::with_state(
        ToolsConfig {
            workspace_root: ws_root.display().to_string(),
            ..ToolsConfig::default()
        },
        std::path::PathBuf::from("hashi"),
        crate::sandbox::SandboxState::Off,
    ));
    let _guard = rt.enter();
    assert!(worker.step().expect("step"));
    let seen = model.seen.lock().expect("seen").clone();
    assert_eq!(seen, vec![Some(100), Some(40)], "turn {turn_id}");
}
