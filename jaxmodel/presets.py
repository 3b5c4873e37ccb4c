"""Named hardware and model presets (``--gpu`` / ``--llm`` and specs' ``[base]``).

They are the models' domain knowledge and live in :mod:`jaxmodel.models.presets`;
this module keeps the public import path.
"""

from jaxmodel.models.presets import (
    GPU_COLUMNS,
    GPUS,
    LLM_COLUMNS,
    LLMS,
    MOE_LLMS,
    Preset,
    Published,
    apply_presets,
    get_preset,
)

__all__ = ["GPUS", "GPU_COLUMNS", "LLMS", "LLM_COLUMNS", "MOE_LLMS", "Preset", "Published",
           "apply_presets", "get_preset"]
