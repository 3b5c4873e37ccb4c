"""Dashboard view updates (query + figure) on 10^7- and 10^8-row sweep datasets.

    python bench/dashboard.py                  # 10^7 and 10^8 rows
    python bench/dashboard.py --sizes 1e7      # only 10^7

The datasets are written by the engine (``jaxmodel.sweep``) from the default sweep's
grid with more bandwidths (``out/bench-dashboard-N``, reused when already there), with
the columns a dashboard reads: the inputs, MFU, step time, throughput, validity,
bottleneck and regime.  Each view update is what the app does when a control changes:
the DuckDB query for the view under the filters, the Plotly figure, and its JSON (what
the page receives).  Each update runs ``--repeat`` times; the table gives its median and
worst.  Target: every update under 1 s.

Datasets of 2x10^7 rows or more get the summary cube the dashboard builds at start
(``--no-cube``: none); its build time is reported apart.

Baselines, measured in the same run: ``jaxmodel plot heatmap``'s aggregation
(``jaxmodel.plot.heatmap_data``: a pyarrow scan with the filter pushed down, batch by
batch) for the first view; the ratio says how much faster the dashboard's query path is.
For the Pareto view: the same exact front without the sampled pre-pass
(``sample_percent=0``: every filtered row fetched, the front taken in numpy), and on a
dataset with a cube and id runs, the same front by one scan of the rows (what the view
does without the cube).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GRID = """
[base]
model_params_b = 70
seq_length = 4096
hidden_dim = 8192
num_layers = 80

[axes]
link_bandwidth_gb_s = {{geomspace = [25, 3200, {bandwidths}]}}
num_gpus = {{powers_of_two = [64, 16384]}}
compute_tflops = [312, 500, 989, 2250]
tensor_parallel = {{powers_of_two = [1, 8]}}
pipeline_parallel = [1, 2, 4, 8, 16]
micro_batch = {{powers_of_two = [1, 8]}}
gradient_accum_steps = {{powers_of_two = [1, 128]}}

[output]
columns = ["config_id", "link_bandwidth_gb_s", "num_gpus", "compute_tflops",
           "tensor_parallel", "pipeline_parallel", "micro_batch", "gradient_accum_steps",
           "mfu_percent", "step_time_ms", "throughput_tokens_s", "valid_layout",
           "bottleneck", "regime"]
rows_per_file = 4_194_304
"""
ROWS_PER_BANDWIDTH = 9 * 4 * 4 * 5 * 4 * 8  # 23,040
BIG = "tensor_parallel * pipeline_parallel >= 16"  # the free filter most updates use


def dataset(rows: int) -> tuple[Path, float | None]:
    """The engine-written dataset of about ``rows`` rows; the sweep's seconds if written now."""
    from jaxmodel.spec import parse_spec
    from jaxmodel.sweeping import sweep

    bandwidths = max(2, round(rows / ROWS_PER_BANDWIDTH))
    path = ROOT / "out" / f"bench-dashboard-{rows:.0e}".replace("+", "")
    meta = path / "_jaxmodel.json"
    want = bandwidths * ROWS_PER_BANDWIDTH
    if meta.exists() and json.loads(meta.read_text()).get("configurations") == want and any(
            path.glob("part-*.parquet")):
        return path, None
    spec = parse_spec(GRID.format(bandwidths=bandwidths), path.name)
    t0 = time.perf_counter()
    sweep(spec, path, overwrite=True, chunk_size=1 << 22)
    return path, time.perf_counter() - t0


def updates(catalog, name: str):
    """(label, function) for each view update, in the order a person might click."""
    from jaxmodel.dashboard import data as q
    from jaxmodel.dashboard import figures as figs

    src = catalog.source(name)
    big = q.Filters(where=BIG)
    sliders = q.Filters(ranges={"tensor_parallel": (2, 8), "num_gpus": (256, 4096)},
                        choices={"regime": ["overhead-limited", "communication-bound"]})
    x, y = "link_bandwidth_gb_s", "num_gpus"

    def heat(value, agg, f, facet=None, x=x, y=y):
        g = q.grid(catalog, name, x, y, value, agg, f, facet)
        return figs.heatmap(src, g)

    def line(f):
        return figs.lines(src, q.grid(catalog, name, x, "tensor_parallel", "mfu_percent",
                                      "max", f))

    return [
        ("heatmap: max mfu, no filter", lambda: heat("mfu_percent", "max", q.Filters())),
        ("heatmap: + free filter", lambda: heat("mfu_percent", "max", big)),
        ("heatmap: mean step time", lambda: heat("step_time_ms", "mean", big)),
        ("heatmap: sliders + regime choice", lambda: heat("mfu_percent", "max", sliders)),
        ("heatmap: GPUs x TFLOP/s, facet by p",
         lambda: heat("mfu_percent", "max", big, facet="pipeline_parallel", x="num_gpus",
                      y="compute_tflops")),
        ("heatmap: y = compute_tflops", lambda: heat("mfu_percent", "max", big,
                                                     y="compute_tflops")),
        ("lines: one per tensor_parallel", lambda: line(big)),
        ("regime map", lambda: figs.regime_map(src, q.regimes(catalog, name, x, y, "regime",
                                                              "mfu_percent", big))),
        ("regime map: GPUs x TFLOP/s, most frequent, facet by t", lambda: figs.regime_map(
            src, q.regimes(catalog, name, "num_gpus", "compute_tflops", "regime",
                           "mfu_percent", big, rule="most", facet="tensor_parallel"))),
        ("scatter: 4,000 sampled rows", lambda: figs.scatter(
            src, q.scatter(catalog, name, "step_time_ms", "mfu_percent", "regime", big),
            "step_time_ms", "mfu_percent", "regime")),
        ("scatter: facet by p", lambda: figs.scatter(
            src, q.scatter(catalog, name, "step_time_ms", "mfu_percent", "regime", big,
                           facet="pipeline_parallel"),
            "step_time_ms", "mfu_percent", "regime", facet="pipeline_parallel")),
        ("rows: top 20 by mfu", lambda: q.top_rows(catalog, name, "mfu_percent", k=20,
                                                   filters=big)),
        ("pareto: step time vs throughput", lambda: figs.pareto(
            src, q.pareto(catalog, name, "step_time_ms", "throughput_tokens_s", filters=big),
            "step_time_ms", "throughput_tokens_s")),
        ("row count under the filter", lambda: q.count_rows(catalog, name, sliders)),
    ]


