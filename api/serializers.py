"""Shapes of the mailbox and message routes: input serializers check the format, the
services the domain's rules."""
import json
from collections.abc import Mapping
from datetime import datetime

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import ISO_8601, serializers
from rest_framework.fields import SkipField
from rest_framework.settings import api_settings

from api.fields import (
    DomainField,
    FieldsBoundOnce,
    LocalPartField,
    QueryChoiceField,
    QueryDateTimeField,
    QueryIntegerField,
    QueryTextField,
    RuleField,
    SearchAfterField,
    SearchTextField,
    StrictBooleanField,
    StrictIntegerField,
    StrictSerializer,
    by_rule,
)
from api.schema import ttl_bounds
from mailboxes.lifecycle import METADATA_MAX_BYTES, NAME_MAX, TAG_PATTERN, TAGS_MAX, label_rule, tag_checked
from mailboxes.mail_format import ONE_LINE_PATTERN, header, lineage_of
from mailboxes.models import Direction, MailboxStatus
from relay.inbound.attachments import without_format_characters
from relay.verdicts import RESULTS, nothing_known
from relay.models import DeliveryStatus, OutboxMail, OutboxStatus, Suppression, SuppressionReason
from relay.outbox.delivery import delivery_of
from relay.reading import MAILBOX_ORDERINGS


# --- labels (docs/api.md): each checked by the service's rule (mailboxes.lifecycle.labels_checked)
@extend_schema_field({"type": "string", "pattern": ONE_LINE_PATTERN})
class LabelNameField(RuleField):
    rule = staticmethod(label_rule("name"))


@extend_schema_field({"type": "string", "pattern": TAG_PATTERN})
class TagField(RuleField):
    rule = staticmethod(tag_checked)

    def __init__(self, **kwargs):
        super().__init__(max_length=32, **kwargs)


class TagListField(serializers.ListField):
    """Labels' tags: the rule counts them as sent (the schema's maxItems), repeats included."""

    def __init__(self, **kwargs):
        super().__init__(child=TagField(), max_length=TAGS_MAX, **kwargs)

    def to_internal_value(self, data):
        if isinstance(data, list):
            # The rule checks every item; the child field is there for the schema.
            return by_rule(label_rule("tags"), data)
        return super().to_internal_value(data)


@extend_schema_field({"type": "object", "additionalProperties": True,
                      "description": f"Any JSON object, at most {METADATA_MAX_BYTES} bytes serialized."})
class MetadataField(serializers.JSONField):
    """A JSON object, taken in as its compact JSON text (what Mailbox.metadata keeps)."""

    def to_internal_value(self, data):
        return by_rule(label_rule("metadata"), data)

    def to_representation(self, value):
        return json.loads(value) if isinstance(value, str) else value


class LabelsSerializer(StrictSerializer):
    name = LabelNameField(required=False, max_length=NAME_MAX, allow_blank=True, trim_whitespace=False,
                          help_text="A name for the mailbox, up to 100 characters.")
    tags = TagListField(required=False, help_text="Up to 10 tags of a-z, 0-9, '_' and '-', each at most 32.")
    metadata = MetadataField(required=False, help_text=f"A JSON object, at most {METADATA_MAX_BYTES} bytes.")


class MailboxPatchSerializer(LabelsSerializer):
    pass


class MailboxCreateSerializer(LabelsSerializer):
    local_part = LocalPartField(required=False, min_length=1, max_length=64, trim_whitespace=False,
                                help_text="a-z, 0-9, '.', '_', '-' as a dot-atom, not a role name; random when absent.")
    domain = DomainField(required=False, min_length=1, max_length=253,
                         help_text="One of RELAY_DOMAINS (the first when absent) or one of your verified domains.")
    ttl_ms = StrictIntegerField(required=False, **ttl_bounds(),
                                help_text="Lifetime in ms, at most the plan's cap; the plan's default when absent.")
    sandbox = StrictBooleanField(required=False, default=False,
                                 help_text="true: a sandbox, which also catches what an app submits with its SMTP "
                                           "settings (returned once, as `smtp`), to anyone, and never delivers it.")


