#!/usr/bin/env bash
# Creates .venv-bench with NVIDIA's perf_analyzer (the C++ reference load client) for the
# benchmarks. It lives in its own gitignored environment: it is never a project dependency.
# perf_analyzer ships in PyPI's tritonclient==2.41.0 wheel (later wheels dropped it) and needs
# libcudart.so.12 and libb64.so.0d, which the Triton runtime's nvidia_pytriton.libs carries
# under hashed names; we link them under their plain names into .venv-bench/lib.
# Prints the path of a wrapper that runs perf_analyzer with that library path.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_VENV=$ROOT/.venv-bench
TRITON_VENV=${STACK_TRITON_VENV:-$ROOT/.venv-triton}
PYTHON=${PYTHON:-python3}

if [ ! -x "$BENCH_VENV/bin/perf_analyzer" ]; then
  echo "[bench] installing tritonclient==2.41.0 (for perf_analyzer) into $BENCH_VENV" >&2
  "$PYTHON" -m venv "$BENCH_VENV"
  "$BENCH_VENV/bin/pip" install -q --disable-pip-version-check "tritonclient==2.41.0" 2> >(grep -v "is ignored: it is neither" >&2) >&2
fi
libs=$(ls -d "$TRITON_VENV"/lib/python3.*/site-packages/nvidia_pytriton.libs 2>/dev/null | tail -1)
[ -n "$libs" ] || { echo "[bench] no Triton runtime in $TRITON_VENV: run ./stack/up once" >&2; exit 2; }
mkdir -p "$BENCH_VENV/lib/perf_analyzer"
ln -sf "$(ls "$libs"/libcudart-*.so.12*)" "$BENCH_VENV/lib/perf_analyzer/libcudart.so.12"
ln -sf "$(ls "$libs"/libb64-*.so.0d)" "$BENCH_VENV/lib/perf_analyzer/libb64.so.0d"
cat > "$BENCH_VENV/bin/perf_analyzer_run" <<WRAP
#!/usr/bin/env bash
export LD_LIBRARY_PATH="$BENCH_VENV/lib/perf_analyzer:$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$BENCH_VENV/bin/perf_analyzer" "\$@"
WRAP
chmod +x "$BENCH_VENV/bin/perf_analyzer_run"
echo "$BENCH_VENV/bin/perf_analyzer_run"
