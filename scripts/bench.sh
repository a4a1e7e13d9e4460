#!/usr/bin/env bash
# Runs one benchmark: scripts/bench.sh NAME [ARGS], NAME one of the files in bench/.
# PostgreSQL and Redis as for the tests (services.sh); a scratch database relay_bench.
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: scripts/bench.sh expiry_burst|expiry_lag|api|smtp_ingest|smtp_peers|submission|store_cost|mailer|waiting|dashboard|limiter_burst|broker_burst|search|soak|mcp_wait|mcp_cost|cyrus_read|verdicts|curves|parse_cost [ARGS]}
shift
# Run straight from a fresh clone too, not only through `make bench`: the tools and the
# packages the benchmarks import (a no-op once installed).
make --no-print-directory -s install-dev
. scripts/services.sh
# The HTTP benchmarks drive load with wrk; install it when missing and this user may.
if ! command -v wrk >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing wrk for the HTTP benchmarks" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk) >/dev/null \
    || echo "warning: could not install wrk" >&2
fi
# The mail-server benchmark runs a Cyrus of its own; install Debian's when missing.
if [ "$name" = cyrus_read ] && [ ! -x /usr/lib/cyrus/bin/master ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing cyrus-imapd, cyrus-caldav and sasl2-bin for the mail-server benchmark" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    cyrus-imapd cyrus-caldav sasl2-bin) >/dev/null || echo "warning: could not install Cyrus" >&2
fi
# The verdicts benchmark runs an NSD of its own and signs with Mail::DKIM, the SMTP ones
# serve their sender's records from an NSD; install Debian's when missing.
if [[ "$name" =~ ^(verdicts|smtp_ingest|smtp_peers|submission|curves)$ ]] && { ! command -v nsd >/dev/null || ! perl -MMail::DKIM -e1 2>/dev/null; } \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing nsd, opendkim-tools and libmail-dkim-perl for the $name benchmark" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    nsd opendkim-tools libmail-dkim-perl) >/dev/null || echo "warning: could not install NSD" >&2
fi
# The peer of the SMTP benchmark: maildev, from the npm registry, into var/maildev.
MAILDEV_VERSION=3.0.0
if [ "$name" = smtp_peers ] && [ ! -x var/maildev/node_modules/.bin/maildev ]; then
  command -v npm >/dev/null || { echo "error: smtp_peers needs npm (Node.js) to install maildev" >&2; exit 1; }
  echo "installing maildev $MAILDEV_VERSION into var/maildev" >&2
  mkdir -p var/maildev
  npm install --prefix var/maildev --no-audit --no-fund --save-exact --loglevel=error "maildev@$MAILDEV_VERSION" >/dev/null
fi
# The parse benchmark's peer: fast-mail-parser (Rust) from the package index, in a
# virtualenv of its own (Relay does not depend on it).
FAST_MAIL_PARSER_VERSION=0.10.0
if [ "$name" = parse_cost ] && [ ! -x var/fast-mail-parser/bin/python ]; then
  echo "installing fast-mail-parser $FAST_MAIL_PARSER_VERSION into var/fast-mail-parser" >&2
  python3 -m venv var/fast-mail-parser
  var/fast-mail-parser/bin/pip install -q "fast-mail-parser==$FAST_MAIL_PARSER_VERSION"
fi
# Search's million messages take ten minutes to fill: they live in a database of their
# own, which the other benchmarks' fresh databases leave alone (its --reuse reads them).
# Two clones benchmarking at once name their own: RELAY_BENCH_DATABASE, RELAY_BENCH_REDIS_DB.
# The curves' search corpus is refilled in this database's name with _search after it.
database=relay_bench
[ "$name" = search ] && database=relay_bench_search
database=${RELAY_BENCH_DATABASE:-$database}
export DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/$database"
export CELERY_BROKER_URL="redis://127.0.0.1:$REDIS_PORT/${RELAY_BENCH_REDIS_DB:-14}"
mkdir -p var/static
export RELAY_ENV_FILE=/dev/null DJANGO_DEBUG=false PYTHONPATH=.
export DJANGO_SECRET_KEY=relay-bench-secret-key-not-for-production-qR7sT8uV9wX0yZ1aB2
exec $BIN/python "bench/$name.py" "$@"
