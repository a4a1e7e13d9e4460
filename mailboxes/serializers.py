import re

from django.conf import settings
from rest_framework import serializers

from mailboxes.models import Mailbox, Message, OutboundMessage
from mailboxes.services import plan_ttl_cap_ms

LOCAL_PART_RE = re.compile(r"[a-z0-9._-]{1,64}")


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer and nothing else: not "300000", not 300000.0, not true."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class TtlMixin:
    def validate_ttl_ms(self, value: int | None) -> int | None:
        if value is None:
            return value
        cap = plan_ttl_cap_ms(self.context["plan"])
        if not settings.RELAY_MIN_TTL_MS <= value <= cap:
            raise serializers.ValidationError(
                f"ttl_ms must be between {settings.RELAY_MIN_TTL_MS} and {cap} on the {self.context['plan']} plan."
            )
        return value


class MailboxCreateSerializer(TtlMixin, serializers.Serializer):
    local_part = serializers.CharField(required=False, max_length=64, trim_whitespace=False)
    domain = serializers.CharField(required=False, max_length=253)
    ttl_ms = StrictIntegerField(required=False)

    def validate_local_part(self, value: str) -> str:
        value = value.lower()
        if not LOCAL_PART_RE.fullmatch(value):
            raise serializers.ValidationError("local_part must be 1 to 64 of a-z, 0-9, '.', '_' and '-'.")
        return value

    def validate_domain(self, value: str) -> str:
        value = value.lower()
        if value not in settings.RELAY_DOMAINS:
            raise serializers.ValidationError(f"domain must be one of: {', '.join(settings.RELAY_DOMAINS)}.")
        return value


class MailboxRenewSerializer(TtlMixin, serializers.Serializer):
    ttl_ms = StrictIntegerField(required=False)


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
    subject = serializers.CharField()
    received_at = serializers.DateTimeField()
    size = serializers.IntegerField()
    is_read = serializers.BooleanField()
    has_attachments = serializers.SerializerMethodField()

    def get_has_attachments(self, message: Message) -> bool:
        return bool(message.attachments)


class AttachmentSerializer(serializers.Serializer):
    filename = serializers.CharField(allow_null=True)
    content_type = serializers.CharField()
    size = serializers.IntegerField()
    content_id = serializers.CharField(allow_null=True)


class MessageDetailSerializer(MessageSummarySerializer):
    text = serializers.CharField()
    html = serializers.CharField()
    headers = serializers.ListField(child=serializers.ListField(child=serializers.CharField()))
    attachments = AttachmentSerializer(many=True)


class SendSerializer(serializers.Serializer):
    to = serializers.ListField(child=serializers.EmailField(max_length=320), min_length=1, max_length=50)
    subject = serializers.CharField(max_length=998)
    text = serializers.CharField(max_length=1_000_000, allow_blank=True)
    html = serializers.CharField(max_length=1_000_000, required=False, allow_blank=True)


class OutboundSerializer(serializers.ModelSerializer):
    class Meta:
        model = OutboundMessage
        fields = ["id", "to", "subject", "status", "attempts", "last_error", "created_at", "sent_at"]
