"""An MCP server written by hand, as JSON-RPC lines on stdio, for what the `mcp`
package's own server refuses to send: a tool list whose `broken` tool has an input
schema that is not JSON Schema at its root (`"type": 12`, `"required": "x"`).

    python tests/mcp_raw_server.py

It answers `initialize` (protocol 2025-11-25) and `tools/list`, and any other request
with "method not found" (so a client's `server/discover` probe falls back to
`initialize`).
"""

from __future__ import annotations

import json
import sys

TOOLS = [
    {"name": "add", "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}}}},
    {"name": "broken", "inputSchema": {"type": 12, "required": "x"}},
]
SERVER = {"name": "durafact-test-raw", "version": "1"}


def answer(method: str) -> dict:
    if method == "initialize":
        capabilities = {"tools": {}}
        result = {
            "protocolVersion": "2025-11-25",
            "capabilities": capabilities,
            "serverInfo": SERVER,
        }
        return {"result": result}
    if method == "tools/list":
        return {"result": {"tools": TOOLS}}
    return {"error": {"code": -32601, "message": f"method not found: {method}"}}


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        if "id" in message:  # a request; notifications need no answer
            reply = {"jsonrpc": "2.0", "id": message["id"], **answer(message["method"])}
            print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
