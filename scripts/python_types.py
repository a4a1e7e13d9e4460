"""Writes the Python client's types (client/relay_client/types.py) from Relay's OpenAPI
schema, as openapi-typescript writes the TypeScript client's: a frozen dataclass per
resource, the API's field names as attributes (`from` as `from_`), timestamps as
datetimes. scripts/python-types.sh runs it; tests/test_client.py fails when the file
checked in is not what the schema gives.

    python scripts/python_types.py SCHEMA.json OUT.py
"""
import json
import keyword
import sys

# Each class of the client: the schema's components it stands for (a field required in
# every one of them is required; the others are there on some answers only), what nests
# inside it, and what it says about itself.
CLASSES = {
    "Mailbox": (("Mailbox", "MailboxCreated"), {}, ""),
    "Attachment": (("Attachment",), {}, ""),
    "Link": (("Link",), {}, ""),
    "Delivery": (("Delivery",), {}, "One recipient of a sent message, and what became of it."),
    "Message": (("MessageSummary", "MessageDetail"),
                {"attachments": "Attachment", "links": "Link", "delivery": "Delivery"},
                "A list item, or (from get_message and the waits) a message whole: then the fields of a\n"
                "    message whole are filled in."),
    "DomainRecord": (("DomainRecord",), {}, ""),
    "Domain": (("Domain",), {"records": "DomainRecord"}, ""),
    "Sent": (("SendAccepted",), {}, "A mail queued: `id` its outbox entry, `message_id` the copy kept in the mailbox."),
    "Thread": (("Thread", "ThreadDetail"), {"messages": "Message"},
               "A conversation; `messages` (oldest first) only from get_thread."),
}

PREAMBLE = '''"""What Relay's API answers, as typed objects with the API's field names as attributes
(`from` is `from_`: a Python keyword), its timestamps as timezone-aware datetimes. Fields
the API adds later are kept in `.raw`, as the API sent them.

Generated from Relay's OpenAPI schema by scripts/python-types.sh: do not edit by hand."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, TypeVar

T = TypeVar("T")


def build(cls: type[T], data: dict[str, Any]) -> T:
    """An instance of the dataclass `cls` from the API's JSON `data`, with what nests in it."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    nested = getattr(cls, "NESTED", {})
    values = {}
    for key, value in data.items():
        name = "from_" if key == "from" else key
        if name in nested and isinstance(value, list):
            value = [build(globals()[nested[name]], item) for item in value]
        elif name in TIMESTAMPS:
            value = _timestamp(value)
        values[name] = value
    known = {key: value for key, value in values.items() if key in names and key != "raw"}
    return cls(**known, raw=data)  # type: ignore[call-arg]


def _timestamp(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


@dataclass(frozen=True, kw_only=True)
class ApiObject:
    """What every result keeps: the API's JSON as it came (`raw`)."""

    NESTED: ClassVar[dict[str, str]] = {}
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_api(cls: type[T], data: dict[str, Any]) -> T:
        return build(cls, data)


@dataclass(frozen=True)
class Event:
    """One event of a mailbox's stream: `message` (data: a list item, id: its id) or
    `expired` (data: the mailbox; the stream ends after it)."""

    event: str
    data: dict[str, Any]
    id: str | None = None
'''


def _resolve(schema: dict, components: dict) -> dict:
    while True:
        if "$ref" in schema:
            schema = {**components[schema["$ref"].rsplit("/", 1)[1]], **{k: v for k, v in schema.items() if k != "$ref"}}
        elif "allOf" in schema and len(schema["allOf"]) == 1:
            schema = {**_resolve(schema["allOf"][0], components), **{k: v for k, v in schema.items() if k != "allOf"}}
        else:
            return schema


def _python_type(schema: dict, components: dict, nested: str | None) -> str:
    nullable = schema.get("nullable", False)
    choices = [_resolve(choice, components) for choice in schema.get("oneOf", ())]
    if choices:  # drf-spectacular's nullable choices: the values' enum, or null's
        schema = next(choice for choice in choices if choice.get("enum") != [None])
    schema = _resolve(schema, components)
    kind = schema.get("type")
    if kind == "array":
        found = f"list[{nested or _python_type(schema.get('items', {}), components, None)}]"
    elif kind == "string":
        found = "datetime" if schema.get("format") == "date-time" else "str"
    elif kind == "integer":
        found = "int"
    elif kind == "number":
        found = "float"
    elif kind == "boolean":
        found = "bool"
    elif "enum" in schema:
        found = "str"
    else:
        found = "dict[str, Any]"
    return f"{found} | None" if nullable or schema.get("nullable") else found


def generate(schema: dict) -> str:
    components = schema["components"]["schemas"]
    lines = [PREAMBLE]
    timestamps = set()
    for name, (sources, nested, about) in CLASSES.items():
        properties: dict[str, dict] = {}
        for source in sources:
            properties.update(components[source]["properties"])
        required_everywhere = set.intersection(*(set(components[source].get("required", ())) for source in sources))
        lines += ["", "", "@dataclass(frozen=True, kw_only=True)", f"class {name}(ApiObject):"]
        if about:
            lines += [f'    """{about}"""', ""]
        if nested:
            pairs = ", ".join(f'"{key}": "{value}"' for key, value in nested.items())
            lines.append(f"    NESTED: ClassVar[dict[str, str]] = {{{pairs}}}")
        for wire_name, prop in properties.items():
            attribute = wire_name + "_" if keyword.iskeyword(wire_name) else wire_name
            annotation = _python_type(prop, components, nested.get(attribute))
            if annotation.startswith("datetime"):
                timestamps.add(attribute)
            if wire_name in required_everywhere:
                lines.append(f"    {attribute}: {annotation}")
            elif annotation.startswith("list["):
                lines.append(f"    {attribute}: {annotation} = field(default_factory=list)")
            else:
                optional = annotation if annotation.endswith("| None") else f"{annotation} | None"
                lines.append(f"    {attribute}: {optional} = None")
    lines += ["", "", "TIMESTAMPS = frozenset({" + ", ".join(repr(name) for name in sorted(timestamps)) + "})", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    source, target = sys.argv[1:]
    with open(source) as schema_file:
        text = generate(json.load(schema_file))
    with open(target, "w") as out:
        out.write(text)
