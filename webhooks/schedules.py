"""The beat schedule of the deliveries' sweep, installed after every migrate (like
expiry's), so no operator step is needed."""
from django.conf import settings

SWEEP_TASK_NAME = "relay: requeue lapsed webhook deliveries"


def install_schedule(apps=None) -> None:
    if apps is None:
        from django.apps import apps
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    every, _ = IntervalSchedule.objects.get_or_create(every=settings.RELAY_SWEEP_INTERVAL_SECONDS, period="seconds")
    PeriodicTask.objects.update_or_create(
        name=SWEEP_TASK_NAME,
        defaults={"task": "webhooks.tasks.sweep_deliveries", "interval": every, "crontab": None, "enabled": True,
                  "expire_seconds": settings.RELAY_SWEEP_INTERVAL_SECONDS * 2})
