#!/usr/bin/env bash
# Runs a command while one core is kept busy by a spinning process: how the suite is shown
# to hold on a machine at about half its speed (`make test-half-speed`). The spinner is
# stopped however the command ends.
set -euo pipefail
python3 -c 'while True: pass' &
spinner=$!
trap 'kill "$spinner" 2>/dev/null || true' EXIT
echo "with-busy-core: process $spinner keeps one core busy" >&2
"$@"
