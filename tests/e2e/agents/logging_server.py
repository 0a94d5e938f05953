"""A real MCP server (the official SDK's MCPServer, on stdio) that logs every call it receives
to the file named by its first argument, before doing anything: the proof of what reached it.
Tools: `note` (appends its text to the log's neighbour notes.txt) and `erase` (empties it)."""
import json
import pathlib
import sys

from mcp.server.mcpserver import MCPServer

log = pathlib.Path(sys.argv[1])
notes = log.with_name("notes.txt")
server = MCPServer("logging-server")


def received(tool, **kv):
    with log.open("a") as f:
        f.write(json.dumps({"tool": tool, **kv}) + "\n")


@server.tool()
def note(text: str) -> str:
    """Append a line to the notes."""
    received("note", text=text)
    with notes.open("a") as f:
        f.write(text + "\n")
    return "noted"


@server.tool()
def erase() -> str:
    """Empty the notes."""
    received("erase")
    notes.write_text("")
    return "erased"


server.run()
