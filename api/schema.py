"""What the OpenAPI schema says beyond what drf-spectacular infers: the error format on
every operation, and list responses as the paginated envelope they are."""
import functools
import re

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers

from accounts.models import plan_limit
from mailboxes.lifecycle import LOCAL_PART_PATTERN
from mailboxes.models import Plan
from relay.error_table import DOMAIN_CODES, STATUS_CODES

# The errors any operation may answer (docs/api.md): bad input, credentials, another owner's
# or a missing mailbox, an expired one, a body too large or not JSON, a rate or a quota.
COMMON_ERRORS = (400, 401, 403, 404, 405, 406, 410, 413, 415, 429)
# And those only some operations answer: a taken address, login or domain name, a domain
# still in use, a backend that cannot provision, a suppressed recipient of a send, a release
# of a copy of mail sent.
_MESSAGE = "/api/v1/mailboxes/{mailbox_id}/messages"
EXTRA_ERRORS = {("/api/v1/mailboxes", "post"): [409, 503], ("/api/v1/accounts", "post"): [409],
                ("/api/v1/domains", "post"): [409], ("/api/v1/domains/{domain_id}", "delete"): [409],
                (_MESSAGE, "post"): [422], (f"{_MESSAGE}/{{message_id}}/reply", "post"): [422],
                (f"{_MESSAGE}/{{message_id}}/forward", "post"): [422],
                (f"{_MESSAGE}/{{message_id}}/release", "post"): [409, 422]}
ERROR_SCHEMA = {
    "type": "object",
    "required": ["code", "message"],
    "properties": {
        "code": {"type": "string", "enum": sorted(set(STATUS_CODES.values()) | set(DOMAIN_CODES.values()))},
        "message": {"type": "string"},
        "fields": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}},
                   "description": "For validation errors: the messages of each field or parameter."},
    },
}

PAGE_PARAMETERS = [
    OpenApiParameter("page", {"type": "integer", "minimum": 1, "maximum": 999_999_999},
                     description="Page number, from 1."),
    OpenApiParameter("page_size", {"type": "integer", "minimum": 1, "maximum": 200},
                     description="Results per page (default 50)."),
]
WAIT_PARAMETERS = [
    OpenApiParameter("wait", {"type": "integer", "minimum": 0, "maximum": 60},
                     description="Seconds to hold the request until a message (after `after`) arrives; "
                                 "answered within 1 s of its arrival. 410 if the mailbox expires meanwhile."),
]

# Sending answers 202 with the outbox entry's id: say where it can be read, so that no
# client (or fuzzer) takes it for a received message's id.
SENDING_OPERATIONS = ("messages_send", "messages_reply", "messages_forward", "messages_release")
SEND_LINKS = {"outbox": {"operationId": "outbox_get", "parameters": {
    "mailbox_id": "$request.path.mailbox_id", "outbound_id": "$response.body#/id"}}}


@functools.cache
def paginated(serializer_class: type[serializers.Serializer]) -> type[serializers.Serializer]:
    """The response serializer of a list: {"count", "next", "previous", "results"}; one
    class per item serializer, however many routes list it."""
    return type(f"Paginated{serializer_class.__name__.removesuffix('Serializer')}List", (serializers.Serializer,), {
        "count": serializers.IntegerField(),
        "next": serializers.URLField(allow_null=True),
        "previous": serializers.URLField(allow_null=True),
        "results": serializer_class(many=True),
    })


