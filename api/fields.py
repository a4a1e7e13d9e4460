"""The fields and base serializer every input of the API is read with: strict about what
they take, so that a malformed value is a 400 naming it (docs/api.md, "Errors")."""
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.schema import domain_schema, local_part_schema
from mailboxes.errors import InvalidRequest
from mailboxes.lifecycle import local_part_checked
from mailboxes.mail_format import NOT_ONE_LINE, ONE_LINE_PATTERN, breaks_line
from relay.outbox import build
from relay.reading import AFTER_MAX, SEARCH_TEXT_MAX, search_after, search_text


def by_rule(rule, value):
    """`rule(value)`, a rule of a service below api/ (so that a route and a tool say it
    once), its InvalidRequest as the field's 400."""
    try:
        return rule(value)
    except InvalidRequest as exc:
        raise serializers.ValidationError(exc.message) from exc


def validated(serializer_class, data) -> dict:
    """`data` read by `serializer_class`, or its 400 naming each field that is wrong: the
    one way a route or a tool reads its input."""
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class FieldsBoundOnce:
    """For a serializer reading a request's query (plain fields, no context): its fields
    built and bound once per class, as RenderedOnce's are for an answer (DRF deep-copies
    every declared field for each serializer it makes); the fields keep no state while
    validating, so the threads serving requests may share them."""

    @property
    def fields(self):
        fields = type(self).__dict__.get("_fields_bound_once")
        if fields is None:  # a race builds them twice, harmlessly
            fields = super().fields
            type(self)._fields_bound_once = fields
        return fields


# Refuses unknown fields, naming them ("ttl" must not silently mean the default). A comment:
# the schema would show a docstring on every request body.
class StrictSerializer(serializers.Serializer):

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


@extend_schema_field({"type": "string", "pattern": "^[^\\u0000]*$"})
class StrictCharField(serializers.CharField):
    """A JSON string and nothing else (DRF would take 0 for "0"), with no NUL in it
    (PostgreSQL cannot store one; DRF refuses it, and the schema says so)."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class RuleField(StrictCharField):
    """A string checked by `rule`, a service's rule below api/, so that a route and a tool
    say it once: "" too (DRF would refuse it as blank in words of its own). The limits a
    field is given are the schema's, and hold once the rule has."""

    @staticmethod
    def rule(value: str) -> str:
        raise NotImplementedError

    def __init__(self, **kwargs):
        kwargs.setdefault("trim_whitespace", False)  # the rule's to decide
        super().__init__(**kwargs)

    def run_validation(self, data=serializers.empty):
        if data == "":
            return by_rule(self.rule, data)
        return super().run_validation(data)

    def to_internal_value(self, data):
        return by_rule(self.rule, super().to_internal_value(data))


@extend_schema_field({"type": "string", "pattern": ONE_LINE_PATTERN})
class OneLineField(StrictCharField):
    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        # A line break would end the header and start another: the service's rule, here
        # to name the field in a 400 before anything is built.
        if breaks_line(value):
            raise serializers.ValidationError(NOT_ONE_LINE)
        return value


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer and nothing else: not "300000", not 300000.0, not true."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class PresentEmptyIsAValue:
    """DRF takes a present but empty query parameter for an absent one; `?status=` or
    `?until=` is a malformed value, not a default, and gets its 400."""

    def get_value(self, dictionary):
        if self.field_name in dictionary and dictionary.get(self.field_name) == "":
            return ""
        return super().get_value(dictionary)


class StrictBooleanField(PresentEmptyIsAValue, serializers.BooleanField):
    """A query-string boolean: true or false only, so `include_expired=banana` is a 400."""

    # The bools are what DRF passes for an absent parameter.
    TRUE_VALUES = {"true", True}
    FALSE_VALUES = {"false", False}
    NULL_VALUES = set()


class QueryChoiceField(PresentEmptyIsAValue, serializers.ChoiceField):
    pass


class QueryDateTimeField(PresentEmptyIsAValue, serializers.DateTimeField):
    pass


class QueryTextField(PresentEmptyIsAValue, OneLineField):
    """Query text: one line, and not empty (`?q=` is a 400). A value of only whitespace is
    trimmed to nothing, as DRF trims text, and filters nothing: the schema allows it."""

    def __init__(self, **kwargs):
        kwargs.setdefault("allow_blank", True)
        super().__init__(**kwargs)

    def run_validation(self, data=serializers.empty):
        if data == "":
            self.fail("blank")
        if isinstance(data, str) and breaks_line(data):
            raise serializers.ValidationError(NOT_ONE_LINE)
        return super().run_validation(data)


@extend_schema_field({"type": "string", "pattern": ONE_LINE_PATTERN})
class SearchTextField(PresentEmptyIsAValue, StrictCharField):
    """A search filter's text, checked by the rule every door's search takes
    (relay.reading.search_text), its limit declared from the same table."""

    def __init__(self, rule: str, **kwargs):
        self.rule = rule
        super().__init__(max_length=SEARCH_TEXT_MAX[rule], allow_blank=True, **kwargs)

    def run_validation(self, data=serializers.empty):
        if isinstance(data, str):
            data = by_rule(lambda text: search_text(self.rule, text), data)
        return super().run_validation(data)


class QueryIntegerField(PresentEmptyIsAValue, serializers.IntegerField):
    pass


class SearchAfterField(QueryIntegerField):
    """A search's `after`, checked by the rule every door's search takes
    (relay.reading.search_after), its bounds declared from the same limit."""

    def __init__(self, **kwargs):
        super().__init__(min_value=1, max_value=AFTER_MAX, **kwargs)

    def to_internal_value(self, data):
        return by_rule(search_after, super().to_internal_value(data))


@extend_schema_field(local_part_schema())
class LocalPartField(RuleField):
    rule = staticmethod(local_part_checked)


@extend_schema_field(domain_schema())
class DomainField(StrictCharField):
    pass


# What `to` takes: the service's address rule, stated in the schema too.
ADDRESS_PATTERN = build.ADDRESS_PATTERN