class MailboxRenewSerializer(StrictSerializer):
    ttl_ms = StrictIntegerField(required=False, **ttl_bounds(),
                                help_text="New lifetime from now in ms; the plan's default when absent.")


class MailboxListQuerySerializer(serializers.Serializer):
    include_expired = StrictBooleanField(required=False, default=False, help_text="Also list expired mailboxes.")
    status = QueryChoiceField(choices=["active", "expired"], required=False,
                                     help_text="Only mailboxes in this status (include_expired then does not apply).")
    tag = serializers.ListField(child=TagField(), required=False, max_length=10,
                                help_text="Repeatable: mailboxes with every one of these tags.")
    q = QueryTextField(required=False, max_length=100, help_text="Text found in the address or the name.")
    created_after = QueryDateTimeField(required=False, help_text="ISO 8601.")
    created_before = QueryDateTimeField(required=False, help_text="ISO 8601.")
    ordering = QueryChoiceField(choices=MAILBOX_ORDERINGS, required=False, default="-created_at")


class MessageSearchQuerySerializer(FieldsBoundOnce, serializers.Serializer):
    q = SearchTextField("words", required=False,
                        help_text='Words in the subject or text, all of them ("a phrase", or, -word work too).')
    vars()["from"] = SearchTextField("sender", required=False, source="sender",
                                     help_text="Text in the From header or the envelope sender.")
    subject = SearchTextField("subject", required=False, help_text="Text in the subject.")
    since = QueryDateTimeField(required=False, help_text="Received at or after this (ISO 8601).")
    until = QueryDateTimeField(required=False, help_text="Received before this (ISO 8601).")
    unread = StrictBooleanField(required=False, default=False, help_text="true: only messages not yet read.")
    authenticated = StrictBooleanField(required=False, default=False,
                                       help_text="true: only mail whose verdict is pass (SPF, DKIM and DMARC).")
    after = SearchAfterField(required=False,
                             help_text="Only messages received after this message (its id); "
                                       "400 if it is not one of the listed mailbox's messages.")
    direction = QueryChoiceField(choices=Direction.values, required=False,
                                 help_text="in: received mail; out: mail sent from the mailbox. Both when absent "
                                           "(a wait: in).")
    rcpt = SearchTextField("rcpt", required=False,
                           help_text="An envelope recipient, the whole address in any case (a sandbox's catch: any "
                                     "of its RCPT TO; other mail: the address it came to).")

    @staticmethod
    def filters(query: dict) -> dict:
        """The validated query as relay.reading.message_search's keywords."""
        return {"words": query.get("q", ""), "sender": query.get("sender", ""), "subject": query.get("subject", ""),
                "since": query.get("since"), "until": query.get("until"), "unread": query["unread"],
                "authenticated": query["authenticated"], "after": query.get("after"),
                "direction": query.get("direction", ""), "rcpt": query.get("rcpt", "")}


class WaitQuerySerializer(MessageSearchQuerySerializer):
    """`?wait=S&after=MID` with the list's search filters; integers within the schema's bounds."""

    wait = QueryIntegerField(min_value=0, max_value=60)
    page = QueryIntegerField(min_value=1, max_value=999_999_999, required=False, default=1)
    page_size = QueryIntegerField(min_value=1, max_value=200, required=False, default=50)


class EventsQuerySerializer(serializers.Serializer):
    pass


