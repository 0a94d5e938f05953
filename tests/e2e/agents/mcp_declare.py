"""Declares tool calls through Kura's MCP endpoint with the official `mcp` client.

Usage: mcp_declare.py URL TOKEN TOOL PATH... Starts one turn, declares TOOL with
{"file_path": PATH} for each PATH, and prints one JSON line per declaration: what
declare_call answered (or how it was refused).
"""
import asyncio
import json
import sys

from mcp_flow import call, connect


async def main(url, token, tool, paths):
    http, c = connect(url, token)
    async with http, c:
        started = await call(c, "start_session", {"instruction": "declare calls"})
        for p in paths:
            d = await call(c, "declare_call", {"turn_id": started["turn_id"], "tool": tool, "arguments": {"file_path": p}})
            print(json.dumps({"path": p, "result": d}), flush=True)


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]))