def timed(fn) -> float:
    t0 = time.perf_counter()
    out = fn()
    if hasattr(out, "to_json"):
        out.to_json()  # what the page receives
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e7,1e8", help="comma-separated row counts")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-cube", action="store_true",
                    help="no summary cube, even for datasets over 2x10^7 rows")
    ap.add_argument("--out", default="dashboard.json", help="file under bench/results")
    args = ap.parse_args()
    from jaxmodel import plot
    from jaxmodel.dashboard import data as q
    from jaxmodel.dashboard.data import Catalog

    results = []
    for size in (int(float(s)) for s in args.sizes.split(",")):
        path, wrote_s = dataset(size)
        rows = json.loads((path / "_jaxmodel.json").read_text())["configurations"]
        load_start = os.getloadavg()[0]
        print(f"\n{rows:,} rows in {path.relative_to(ROOT)}"
              + (f" (written by the engine in {wrote_s:.0f} s)" if wrote_s else " (reused)"))
        t0 = time.perf_counter()
        catalog = Catalog([path], cube_min_rows=None if args.no_cube else q.CUBE_MIN_ROWS)
        name = catalog.names[0]
        c = catalog.source(name).cube
        cube = c and {"groups": c.groups, "dims": list(c.dims), "build_s": c.seconds,
                      "open_s": time.perf_counter() - t0, "id_runs": c.ids is not None}
        if cube:
            print(f"summary cube: {c.groups:,} groups by {', '.join(c.dims)}, built in "
                  f"{c.seconds:.1f} s at start (views on those columns read it; id runs: "
                  f"{'yes' if c.ids else 'no'})")
        t0 = time.perf_counter()
        plot.heatmap_data(str(path), "link_bandwidth_gb_s", "num_gpus", "mfu_percent", "max")
        baseline = time.perf_counter() - t0
        print(f"{'view update':<54} {'median s':>9} {'worst s':>8}")
        table = []
        for label, fn in updates(catalog, name):
            times = [timed(fn) for _ in range(args.repeat)]
            table.append({"update": label, "median_s": statistics.median(times),
                          "worst_s": max(times)})
            print(f"{label:<54} {statistics.median(times):>9.3f} {max(times):>8.3f}")
        pareto_s = next(r["median_s"] for r in table if r["update"].startswith("pareto"))
        pareto_plain = pareto_scan = None
        front = functools.partial(q.pareto, catalog, name, "step_time_ms",
                                  "throughput_tokens_s", filters=q.Filters(where=BIG))
        if rows <= 2 * 10**7:  # it fetches every filtered row: ~1 GB at 10^8 rows
            pareto_plain = statistics.median(timed(functools.partial(front, sample_percent=0))
                                             for _ in range(max(1, args.repeat // 2)))
            print(f"pareto without the sampled pre-pass (every filtered row fetched): "
                  f"{pareto_plain:.3f} s, {pareto_plain / pareto_s:.1f}x the view's median")
        if c is not None and c.ids is not None:  # the view read the cube and a few groups
            sampled = 100.0 * q.PARETO_SAMPLE_ROWS / rows
            pareto_scan = statistics.median(
                timed(functools.partial(front, sample_percent=sampled))
                for _ in range(max(1, args.repeat // 2)))
            print(f"pareto by one scan of the rows (no cube): {pareto_scan:.3f} s, "
                  f"{pareto_scan / pareto_s:.1f}x the view's median")
        catalog.close()
        medians = [r["median_s"] for r in table]
        worst = max(r["worst_s"] for r in table)
        first = table[0]["median_s"]
        load = os.getloadavg()[0]
        print(f"load average {load:.1f} on {os.cpu_count()} cores")
        print(f"all updates: median {statistics.median(medians):.3f} s, worst {worst:.3f} s "
              f"(target < 1 s: {'met' if worst < 1 else 'not met'}); first heatmap "
              f"{baseline / first:.1f}x faster than jaxmodel plot's pyarrow aggregation "
              f"({baseline:.2f} s)")
        results.append({"rows": rows, "updates": table, "median_s": statistics.median(medians),
                        "worst_s": worst, "baseline_plot_heatmap_s": baseline,
                        "speedup_vs_plot": baseline / first, "wrote_s": wrote_s,
                        "pareto_unsampled_s": pareto_plain,
                        "pareto_speedup_vs_unsampled": pareto_plain / pareto_s
                        if pareto_plain else None, "pareto_scan_s": pareto_scan,
                        "pareto_speedup_vs_scan": pareto_scan / pareto_s
                        if pareto_scan else None, "cube": cube,
                        "load_average": load, "load_average_start": load_start,
                        "cores": os.cpu_count()})
    out = ROOT / "bench" / "results" / Path(args.out).name
    out.write_text(json.dumps(results, indent=1))
    print(f"\nwrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