# Each field of a plain kind (integer, text, boolean, UUID, ISO 8601 time, a list of text)
# renders its value without DRF's generic steps, and the time zone a page's times are shown
# in is asked once for the page: DRF's per-field work was most of a search's rendering
# (docs/benchmarks.md). A field's value is read with getattr where its source is one
# attribute of an object and the field reads no way of its own; a mapping's by key, as DRF
# reads it. Anything else, or a value of another kind, goes through the field itself;
# tests/api/test_rendering.py holds the two equal. (A comment: the schema shows this class's
# docstring for each serializer without one of its own.)
class RenderedOnce:
    """For a serializer of plain values: `represent(instance)` renders from fields bound once
    per class (DRF deep-copies every field per serializer); the fields keep no state."""

    @classmethod
    def represent(cls, instance) -> dict:
        return cls.represent_many((instance,))[0]

    @classmethod
    def represent_many(cls, instances) -> list[dict]:
        """What `Serializer(instances, many=True).data` holds."""
        fields = cls.__dict__.get("_fields_rendered_once")
        if fields is None:  # a race builds them twice, harmlessly
            fields = [_FieldRendering(name, field) for name, field in cls().fields.items() if not field.write_only]
            cls._fields_rendered_once = fields
        # Times are shown in the current time zone, in ISO 8601 unless the settings say otherwise.
        default_format = api_settings.DATETIME_FORMAT
        iso = isinstance(default_format, str) and default_format.lower() == ISO_8601
        shown_in = timezone.get_current_timezone() if settings.USE_TZ and iso else None
        represented = []
        for instance in instances:
            mapping = isinstance(instance, Mapping)  # read by key, as DRF reads one
            fields_shown = {}
            for field in fields:
                try:
                    fields_shown[field.name] = field.render(instance, mapping, shown_in)
                except SkipField:  # left out, as DRF leaves it
                    pass
            represented.append(fields_shown)
        return represented


class _FieldRendering:
    """One field of a RenderedOnce serializer: its value read and rendered as the field
    itself would (Field.get_attribute, then None or to_representation)."""

    __slots__ = ("name", "field", "attribute", "plain")

    def __init__(self, name: str, field: serializers.Field) -> None:
        self.name, self.field = name, field
        # A source of one attribute is read with getattr, unless the field reads its own way;
        # a dotted one, or "*", by the field.
        plain_read = type(field).get_attribute is serializers.Field.get_attribute
        self.attribute = field.source_attrs[0] if plain_read and len(field.source_attrs) == 1 else None
        self.plain = _PLAIN_RENDERINGS.get(type(field))
        if type(field) is serializers.UUIDField and field.uuid_format != "hex_verbose":
            self.plain = None
        if type(field) is serializers.DateTimeField and (hasattr(field, "timezone") or hasattr(field, "format")):
            self.plain = None  # a zone or format of its own
        if type(field) is serializers.ListField and type(field.child) is not serializers.CharField:
            self.plain = None

    def render(self, instance, mapping: bool, shown_in):
        value = self.field.get_attribute(instance) if mapping else self._read(instance)
        if value is None:
            return None
        if self.plain is not None:
            rendered = self.plain(value, shown_in)
            if rendered is not _NOT_PLAIN:
                return rendered
        return self.field.to_representation(value)

    def _read(self, instance):
        if self.attribute is None:
            return self.field.get_attribute(instance)
        try:
            value = getattr(instance, self.attribute)
        except (AttributeError, KeyError, ObjectDoesNotExist):  # the field says what these mean
            return self.field.get_attribute(instance)
        return self.field.get_attribute(instance) if callable(value) else value


_NOT_PLAIN = object()  # a value of another kind than the field's plain one: the field renders it


def _time_shown(value, shown_in):
    # DateTimeField.to_representation in ISO 8601 for an aware time, UTC as "Z".
    if type(value) is not datetime or value.utcoffset() is None or shown_in is None:
        return _NOT_PLAIN
    try:
        shown = value.astimezone(shown_in).isoformat()
    except OverflowError:  # the field's own error for it
        return _NOT_PLAIN
    return shown[:-6] + "Z" if shown.endswith("+00:00") else shown


def _texts(value, shown_in):
    return [None if item is None else str(item) for item in value]


_PLAIN_RENDERINGS = {
    serializers.IntegerField: lambda value, shown_in: int(value),
    serializers.CharField: lambda value, shown_in: str(value),
    serializers.BooleanField: lambda value, shown_in: value if type(value) is bool else _NOT_PLAIN,
    serializers.UUIDField: lambda value, shown_in: str(value),
    serializers.DateTimeField: _time_shown,
    serializers.ListField: _texts,
}


