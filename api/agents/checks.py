"""Django's check that the MCP server builds, run by `manage.py migrate` and `check`: a web
process builds it only at its first `/mcp` request (config/asgi.py), where a server that
cannot be built would otherwise first show."""
from django.core import checks


@checks.register()
def mcp_server_builds(app_configs, **kwargs) -> list:
    try:
        from api.agents.server import http_app

        http_app()
    except Exception as exc:
        return [checks.Error(f"The MCP server cannot be built: {exc!r}",
                             hint="Web processes would answer /mcp with 503 until it builds.", id="relay.E001")]
    return []
