"""The agents' door (docs/agents.md): the MCP tools, over `/mcp` and `manage.py runmcp`."""