# Plain fields, not a ModelSerializer, which introspects the model for every instance.
class MailboxSerializer(RenderedOnce, serializers.Serializer):
    id = serializers.UUIDField(read_only=True)
    address = serializers.CharField(read_only=True, max_length=320)
    status = serializers.ChoiceField(choices=MailboxStatus.choices, read_only=True)
    created_at = serializers.DateTimeField(read_only=True)
    expires_at = serializers.DateTimeField(read_only=True)
    expired_at = serializers.DateTimeField(read_only=True, allow_null=True)
    message_count = serializers.IntegerField(read_only=True, min_value=0)
    name = serializers.CharField(read_only=True, max_length=100)
    tags = serializers.ListField(child=serializers.CharField(), read_only=True)
    metadata = MetadataField(read_only=True)
    sandbox = serializers.BooleanField(read_only=True, help_text="A sandbox: it catches what its SMTP login "
                                                                 "submits (docs/sandbox.md).")


class SmtpSettingsSerializer(serializers.Serializer):
    host = serializers.CharField()
    port = serializers.IntegerField(allow_null=True, help_text="The submission port; null when none is served.")
    username = serializers.CharField(help_text="The sandbox's address.")
    password = serializers.CharField(help_text="Shown once; stored hashed.")
    security = serializers.ChoiceField(choices=["starttls", "none"], help_text=(
        '"none" where this Relay has no TLS certificate: no STARTTLS, AUTH from the same host only.'))


class MailboxCreatedSerializer(MailboxSerializer):
    # Not read_only: read-only fields are "required" in response schemas, and an owner's
    # create has no token.
    token = serializers.CharField(required=False, help_text="Only for anonymous creation, shown once.")
    smtp = SmtpSettingsSerializer(required=False, help_text="Only for a sandbox, shown once: its SMTP settings.")


class FaultRuleSerializer(serializers.Serializer):
    stage = serializers.ChoiceField(choices=["auth", "mail", "rcpt", "data"])
    code = serializers.IntegerField(min_value=400, max_value=599, help_text="The SMTP reply code answered.")
    message = serializers.CharField(required=False, max_length=200, help_text="Its text; a default when absent.")
    match = serializers.CharField(required=False, max_length=320,
                                  help_text="A glob on the address (mail: the sender; rcpt: the recipient; data: "
                                            "the sender; auth: the username), any case; every address when absent.")
    probability = serializers.FloatField(required=False, min_value=0, max_value=1,
                                         help_text="Drawn for each answer; 1 when absent.")
    times = serializers.IntegerField(required=False, allow_null=True, min_value=1,
                                     help_text="Spent after this many answers, across every SMTP process.")
    delay_seconds = serializers.FloatField(required=False, min_value=0, max_value=30, help_text="Answer this late.")


class FaultRuleShownSerializer(FaultRuleSerializer):
    remaining = serializers.IntegerField(allow_null=True, help_text="What is left of `times`; null without one.")

    @staticmethod
    def of(rule) -> dict:
        return {"stage": rule.stage, "code": rule.code, "message": rule.message, "match": rule.match,
                "probability": rule.probability, "times": rule.times, "delay_seconds": rule.delay_seconds,
                "remaining": rule.remaining}


class FaultRulesSerializer(serializers.Serializer):
    """The body of PUT …/faults: its rules are checked by the service (mailboxes.faults)."""

    rules = serializers.ListField(child=FaultRuleSerializer(), max_length=20)


class FaultRulesShownSerializer(serializers.Serializer):
    rules = FaultRuleShownSerializer(many=True)


class SandboxPasswordSerializer(MailboxSerializer):
    smtp = SmtpSettingsSerializer(help_text="The new SMTP settings, shown once; the old password fails at once.")


