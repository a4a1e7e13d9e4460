#!/usr/bin/env bash
# Sourced by test.sh and bench.sh: makes sure PostgreSQL and Redis answer on 127.0.0.1 and
# sets PG_PORT and REDIS_PORT. Uses the ones on the usual ports when they answer;
# otherwise starts the machine's PostgreSQL cluster, or a throwaway one, and a throwaway
# Redis under var/. Fails with a clear message only when the server binaries are missing.
BIN=.venv/bin
mkdir -p var
VAR=$(pwd)/var

pg_up() {  # pg_up PORT
  $BIN/python - "$1" <<'PY' >/dev/null 2>&1
import sys, psycopg2
psycopg2.connect(host="127.0.0.1", port=int(sys.argv[1]), user="postgres", dbname="postgres", connect_timeout=2).close()
PY
}
redis_up() {  # redis_up PORT
  $BIN/python -c "import redis,sys; redis.Redis(host='127.0.0.1', port=int(sys.argv[1]), socket_timeout=2).ping()" "$1" >/dev/null 2>&1
}
wait_for() {  # wait_for WHAT CHECK PORT
  for _ in $(seq 1 60); do "$2" "$3" && return 0; sleep 0.5; done
  echo "error: $1 did not come up on 127.0.0.1:$3" >&2; exit 1
}

PG_PORT=5432
if ! pg_up $PG_PORT; then
  if command -v pg_ctlcluster >/dev/null && ls /etc/postgresql/*/main >/dev/null 2>&1; then
    echo "PostgreSQL is down; starting the machine's cluster" >&2
    for version in $(ls /etc/postgresql); do pg_ctlcluster --skip-systemctl-redirect "$version" main start || true; done
    wait_for PostgreSQL pg_up $PG_PORT
  else
    INITDB=$(command -v initdb || ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | tail -1 || true)
    if [ -z "$INITDB" ]; then
      echo "error: PostgreSQL is not running on 127.0.0.1:5432 and no PostgreSQL server binaries (initdb) were found; install PostgreSQL" >&2
      exit 1
    fi
    PG_PORT=55432
    PGDIR=$VAR/test-postgres
    if ! pg_up $PG_PORT; then
      echo "starting a throwaway PostgreSQL on port $PG_PORT" >&2
      AS=(); [ "$(id -u)" = 0 ] && AS=(runuser -u postgres --)
      rm -rf "$PGDIR"; mkdir -p "$PGDIR"; [ "$(id -u)" = 0 ] && chown postgres "$PGDIR"
      "${AS[@]}" "$INITDB" -D "$PGDIR" -U postgres --auth=trust >/dev/null
      "${AS[@]}" "$(dirname "$INITDB")/pg_ctl" -D "$PGDIR" -o "-p $PG_PORT -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off" -l "$PGDIR/log" start >/dev/null
      wait_for PostgreSQL pg_up $PG_PORT
    fi
  fi
fi

REDIS_PORT=6379
if ! redis_up $REDIS_PORT; then
  if ! command -v redis-server >/dev/null; then
    echo "error: Redis is not running on 127.0.0.1:6379 and redis-server was not found; install Redis" >&2
    exit 1
  fi
  REDIS_PORT=56379
  if ! redis_up $REDIS_PORT; then
    echo "starting a throwaway Redis on port $REDIS_PORT" >&2
    mkdir -p "$VAR/test-redis"
    redis-server --port $REDIS_PORT --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
      --dir "$VAR/test-redis" --logfile "$VAR/test-redis/redis.log"
    wait_for Redis redis_up $REDIS_PORT
  fi
fi


# RabbitMQ, for the worker tests that run on it too (tests/expiry/test_workers_rabbitmq.py): the local
# one, started if it is down and the server is installed; without it those tests skip.
rabbitmq_up() {  # rabbitmq_up PORT
  $BIN/python -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=2).close()" "$1" >/dev/null 2>&1
}
if ! rabbitmq_up 5672 && command -v rabbitmq-server >/dev/null; then
  echo "RabbitMQ is down; starting the machine's server" >&2
  rabbitmq-server -detached >/dev/null 2>&1 || true
  for _ in $(seq 1 60); do rabbitmq_up 5672 && break; sleep 0.5; done
  rabbitmq_up 5672 || echo "warning: RabbitMQ did not come up; its worker tests will be skipped" >&2
fi
