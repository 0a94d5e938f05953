//! Kura's system suite: the real daemons as separate processes on a real nats-server and one
//! real SQLite file — one test binary, a module per concern.

mod agents;
mod approvals;
mod attacks;
mod bus;
mod chaos;
mod commits;
mod conformance;
mod console;
mod e2e;
mod files;
mod fleet;
mod gate;
mod hook_setup;
mod mcp_tools;
mod memory;
mod openai;
mod package;
mod plans;
mod proxy;
mod questions;
mod supervise;
mod timetravel;
mod traces;
mod ungated;
mod up;
mod upgrade;
mod witness;
mod writs;
