"""The people's door (docs/inbox.md): the web inbox, pages of the web process over the same
entries as the API and the MCP tools."""
