"""bench/baseline_asgi.py's WSGI twin, for `scripts/bench.sh api --server wsgi`."""
import os

from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
settings.ROOT_URLCONF = "bench.baseline_urls"

from config.wsgi import application  # noqa: E402,F401 (what gunicorn serves)
