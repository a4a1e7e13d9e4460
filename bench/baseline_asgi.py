"""The API benchmark's baseline (bench/api.py): Relay's own ASGI application, as
`config.asgi` serves it, with one route more (bench/baseline_urls.py), served by the same
server and workers: a plain Django view that makes the same primary-key select as
`GET /api/v1/mailboxes/{id}` and answers it as JSON, without DRF, authentication,
throttles or serializers. The ratio of the two is what Relay's API costs above Django.

    gunicorn bench.baseline_asgi -k core.serving.UvicornWorker
"""
import os

from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
settings.ROOT_URLCONF = "bench.baseline_urls"  # Relay's routes and the baseline's

from config.asgi import application  # noqa: E402,F401 (what gunicorn serves)
