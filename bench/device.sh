#!/usr/bin/env bash
# The GPU benchmarks in one go: install the `cuda` extra, then run the
# in-memory, end-to-end, top-k and `best` benchmarks on whatever jax finds, and
# write their JSON into OUT_DIR.  Sized to finish in under 5 minutes on one
# modern GPU with a 16-core host (each step has its own time limit, so a slow
# step cannot eat the others' time; a step that fails or runs out is noted in
# OUT_DIR/failures.txt and the others still run).
#
#   bench/device.sh OUT_DIR
#
# Environment:
#   JAXMODEL_BENCH_SKIP_INSTALL=1   use .venv as it is (no pip; e.g. on a CPU)
#   JAXMODEL_BENCH_SCALE=small      tiny sizes: checks the script in a minute on a CPU
#   PYTHON=python3.12               the interpreter that makes .venv if it is missing
#
# Writes OUT_DIR/environment.json, sweep_throughput.json, top_k.json,
# search.json (and failures.txt if any step failed).
set -uo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: bench/device.sh OUT_DIR" >&2
    exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1" || exit 2
OUT=$(cd "$1" && pwd)
cd "$ROOT" || exit 2
SCALE=${JAXMODEL_BENCH_SCALE:-full}
PY=$ROOT/.venv/bin/python
rm -f "$OUT/failures.txt"

if [[ ${JAXMODEL_BENCH_SKIP_INSTALL:-0} != 1 ]]; then
    [[ -x $PY ]] || "${PYTHON:-python3}" -m venv .venv || exit 1
    "$PY" -m pip install --quiet -e '.[cuda,test]' || {
        echo "error: could not install the cuda extra (pip install -e '.[cuda,test]')" >&2
        exit 1
    }
fi

case $SCALE in
    full)   # a GPU: large chunks; the full grids
        CHUNK=16777216; BANDWIDTHS=1024; REPEATS=2; SHARE=8; SEARCH_ROWS=67108864
        LIMITS=(150 75 45) ;;
    small)  # a check of this script on a CPU
        CHUNK=65536; BANDWIDTHS=2; REPEATS=1; SHARE=100000; SEARCH_ROWS=65536
        LIMITS=(600 300 300) ;;
    *) echo "error: JAXMODEL_BENCH_SCALE: got '$SCALE'; allowed: full, small" >&2; exit 2 ;;
esac

step() {  # step NAME LIMIT_SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit ${limit} s)"
    local t0=$SECONDS
    timeout "$limit" "$@"
    local rc=$?
    echo "== $name: exit $rc after $((SECONDS - t0)) s"
    if [[ $rc -ne 0 ]]; then
        echo "$name: exit $rc after $((SECONDS - t0)) s (limit $limit s)" >> "$OUT/failures.txt"
    fi
}

"$PY" - "$OUT/environment.json" "$SCALE" <<'EOF'
import json, os, platform, shutil, subprocess, sys
import jax
gpu = None
if shutil.which("nvidia-smi"):
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
info = {"scale": sys.argv[2], "platform": platform.platform(), "python": platform.python_version(),
        "jax": jax.__version__, "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()], "nvidia_smi": gpu,
        "cores": len(os.sched_getaffinity(0)), "load_average": os.getloadavg()}
open(sys.argv[1], "w").write(json.dumps(info, indent=1) + "\n")
print(json.dumps(info))
EOF
[[ $? -eq 0 ]] || echo "environment: failed" >> "$OUT/failures.txt"

# In memory (a, b, c, f), to Parquet in the process (d, e), whole processes
# on the 24M grid against the numpy + pyarrow script (g, h), constant columns.
step sweep_throughput "${LIMITS[0]}" "$PY" bench/sweep_throughput.py --skip-rss \
    --chunk-size "$CHUNK" --bandwidths "$BANDWIDTHS" --repeats "$REPEATS" \
    --out "$OUT/sweep_throughput.json"
# The 10^10-candidate top-k sweep: the first 1/SHARE of its chunks.
step top_k "${LIMITS[1]}" "$PY" bench/top_k_1e10.py --share "$SHARE" --chunk-size "$CHUNK" \
    --output "$OUT/top_k_dataset" --out "$OUT/top_k.json"
rm -rf "$OUT/top_k_dataset"
# jaxmodel best: the engine against a Python loop, and the question end to end.
step search "${LIMITS[2]}" "$PY" bench/search.py --rows "$SEARCH_ROWS" --repeats 2 \
    --out "$OUT/search.json"

if [[ -s $OUT/failures.txt ]]; then
    echo "some steps failed:" >&2
    cat "$OUT/failures.txt" >&2
    exit 1
fi
echo "results in $OUT"
