//! What an outside agent sends to Kura and gets back, over MCP or the HTTP routes alike (one
//! handler serves both, so the two cannot drift). Unknown fields are refused: an `author`
//! argument in particular, since who wrote a record comes from the agent's token alone.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::record::RecordType;
use crate::{
    ApprovalState, CallId, Effect, LedgerId, RecordId, RequestId, SessionId, TurnId, Verdict,
};

/// The steps an agent may record ([`RecordStep`]); any other type is refused at parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum StepType {
    /// A thought.
    #[serde(rename = "agent.thought")]
    AgentThought,
    /// A plan (history: an outside agent's plan is not work for hashi).
    #[serde(rename = "agent.plan")]
    AgentPlan,
    /// A tool's result.
    #[serde(rename = "tool.result")]
    ToolResult,
    /// An error.
    #[serde(rename = "sys.error")]
    SysError,
}

impl From<StepType> for RecordType {
    fn from(t: StepType) -> RecordType {
        match t {
            StepType::AgentThought => RecordType::AgentThought,
            StepType::AgentPlan => RecordType::AgentPlan,
            StepType::ToolResult => RecordType::ToolResult,
            StepType::SysError => RecordType::SysError,
        }
    }
}

/// What an agent remembers ([`Remember`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum MemoryKind {
    /// A fact (`memory.fact`).
    Fact,
    /// A decision (`memory.decision`): a newer one on the same key supersedes it.
    Decision,
}

impl From<MemoryKind> for RecordType {
    fn from(k: MemoryKind) -> RecordType {
        match k {
            MemoryKind::Fact => RecordType::MemoryFact,
            MemoryKind::Decision => RecordType::MemoryDecision,
        }
    }
}

/// Derives the JSON schema the MCP tools publish, when the `schema` feature is on.
macro_rules! wire {
    ($($item:item)*) => {
        $(
            #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
            #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
            #[serde(deny_unknown_fields)]
            $item
        )*
    };
}