def add_error_responses(result: dict, generator, request, public) -> dict:
    """drf-spectacular hook: each operation's error statuses, closed request bodies, and the
    sends' 202 linked to their outbox entry."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas["Error"] = ERROR_SCHEMA
    _ttl_for_the_caller(schemas, request)
    for schema in schemas.values():
        for name, prop in schema.get("properties", {}).items():
            schema["properties"][name] = _blank_allowed_plainly(prop)
    error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            for media in operation.get("requestBody", {}).get("content", {}).values():
                _closed(schemas, media.get("schema", {}).get("$ref", ""))
            if operation.get("operationId") in SENDING_OPERATIONS:
                operation["responses"]["202"]["links"] = SEND_LINKS
                operation["responses"]["202"]["headers"] = {"Location": {
                    "schema": {"type": "string"}, "description": "The outbox entry of this mail."}}
            responses = operation.setdefault("responses", {})
            statuses = list(COMMON_ERRORS) + EXTRA_ERRORS.get((path, method), [])
            for status in statuses:
                responses.setdefault(str(status), {"description": STATUS_CODES[status], **error})
            # A request line longer than the HTTP server takes is refused before Relay sees it.
            responses.setdefault("414", {"description": "URI too long (refused by the HTTP server, not JSON)",
                                         "content": {"text/html": {"schema": {"type": "string"}}}})
    return result


def _closed(schemas: dict, ref: str) -> None:
    """A request body's schema allows no other properties than its own; a body that is
    one of several shapes (oneOf) closes each shape, not the union."""
    if not ref.startswith("#/components/schemas/"):
        return
    schema = schemas[ref.rsplit("/", 1)[1]]
    if "oneOf" in schema:
        for branch in schema["oneOf"]:
            _closed(schemas, branch.get("$ref", ""))
    else:
        schema["additionalProperties"] = False


def _ttl_for_the_caller(schemas: dict, request) -> None:
    """The schema served to a caller states that caller's TTL cap (free for anonymous
    callers), since a TTL above one's own plan's cap is a 400."""
    caller = getattr(request, "user", None) if request is not None else None
    plan = getattr(caller, "plan", None) or Plan.FREE
    for name in ("MailboxCreate", "MailboxRenew"):
        ttl = schemas.get(name, {}).get("properties", {}).get("ttl_ms")
        if ttl is not None:
            ttl["maximum"] = plan_limit(plan, "ttl_cap_ms")
            ttl["description"] = f"{ttl.get('description', '')} Your plan ({plan}) allows at most {ttl['maximum']}."


def _blank_allowed_plainly(prop: dict) -> dict:
    """A blank-allowed string as the string alone: drf-spectacular's oneOf with maxLength 0
    makes "" match twice, which oneOf refuses."""
    branches = prop.get("oneOf")
    if (isinstance(branches, list) and len(branches) == 2 and branches[1] == {"type": "string", "maxLength": 0}
            and not branches[0].get("minLength")):
        return {**{k: v for k, v in prop.items() if k != "oneOf"}, **branches[0]}
    return prop


def ttl_bounds() -> dict:
    return {"min_value": settings.RELAY_MIN_TTL_MS, "max_value": settings.RELAY_MAX_TTL_MS}


def _any_case(word: str) -> str:
    return "".join(f"[{c.upper()}{c}]" if c.isalpha() else re.escape(c) for c in word)


def local_part_schema() -> dict:
    """What POST /mailboxes accepts as local_part: a dot-atom of a-z, 0-9, '_', '-' in
    any case (it is lower-cased), never a reserved role name."""
    roles = "|".join(_any_case(role) for role in sorted(settings.RELAY_RESERVED_LOCAL_PARTS))
    pattern = LOCAL_PART_PATTERN.replace("a-z", "A-Za-z")  # any case: it is lower-cased
    return {"type": "string", "minLength": 1, "maxLength": 64, "pattern": f"^{pattern}$",
            "not": {"pattern": f"^({roles})$"}}


DOMAIN_NAME_PATTERN = r"^([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?$"


def domain_schema() -> dict:
    """A mailbox's domain: one of RELAY_DOMAINS (listed as examples) or a verified domain
    of the caller's, which no schema can list."""
    return {"type": "string", "minLength": 1, "maxLength": 253, "pattern": DOMAIN_NAME_PATTERN,
            "examples": settings.RELAY_DOMAINS}
