#!/usr/bin/env bash
# Replaces checks/data/caniemail.json with the newest caniemail data (docs/checks.md): the
# npm package `caniemail` carries caniemail.com's data.json (MIT). Run by hand, then commit.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "caniemail@${CANIEMAIL_VERSION:-latest}" >/dev/null && tar xzf caniemail-*.tgz)
.venv/bin/python - "$work/package/data/caniemail.json" <<'PY'
import json, shutil, sys
data = json.load(open(sys.argv[1]))
assert data.get("data") and data.get("nicenames") and data.get("last_update_date"), "not caniemail's data"
shutil.copyfile(sys.argv[1], "checks/data/caniemail.json")
print(f"caniemail data of {data['last_update_date'][:10]}: {len(data['data'])} features")
PY
