from django.db import models


class LinkCheck(models.Model):
    """The latest link check of one message: asked for by POST, done by a Celery task."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DONE = "done"

    message = models.OneToOneField("mailboxes.Message", on_delete=models.CASCADE, primary_key=True,
                                   related_name="+")
    status = models.CharField(max_length=7, choices=Status.choices, default=Status.PENDING)
    # [{"url", "status_code", "final_url", "redirects", "error", "ok"}], in the message's order.
    links = models.JSONField(default=list, blank=True)
    # When the check was last queued: a task carries it, and only the task of the newest
    # request writes its result.
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
