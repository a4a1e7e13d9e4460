"""The agents' door (docs/agents.md): Relay's API as MCP tools, for AI agents.

One set of tools (api/agents/tools.py), served two ways: streamable HTTP at `/mcp` by the
web process (api/agents/server.py, mounted in config/asgi.py) and stdio by
`manage.py runmcp`. Every tool is a call of the API route that does the same thing,
made inside the process with the caller's own credentials (api/agents/dispatch.py), so
an agent meets exactly the API's authentication, validation, quotas, throttles, owner
isolation and waits: it can do nothing over MCP that its key cannot do over HTTP."""
