//! The worker in-process, on a temporary database with NATS away (a bus that never
//! connects: doorbells go nowhere, as when the server is down): crash recovery of calls a
//! dead worker left without a result.

use std::sync::Arc;
use std::sync::Mutex;

use kura_model::{Provider, ProviderError, Step, TurnInput};
use kura_runtime::{Bus, Common, Stop};
use kura_store::store::append_in;
use kura_store::work::{claim_next, fenced, now_ms, turn};
use kura_store::{Store, StoreOptions};
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
        append_in(
            tx,
            dead.output_ledger_id,
            &call(
                "fs.write",
                json!({"path": "out.txt", "content": "x"}),
                "call-w",
            ),
        )?;
        append_in(
            tx,
            dead.output_ledger_id,
            &call("fs.read", json!({"path": "notes.txt"}), "call-r"),
        )
    })
    .expect("calls");
    std::thread::sleep(std::time::Duration::from_millis(5)); // its 1 ms lease runs out

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
    let provider = Arc::new(Deliverer(Mutex::new(Vec::new())));
    let mut worker = Worker {
        store: Store::open(&db, &StoreOptions::default()).expect("open"),
        renew_store: Some(Store::open(&db, &StoreOptions::default()).expect("open")),
        owner: "successor".into(),
        config: WorkerConfig {
            approvals: Approvals::Off,
            ..WorkerConfig::default()
        },
        provider: provider.clone(),
        specs: toolbox.specs().into(),
        tools: Arc::new(toolbox),
        retries: 0,
        bus,
        stop: Stop::new(),
    };
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
