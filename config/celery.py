"""The Celery application. Its settings live in config/settings.py under CELERY_*."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("relay")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
