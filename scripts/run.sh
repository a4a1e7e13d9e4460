#!/usr/bin/env bash
# Starts Relay's processes (web, worker, links, beat, smtp, mailer) in the foreground, each line of
# output prefixed with the process's name; Ctrl-C stops them all and exits 0.
# Defaults: SQLite at var/relay.sqlite3, the filesystem broker under var/broker.
# Set DATABASE_URL / CELERY_BROKER_URL to use PostgreSQL and Redis instead.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(pwd)/.venv/bin
# On a terminal, run as its foreground process group, so Ctrl-C stops Relay and not the
# `make` above it (scripts/foreground.py).
if [ -t 0 ] && [ -z "${RELAY_RUN_IN_FOREGROUND:-}" ]; then
  export RELAY_RUN_IN_FOREGROUND=1
  exec "$BIN/python" scripts/foreground.py "$0" "$@"
fi
WEB_PORT=${RELAY_WEB_PORT:-8000}
SMTP_PORT=${RELAY_SMTP_PORT:-2525}
# The sandboxes' submission port (docs/sandbox.md): runsmtp serves it, the web names it.
export RELAY_SUBMISSION_PORT=${RELAY_SUBMISSION_PORT:-2587}
VAR=${RELAY_VAR_DIR:-var}
# The links in activation and recovery mails lead to this web process.
export RELAY_PUBLIC_URL=${RELAY_PUBLIC_URL:-http://127.0.0.1:$WEB_PORT}
mkdir -p "$VAR/broker/queue" "$VAR/broker/control" "$VAR/static"
# Every process writes its counters here and /metrics sums them; emptied on each start
# (below, once the ports are known to be free: a second `make run` must not wipe the
# running one's), so counters begin at zero as Prometheus expects of a restart.
export PROMETHEUS_MULTIPROC_DIR=$(cd "$VAR" && pwd)/metrics

# This checkout's random secret key, kept in a file so that `.venv/bin/python manage.py ...`
# in another terminal starts with the same one (config/settings.py reads only that key
# from it). Debug is off; DJANGO_DEBUG=true make run turns it on for the processes started
# here, which listen on 127.0.0.1 only (config/settings.py refuses debug for other hosts).
if ! grep -q '^DJANGO_SECRET_KEY=' "$VAR/relay.env" 2>/dev/null; then
  (umask 077; printf 'DJANGO_SECRET_KEY=%s\n' \
    "$($BIN/python -c 'import secrets; print(secrets.token_urlsafe(50))')" > "$VAR/relay.env")
fi
export DJANGO_DEBUG=${DJANGO_DEBUG:-false}

port_free() {  # port_free PORT VARIABLE
  if ! $BIN/python -c "import socket,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', int(sys.argv[1])))" "$1" 2>/dev/null; then
    echo "error: port $1 on 127.0.0.1 is already in use; set $2 to another port (e.g. $2=$(( $1 + 1 )) make run)" >&2
    exit 1
  fi
}
port_free "$WEB_PORT" RELAY_WEB_PORT
port_free "$SMTP_PORT" RELAY_SMTP_PORT
port_free "$RELAY_SUBMISSION_PORT" RELAY_SUBMISSION_PORT
rm -rf "$PROMETHEUS_MULTIPROC_DIR" && mkdir -p "$PROMETHEUS_MULTIPROC_DIR"

$BIN/python manage.py migrate --noinput
$BIN/python manage.py collectstatic --noinput -v0

pids=()
names=()
stopping=0
# How long the processes get to stop on their own: past runsmtp's 30 s drain of messages
# being stored. Whatever is still running then is killed, and named.
STOP_SECONDS=40
stop() {
  stopping=1
  trap - EXIT INT TERM
  kill -TERM "${pids[@]}" 2>/dev/null || true
  local deadline=$((SECONDS + STOP_SECONDS)) i
  while [ $SECONDS -lt $deadline ]; do
    kill -0 "${pids[@]}" 2>/dev/null || break  # true while any is still running
    sleep 0.2
  done
  for i in "${!pids[@]}"; do
    if kill -0 "${pids[$i]}" 2>/dev/null; then
      echo "${names[$i]} did not stop within ${STOP_SECONDS} s; killing it" >&2
      pkill -KILL -P "${pids[$i]}" 2>/dev/null || true  # its own children (pool processes) first
      kill -KILL "${pids[$i]}" 2>/dev/null || true
    fi
  done
  wait "${pids[@]}" 2>/dev/null || true
}
on_interrupt() {
  echo; echo "stopping Relay" >&2
  stop
  exit 0
}
trap on_interrupt INT TERM
trap stop EXIT

# start NAME COMMAND...: runs COMMAND with its output (stdout and stderr) prefixed by NAME.
start() {
  local name=$1; shift
  "$@" > >(sed -u "s/^/$(printf '%-6s' "$name")| /") 2>&1 &
  pids+=($!)
  names+=("$name")
}
# Keep-alive past a client's usual idle pause (uvicorn's own is 5 s): a client that sends
# on a connection at the instant the server closes it gets an error it cannot retry safely.
# The lifespan ends /mcp's session manager, which the first /mcp request starts (config/asgi.py).
start web    $BIN/uvicorn config.asgi:application --host 127.0.0.1 --port "$WEB_PORT" --lifespan on --timeout-keep-alive 65
start worker $BIN/celery -A config worker -Q celery,sweep --loglevel=INFO --concurrency=2 --hostname "worker@%h"
# Link checks on a worker of their own (docs/checks.md, "The link-check queue"): a message's
# links take minutes at worst, and expiry, the outbox and webhooks never wait behind them.
start links  $BIN/celery -A config worker -Q links --loglevel=INFO --concurrency=1 --hostname "links@%h"
# Beat at WARNING: at INFO it logs every tick of every schedule ("Sending due task"); what
# a sweep found to do is the worker's to log.
start beat   $BIN/celery -A config beat --loglevel=WARNING
start smtp   $BIN/python manage.py runsmtp --port "$SMTP_PORT"
start mailer $BIN/python manage.py runmailer

cat <<MSG

Relay is starting:
  inbox      http://127.0.0.1:$WEB_PORT/   (open it in a browser: an address in one click)
  API        http://127.0.0.1:$WEB_PORT/api/v1/
  API docs   http://127.0.0.1:$WEB_PORT/api/docs/
  MCP        http://127.0.0.1:$WEB_PORT/mcp   (AI agents: docs/agents.md; over stdio:
             RELAY_API_KEY=rk_... .venv/bin/python manage.py runmcp)
  health     http://127.0.0.1:$WEB_PORT/readyz   metrics http://127.0.0.1:$WEB_PORT/metrics
  admin      http://127.0.0.1:$WEB_PORT/admin/   (create a login: .venv/bin/python manage.py createsuperuser)
  SMTP       127.0.0.1:$SMTP_PORT   submission (sandboxes: docs/sandbox.md) 127.0.0.1:$RELAY_SUBMISSION_PORT
  API key    .venv/bin/python manage.py createapikey NAME   (or sign up: POST /api/v1/accounts)
  Mail out   printed in the worker's log (set EMAIL_URL=smtp://host:port to really send)
Logs: every line below names its process (web, worker, links, beat, smtp, mailer). Press Ctrl-C to stop.

MSG
# The banner comes before the web's first answer can (migrations, imports): say when it answers.
(for _ in $(seq 600); do
  if $BIN/python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
      "http://127.0.0.1:$WEB_PORT/readyz" 2>/dev/null; then
    echo "Relay is ready: http://127.0.0.1:$WEB_PORT/"
    exit 0
  fi
  sleep 0.5
done) &
# If any process dies on its own, stop the others rather than run half a service.
set +e
wait -n "${pids[@]}"
status=$?
# Ctrl-C reaches every process of the group at once, and one may end before this shell
# runs its trap: let the trap run (it exits 0) before calling the end unexpected.
sleep 0.5
if [ "$stopping" = 0 ]; then
  echo "a Relay process exited (status $status); stopping the rest" >&2
  stop
  exit 1
fi
