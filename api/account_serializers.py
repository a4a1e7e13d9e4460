"""Input and output shapes of the account routes (docs/api.md, "Accounts and keys")."""
from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from accounts.models import LOGIN_PATTERN, Account, ApiKey
from api.fields import (
    ADDRESS_PATTERN,
    StrictCharField,
    StrictSerializer,
)


# --- accounts (docs/api.md) -------------------------------------------------------------------
@extend_schema_field({"type": "string", "pattern": ADDRESS_PATTERN, "maxLength": 254})
class EmailAddressField(StrictCharField):
    """An account's email: an address, at most 254 characters (RFC 5321's path limit)."""

    def __init__(self, **kwargs):
        super().__init__(max_length=254, **kwargs)
        self.validators.append(RegexValidator(ADDRESS_PATTERN, "Enter a valid email address."))


LINK_TOKEN_PATTERN = r"^[A-Za-z0-9_-]{86}$"


@extend_schema_field({"type": "string", "pattern": LINK_TOKEN_PATTERN})
class LinkTokenField(StrictCharField):
    """The token of an activation or recovery link: 86 base64url characters."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.validators.append(RegexValidator(LINK_TOKEN_PATTERN, "Not a link token: copy it whole from the mail."))


@extend_schema_field({"type": "string", "pattern": "^[0-9]{5}$"})
class CodeField(StrictCharField):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.validators.append(RegexValidator(r"^[0-9]{5}$", "A code is 5 digits."))


@extend_schema_field({"type": "string", "pattern": LOGIN_PATTERN})
class LoginField(StrictCharField):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.validators.append(RegexValidator(LOGIN_PATTERN, "A login is 3 to 32 of a-z, 0-9, '_' and '-'."))


class SignUpSerializer(StrictSerializer):
    email = EmailAddressField()
    login = LoginField()


class ActivateSerializer(StrictSerializer):
    token = LinkTokenField(required=False, help_text="From the activation link (the part after /activate/).")
    email = EmailAddressField(required=False, help_text="With `code`: activation by the code in the mail.")
    code = CodeField(required=False)

    def validate(self, data):
        if "token" in data and not ({"email", "code"} & set(data)):
            return data
        if "token" not in data and {"email", "code"} <= set(data):
            return data
        raise serializers.ValidationError("Give either `token`, or `email` and `code`.")


# The two bodies ActivateSerializer takes, as the schema states them (one of the two):
# a body with neither, or with parts of both, is a 400, and the schema says so.
class ActivateByLinkSerializer(StrictSerializer):
    token = LinkTokenField(help_text="From the activation link (the part after /activate/).")


class ActivateByCodeSerializer(StrictSerializer):
    email = EmailAddressField(help_text="The address the activation mail went to.")
    code = CodeField(help_text="The code in the activation mail.")


class RecoverSerializer(StrictSerializer):
    email = EmailAddressField()


class RecoverConfirmSerializer(StrictSerializer):
    token = LinkTokenField(help_text="From the recovery link (the part after /recover/).")
    code = CodeField()


class AcceptedSerializer(serializers.Serializer):
    status = serializers.CharField()


class AccountSerializer(serializers.ModelSerializer):
    class Meta:
        model = Account
        fields = ["login", "email", "plan", "status", "created_at", "status_changed_at", "activated_at",
                  "suspended_at", "unsuspended_at"]


class ApiKeySerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiKey
        fields = ["id", "prefix", "created_at", "last_used_at", "revoked_at"]


class ApiKeyCreatedSerializer(ApiKeySerializer):
    api_key = serializers.CharField(help_text="The key itself, shown only now.")

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "api_key"]


class ActivatedSerializer(serializers.Serializer):
    account = AccountSerializer()
    api_key = serializers.CharField(help_text="The account's first key, shown only now.")


class RecoveredSerializer(serializers.Serializer):
    api_key = serializers.CharField(help_text="A new key, shown only now; every other key of the account is revoked.")


class EmptySerializer(StrictSerializer):
    pass
