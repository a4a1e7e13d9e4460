import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Read by config/settings.py: under ASGI each request runs its sync parts in a thread
# of its own, so a database connection kept open past the request (CONN_MAX_AGE) would
# be left behind with that thread, and they would pile up to PostgreSQL's limit.
os.environ["RELAY_SERVING_ASGI"] = "1"
application = get_asgi_application()
