"""LangGraph's side of `./scripts/bench --peers`: the same deterministic 10-step agent turn
Kura's stack bench runs (thought -> tool call -> tool result, three times, then the
deliverable; no model), on LangGraph's SqliteSaver, measured the way the Rust side measures
Kura. Prints one JSON object on stdout.

  fair     WAL + synchronous=FULL + durability="sync": every step durable before the next,
           the promise Kura makes (a kill -9 or a power cut loses no finished step)
  default  what `SqliteSaver(conn)` and `graph.invoke` do when not told otherwise
           (WAL, SQLite's default synchronous, durability="async")

Each step is one graph node, so one step is one LangGraph superstep and one checkpoint,
as one step is one record in Kura. The tool lists a directory, as Kura's `fs.list` does.
"""

import argparse
import json
import os
import resource
import sqlite3
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

ROUNDS = 3
STEPS = 3 * ROUNDS + 1


def build(saver, workspace, ask=False):
    """thought_i -> call_i -> tool_i (i = 1..3) -> deliver: ten nodes, ten supersteps."""
    g = StateGraph(MessagesState)

    def thought(i):
        return lambda s: {"messages": [AIMessage(content=f"step {i}: list the notes")]}

    def call(i):
        return lambda s: {
            "messages": [
                AIMessage(
                    content="",
                    tool_calls=[{"name": "fs.list", "args": {}, "id": f"call-{i}"}],
                )
            ]
        }

    def tool(i):
        def run(s):
            if ask:
                # LangGraph's human in the loop: park here; a `Command(resume=...)` returns.
                if interrupt({"tool": "fs.write", "path": "notes/plan.md"}) != "approve":
                    return {"messages": [ToolMessage(content="denied", tool_call_id=f"call-{i}")]}
                with open(os.path.join(workspace, "plan.md"), "w") as f:
                    f.write("approved")
                TOOL_RAN.append(time.perf_counter())
                return {"messages": [ToolMessage(content="wrote", tool_call_id=f"call-{i}")]}
            names = sorted(os.listdir(workspace))
            return {"messages": [ToolMessage(content=json.dumps(names), tool_call_id=f"call-{i}")]}

        return run

    prev = START
    for i in range(1, ROUNDS + 1):
        for name, fn in ((f"thought{i}", thought(i)), (f"call{i}", call(i)), (f"tool{i}", tool(i))):
            g.add_node(name, fn)
            g.add_edge(prev, name)
            prev = name
    g.add_node("deliver", lambda s: {"messages": [AIMessage(content="listed the notes")]})
    g.add_edge(prev, "deliver")
    g.add_edge("deliver", END)
    return g.compile(checkpointer=saver)


TOOL_RAN = []


def saver_for(path, mode):
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    if mode == "fair":
        conn.execute("PRAGMA synchronous=FULL")
    return conn, saver


def durability(mode):
    return "sync" if mode == "fair" else "async"


def disk_bytes(path):
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def checkpointed_bytes(conn, path):
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return disk_bytes(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["fair", "default"], required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--turns", type=int, default=50)
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--history-turns", type=int, default=100)
    ap.add_argument("--approvals", type=int, default=20)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    workspace = tempfile.mkdtemp(dir=a.dir)
    for n in ("a.md", "b.md", "c.md"):
        open(os.path.join(workspace, n), "w").close()
    out = {"mode": a.mode, "steps_per_turn": STEPS}
    d = durability(a.mode)

    # Per-turn time, one at a time, each turn its own thread (as each Kura turn its own session).
    path = os.path.join(a.dir, f"lg-{a.mode}-turns.sqlite")
    conn, saver = saver_for(path, a.mode)
    out["synchronous"] = conn.execute("PRAGMA synchronous").fetchone()[0]
    out["journal_mode"] = conn.execute("PRAGMA journal_mode").fetchone()[0]
    graph = build(saver, workspace)
    turn_ms = []
    for i in range(a.turns):
        cfg = {"configurable": {"thread_id": f"turn-{i}"}}
        t = time.perf_counter()
        r = graph.invoke({"messages": [HumanMessage(content=f"list {i}")]}, cfg, durability=d)
        turn_ms.append((time.perf_counter() - t) * 1000)
        assert len(r["messages"]) == STEPS + 1, r
    out["turn_ms"] = turn_ms
    conn.close()

    # Steps/s with many sessions in flight: one process, a thread per session (the saver
    # serialises its writes under one lock, as SQLite serialises Kura's daemons' commits).
    path = os.path.join(a.dir, f"lg-{a.mode}-flight.sqlite")
    conn, saver = saver_for(path, a.mode)
    graph = build(saver, workspace)

    def one(i):
        cfg = {"configurable": {"thread_id": f"flight-{i}"}}
        graph.invoke({"messages": [HumanMessage(content=f"burst {i}")]}, cfg, durability=d)

    t = time.perf_counter()
    with ThreadPoolExecutor(max_workers=min(a.sessions, 32)) as pool:
        list(pool.map(one, range(a.sessions)))
    elapsed = time.perf_counter() - t
    out["steps_per_s"] = a.sessions * STEPS / elapsed
    out["bytes_per_step"] = checkpointed_bytes(conn, path) / (a.sessions * STEPS)
    conn.close()

    # A long history: one thread that grows turn after turn, then read it back.
    path = os.path.join(a.dir, f"lg-{a.mode}-history.sqlite")
    conn, saver = saver_for(path, a.mode)
    graph = build(saver, workspace)
    cfg = {"configurable": {"thread_id": "history"}}
    for i in range(a.history_turns):
        graph.invoke({"messages": [HumanMessage(content=f"turn {i}")]}, cfg, durability=d)
    out["history_steps"] = a.history_turns * STEPS
    out["history_bytes"] = checkpointed_bytes(conn, path)
    conn.close()
    out["peak_rss_turns_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # A fresh process would read from a cold saver; a fresh connection is the closest here.
    conn, saver = saver_for(path, a.mode)
    graph = build(saver, workspace)
    t = time.perf_counter()
    state = graph.get_state(cfg)
    out["readback_latest_ms"] = (time.perf_counter() - t) * 1000
    assert len(state.values["messages"]) == a.history_turns * (STEPS + 1)
    t = time.perf_counter()
    n = sum(1 for _ in graph.get_state_history(cfg))
    out["readback_all_ms"] = (time.perf_counter() - t) * 1000
    out["readback_checkpoints"] = n
    conn.close()

    # The human-approval round trip: the tool node interrupts; `Command(resume=...)` started
    # -> the tool has run.
    path = os.path.join(a.dir, f"lg-{a.mode}-approve.sqlite")
    conn, saver = saver_for(path, a.mode)
    graph = build(saver, workspace, ask=True)
    approve_ms = []
    for i in range(a.approvals):
        cfg = {"configurable": {"thread_id": f"ask-{i}"}}
        r = graph.invoke({"messages": [HumanMessage(content=f"plan {i}")]}, cfg, durability=d)
        assert "__interrupt__" in r, r
        TOOL_RAN.clear()
        t = time.perf_counter()
        graph.invoke(Command(resume="approve"), cfg, durability=d)
        # The first parked tool ran; time to it, not to the rest of the turn.
        assert TOOL_RAN, "the approved tool did not run"
        approve_ms.append((TOOL_RAN[0] - t) * 1000)
        # Two more interrupts in this turn: approve them so the thread ends.
        for _ in range(ROUNDS - 1):
            graph.invoke(Command(resume="approve"), cfg, durability=d)
    out["approve_ms"] = approve_ms
    conn.close()

    out["peak_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out["turn_ms_p50"] = statistics.median(turn_ms)
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
