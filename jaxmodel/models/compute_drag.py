"""What makes the refined model's compute slow, for its verdict (host side).

When compute is the largest step-time term but MFU stays below
``COMPUTE_BOUND_MFU_PERCENT`` (:mod:`jaxmodel.models.verdicts`), the time lost
against the ideal step ``MFU x step`` splits into the compute term's own
excess over the ideal and the collectives and bubble around it.  The compute
excess splits exactly into three parts of the refined model's outputs:

* recompute: the recomputed FLOPs at the bf16 peak, ``(HFU - MFU) x step``;
* memory-bound kernels: ``memory_bound_ms`` (norms, activations, softmax,
  cross-entropy, FP8 casts, the optimizer: HBM-bound, no FLOPs counted);
* the matrix kernels below peak: the rest of the compute term,
  ``compute - HFU x step - memory_bound_ms``: GEMMs at the efficiency their
  shapes reach (tiles, waves, arithmetic intensity) and the fused attention at
  its achievable fraction, and the fixed cost of each kernel launch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jaxmodel.models.verdicts import ComputePart


def refined_compute_parts(inputs: Mapping[str, float], outputs: Mapping[str, Any]
                          ) -> tuple[ComputePart, ...]:
    """The compute term's time beyond the ideal, by cause (ms, largest first)."""
    step = float(outputs["step_time_ms"])
    mfu, hfu = float(outputs["mfu_percent"]), float(outputs["hfu_percent"])
    memory = float(outputs["memory_bound_ms"])
    recompute = (hfu - mfu) / 100.0 * step
    matrix = float(outputs["compute_time_ms"]) - hfu / 100.0 * step - memory
    parts = (
        ComputePart("GEMMs and attention below their peak (GEMM shapes, attention "
                    "efficiency, kernel launches)", max(matrix, 0.0),
                    "Larger GEMMs run nearer the peak: raise the micro-batch or lower "
                    "tensor parallelism"),
        ComputePart("memory-bound kernels", memory,
                    "Fuse or cut the memory-bound kernels (cross_entropy_fusion, FP8 casts), "
                    "or use a GPU with more HBM bandwidth"),
        ComputePart("recompute", max(recompute, 0.0),
                    "Recompute less (selective instead of full recompute) where memory allows"),
    )
    return tuple(sorted(parts, key=lambda p: -p.ms))
