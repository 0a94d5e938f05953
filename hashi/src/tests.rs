//! The worker in-process, on a temporary database with NATS away (a bus that never
//! connects: doorbells go nowhere, as when the server is down): crash recovery of calls a
//! dead worker left without a result.

use proto::TurnId;
use std::sync::Arc;
use std::sync::Mutex;

use kura_model::{Provider, ProviderError, Step, TurnInput};
use kura_runtime::{Bus, Common, Stop};
use kura_store::{Store, StoreOptions};
use kura_work::{claim_next, fenced, now_ms, turn};
use proto::TurnState;
use proto::record::{NewRecord, RecordType};
use serde_json::{Value, json};

use crate::tools::{Toolbox, ToolsConfig};
use crate::{Approvals, Worker, WorkerConfig};

/// A model that only delivers, and remembers what history it was shown.
struct Deliverer(Mutex<Vec<usize>>);

impl Provider for Deliverer {
    fn next(&self, input: &TurnInput<'_>) -> Result<Vec<Step>, ProviderError> {
        self.0
            .lock()
            .map_err(|_| ProviderError::Fatal("poisoned".into()))?
            .push(input.history.len());
        Ok(vec![Step::Deliver {
            text: "done".into(),
            is_final: true,
            extra: Default::default(),
        }])
    }
}

fn call(tool: &str, args: Value, call_id: &str) -> NewRecord {
    NewRecord {
        record_type: RecordType::ToolCall,
        content: json!({"tool_name": tool, "arguments": args, "call_id": call_id}),
        author_id: "agent:hashi".into(),
        metadata: Default::default(),
    }
}

#[test]
fn a_dead_workers_side_effect_is_recorded_unknown_and_its_read_runs_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("w.db");
    let mut store = Store::create(&db, &StoreOptions::default()).expect("create");
    let turn_id = kura_testkit::pending_turn(&mut store, "write then read");
    let ws_root = dir.path().join("ws");

    // The first worker claims, records two calls, and dies before either has a result.
    let dead = claim_next(&mut store, "dead", 1, now_ms())
        .expect("claim")
        .expect("turn");
    std::fs::create_dir_all(ws_root.join(dead.session_id.to_string())).expect("ws");
    std::fs::write(
        ws_root.join(dead.session_id.to_string()).join("notes.txt"),
        "kept",
    )
    .expect("file");
    fenced(&mut store, &dead, |tx| {
        tx.append(
            dead.output_ledger_id,
            &call(
                "fs.write",
                json!({"path": "out.txt", "content": "x"}),
                "call-w",
            ),
        )?;
        tx.append(
            dead.output_ledger_id,
            &call("fs.read", json!({"path": "notes.txt"}), "call-r"),
        )
    })
    .expect("calls");
    std::thread::sleep(std::time::Duration::from_millis(5)); // its 1 ms lease runs out

    let provider = Arc::new(Deliverer(Mutex::new(Vec::new())));
    let (rt, mut worker) = worker_on(
        &db,
        &ws_root,
        "successor",
        provider.clone(),
        WorkerConfig::default(),
    );
    let _guard = rt.enter();
    assert!(worker.step().expect("step"), "the expired turn is claimed");

    let t = turn(store.conn(), turn_id).expect("turn");
    assert_eq!(t.state, TurnState::Done);
    let output = store
        .hydrate(t.output_ledger_id.expect("output"))
        .expect("hydrate");
    let result_of = |id: &str| {
        output
            .iter()
            .find(|r| r.record_type == RecordType::ToolResult && r.content["call_id"] == id)
            .map(|r| r.content.clone())
            .unwrap_or_else(|| panic!("no result for {id}"))
    };
    assert_eq!(
        result_of("call-w")["status"],
        "unknown",
        "a side effect is never run again"
    );
    assert!(
        !ws_root
            .join(dead.session_id.to_string())
            .join("out.txt")
            .exists(),
        "the write did not happen a second time (nor a first)"
    );
    let read = result_of("call-r");
    assert_eq!(read["status"], "success", "a read is safe to run again");
    assert_eq!(read["result"]["content"], "kept");
    assert_eq!(
        *provider.0.lock().expect("lock"),
        [4],
        "the model saw both calls and both results"
    );
}

/// A model whose answer depends on the instruction: `poison` delivers more than a record
/// holds (so every attempt fails to store it), `flood` makes a hundred tool calls in one
/// response, anything else delivers at once.
struct Adversary;

impl Provider for Adversary {
    fn next(&self, input: &TurnInput<'_>) -> Result<Vec<Step>, ProviderError> {
        let deliver = |text: String| Step::Deliver {
            text,
            is_final: true,
            extra: Default::default(),
        };
        Ok(match input.instruction().as_str() {
            "poison" => vec![deliver("p".repeat(proto::record::MAX_CONTENT_BYTES + 10))],
            "flood" => (0..100)
                .map(|i| Step::ToolCall {
                    name: "fs.write".into(),
                    arguments: json!({"path": format!("f{i}"), "content": "x"})
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                })
                .chain([deliver("flooded".into())])
                .collect(),
            _ => vec![deliver("done".into())],
        })
    }
}

