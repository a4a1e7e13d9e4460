"""Input and output shapes of the API. Input serializers check the format; the rules of
the domain (TTL bounds per plan, addresses never reused) are the services' to enforce."""
import re

from django.conf import settings
from rest_framework import serializers

from mailboxes.models import Mailbox, OutboundMessage

# A dot-atom of [a-z0-9._-]: no leading, trailing or doubled dot.
LOCAL_PART_RE = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not know, naming them: a typo such as "ttl" must not
    silently make a mailbox with the default lifetime."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer and nothing else: not "300000", not 300000.0, not true."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """A query-string boolean: true/false/1/0 only, so `include_expired=banana` is a 400."""

    # The bools are what DRF passes for an absent parameter.
    TRUE_VALUES = {"true", "True", "1", True}
    FALSE_VALUES = {"false", "False", "0", False}
    NULL_VALUES = set()


class MailboxCreateSerializer(StrictSerializer):
    local_part = serializers.CharField(required=False, max_length=64, trim_whitespace=False)
    domain = serializers.CharField(required=False, max_length=253)
    ttl_ms = StrictIntegerField(required=False)

    def validate_local_part(self, value: str) -> str:
        value = value.lower()
        if not LOCAL_PART_RE.fullmatch(value):
            raise serializers.ValidationError(
                "local_part must be 1 to 64 of a-z, 0-9, '.', '_' and '-', with no leading, trailing or double dot.")
        if value in settings.RELAY_RESERVED_LOCAL_PARTS:
            raise serializers.ValidationError(f"{value} is a reserved role address and cannot be handed out.")
        return value

    def validate_domain(self, value: str) -> str:
        value = value.lower()
        if value not in settings.RELAY_DOMAINS:
            raise serializers.ValidationError(f"domain must be one of: {', '.join(settings.RELAY_DOMAINS)}.")
        return value


class MailboxRenewSerializer(StrictSerializer):
    ttl_ms = StrictIntegerField(required=False)


class MailboxListQuerySerializer(serializers.Serializer):
    include_expired = StrictBooleanField(required=False, default=False)


class MailboxSerializer(serializers.ModelSerializer):
    class Meta:
        model = Mailbox
        fields = ["id", "address", "status", "created_at", "expires_at", "expired_at", "message_count"]


class MailboxCreatedSerializer(MailboxSerializer):
    token = serializers.CharField(read_only=True, required=False, help_text="Only for anonymous creation, shown once.")

    class Meta(MailboxSerializer.Meta):
        fields = MailboxSerializer.Meta.fields + ["token"]


class MessageSummarySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    # "from" is a Python keyword, so it is declared through the class namespace.
    vars()["from"] = serializers.CharField(source="from_header")
    to = serializers.CharField(source="to_header")
    envelope_from = serializers.CharField()
    envelope_to = serializers.CharField()
    subject = serializers.CharField()
    received_at = serializers.DateTimeField()
    size = serializers.IntegerField()
    is_read = serializers.BooleanField()
    has_attachments = serializers.BooleanField()


class AttachmentSerializer(serializers.Serializer):
    filename = serializers.CharField(allow_null=True)
    content_type = serializers.CharField()
    size = serializers.IntegerField()
    content_id = serializers.CharField(allow_null=True)


class MessageDetailSerializer(MessageSummarySerializer):
    text = serializers.CharField(source="content.text")
    html = serializers.CharField(source="content.html")
    headers = serializers.ListField(source="content.headers", child=serializers.ListField(child=serializers.CharField()))
    attachments = AttachmentSerializer(source="content.attachments", many=True)


class RecipientListField(serializers.ListField):
    """`to` is a list of addresses; a single string is taken as a list of one."""

    def to_internal_value(self, data):
        if isinstance(data, str):
            data = [data]
        return super().to_internal_value(data)


class SendSerializer(StrictSerializer):
    to = RecipientListField(child=serializers.EmailField(max_length=320), min_length=1, max_length=50,
                            help_text="A list of addresses (a single string counts as a list of one).")
    subject = serializers.CharField(max_length=998)
    text = serializers.CharField(max_length=1_000_000, allow_blank=True)
    html = serializers.CharField(max_length=1_000_000, required=False, allow_blank=True)

    def validate_subject(self, value: str) -> str:
        # A line break would end the header and start another: refused here, not at send time.
        if "\r" in value or "\n" in value:
            raise serializers.ValidationError("subject must be one line: no CR or LF.")
        return value


class SendAcceptedSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField()


class OutboundSerializer(serializers.ModelSerializer):
    class Meta:
        model = OutboundMessage
        fields = ["id", "to", "subject", "status", "attempts", "last_error", "created_at", "sent_at"]