# A message in a list. Its subclass MessageDetailSerializer renders with a context and
# nested serializers: it is rendered the DRF way, never through `represent`.
class MessageSummarySerializer(RenderedOnce, serializers.Serializer):
    id = serializers.IntegerField()
    mailbox_id = serializers.UUIDField()
    # "from" is a Python keyword, so it is declared through the class namespace.
    # The From header, or the envelope sender when the mail has none (Message.sender).
    vars()["from"] = serializers.CharField(source="sender")
    to = serializers.CharField(source="to_header")
    envelope_from = serializers.CharField()
    envelope_to = serializers.CharField()
    rcpt_to = serializers.ListField(child=serializers.CharField(), help_text="Every envelope recipient of a "
                                    "submission a sandbox caught, Bcc included; [] for mail received.")
    subject = serializers.CharField()
    received_at = serializers.DateTimeField()
    size = serializers.IntegerField()
    is_read = serializers.BooleanField()
    has_attachments = serializers.BooleanField()
    authenticated = serializers.BooleanField(help_text="Its verdict is pass: DMARC passed, or an aligned DKIM "
                                                       "signature or SPF did where the From domain has no DMARC.")
    direction = serializers.ChoiceField(choices=Direction.values, help_text="in: received; out: sent from the mailbox.")
    thread_id = serializers.IntegerField(allow_null=True, help_text="Its thread (null for mail kept from before "
                                                                    "threads).")


class AttachmentSerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="Its number in the message, from 1; stable.")
    download_url = serializers.URLField(help_text="GET it for the bytes (always served as a download).")
    filename = serializers.CharField(allow_null=True)
    content_type = serializers.CharField()
    size = serializers.IntegerField()
    content_id = serializers.CharField(allow_null=True)


class LinkSerializer(serializers.Serializer):
    url = serializers.CharField()
    text = serializers.CharField()


_RESULT = serializers.ChoiceField(choices=RESULTS)


class SpfResultSerializer(serializers.Serializer):
    result = _RESULT
    domain = serializers.CharField(help_text="The envelope sender's domain, or the HELO name without one.")


class DkimResultSerializer(serializers.Serializer):
    result = _RESULT
    domain = serializers.CharField(help_text="The signature's d=.")
    selector = serializers.CharField(help_text="The signature's s=.")


class DmarcResultSerializer(serializers.Serializer):
    result = _RESULT
    policy = serializers.CharField(allow_null=True, help_text="p= (sp= for a subdomain); null without a record.")
    domain = serializers.CharField(help_text="The From header's domain.")


class EnvelopeSerializer(serializers.Serializer):
    mail_from = serializers.CharField()
    rcpt_to = serializers.ListField(child=serializers.CharField())


class AuthenticationSerializer(serializers.Serializer):
    spf = SpfResultSerializer()
    dkim = DkimResultSerializer(many=True)
    dmarc = DmarcResultSerializer()
    verdict = serializers.ChoiceField(choices=["pass", "fail", "none"])


def _outbox_mail(message) -> OutboxMail | None:
    """The outbox entry of a message the mailbox sent."""
    if message.direction != Direction.OUT:
        return None
    try:
        return message.outbox_mail
    except OutboxMail.DoesNotExist:
        return None


def message_codes(message) -> list[str]:
    """The one-time codes of a message (docs/api.md, "Codes and links"), most likely first."""
    return message.content.codes  # computed when stored


class DeliverySerializer(serializers.Serializer):
    """One recipient of a sent message, and what became of it (docs/delivery.md)."""

    recipient = serializers.CharField()
    status = serializers.ChoiceField(choices=DeliveryStatus.values, help_text=(
        "queued; sent (the next hop answered 250); deferred (a 4xx, retried); failed (a 5xx, or retries spent); "
        "bounced or complained (a bounce or complaint came back). sent, failed, bounced and complained are final."))
    smtp_code = serializers.IntegerField(allow_null=True, help_text="The last SMTP code heard for it, if any.")
    detail = serializers.CharField(help_text="The last answer's text, or what a bounce said.")
    at = serializers.DateTimeField(help_text="When the state was last changed.")


class SuppressionSerializer(serializers.ModelSerializer):
    reason = serializers.ChoiceField(choices=SuppressionReason.values)
    message_id = serializers.IntegerField(allow_null=True, help_text="The sent message whose bounce or complaint "
                                                                     "added it.")

    class Meta:
        model = Suppression
        fields = ["address", "reason", "at", "message_id"]