wire! {
    /// Start a turn: a new session, the agent's own session continued, or a fork of any
    /// sealed ledger.
    pub struct StartSession {
        /// What the agent was asked to do (the user's prompt).
        pub instruction: String,
        /// A label for a new session (default: the instruction's first words).
        #[serde(default)]
        pub label: Option<String>,
        /// Continue this session (one this agent started) instead of starting a new one.
        #[serde(default)]
        pub session_id: Option<SessionId>,
        /// Fork a new session from this sealed ledger (of any session) and start there.
        #[serde(default)]
        pub from_ledger: Option<LedgerId>,
    }

    /// The turn an agent writes to.
    pub struct Started {
        /// The session.
        pub session_id: SessionId,
        /// The turn: every later call names it.
        pub turn_id: TurnId,
        /// The sealed context: the instruction and the memory found for it.
        pub context_ledger_id: LedgerId,
        /// The open output ledger the turn's records go to.
        pub output_ledger_id: LedgerId,
        /// The memory found for the instruction (also in the context ledger).
        pub memory: Vec<Remembered>,
        /// The files this turn starts from, as recorded (a fork's: its origin's tree), when
        /// Kura recorded any: put them in place with `kura workspace restore SESSION --root DIR`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub workspace: Option<crate::workspace::ObjectId>,
    }

    /// A memory record found for an instruction or a search.
    pub struct Remembered {
        /// The record.
        pub record_id: RecordId,
        /// `memory.fact`, `memory.decision`, or the deliverable it came from.
        pub record_type: RecordType,
        /// Its text.
        pub text: String,
    }

    /// Record a step of the turn.
    pub struct RecordStep {
        /// The turn (from `start_session`).
        pub turn_id: TurnId,
        /// `agent.thought`, `agent.plan`, `tool.result` or `sys.error`.
        pub record_type: StepType,
        /// The step: a string is stored as `{"text": …}`, an object as it is.
        pub content: Value,
    }

    /// A stored record.
    pub struct Recorded {
        /// Its id.
        pub record_id: RecordId,
        /// Its SHA-256 (RFC 8785 form).
        pub hash: String,
        /// Its position in the turn's output ledger.
        pub position: u64,
    }

    /// Report a call that already ran without being declared (the agent's PreToolUse hook
    /// was missing, killed or timed out): recorded as ungated, and an alarm.
    pub struct ReportUngated {
        /// The turn.
        pub turn_id: TurnId,
        /// The tool's name as the agent knows it.
        pub tool: String,
        /// Its arguments, as the agent reported them.
        pub arguments: Map<String, Value>,
        /// The agent's own id for the call (Claude Code's `tool_use_id`): a call is
        /// reported once, however often it is noticed.
        pub agent_call_id: String,
        /// What it returned, if known.
        #[serde(default)]
        pub result: Option<Value>,
        /// Where it was noticed: `PostToolUse`, `transcript`.
        pub noticed_by: String,
    }

    /// Declare a tool call before running it, and have it ruled on.
    pub struct DeclareCall {
        /// The turn.
        pub turn_id: TurnId,
        /// The tool's name as the agent knows it (`Bash`, `Write`, `mcp__x__y`, …).
        pub tool: String,
        /// Its arguments.
        pub arguments: Map<String, Value>,
    }

    /// How a declared call was ruled on.
    pub struct Declared {
        /// The approval request (wait on it when `decision` is `ask`).
        pub request_id: RequestId,
        /// The call's id in the ledger; a `tool.result` names it.
        pub call_id: CallId,
        /// `allow` (run it now), `deny` (do not run it) or `ask` (a person decides: wait).
        pub decision: Verdict,
        /// The rule that decided, when one did.
        #[serde(default)]
        pub rule: Option<String>,
        /// The effect class Kura's configuration gives the tool.
        pub effect: Effect,
        /// The arguments as Kura ruled on them: the declared ones with every path in its
        /// one normal form (`//`, `/./`, `/../` resolved). Run these.
        #[serde(default)]
        pub arguments: Map<String, Value>,
        /// When a person approved the call with edited arguments before this answer: run
        /// those instead.
        #[serde(default)]
        pub edited_arguments: Option<Map<String, Value>>,
    }

    /// Put a question to the agent's people (`person.ask`): wait for the answer with
    /// `wait_decision`; it comes as `edited_arguments.answer`, signed by whoever answered.
    pub struct AskPerson {
        /// The turn.
        pub turn_id: TurnId,
        /// The question.
        pub question: String,
        /// The answers to choose from, if any.
        #[serde(default)]
        pub choices: Vec<String>,
    }

    /// Take back a declared call the agent will not run (it stopped waiting): an undecided
    /// request is denied, so nobody approves it.
    pub struct WithdrawCall {
        /// The request (from `declare_call`).
        pub request_id: RequestId,
    }

    /// Wait for the decision on a request.
    pub struct WaitDecision {
        /// The request (from `declare_call`).
        pub request_id: RequestId,
        /// How long to wait, in milliseconds (at most 8000; ask again to wait longer).
        #[serde(default)]
        pub timeout_ms: Option<u64>,
    }

    /// Where a request stands.
    pub struct Decision {
        /// The request.
        pub request_id: RequestId,
        /// `approved`, `denied`, or still `asked` / `pending`.
        pub state: ApprovalState,
        /// The rule that decided.
        #[serde(default)]
        pub rule: Option<String>,
        /// The arguments a person approved instead of the declared ones: run these.
        #[serde(default)]
        pub edited_arguments: Option<Map<String, Value>>,
        /// The signed decision's record, once decided.
        #[serde(default)]
        pub decision_record_id: Option<RecordId>,
    }

    /// End the turn with its deliverable.
    pub struct EndTurn {
        /// The turn.
        pub turn_id: TurnId,
        /// What the turn delivers.
        pub deliverable: String,
    }

    /// The sealed turn.
    pub struct Ended {
        /// The session.
        pub session_id: SessionId,
        /// The sealed output ledger.
        pub output_ledger_id: LedgerId,
        /// Its hash.
        pub ledger_hash: String,
    }

    /// Remember a fact or a decision: searchable at once.
    pub struct Remember {
        /// `fact` or `decision`.
        pub kind: MemoryKind,
        /// What to remember.
        pub text: String,
        /// The turn to record it in (else it is stored on its own).
        #[serde(default)]
        pub turn_id: Option<TurnId>,
    }

    /// Search memory.
    pub struct SearchMemory {
        /// Words to look for.
        pub query: String,
        /// At most this many hits (default 5, at most 50).
        #[serde(default)]
        pub limit: Option<usize>,
        /// The turn the search serves: what it returned is noted there (a `sys.context`).
        #[serde(default)]
        pub turn_id: Option<TurnId>,
    }

    /// Memory hits.
    pub struct Found {
        /// The hits, best first.
        pub hits: Vec<Remembered>,
    }

    /// Read a session's history.
    pub struct ReadLog {
        /// The session.
        pub session_id: SessionId,
        /// At most this many records, newest ledgers first (default 100, at most 500).
        #[serde(default)]
        pub limit: Option<usize>,
    }

    /// Records, as stored (id, hash, type, content, author, metadata, time).
    pub struct Records {
        /// The records.
        pub records: Vec<Value>,
        /// True when more were left out by the limit.
        pub truncated: bool,
    }

    /// Read one record.
    pub struct ShowRecord {
        /// The record.
        pub record_id: RecordId,
    }

    /// Verify a session (its ledgers, their ancestors, its ref log) or one ledger.
    pub struct Verify {
        /// The session.
        #[serde(default)]
        pub session_id: Option<SessionId>,
        /// Or one ledger and its ancestors.
        #[serde(default)]
        pub ledger_id: Option<LedgerId>,
    }

    /// What verification found.
    pub struct Verified {
        /// True when every hash, root, chain and seal matches.
        pub ok: bool,
        /// Records whose hashes were recomputed.
        pub records_checked: u64,
        /// Ledgers checked.
        pub ledgers_checked: u64,
        /// Each problem, in words.
        pub problems: Vec<String>,
    }

    /// Prove a record is in a sealed ledger.
    pub struct Prove {
        /// The record.
        pub record_id: RecordId,
        /// The sealed ledger.
        pub ledger_id: LedgerId,
    }

    /// An inclusion proof (check it offline with `kura verify-proof`).
    pub struct Proof {
        /// The proof bundle, as `kura prove --json` prints it.
        pub proof: Value,
    }

    /// Compare two ledgers.
    pub struct Diff {
        /// The first ledger.
        pub a: LedgerId,
        /// The second ledger.
        pub b: LedgerId,
    }

    /// What differs (each side at most 200 records).
    pub struct Diffed {
        /// Records only in `a`.
        pub only_a: Vec<Value>,
        /// Records only in `b`.
        pub only_b: Vec<Value>,
        /// How many are in both.
        pub in_both: usize,
    }

    /// Hand a task to Kura's own agents (as `minato submit`), optionally waiting for it.
    pub struct Delegate {
        /// What Kura's agent should do.
        pub instruction: String,
        /// Wait this long for the deliverable, in milliseconds (at most 8000; poll with
        /// `delegation` afterwards).
        #[serde(default)]
        pub wait_ms: Option<u64>,
    }

    /// Where a delegated task stands.
    pub struct Delegation {
        /// The request's place in minato's queue.
        pub request_seq: i64,
        /// Wait this long for it to complete, in milliseconds (at most 8000).
        #[serde(default)]
        pub wait_ms: Option<u64>,
    }

    /// A delegated task's state.
    pub struct Delegated {
        /// The request (ask again with `delegation`).
        pub request_seq: i64,
        /// Its session, once minato took it up.
        #[serde(default)]
        pub session_id: Option<SessionId>,
        /// True once it completed.
        pub complete: bool,
        /// The deliverable's text, once complete.
        #[serde(default)]
        pub deliverable: Option<String>,
    }
}

/// A JSON-RPC 2.0 error answer, as the agents' surface and `kura mcp`'s relay send one for a
/// message they could not take or deliver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcErrorAnswer {
    /// Always "2.0".
    pub jsonrpc: String,
    /// The request's id (null when it had none that could be read).
    pub id: Value,
    /// What went wrong.
    pub error: RpcError,
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    /// JSON-RPC's code (-32700 parse error, -32000 and below a server's own).
    pub code: i64,
    /// One line for a person.
    pub message: String,
}

impl RpcErrorAnswer {
    /// An error answer to `id`.
    pub fn new(id: Value, code: i64, message: impl Into<String>) -> RpcErrorAnswer {
        RpcErrorAnswer {
            jsonrpc: "2.0".into(),
            id,
            error: RpcError {
                code,
                message: message.into(),
            },
        }
    }
}
