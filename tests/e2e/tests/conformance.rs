//! The official MCP conformance suite (npm `@modelcontextprotocol/conformance`, on the Node 22
//! it needs, both from npm) against `kura serve`'s `/mcp`, for every server scenario that
//! applies to a server that offers tools only — the same binary a third party would run.

use std::path::{Path, PathBuf};
use std::process::Command;

use kura_testkit::free_port;

/// The Node release the suite runs on (it needs 22 or later; the machine's may be older).
const NODE: &str = "22.23.3";

/// The MCP tests' Node packages (`agents/conformance/package.json`: the conformance suite
/// and real MCP servers), installed once under `target/` from npm — the lock file pins every
/// package: the node binary and the `node_modules` directory.
pub(crate) fn node_packages() -> (PathBuf, PathBuf) {
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/conformance");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/mcp-conformance");
    let arch = match std::env::consts::ARCH {
        "aarch64" => "arm64",
        _ => "x64",
    };
    let node = dir.join(format!("node_modules/node-linux-{arch}/bin/node"));
    let modules = dir.join("node_modules");
    // The lock file as installed: a changed one (a package added) installs again.
    let lock = std::fs::read(here.join("package-lock.json")).expect("the pinned lock file");
    let ready = Command::new(&node)
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == format!("v{NODE}"))
        && std::fs::read(dir.join("package-lock.json")).is_ok_and(|l| l == lock);
    if !ready {
        std::fs::create_dir_all(&dir).expect("target/mcp-conformance");
        for f in ["package.json", "package-lock.json"] {
            std::fs::copy(here.join(f), dir.join(f)).expect("copy the pinned package list");
        }
        let npm = |args: &[&str]| {
            let ok = Command::new("npm")
                .args(args)
                .args(["--no-audit", "--no-fund", "--ignore-scripts", "--prefix"])
                .arg(&dir)
                .status()
                .expect("npm (Debian: apt-get install npm)")
                .success();
            assert!(ok, "npm {args:?} failed");
        };
        npm(&["ci"]);
        npm(&["install", "--no-save", &format!("node-linux-{arch}@{NODE}")]);
    }
    (node, modules)
}

/// Node and the suite: the node binary, the suite's entry point, and the preload that adds
/// the token.
fn suite() -> (PathBuf, PathBuf, PathBuf) {
    let (node, modules) = node_packages();
    let entry = modules.join("@modelcontextprotocol/conformance/dist/index.js");
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/conformance");
    (node, entry, here.join("auth.cjs"))
}

/// The server scenarios that apply to a server offering tools only. The others call the
/// suite's own test tools (`test_simple_text`, `json_schema_2020_12_tool`, …) or ask for
/// capabilities Kura does not declare (logging, completion, resources, prompts, sampling,
/// elicitation), which a conforming server answers with -32601.
const SCENARIOS: &[&str] = &[
    "server-initialize",
    "ping",
    "tools-list",
    "server-sse-polling",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
];

/// Every applicable scenario passes against `kura serve`, with authentication on (each
/// request carries the agent's token, as every Kura client's must). A SHOULD the server does
/// not do is the suite's WARNING (resuming an SSE stream after a reconnect: Kura answers
/// each call whole instead); no check may fail. The suite never ends its sessions, so the
/// per-agent cap is raised for it.
#[test]
fn the_official_mcp_conformance_suite_passes_every_scenario_for_a_tools_only_server() {
    let (node, entry, auth) = suite();
    let port = free_port();
    let (_s, token) = crate::agents::agent_stack_with(
        port,
        &[("KURA_AGENTS__MCP_SESSIONS_PER_AGENT", "64".into())],
    );
    let url = format!("http://127.0.0.1:{port}/mcp");
    for scenario in SCENARIOS {
        let out = Command::new(&node)
            .arg("--require")
            .arg(&auth)
            .arg(&entry)
            .args(["server", "--url", &url, "--scenario", scenario])
            .env("KURA_CONFORMANCE_TOKEN", &token)
            .env("NODE_PATH", entry.ancestors().nth(4).expect("node_modules"))
            .output()
            .expect("the conformance suite");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{scenario}:\n{said}");
        assert!(
            !said.contains("FAILURE") && said.contains("SUCCESS"),
            "{scenario}:\n{said}"
        );
    }
}
