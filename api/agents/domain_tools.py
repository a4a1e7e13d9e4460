"""The MCP tools for domains of one's own (docs/agents.md, "Domains"): the routes of
docs/api.md's "Domains", for an account's key."""
import uuid
from typing import Annotated

from mcp_types import CallToolResult
from pydantic import Field

from api.agents.declare import Deleted, DomainList, DomainOut, calling_owner, result, tool
from core.pools import DNS_CHECKS
from api.domain_serializers import DomainSerializer
from domains.services import domain_create, domain_verify, domains_of
from mailboxes.domain_removal import domain_delete

DomainId = Annotated[uuid.UUID, Field(description="The domain's id (a UUID), as create_domain or list_domains gave it.")]
LISTED_MAX = 100
DOING = "managing domains"


def _out(domain) -> dict:
    return dict(DomainSerializer(domain).data)


@tool(output=DomainOut)
def create_domain(name: Annotated[str, Field(description="A domain you control, e.g. mail.example.com.")]
                  ) -> CallToolResult:
    """Add a domain of your own, so mailboxes can have addresses sites do not block.
    Returns the domain with `records`: the DNS records its owner must publish (MX and the
    DKIM key are required; SPF and DMARC recommended). Then call verify_domain. Errors:
    conflict (already added), quota_exceeded (the plan's domains), invalid_request."""
    owner = calling_owner(DOING)
    return result(_out(domain_create(owner=owner.owner, name=name)))


@tool(output=DomainList, read_only=True, idempotent=True)
def list_domains() -> CallToolResult:
    """Your domains, newest first: {"domains": [domain, ...]}, each with its status
    (pending or verified) and records."""
    domains = domains_of(calling_owner(DOING).owner)[:LISTED_MAX]
    return result({"domains": [_out(domain) for domain in domains]})


@tool(output=DomainOut, idempotent=True, open_world=True, pool=DNS_CHECKS)
def verify_domain(domain_id: DomainId) -> CallToolResult:
    """Look the domain's DNS records up now: each record's status (ok, missing, wrong,
    unchecked); the domain becomes verified once MX and DKIM are ok, and then
    create_mailbox takes it as `domain`. Errors: not_found, quota_exceeded (a few checks
    a minute per account)."""
    return result(_out(domain_verify(owner=calling_owner(DOING).owner, domain_id=domain_id)))


@tool(output=Deleted, destructive=True)
def delete_domain(domain_id: DomainId) -> CallToolResult:
    """Remove a domain. Errors: conflict (active mailboxes still use it), not_found."""
    domain_delete(owner=calling_owner(DOING).owner, domain_id=domain_id)
    return result({"deleted": True})


DOMAIN_TOOLS = [create_domain, list_domains, verify_domain, delete_domain]
