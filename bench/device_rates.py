"""The achievable rates of the GPU this runs on, against the refined model's shape model.

Measures, with jax on whatever device it finds:

* **GEMMs by shape**: the three passes (forward ``[tok, k] x [k, n]``, data
  gradient ``[tok, n] x [n, k]``, weight gradient ``[k, tok] x [tok, n]``) of
  each weight GEMM of a transformer layer (``refined.layer_gemm_shapes``) for
  Llama 3 8B and 70B at the tensor-parallel widths and tokens per micro-batch
  the published H100 recipes run, in bf16 and in per-tensor FP8 (e4m3
  operands, bf16 output, the TN layout cuBLASLt's FP8 kernels take);
* **the large square GEMM** (8192^3, bf16 and FP8): the baseline every shape
  is a ratio to, and the measured counterpart of ``matmul_efficiency`` (the
  Maximum Achievable Matmul FLOPS the presets cite);
* **fused attention** through cuDNN (``jax.nn.dot_product_attention``,
  ``implementation="cudnn"``), head dimension 128, sequence 8192, 16 heads,
  batch 2 (FlashAttention-3's benchmark shape), causal and not, forward and
  backward, FLOPs counted as FlashAttention-3 counts them (forward
  ``4 b s^2 h d``, halved under the causal mask; backward 2.5x);
* **HBM**: a streaming scale of a 2 GiB array (bytes read + written);
* **sustained**: the square GEMM run back to back for ``--sustain`` seconds
  per precision, its rate over the last half, with the board power, SM clock
  and temperature ``nvidia-smi`` reads meanwhile (where it exists): what the
  power limit leaves of the burst rate.

Each measured rate is printed next to the rate the refined model's GEMM shape
model (``jaxmodel.collectives.gemm_efficiency``) gives that shape with the
preset named by ``--gpu`` (default h200), as measured / model.  Times are the
median over rounds of back-to-back calls on rotating inputs, after a warm-up.

    python bench/device_rates.py --out DIR/rates.json [--gpu h200] [--scale small]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxmodel.collectives import gemm_efficiency
from jaxmodel.presets import apply_presets

ROOT = Path(__file__).resolve().parents[1]
# (name, hidden, q width, heads, kv heads, ffn, tensor parallel, tokens per GEMM)
# Tokens per GEMM: micro-batch x sequence (sequence parallelism gathers the
# whole sequence before the column-parallel GEMMs).  Llama 3 8B on H100 in
# Megatron-Bridge runs t1 with MBS 1 at 8192 (and CP 2: 4096 per rank);
# Llama 3 70B runs t4 (and t8 on some rows).
LAYERS = [
    ("llama3-8b t1 8192", 4096, 4096, 32, 8, 14336, 1, 8192),
    ("llama3-70b t4 8192", 8192, 8192, 64, 8, 28672, 4, 8192),
    ("llama3-70b t8 8192", 8192, 8192, 64, 8, 28672, 8, 8192),
]
SMALL_LAYERS = [("tiny t1 256", 256, 256, 4, 2, 512, 1, 256)]


def layer_shapes(h, q, a, kv, f, t):
    """(gemm name, n, k) of each weight GEMM, as ``refined.layer.layer_gemm_shapes``."""
    return [("qkv", int(q * (1 + 2 * kv / a) / t), h), ("proj", h, q // t),
            ("fc1", 2 * f // t, h), ("fc2", h, f // t)]


def timed(fn, inputs, min_seconds):
    """Median seconds of one call of ``fn`` over rounds of back-to-back calls."""
    out = fn(*inputs[0])
    jax.block_until_ready(out)
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*inputs[1 % len(inputs)]))
    once = max(time.perf_counter() - t0, 1e-6)
    calls = max(3, min(200, int(min_seconds / 5 / once)))
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for i in range(calls):
            out = fn(*inputs[i % len(inputs)])
        jax.block_until_ready(out)
        rounds.append((time.perf_counter() - t0) / calls)
    return statistics.median(rounds)


def gemm_time(m, n, k, fp8, key, min_seconds, copies=3):
    """Seconds of ``[m, k] x [k, n]``; FP8 as cuBLASLt takes it (B stored ``[n, k]``)."""
    keys = jax.random.split(key, 2 * copies)
    if fp8:
        dtype = jnp.float8_e4m3fn
        a = [jax.random.normal(keys[2 * i], (m, k), jnp.float32).astype(dtype)
             for i in range(copies)]
        b = [jax.random.normal(keys[2 * i + 1], (n, k), jnp.float32).astype(dtype)
             for i in range(copies)]
        dims = (((1,), (1,)), ((), ()))
    else:
        a = [jax.random.normal(keys[2 * i], (m, k), jnp.bfloat16) for i in range(copies)]
        b = [jax.random.normal(keys[2 * i + 1], (k, n), jnp.bfloat16) for i in range(copies)]
        dims = (((1,), (0,)), ((), ()))
    fn = jax.jit(lambda x, y: jax.lax.dot_general(x, y, dims,
                                                  preferred_element_type=jnp.bfloat16))
    return timed(fn, list(zip(a, b, strict=True)), min_seconds)


def sustained(m, fp8, key, seconds):
    """(TFLOP/s over the second half, nvidia-smi samples) of the square GEMM run back to back."""
    keys = jax.random.split(key, 2)
    dtype = jnp.float8_e4m3fn if fp8 else jnp.bfloat16
    a = jax.random.normal(keys[0], (m, m), jnp.float32).astype(dtype)
    b = jax.random.normal(keys[1], (m, m), jnp.float32).astype(dtype)
    dims = (((1,), (1,)), ((), ()))
    fn = jax.jit(lambda x, y: jax.lax.dot_general(x, y, dims,
                                                  preferred_element_type=jnp.bfloat16))
    jax.block_until_ready(fn(a, b))
    samples, done = [], threading.Event()

    def sample():
        query = ["nvidia-smi", "--query-gpu=power.draw,clocks.sm,temperature.gpu",
                 "--format=csv,noheader,nounits"]
        while not done.wait(0.25):
            out = subprocess.run(query, capture_output=True, text=True).stdout.split(",")
            try:
                samples.append((time.perf_counter(), *map(float, out[:3])))
            except ValueError:
                pass

    sampler = threading.Thread(target=sample, daemon=True)
    if shutil.which("nvidia-smi"):
        sampler.start()
    start = time.perf_counter()
    half, calls_after = None, 0
    while time.perf_counter() - start < seconds:
        out = None
        for _ in range(10):
            out = fn(a, b)
        jax.block_until_ready(out)
        if half is None and time.perf_counter() - start >= seconds / 2:
            half = time.perf_counter()
        elif half is not None:
            calls_after += 10
    end = time.perf_counter()
    done.set()
    late = [s[1:] for s in samples if s[0] >= (half or start)]
    med = [statistics.median(c) for c in zip(*late, strict=True)] if late else [None] * 3
    return (2.0 * m ** 3 * calls_after / max(end - (half or start), 1e-9) / 1e12,
            {"power_w": med[0], "sm_clock_mhz": med[1], "temperature_c": med[2],
             "samples": len(late)})


def attention(b, s, heads, d, causal, implementation, key, min_seconds):
    """(forward s, backward s) of fused attention ``[b, s, heads, d]`` in bf16."""
    q, k, v, do = (jax.random.normal(kk, (b, s, heads, d), jnp.bfloat16)
                   for kk in jax.random.split(key, 4))

    def attn(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, is_causal=causal,
                                            implementation=implementation)

    fwd = jax.jit(attn)
    both = jax.jit(lambda q, k, v, do: jax.vjp(attn, q, k, v)[1](do))
    t_f = timed(fwd, [(q, k, v)], min_seconds)
    t_fb = timed(both, [(q, k, v, do)], min_seconds)
    return t_f, max(t_fb - t_f, 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h200", help="the preset the shape model is read at")
    ap.add_argument("--scale", choices=["full", "small"], default="full",
                    help="small: tiny sizes, a check of this script on a CPU")
    ap.add_argument("--min-seconds", type=float, default=0.1, help="per measurement")
    ap.add_argument("--sustain", type=float, default=5.0,
                    help="seconds of the sustained square GEMM per precision")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "device_rates.json"))
    args = ap.parse_args()
    full = args.scale == "full"
    p = apply_presets("refined", gpu=args.gpu)
    peak = {False: p["compute_tflops"] * 1e12, True: p["fp8_peak_tflops"] * 1e12}
    ceiling = {False: p["matmul_efficiency"], True: p["fp8_matmul_efficiency"]}
    hbm = p["hbm_bandwidth_tb_s"] * 1e12 * p["hbm_efficiency"]
    key = jax.random.PRNGKey(0)
    rows = []

    def gemm(label, m, n, k, fp8):
        s = gemm_time(m, n, k, fp8, key, args.min_seconds)
        model = float(gemm_efficiency(m, n, k, ceiling=ceiling[fp8], peak_flops=peak[fp8],
                                      hbm_bytes_s=hbm, num_sms=p["num_sms"],
                                      bytes_per_element=1.0 if fp8 else 2.0)) * peak[fp8]
        rows.append({"kind": "gemm", "label": label, "precision": "fp8" if fp8 else "bf16",
                     "m": m, "n": n, "k": k, "seconds": s, "tflops": 2 * m * n * k / s / 1e12,
                     "model_tflops": model / 1e12})
        print(f"{label:40} {rows[-1]['precision']:4} {m:6} {n:6} {k:6} "
              f"{rows[-1]['tflops']:8.1f} {model / 1e12:8.1f}", flush=True)

    square = 8192 if full else 256
    for fp8 in (False, True):
        gemm(f"square {square}", square, square, square, fp8)
    for name, h, q, a, kv, f, t, tok in (LAYERS if full else SMALL_LAYERS):
        for gname, n, k in layer_shapes(h, q, a, kv, f, t):
            for fp8 in (False, True):
                gemm(f"{name} {gname} fwd", tok, n, k, fp8)
                gemm(f"{name} {gname} dgrad", tok, k, n, fp8)
                gemm(f"{name} {gname} wgrad", k, n, tok, fp8)

    gpu = jax.default_backend() == "gpu"
    b, s, heads, d = (2, 8192, 16, 128) if full else (1, 256, 2, 64)
    for causal in (False, True):
        t_f, t_b = attention(b, s, heads, d, causal, "cudnn" if gpu else None, key,
                             args.min_seconds)
        fwd_flops = 4.0 * b * s * s * heads * d / (2 if causal else 1)
        rows.append({"kind": "attention", "label": f"{'causal' if causal else 'full'} "
                     f"b{b} s{s} h{heads} d{d}", "forward_tflops": fwd_flops / t_f / 1e12,
                     "backward_tflops": 2.5 * fwd_flops / t_b / 1e12,
                     "forward_s": t_f, "backward_s": t_b})

    n = (1 << 30) if full else (1 << 20)
    x = [jnp.ones((n,), jnp.bfloat16) * (i + 1) for i in range(2)]
    t = timed(jax.jit(lambda v: v * 1.5), [(v,) for v in x], args.min_seconds)
    rows.append({"kind": "hbm", "label": f"scale {2 * n / 2**30:.0f} GiB bf16",
                 "tb_s": 4 * n / t / 1e12, "seconds": t})

    for fp8 in (False, True):
        seconds = args.sustain if full else 0.5
        tflops, smi = sustained(square, fp8, key, seconds)
        rows.append({"kind": "sustained", "label": f"square {square} for {seconds} s",
                     "precision": "fp8" if fp8 else "bf16", "tflops": tflops, **smi})

    base = {r["precision"]: r["tflops"] for r in rows if r["label"].startswith("square")}
    attn_model = p["attention_efficiency"] * p["compute_tflops"]
    doc = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "backend": jax.default_backend(), "devices": [str(dv) for dv in jax.devices()],
           "jax": jax.__version__, "scale": args.scale, "preset": args.gpu,
           "preset_values": {k: p[k] for k in ("compute_tflops", "fp8_peak_tflops",
                                                "matmul_efficiency", "fp8_matmul_efficiency",
                                                "attention_efficiency", "hbm_bandwidth_tb_s",
                                                "hbm_efficiency", "num_sms")},
           "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")

    print(f"{'GEMM':40} {'prec':4} {'m':>6} {'n':>6} {'k':>6} {'TFLOP/s':>8} "
          f"{'/square':>7} {'model':>7} {'meas/model':>10}")
    for r in rows:
        if r["kind"] == "gemm":
            print(f"{r['label']:40} {r['precision']:4} {r['m']:6} {r['n']:6} {r['k']:6} "
                  f"{r['tflops']:8.1f} {r['tflops'] / base[r['precision']]:7.3f} "
                  f"{r['model_tflops']:7.1f} {r['tflops'] / r['model_tflops']:10.3f}")
    for r in rows:
        if r["kind"] == "attention":
            print(f"attention {r['label']}: forward {r['forward_tflops']:.1f}, backward "
                  f"{r['backward_tflops']:.1f} TFLOP/s (preset {attn_model:.1f} combined)")
        elif r["kind"] == "sustained":
            print(f"sustained {r['label']} {r['precision']}: {r['tflops']:.1f} TFLOP/s "
                  f"({r['tflops'] / base[r['precision']]:.3f} of the burst) at "
                  f"{r['power_w']} W, SM {r['sm_clock_mhz']} MHz, {r['temperature_c']} C")
        elif r["kind"] == "hbm":
            print(f"HBM {r['label']}: {r['tb_s']:.2f} TB/s (preset "
                  f"{hbm / 1e12:.2f} = {p['hbm_efficiency']} x {p['hbm_bandwidth_tb_s']})")
    summary = {prec: np.median([r["tflops"] / r["model_tflops"] for r in rows
                                if r["kind"] == "gemm" and r["precision"] == prec])
               for prec in ("bf16", "fp8")}
    print("median measured / model over the GEMMs:",
          ", ".join(f"{k} {v:.3f}" for k, v in summary.items()))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
