#!/usr/bin/env bash
# Starts Relay's four processes (web, worker, beat, smtp) in the foreground; Ctrl-C stops
# them all. Defaults: SQLite at var/relay.sqlite3, the filesystem broker under var/broker.
# Set DATABASE_URL / CELERY_BROKER_URL to use PostgreSQL and Redis instead.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
mkdir -p var
WEB_PORT=${RELAY_WEB_PORT:-8000}

$BIN/python manage.py migrate --noinput

pids=()
stop() {
  trap - EXIT INT TERM
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap stop EXIT INT TERM

$BIN/python manage.py runserver "127.0.0.1:$WEB_PORT" --noreload & pids+=($!)
$BIN/celery -A config worker --loglevel=INFO --concurrency=2 --hostname "worker@%h" & pids+=($!)
$BIN/celery -A config beat --loglevel=INFO & pids+=($!)
$BIN/python manage.py runsmtp & pids+=($!)

cat <<MSG

Relay is starting:
  API        http://127.0.0.1:$WEB_PORT/api/v1/
  API docs   http://127.0.0.1:$WEB_PORT/api/docs/
  admin      http://127.0.0.1:$WEB_PORT/admin/   (create a login: .venv/bin/python manage.py createsuperuser)
  SMTP       127.0.0.1:${RELAY_SMTP_PORT:-2525}
  API key    .venv/bin/python manage.py createapikey NAME
Press Ctrl-C to stop.

MSG
# If any process dies, stop the others rather than run half a service.
wait -n
echo "a Relay process exited; stopping the rest" >&2
exit 1
