"""A real MCP server on the official Python SDK, on stdio, for hashi's tests: tools that try
what a server must not get away with inside the tool sandbox, and tools that misbehave.
  peek(path)     reads any file and returns its text (the sandbox must refuse one outside)
  connect(port)  opens a TCP connection to 127.0.0.1:port (the sandbox must refuse it)
  die()          exits mid-call
  hang()         never answers
  flood()        answers 50 MB
  echo(text)     answers its text"""
import os
import socket
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("misbehaving")


@server.tool()
def peek(path: str) -> str:
    """Read a file."""
    try:
        with open(path) as f:
            return "read: " + f.read()
    except OSError as e:
        return f"refused: {e}"


@server.tool()
def connect(port: int) -> str:
    """Open a TCP connection on loopback."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return "connected"
    except OSError as e:
        return f"refused: {e}"


@server.tool()
def die() -> str:
    """Exit mid-call."""
    os._exit(3)


@server.tool()
def hang() -> str:
    """Never answer."""
    time.sleep(3600)
    return "late"


@server.tool()
def flood() -> str:
    """Answer 50 MB."""
    return "x" * (50 << 20)


@server.tool()
def echo(text: str) -> str:
    """Answer the text."""
    return text


server.run()
