# Sourced by stack/up and stack/test: make this machine able to run the stack.
# Idempotent and quiet when nothing is missing; every step says what it does.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
VENV=${STACK_VENV:-$ROOT/.venv}
TRITON_VENV=${STACK_TRITON_VENV:-$ROOT/.venv-triton}
export STACK_TRITON_VENV=$TRITON_VENV

say() { printf '[bootstrap] %s\n' "$*" >&2; }
die() { printf '[bootstrap] error: %s\n' "$*" >&2; exit 1; }

# pip prints a warning per package for index paths that do not exist on some
# machines; keep real errors visible, drop that noise.
pip_quiet() { "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

check_python() {
  command -v "$PYTHON" >/dev/null || die "$PYTHON not found: install Python 3.10-3.13 (apt-get install python3 python3-venv)"
  "$PYTHON" - <<'PY' || die "$PYTHON is not usable for the stack (see above)"
import sys, sysconfig
v = sys.version_info
if not ((3, 10) <= v[:2] <= (3, 13)):
    sys.exit(f"Python {v.major}.{v.minor} found; the stack needs 3.10-3.13 "
             "(the Triton python backend ships stubs for those). Set PYTHON=python3.11")
if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
    sys.exit("this Python has no shared libpython, which Triton's python backend embeds; "
             "use Debian's python3 or a build with --enable-shared, via PYTHON=...")
import venv  # noqa: F401  (python3-venv on Debian)
PY
}

# A stamp file in each venv holds the hash of the requirement files it was built
# from, so a re-run installs only when they changed.
digest() { cat "$@" | sha256sum | cut -c1-16; }

# needs_install VENV NAME FILES...: create VENV if missing; succeed if NAME must be installed.
needs_install() {
  local venv=$1 name=$2; shift 2
  if [ ! -x "$venv/bin/python" ]; then
    say "creating virtual environment $venv"
    "$PYTHON" -m venv "$venv"
  fi
  [ "$(cat "$venv/.stack-$name" 2>/dev/null)" != "$(digest "$@")" ]
}

mark_installed() {
  local venv=$1 name=$2; shift 2
  digest "$@" > "$venv/.stack-$name"
}

ensure_triton_env() {
  local req=$ROOT/stack/requirements-triton.txt
  if needs_install "$TRITON_VENV" triton "$req"; then
    say "installing the Triton runtime into $TRITON_VENV (nvidia-pytriton, about 60 MB)"
    pip_quiet "$TRITON_VENV/bin/pip" install -q --disable-pip-version-check -r "$req"
    mark_installed "$TRITON_VENV" triton "$req"
  fi
}

# ensure_app_env [EXTRA]: the project itself, editable, with an optional extra ("test").
ensure_app_env() {
  local extra=${1:-} spec=$ROOT
  [ -n "$extra" ] && spec="$ROOT[$extra]"
  local name=app${extra:+-$extra}
  if needs_install "$VENV" "$name" "$ROOT/pyproject.toml"; then
    say "installing the stack's Python packages into $VENV${extra:+ (with the $extra extra)}"
    pip_quiet "$VENV/bin/pip" install -q --disable-pip-version-check -e "$spec"
    mark_installed "$VENV" "$name" "$ROOT/pyproject.toml"
  fi
}

# ensure_debian_packages CMD=PACKAGE ...: install what is missing with apt-get when root.
ensure_debian_packages() {
  local missing=() pair
  for pair in "$@"; do
    command -v "${pair%%=*}" >/dev/null || missing+=("${pair#*=}")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    die "missing ${missing[*]}: install with 'sudo apt-get install ${missing[*]}' and run again"
  fi
  say "installing Debian packages: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# at_once STEP...: run each step (a command line of the functions above) at the same time,
# each in its own subshell, and fail if any failed (each says why above). The steps touch
# different things (Debian's packages, the Triton venv, the stack's venv), and on a fresh
# machine they are mostly downloads: together they take as long as the longest, not the sum.
at_once() {
  local pids=() step pid failed=0
  for step in "$@"; do
    (eval "$step") &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do
    wait "$pid" || failed=1
  done
  [ "$failed" -eq 0 ] || die "a step above failed; run the same command again once it is fixed"
}
