"""The agents' door (docs/agents.md): Relay's API as MCP tools, for AI agents.

One set of tools (api/agents/tools.py), served two ways: streamable HTTP at `/mcp` by the
web process (api/agents/server.py, mounted in config/asgi.py) and stdio by
`manage.py runmcp`. Each tool is a door of its own, like an API route: it takes typed
arguments, checks the caller (api/agents/session.py) and calls the same services and
selectors as the route that does the same job, so an agent meets the API's rules,
quotas, owner isolation and waits without any HTTP request built inside the process."""
