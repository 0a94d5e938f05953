"""The round trip of one MCP tool call as the official `mcp` client sees it, to a server on
stdio started by COMMAND (the server itself, or `kura mcp-proxy ... -- server`).
Usage: proxy_bench.py N TOOL -- COMMAND... ; prints {"p50_ms": .., "p99_ms": ..} after 10
warm-up calls and N timed ones. The environment is passed on to COMMAND."""
import asyncio
import json
import os
import sys
import time

from mcp import Client, StdioServerParameters


async def main(n, tool, command):
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    async with Client(params, mode="legacy") as c:
        args = {"text": "call"} if tool == "echo" else {}
        for _ in range(10):
            await c.call_tool(tool, args)
        times = []
        for _ in range(n):
            t = time.perf_counter()
            r = await c.call_tool(tool, args)
            times.append((time.perf_counter() - t) * 1000)
            assert not r.is_error, r
    times.sort()
    print(json.dumps({"p50_ms": times[len(times) // 2], "p99_ms": times[min(len(times) - 1, len(times) * 99 // 100)]}))


sep = sys.argv.index("--")
asyncio.run(main(int(sys.argv[1]), sys.argv[2], sys.argv[sep + 1:]))
