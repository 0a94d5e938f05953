"""The same surface over stdio: the official `mcp` client launches `kura mcp`, which relays to
kura serve. Usage: mcp_stdio.py KURA_BINARY URL TOKEN MODE, MODE the client's `mode`:
`legacy` (the initialize handshake) or a revision to pin (`2026-07-28`, no fallback).
Prints one JSON object per line."""
import asyncio
import json
import sys

from mcp import Client, MCPError, StdioServerParameters
from mcp.types import Implementation


def say(**kv):
    print(json.dumps(kv), flush=True)


async def main(kura, url, token, mode):
    params = StdioServerParameters(command=kura, args=["mcp", "--url", url], env={"KURA_AGENT_TOKEN": token})
    async with Client(params, mode=mode, client_info=Implementation(name="kura-e2e-stdio", version="1.0")) as c:
        say(step="tools", tools=sorted(t.name for t in (await c.list_tools()).tools), protocol=str(c.protocol_version))
        started = (await c.call_tool("start_session", {"instruction": "a turn over stdio"})).structured_content
        say(step="start", result=started)
        turn = started["turn_id"]
        r = await c.call_tool("record_step", {"turn_id": turn, "record_type": "agent.thought", "content": "over stdio"})
        say(step="thought", result=r.structured_content)
        try:
            r = await c.call_tool("record_step", {"turn_id": "not-a-turn", "record_type": "agent.thought", "content": "x"})
            if r.is_error:
                say(step="bad_id", result={"tool_error": [getattr(b, "text", "") for b in r.content]})
            else:
                say(step="bad_id", result={"accepted": True})
        except MCPError as e:
            say(step="bad_id", result={"code": e.code, "error": e.message})
        r = await c.call_tool("end_turn", {"turn_id": turn, "deliverable": "done over stdio"})
        say(step="end", result=r.structured_content)


asyncio.run(main(*sys.argv[1:5]))