class MessageDetailSerializer(MessageSummarySerializer):
    text = serializers.CharField(source="content.text")
    html = serializers.CharField(source="content.html")
    headers = serializers.ListField(source="content.headers", child=serializers.ListField(child=serializers.CharField()))
    attachments = serializers.SerializerMethodField()
    codes = serializers.SerializerMethodField(help_text="One-time codes found in the subject and text, most likely first.")
    links = serializers.SerializerMethodField(help_text="Links from the HTML and the text, in order, each once.")
    authentication = serializers.SerializerMethodField(
        help_text="SPF, DKIM and DMARC as found when the message was received, and the verdict.")
    message_id = serializers.SerializerMethodField(
        help_text="Its Message-ID header, without the angle brackets (the same as header_message_id; elsewhere "
                  "message_id is a message's number in Relay).")
    header_message_id = serializers.SerializerMethodField(help_text="Its Message-ID header, without the angle "
                                                                    "brackets.")
    in_reply_to = serializers.SerializerMethodField(help_text="The Message-ID it answers.")
    references = serializers.SerializerMethodField(help_text="The Message-IDs of the conversation before it.")
    cc = serializers.CharField(source="cc_header")
    reply_to = serializers.SerializerMethodField(help_text="Where replies go, if not to From.")
    outbox_id = serializers.SerializerMethodField(help_text="Sent mail: its outbox entry (GET …/outbox/{id}).")
    outbox_status = serializers.SerializerMethodField(help_text="Sent mail: queued, sending, sent, failed or "
                                                                "skipped.")
    delivery = serializers.SerializerMethodField(help_text="Sent mail: each recipient and what became of it "
                                                           "(docs/delivery.md); empty for mail received.")
    envelope = serializers.SerializerMethodField(help_text="The SMTP envelope: MAIL FROM and every RCPT TO (a "
                                                           "sandbox's catch shows its Bcc recipients here).")

    @extend_schema_field(EnvelopeSerializer)
    def get_envelope(self, message) -> dict:
        return {"mail_from": message.envelope_from,
                "rcpt_to": list(message.rcpt_to) or ([message.envelope_to] if message.envelope_to else [])}

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_header_message_id(self, message) -> str | None:
        return message.message_id or None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_message_id(self, message) -> str | None:
        return self.get_header_message_id(message)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_in_reply_to(self, message) -> str | None:
        return lineage_of(message.content.headers).in_reply_to or None

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_references(self, message) -> list[str]:
        return list(lineage_of(message.content.headers).references)

    def get_reply_to(self, message) -> str:
        return header(message.content.headers, "Reply-To")

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_outbox_id(self, message) -> int | None:
        outbox = _outbox_mail(message)
        return outbox.id if outbox else None

    @extend_schema_field(serializers.ChoiceField(choices=OutboxStatus.values, allow_null=True))
    def get_outbox_status(self, message) -> str | None:
        outbox = _outbox_mail(message)
        return outbox.status if outbox else None

    @extend_schema_field(DeliverySerializer(many=True))
    def get_delivery(self, message) -> list[dict]:
        return DeliverySerializer(delivery_of(_outbox_mail(message)), many=True).data

    @extend_schema_field(AttachmentSerializer(many=True))
    def get_attachments(self, message) -> list[dict]:
        base_url = self.context.get("base_url", "")
        described = []
        for number, attachment in enumerate(message.content.attachments, start=1):
            path = reverse("message-attachment", kwargs={
                "mailbox_id": message.mailbox_id, "message_id": message.id, "attachment_id": number})
            described.append({"id": number, "download_url": base_url + path,
                              "filename": without_format_characters(attachment.get("filename")),
                              "content_type": attachment.get("content_type", ""),
                              "size": attachment.get("size", 0), "content_id": attachment.get("content_id")})
        return described

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_codes(self, message) -> list[str]:
        return message_codes(message)

    @extend_schema_field(LinkSerializer(many=True))
    def get_links(self, message) -> list[dict]:
        return message.content.links

    @extend_schema_field(AuthenticationSerializer)
    def get_authentication(self, message) -> dict:
        return message.content.authentication or nothing_known()
