"""An outside agent's MCP client behind `kura mcp-proxy`: the official `mcp` client launches
the proxy (which launches the real server) and calls the server's tools through it.
Usage: mcp_proxy.py KURA URL TOKEN NAME CALLS_JSON -- SERVER_COMMAND...
   or: mcp_proxy.py KURA URL TOKEN NAME CALLS_JSON -- --upstream SERVER_URL SERVER_TOKEN
CALLS_JSON is a list of [tool, arguments]; each call's outcome is printed as one JSON line
(`{"step": "tools", ...}` first), flushed at once so the test can act between calls."""
import asyncio
import json
import sys

from mcp import Client, MCPError, StdioServerParameters
from mcp.types import Implementation


def say(**kv):
    print(json.dumps(kv), flush=True)


async def main(kura, url, token, name, calls, server):
    args = ["mcp-proxy", "--name", name, "--url", url, "--wait", "60"]
    env = {"KURA_AGENT_TOKEN": token}
    if server[0] == "--upstream":  # --upstream URL TOKEN: a server over Streamable HTTP
        args += ["--upstream", server[1], "--upstream-token-env", "UPSTREAM_TOKEN"]
        env["UPSTREAM_TOKEN"] = server[2]
    else:
        args += ["--"] + server
    params = StdioServerParameters(command=kura, args=args, env=env)
    async with Client(params, mode="legacy", client_info=Implementation(name="kura-e2e-proxy", version="1.0")) as c:
        say(step="tools", tools=sorted(t.name for t in (await c.list_tools()).tools))
        for tool, arguments in calls:
            say(step="calling", tool=tool)
            try:
                r = await c.call_tool(tool, arguments)
                texts = [getattr(b, "text", "") for b in r.content]
                say(step="called", tool=tool, is_error=bool(r.is_error), text="\n".join(texts))
            except MCPError as e:
                say(step="called", tool=tool, protocol_error=e.code, text=e.message)


sep = sys.argv.index("--")
asyncio.run(main(*sys.argv[1:5], json.loads(sys.argv[5]), sys.argv[sep + 1:]))
