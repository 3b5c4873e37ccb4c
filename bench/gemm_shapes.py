"""The refined model's GEMM shape model against published cuBLASLt FP8 rates.

Azure's AI-benchmarking-guide measures cuBLASLt FP8 GEMMs (random data, 10,000
warm-up iterations) at nine shapes on each of its VMs; the presets take their
sustained FP8 ceiling from the best of them.  This script puts
``jaxmodel.collectives.gemm_efficiency`` (the shape model the refined model runs:
tile and wave quantization on 128 x 256 tiles, plus the compulsory bytes' time
added to the math time) at each GPU preset's own ceiling, peak, SM count and
HBM rate against every measured shape, and prints model / measured.  For
comparison it also prints a plain roofline, ``max(math, memory)`` with the same
tiles.  No GPU is needed: the measurements are the published tables.  Writes
``bench/results/<--out>``.

    .venv/bin/python bench/gemm_shapes.py [--out gemm_shapes.json]
"""

from __future__ import annotations

import argparse
import statistics

from results_file import checked_out, write_json

from jaxmodel.collectives import gemm_efficiency, gemm_math_and_memory_seconds
from jaxmodel.models.presets import GPUS, PRECISION_PEAKS

SHAPES = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
          (16384, 16384, 16384), (32768, 32768, 32768), (1024, 2145, 1024),
          (6144, 12288, 12288), (802816, 192, 768))
# TFLOP/s at SHAPES, from Azure/AI-benchmarking-guide Azure_Results/<file>,
# "GEMM CuBLASLt (FP8)" (forks that hold the files, where the index has them).
MEASURED = {
    "h100-sxm": ("ND_H100_v5_results.md (yosoyjay/AI-benchmarking-guide@a8263ef)",
                 (274.1, 1011.3, 1216.9, 1290.1, 1377.3, 1382.2, 410.7, 1351.4, 663.8)),
    "h200": ("ND_H200_v5_results.md (Azure/AI-benchmarking-guide@7f20e5f)",
             (290.8, 1013.4, 1249.1, 1300.6, 1366.3, 1349.5, 407.9, 1318.0, 717.5)),
    "gb200-nvl72": ("ND_GB200_v6_results.md (Azure/AI-benchmarking-guide@2a370be)",
                    (489.2, 2243.6, 2834.6, 2876.6, 2906.9, 2825.6, 1022.2, 2895.6, 1459.5)),
    "gb300-nvl72": ("ND_GB300_v6_results.md (egmsft/AI-benchmarking-guide@18e80a2)",
                    (553.5, 2288.9, 3257.0, 3286.3, 3308.5, 3271.3, 1115.1, 3279.5, 1717.1)),
}


def shape_rates(gpu: str, m: int, n: int, k: int) -> tuple[float, float]:
    """The model's FP8 TFLOP/s for an ``[m, k] x [k, n]`` GEMM on preset ``gpu``, and a
    plain roofline's (``max`` of the same math and memory seconds)."""
    v = GPUS[gpu].values
    peak = PRECISION_PEAKS[gpu]["fp8"] * 1e12
    shape = dict(ceiling=v["fp8_matmul_efficiency"], peak_flops=peak,
                 hbm_bytes_s=v["hbm_bandwidth_tb_s"] * 1e12 * v["hbm_efficiency"],
                 num_sms=v["num_sms"], bytes_per_element=1.0)
    model = float(gemm_efficiency(float(m), float(n), float(k), **shape)) * peak / 1e12
    math_s, memory_s = (float(t) for t in gemm_math_and_memory_seconds(
        float(m), float(n), float(k), **shape))
    return model, 2.0 * m * n * k / max(math_s, memory_s) / 1e12


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gemm_shapes.json",
                        help="file name written under bench/results/")
    path = checked_out(parser.parse_args().out, "gemm_shapes.json")
    rows, summary = [], {}
    for gpu, (source, rates) in MEASURED.items():
        print(f"{gpu} (FP8 ceiling {GPUS[gpu].values['fp8_matmul_efficiency']}; {source})")
        print(f"  {'m':>7} {'n':>6} {'k':>6} {'measured':>9} {'model':>8} {'ratio':>6} "
              f"{'roofline':>9} {'ratio':>6}")
        for (m, n, k), measured in zip(SHAPES, rates, strict=True):
            model, roofline = shape_rates(gpu, m, n, k)
            rows.append({"gpu": gpu, "m": m, "n": n, "k": k, "measured_tflops": measured,
                         "model_tflops": round(model, 1), "roofline_tflops": round(roofline, 1)})
            print(f"  {m:7d} {n:6d} {k:6d} {measured:9.1f} {model:8.1f} {model / measured:6.3f} "
                  f"{roofline:9.1f} {roofline / measured:6.3f}")
        large = [r["model_tflops"] / r["measured_tflops"] for r in rows
                 if r["gpu"] == gpu and r["m"] == r["n"] == r["k"] and r["k"] >= 4096]
        summary[gpu] = round(statistics.median(large), 3)
        print(f"  model / measured, cubes of 4096 and up: median {summary[gpu]:.3f}")
    write_json(path, {"rows": rows, "median_model_over_measured_large_cubes": summary})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
