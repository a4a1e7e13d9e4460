FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 DJANGO_DEBUG=false
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
# Static files (admin, API docs) are collected at build time; the key is a throwaway
# that only this step sees. At run time DJANGO_SECRET_KEY must be set (Relay refuses to
# start without a real one, since DEBUG is off).
RUN DJANGO_SECRET_KEY=build-only-collectstatic-key-not-used-at-run-time-0123456789 \
    python manage.py collectstatic --noinput -v0 \
 && useradd --system relay && chown -R relay var
USER relay
EXPOSE 8000 2525
CMD ["gunicorn", "config.asgi", "--worker-class", "core.serving.UvicornWorker", "--bind", "0.0.0.0:8000", "--workers", "3", "--limit-request-line", "8190"]
