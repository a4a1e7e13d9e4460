"""A domain of one's own (docs/api.md, "Domains"), proven by the records Relay asks for."""
import uuid

from django.db import models


class DomainStatus(models.TextChoices):
    PENDING = "pending"
    VERIFIED = "verified"


class Domain(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey("accounts.Account", on_delete=models.CASCADE, related_name="domains")
    # Lowercase, without the final dot. Several accounts may claim a name while it is
    # pending; the first to publish its records wins it, and only one holds it verified.
    name = models.CharField(max_length=253)
    status = models.CharField(max_length=8, choices=DomainStatus.choices, default=DomainStatus.PENDING)
    created_at = models.DateTimeField(auto_now_add=True)
    verified_at = models.DateTimeField(null=True, blank=True)
    # The DKIM selector the key was published under (RELAY_DKIM_SELECTOR when it was made).
    selector = models.CharField(max_length=63)
    # DKIM's p= value, and the private key sealed with a key derived from DJANGO_SECRET_KEY.
    dkim_public_key = models.TextField()
    dkim_private_key = models.TextField()
    # What the last verification found for each record (domains/records.py): {kind: status}.
    record_status = models.JSONField(default=dict, blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["owner", "-created_at"], name="domain_owner_list"),
                   models.Index(fields=["name"], name="domain_name")]
        constraints = [
            models.UniqueConstraint(fields=["name"], condition=models.Q(status="verified"), name="domain_verified_once"),
            models.UniqueConstraint(fields=["owner", "name"], name="domain_claimed_once_per_account"),
        ]

    def __str__(self) -> str:
        return self.name
