//! MCP tools in a hashi turn, on the release binaries: an MCP server's tool called by hashi
//! (the model's step → `tool.call` recorded → the one gate → the call → `tool.result`
//! recorded), from the call's record to its result's, beside the same call made directly by
//! the official Python `mcp` client to the same server, measured in the same run.
//!
//! Run it with `./scripts/bench`, or `cargo build --release --workspace && cargo bench -p
//! kura-e2e --bench mcp`.

mod common;

use std::path::Path;
use std::time::Duration;

use common::pct;
use kura_testkit::python::mcp_python;
use kura_testkit::stack::{Stack, session_records};
use proto::record::RecordType;
use serde_json::{Value, json};

fn main() {
    let quick = std::env::var_os("KURA_BENCH_QUICK").is_some();
    let n = if quick { 30 } else { 200 };
    let python = mcp_python();
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/misbehaving_server.py");
    let base = std::process::Command::new(&python)
        .args(["-c", "import sys; print(sys.base_prefix)"])
        .output()
        .expect("python");
    let venv = python
        .parent()
        .and_then(Path::parent)
        .map(|p| p.canonicalize().unwrap_or(p.to_path_buf()))
        .expect("venv");
    let read_only = [
        venv.display().to_string(),
        String::from_utf8_lossy(&base.stdout).trim().to_owned(),
        server
            .parent()
            .map(|p| p.canonicalize().unwrap_or(p.to_path_buf()))
            .expect("scripts")
            .display()
            .to_string(),
    ];
    let mut steps: Vec<Value> = (0..n + 10)
        .map(|i| json!({"tool": "bench.echo", "args": {"text": format!("call {i}")}}))
        .collect();
    steps.push(json!({"deliver": "done"}));
    let mut s = Stack::new(&json!({ "turns": [steps] }).to_string());
    let command = [python.display().to_string(), server.display().to_string()];
    s.extra_env = vec![
        (
            "KURA_TOOLS__MCP".into(),
            format!(
                "[{{ name = \"bench\", command = {command:?}, read_only = {read_only:?}, effects = {{ echo = \"read\" }} }}]"
            ),
        ),
        ("KURA_TOOLS__ALLOW".into(), r#"["bench.*"]"#.into()),
        ("KURA_NATS__MODE".into(), "external".into()),
        ("KURA_WORKER__LEASE_MS".into(), "30000".into()),
        // Every call in one turn: the bench's turn is longer than a model's usually is.
        ("KURA_WORKER__MAX_STEPS".into(), (n + 20).to_string()),
        ("RUST_LOG".into(), "warn".into()),
    ];
    for d in ["aegis", "minato", "hashi"] {
        s.spawn(d, d);
    }
    std::thread::sleep(Duration::from_secs(2));
    let request = s.submit("call the echo");
    let st = s.wait_complete(request, Duration::from_secs(300));
    let recs = session_records(&s.store(), st.session_id.expect("session"));
    let at =
        |r: &proto::Record| common::micros(&r.created_at).expect("a stored time") as f64 / 1000.0;
    let calls: Vec<&proto::Record> = recs
        .iter()
        .filter(|r| r.record_type == RecordType::ToolCall)
        .collect();
    let results: Vec<&proto::Record> = recs
        .iter()
        .filter(|r| r.record_type == RecordType::ToolResult)
        .collect();
    assert_eq!(calls.len(), n + 10, "every call recorded");
    assert!(
        results.iter().all(|r| r.content["status"] == "success"),
        "every call answered"
    );
    // The first ten start the server and warm up.
    let mut hashi: Vec<f64> = calls
        .iter()
        .zip(&results)
        .skip(10)
        .map(|(c, r)| at(r) - at(c))
        .collect();
    s.shutdown_cleanly();

    let out = std::process::Command::new(&python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/proxy_bench.py"))
        .arg(n.to_string())
        .arg("echo")
        .arg("--")
        .args(&command)
        .output()
        .expect("the direct client");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let direct: Value = serde_json::from_slice(&out.stdout).expect("figures");
    let d50 = direct["p50_ms"].as_f64().expect("ms");
    let (h50, h99) = (pct(&mut hashi, 0.5), pct(&mut hashi, 0.99));
    println!("| figure | Kura | baseline (same run) | ratio | target |");
    println!("|---|---|---|---|---|");
    println!(
        "| an MCP server's tool called by hashi (`tool.call` recorded → the gate → the call over stdio, in the sandbox → `tool.result` recorded) | p50 {h50:.2} ms · p99 {h99:.2} ms | the same call by the official Python client, direct to the same server: p50 {d50:.2} ms | {:.2} | ≤ 1.5× + the gate's one commit |",
        h50 / d50
    );
}
