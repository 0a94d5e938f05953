"""A real MCP server (the official SDK's MCPServer) that logs every call it receives to the
file named by its first argument, before doing anything: the proof of what reached it.
On stdio; or, given a port as its second argument, over Streamable HTTP at
http://127.0.0.1:PORT/mcp (each logged call then names the Authorization header it came with).
Tools: `note` (appends its text to the log's neighbour notes.txt), `erase` (empties it) and
`peek` (reads it) and `token` (tells the Kura agent token in its environment, if any)."""
import json
import os
import pathlib
import sys

from mcp.server.mcpserver import Context, MCPServer

log = pathlib.Path(sys.argv[1])
notes = log.with_name("notes.txt")
server = MCPServer("logging-server")


def received(tool, ctx, **kv):
    req = ctx.request_context.request
    if req is not None:
        kv["authorization"] = req.headers.get("authorization")
    with log.open("a") as f:
        f.write(json.dumps({"tool": tool, **kv}) + "\n")


@server.tool()
def note(text: str, ctx: Context) -> str:
    """Append a line to the notes."""
    received("note", ctx, text=text)
    with notes.open("a") as f:
        f.write(text + "\n")
    return "noted"


@server.tool()
def erase(ctx: Context) -> str:
    """Empty the notes."""
    received("erase", ctx)
    notes.write_text("")
    return "erased"


@server.tool()
def token(ctx: Context) -> str:
    """Tell the Kura agent token this server was given, if any."""
    received("token", ctx)
    return "token:" + os.environ.get("KURA_AGENT_TOKEN", "")


@server.tool()
def peek(ctx: Context) -> str:
    """Read the notes."""
    received("peek", ctx)
    return notes.read_text() if notes.exists() else ""


if len(sys.argv) > 2:
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
else:
    server.run()
