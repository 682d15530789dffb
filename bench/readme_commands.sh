#!/usr/bin/env bash
# Time the README's two commands from a new clone, as issue 28 counts them, on this machine's
# clock: `./stack/up --detach`, a look that it serves (3 serial and 3 concurrent requests,
# the dashboard's page), `batchscope down`, then `./stack/test` (CI=true, as .ci/run).
#   bench/readme_commands.sh [REPO] [CLONE]   defaults: this checkout, a new /tmp folder
# Prints one table row: up, test and both, in seconds. Exits non-zero if a step failed.
set -euo pipefail
repo=${1:-$(cd "$(dirname "$0")/.." && pwd)}
clone=${2:-$(mktemp -d /tmp/readme-commands.XXXX)/repo}
git clone -q "$repo" "$clone"
cd "$clone"
now() { date +%s.%N; }
t0=$(now)
./stack/up --detach < /dev/null
t1=$(now)
.venv/bin/batchscope load serial -n 3 > /dev/null
.venv/bin/batchscope load concurrent -n 3 > /dev/null
curl -fsS -o /dev/null http://127.0.0.1:8501/
.venv/bin/batchscope down
t2=$(now)
CI=true ./stack/test < /dev/null
t3=$(now)
python3 - "$t0" "$t1" "$t2" "$t3" <<'PY'
import sys
t0, t1, t2, t3 = map(float, sys.argv[1:])
print("| ./stack/up (s) | ./stack/test (s) | both (s) |")
print("|---|---|---|")
print(f"| {t1 - t0:.0f} | {t3 - t2:.0f} | {t1 - t0 + t3 - t2:.0f} |")
PY