/// A worker named `owner` on `db` with NATS away (a bus that never connects), approvals
/// off, the tools unconfined (no helper binary in a unit test) and `provider` as the model.
fn worker_on(
    db: &std::path::Path,
    ws_root: &std::path::Path,
    owner: &str,
    provider: Arc<dyn Provider>,
    config: WorkerConfig,
) -> (tokio::runtime::Runtime, Worker) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let common = Common {
        nats_url: "nats://127.0.0.1:1".into(),
        ..Common::default()
    };
    let bus = rt.block_on(Bus::connect(&common, "test")).expect("bus");
    let toolbox = Toolbox::with_state(
        ToolsConfig {
            workspace_root: ws_root.display().to_string(),
            ..ToolsConfig::default()
        },
        std::path::PathBuf::from("hashi"),
        crate::sandbox::SandboxState::Off,
    );
    let worker = Worker {
        store: Store::open(db, &StoreOptions::default()).expect("open"),
        renew_store: Some(Store::open(db, &StoreOptions::default()).expect("open")),
        owner: owner.into(),
        config: WorkerConfig {
            approvals: Approvals::Off,
            ..config
        },
        roles: Arc::new(crate::roles::Roles::single(
            provider.clone(),
            toolbox.specs().into(),
        )),
        role: crate::roles::Roles::single(provider.clone(), toolbox.specs().into())
            .get(None)
            .expect("the default role")
            .clone(),
        provider,
        specs: toolbox.specs().into(),
        tools: Arc::new(toolbox),
        retries: 0,
        bus,
        stop: Stop::new(),
        staged: Vec::new(),
        policy: None,
        issuers: Arc::from(issuers()),
        writs: Default::default(),
        spent: Vec::new(),
        usage_note: None,
        retries_note: 0,
        mistakes: 0,
        secrets: Arc::default(),
        files: crate::Files::open(db, &crate::FilesConfig::default())
            .expect("the object store")
            .map(Arc::new),
        changed: None,
    };
    (rt, worker)
}

fn records_of(store: &Store, turn_id: TurnId) -> Vec<proto::record::Record> {
    let t = turn(store.conn(), turn_id).expect("turn");
    store
        .hydrate(t.output_ledger_id.expect("output"))
        .expect("hydrate")
}

/// Attack: a turn whose result could never be stored was retried forever (42 claims in
/// 40 s), oldest first, so with one worker every other session starved.
#[test]
fn poison_turn_ends_after_max_attempts_without_starving_others() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("w.db");
    let mut store = Store::create(&db, &StoreOptions::default()).expect("create");
    let poison = kura_testkit::pending_turn(&mut store, "poison");
    let healthy = kura_testkit::pending_turn(&mut store, "healthy");
    let (rt, mut worker) = worker_on(
        &db,
        &dir.path().join("ws"),
        "w",
        Arc::new(Adversary),
        WorkerConfig {
            max_attempts: 3,
            retry_backoff_ms: 0,
            ..WorkerConfig::default()
        },
    );
    let _guard = rt.enter();

    assert!(
        worker.step().expect("step 1"),
        "the poison turn is claimed first (oldest)"
    );
    assert_eq!(
        turn(store.conn(), poison).expect("turn").state,
        TurnState::Pending
    );
    assert!(worker.step().expect("step 2"));
    assert_eq!(
        turn(store.conn(), healthy).expect("turn").state,
        TurnState::Done,
        "after one failure, the fresh turn goes before the failing one"
    );
    let mut steps = 0;
    while worker.step().expect("step") {
        steps += 1;
        assert!(steps < 10, "the poison turn is still being retried");
    }
    let t = turn(store.conn(), poison).expect("turn");
    assert_eq!(t.state, TurnState::Done, "the poison turn ended");
    let claims: i64 = store
        .conn()
        .query_row(
            "SELECT claims FROM turns WHERE turn_id = ?1",
            [poison.to_string()],
            |r| r.get(0),
        )
        .expect("claims");
    assert_eq!(
        claims, 4,
        "three failed attempts and the claim that ends it"
    );
    let out = records_of(&store, poison);
    let errors: Vec<_> = out
        .iter()
        .filter(|r| r.record_type == RecordType::SysError)
        .collect();
    assert_eq!(errors.len(), 1, "one short sys.error");
    let text = errors[0].content["text"].as_str().unwrap_or("");
    assert!(text.contains("gave up after 3 failed attempts"), "{text}");
    assert!(
        text.len() < 4096,
        "the error is short: {} bytes",
        text.len()
    );
    assert!(
        out.iter()
            .any(|r| r.record_type == RecordType::TaskDeliverable && r.content["final"] == true)
    );
}

/// Attack: one response with 100 tool calls ran all 100 with `max_steps = 32`.
#[test]
fn flood_of_tool_calls_in_one_response_stops_at_max_steps() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("w.db");
    let mut store = Store::create(&db, &StoreOptions::default()).expect("create");
    let flood = kura_testkit::pending_turn(&mut store, "flood");
    let ws_root = dir.path().join("ws");
    let (rt, mut worker) = worker_on(
        &db,
        &ws_root,
        "w",
        Arc::new(Adversary),
        WorkerConfig {
            max_steps: 5,
            ..WorkerConfig::default()
        },
    );
    let _guard = rt.enter();
    assert!(worker.step().expect("step"));
    let out = records_of(&store, flood);
    let calls = out
        .iter()
        .filter(|r| r.record_type == RecordType::ToolCall)
        .count();
    assert_eq!(calls, 5, "no more tool calls than max_steps");
    assert!(out.iter().any(|r| {
        r.record_type == RecordType::SysError
            && r.content["text"]
                .as_str()
                .unwrap_or("")
                .contains("step limit of 5 tool calls")
    }));
    let session = turn(store.conn(), flood)
        .expect("turn")
        .session_id
        .to_string();
    let written = std::fs::read_dir(ws_root.join(session))
        .expect("ws")
        .count();
    assert_eq!(written, 5, "only the allowed calls ran");
}

#[path = "writ_tests.rs"]
mod writs;
use writs::issuers;
