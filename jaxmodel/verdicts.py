"""Bottleneck and regime categories, public names.

The codes and sentences are derived from each model's declared terms in
:mod:`jaxmodel.models.verdicts`; the shared terms and their categories are
defined in :mod:`jaxmodel.models.terms`.
"""

from jaxmodel.models.terms import BOTTLENECKS, bottleneck_categories
from jaxmodel.models.verdicts import (
    COMPUTE_BOUND_MFU_PERCENT,
    REGIMES,
    bottleneck_and_regime,
    render_verdict,
)

__all__ = ["BOTTLENECKS", "COMPUTE_BOUND_MFU_PERCENT", "REGIMES", "bottleneck_and_regime",
           "bottleneck_categories", "render_verdict"]
