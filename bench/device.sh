#!/usr/bin/env bash
# The GPU benchmarks in one go: install the `cuda` extra, then run the
# in-memory, end-to-end, top-k and `best` benchmarks on whatever jax finds, and
# write their JSON into OUT_DIR.  Sized to finish in under 11 minutes on one
# modern GPU with a 16-core host (each step has its own time limit, so a slow
# step cannot eat the others' time; a step that fails or runs out is noted in
# OUT_DIR/failures.txt and the others still run).
#
#   bench/device.sh OUT_DIR
#
# Environment:
#   JAXMODEL_BENCH_INSTALL=pip      (default) pip install -e '.[cuda,test]' into .venv
#   JAXMODEL_BENCH_INSTALL=system   an offline box whose python already has jax with
#                                   its CUDA plugin (a container image): .venv sees the
#                                   system's packages and this checkout, nothing is fetched
#   JAXMODEL_BENCH_INSTALL=none     use .venv as it is (also JAXMODEL_BENCH_SKIP_INSTALL=1)
#   JAXMODEL_BENCH_SCALE=small      tiny sizes: checks the script in a minute on a CPU
#   PYTHON=python3.12               the interpreter that makes .venv if it is missing
#
# Writes OUT_DIR/environment.json, device_rates.json, sweep_throughput.json,
# top_k.json, search.json, first_answer.json/.md (and failures.txt if any step
# failed).
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

INSTALL=${JAXMODEL_BENCH_INSTALL:-pip}
[[ ${JAXMODEL_BENCH_SKIP_INSTALL:-0} == 1 ]] && INSTALL=none
case $INSTALL in
    pip)
        [[ -x $PY ]] || "${PYTHON:-python3}" -m venv .venv || exit 1
        "$PY" -m pip install --quiet -e '.[cuda,test]' || {
            echo "error: could not install the cuda extra (pip install -e '.[cuda,test]')" >&2
            exit 1
        } ;;
    system)
        [[ -x $PY ]] || "${PYTHON:-python3}" -m venv --system-site-packages .venv || exit 1
        # this checkout on the path, its metadata (jaxmodel.__version__ reads it)
        # and the console script, as pip would have made them
        # (and the system python's own site-packages: where that python is
        # itself a virtual environment, --system-site-packages sees its base)
        SYSTEM_SITE=$("${PYTHON:-python3}" -c 'import sysconfig; p = sysconfig.get_paths()
print(p["purelib"]); print(p["platlib"])') || exit 1
        "$PY" - "$ROOT" "$SYSTEM_SITE" <<'PYEOF' || exit 1
import pathlib, sys, sysconfig, tomllib
root = pathlib.Path(sys.argv[1])
site = pathlib.Path(sysconfig.get_paths()["purelib"])
version = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
(site / "jaxmodel-checkout.pth").write_text(f"{root}\n{sys.argv[2]}\n")
info = site / f"jaxmodel-{version}.dist-info"
info.mkdir(exist_ok=True)
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: jaxmodel\nVersion: {version}\n")
PYEOF
        printf '#!%s\nfrom jaxmodel.cli import main\nmain()\n' "$PY" > .venv/bin/jaxmodel
        chmod +x .venv/bin/jaxmodel
        "$PY" -c 'import jax, jaxmodel' || {
            echo "error: JAXMODEL_BENCH_INSTALL=system: the system python lacks jax or a dependency of jaxmodel" >&2
            exit 1
        } ;;
    none) ;;
    *) echo "error: JAXMODEL_BENCH_INSTALL: got '$INSTALL'; allowed: pip, system, none" >&2; exit 2 ;;
esac

case $SCALE in
    full)   # a GPU: large chunks; the full grids
        CHUNK=16777216; BANDWIDTHS=1024; REPEATS=1; SHARE=8; SEARCH_ROWS=67108864
        LIMITS=(120 60 45 300 120) ;;
    small)  # a check of this script on a CPU
        CHUNK=65536; BANDWIDTHS=2; REPEATS=1; SHARE=10000; SEARCH_ROWS=65536
        LIMITS=(600 300 300 120 900) ;;
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

# The GPU's achievable rates (GEMMs by shape in bf16 and FP8, cuDNN attention,
# HBM) against the refined model's shape model at the h200 preset.  About 7 s
# a GEMM shape on an H200 (each compiles, with XLA's GEMM autotuning, and draws
# its inputs): 300 s for its 74.
step rates "${LIMITS[3]}" "$PY" bench/device_rates.py --scale "$SCALE" \
    --out "$OUT/device_rates.json"

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
# Issue 26's first answer on this box: refined eval and the DeepSeek-V3 search,
# cold and warm, as ratios to the bare jax import.
step first_answer "${LIMITS[4]}" "$PY" bench/first_answer.py --only "eval,best (DeepSeek-V3)" \
    --bare 2 --out-dir "$OUT"

if [[ -s $OUT/failures.txt ]]; then
    echo "some steps failed:" >&2
    cat "$OUT/failures.txt" >&2
    exit 1
fi
echo "results in $OUT"
