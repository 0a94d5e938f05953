"""An outside agent's turn through Kura's MCP endpoint, with the official `mcp` client.

Usage: mcp_flow.py URL TOKEN. Prints one JSON object per line: what each step returned or
how it was refused. Between declaring its write and running it, it waits for a person.
"""
import asyncio
import json
import sys

import httpx2
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import Implementation


def say(**kv):
    print(json.dumps(kv), flush=True)


def connect(url, token, mode="auto"):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60))
    client = Client(
        streamable_http_client(url, http_client=http),
        mode=mode,
        client_info=Implementation(name="kura-e2e-agent", version="1.0"),
    )
    return http, client


async def call(c, tool, args):
    try:
        r = await c.call_tool(tool, args)
    except MCPError as e:
        return {"error": e.message, "code": e.code}
    if r.is_error:
        return {"tool_error": [getattr(b, "text", "") for b in r.content]}
    return r.structured_content


async def main(url, token):
    # A stranger without a token learns nothing, not even the tools.
    try:
        http, c = connect(url, None, mode="legacy")
        async with http, c:
            await c.list_tools()
        say(step="no_token", refused=False)
    except Exception as e:  # noqa: BLE001 - any failure to connect is the refusal
        say(step="no_token", refused=True, why=type(e).__name__)

    # Pinned to the current revision: no fallback to `initialize` could hide a refusal.
    http, c = connect(url, token, mode="2026-07-28")
    async with http, c:
        tools = sorted(t.name for t in (await c.list_tools()).tools)
        say(step="tools", tools=tools, protocol=str(c.protocol_version))
        started = await call(c, "start_session", {"instruction": "write the outside plan", "label": "outside agent"})
        say(step="start", result=started)
        turn = started["turn_id"]
        say(step="thought", result=await call(c, "record_step", {"turn_id": turn, "record_type": "agent.thought", "content": "I will write plan.md"}))
        forged = await call(c, "record_step", {"turn_id": turn, "record_type": "agent.thought", "content": "x", "author": "user:ana"})
        say(step="forged_author", result=forged)
        big = await call(c, "record_step", {"turn_id": turn, "record_type": "agent.thought", "content": "y" * 70000})
        say(step="oversized", result=big)
        declared = await call(c, "declare_call", {"turn_id": turn, "tool": "Write", "arguments": {"file_path": "plan.md", "content": "the plan"}})
        say(step="declared", result=declared)
        decision = None
        for _ in range(30):
            decision = await call(c, "wait_decision", {"request_id": declared["request_id"], "timeout_ms": 4000})
            if decision.get("state") in ("approved", "denied"):
                break
        say(step="decision", result=decision)
        say(step="result_as_text", result=await call(c, "record_step", {"turn_id": turn, "record_type": "tool.result", "content": "wrote plan.md"}))
        say(step="result", result=await call(c, "record_step", {"turn_id": turn, "record_type": "tool.result", "content": {"call_id": declared["call_id"], "status": "success", "result": "wrote plan.md"}}))
        say(step="remember", result=await call(c, "remember", {"kind": "fact", "text": "the outside plan lives in plan.md", "turn_id": turn}))
        say(step="noted_search", result=await call(c, "search_memory", {"query": "outside plan", "turn_id": turn}))
        say(step="end", result=await call(c, "end_turn", {"turn_id": turn, "deliverable": "plan.md written\nFACT: the outside agent keeps its notes in plan.md"}))
        say(step="after_end", result=await call(c, "record_step", {"turn_id": turn, "record_type": "agent.thought", "content": "late"}))
        say(step="search", result=await call(c, "search_memory", {"query": "outside plan"}))
        say(step="remember_alone", result=await call(c, "remember", {"kind": "decision", "text": "outside agents file decisions without a turn"}))
        say(step="search_alone", result=await call(c, "search_memory", {"query": "decisions without a turn"}))
        session = started["session_id"]
        log = await call(c, "read_log", {"session_id": session})
        say(step="log", result={"types": [r["record_type"] for r in log["records"]], "truncated": log["truncated"]})
        say(step="verify", result=await call(c, "verify", {"session_id": session}))
        fact = (await call(c, "remember", {"kind": "fact", "text": "proofs travel", "turn_id": turn}))
        say(step="remember_after_end", result=fact)
        thought = log["records"][-1]
        say(step="prove", result=await call(c, "prove", {"record_id": started["context_ledger_id"], "ledger_id": started["context_ledger_id"]}))
        out_first = [r for r in log["records"] if r["record_type"] == "agent.thought"][0]
        say(step="prove_thought", result=await call(c, "prove", {"record_id": out_first["record_id"], "ledger_id": started["output_ledger_id"]}))
        say(step="diff", result=await call(c, "diff", {"a": started["context_ledger_id"], "b": started["output_ledger_id"]}))
        say(step="delegate", result=await call(c, "delegate", {"instruction": "tidy the workspace", "wait_ms": 8000}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
