"""What every cost model offers the engine: fields, a pure function, its terms, a verdict."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from jaxmodel.errors import InputError, closest
from jaxmodel.fields import InputField, OutputField
from jaxmodel.models.terms import Term, bottleneck_categories

if TYPE_CHECKING:
    from jaxmodel.models.layout import LayoutSpace

# An exact int64 output is a product of counts; keeping the product <= 2**62
# leaves a factor of two to 2**63, so a float64 check of it is never fooled.
MAX_EXACT_PRODUCT = 2**62


@dataclass(frozen=True)
class Model:
    """A cost model as the engine sees it.

    Attributes:
      name: the name users select it by (``--model seed``).
      description: one line, printed as ``model`` in ``jaxmodel eval`` JSON.
      inputs: input fields, in order; ``inputs_type(*values)`` builds the pytree.
      outputs: output fields, in order; the fields of ``outputs_type``.
      inputs_type: a ``NamedTuple`` of scalars (one configuration).
      outputs_type: a ``NamedTuple`` of scalars.
      apply: the pure model, ``apply(inputs) -> outputs`` for ONE configuration;
        callers ``jax.vmap`` it.  Inputs are floating point (counts are relaxed
        to floats so that they can be differentiated); integer outputs are int64.
      verdict: host-side text for one configuration,
        ``verdict(inputs: Mapping[str, float], outputs: Mapping[str, Any]) -> str``.
      terms: the step-time terms (:class:`Term`), in stacking and tie-break
        order; the ``bottleneck`` output's categories are
        ``jaxmodel.models.terms.bottleneck_categories(terms)``.
      validity: the bool output that says whether a configuration is valid
        (the engine masks and counts rows by it; invalid rows have NaN metrics).
      steps: the stepped inputs, ``{name: next_value(inputs) -> value}``:
        inputs that act only through a step function (a replica count, a
        switch), whose sensitivity is a discrete difference to the value
        ``next_value`` gives.  Every other input is ``continuous``.
      layout: the model's layout space (its axes, how to enumerate candidate
        layouts for a GPU count and global batch, the replica count), which
        search, ``jaxmodel best`` and the ``--layouts`` breakdown ask; None: the
        model cannot be searched.
      exact_products: ``(output, inputs)`` pairs: an exact int64 output bounded
        by the product of those count inputs (``tokens_per_step <= b m s N``).
        Every caller refuses inputs whose product exceeds ``MAX_EXACT_PRODUCT``
        (:meth:`check_products`), so the output can never wrap around.
      at_least: ``(name, lower)`` pairs: input ``name`` is 0 (a capability the
        hardware lacks, such as an FP8 peak on an A100) or never below input
        ``lower`` (an FP8 peak is at least the BF16 peak); every caller refuses
        inputs that break one (:meth:`check_at_least`).
      layout_reasons: host-side ``(problem, fix)`` pairs for everything the
        model's validity rule rejects in one evaluated configuration
        (``layout_reasons(inputs, outputs)``; empty when valid), or None; the
        layout search counts candidates by them when none is valid.
      cluster: the inputs that describe how a particular cluster performs
        rather than its datasheet or the job (achieved efficiencies, latencies):
        cluster-wide, continuous, and what ``jaxmodel calibrate`` fits by default.
      memory_capacity: the input giving each GPU's memory in GB, which the
        model's memory outputs are checked against (reports print the need
        against it), or None: the model has no memory limit.
      retired: inputs the model no longer takes, ``{name: what replaces it}``
        (one line); a spec, config or option naming one is refused with it
        (:meth:`input_hint`).
      fit_ranges: ``{input: (low, high)}``, the physically possible range of a
        ``cluster`` input (an efficiency no kernel or collective exceeds, a
        latency no fabric undercuts), narrower than its domain; ``jaxmodel
        calibrate`` keeps a fit inside it.
      unused: ``unused(inputs) -> names``: the inputs, and the outputs of
        step-time terms, that one configuration does not use (a dense model's
        MoE inputs and expert all-to-all in the refined model), which
        sensitivities, tables and legends leave out; None: all are used.
      physics: the modules whose docstrings state the model's physics and its
        sources, in reading order (``docs/reference/physics.md`` is built from
        them, so the physics is written once, beside the code).
      hardware: the inputs a hardware designer or buyer can change (peak
        rates, bandwidths, capacities, achieved efficiencies): what
        ``best --sensitivity`` and ``plan --sensitivity`` weigh by default.
      on_host: ``apply`` calls only ``jnp`` and ``jax.lax.stop_gradient`` from
        ``jaxmodel.deferred`` and is elementwise over a batch whose inputs are
        columns or scalars every row shares, so NumPy can run it
        (``jaxmodel.api.evaluate_on_host``: one configuration for a person,
        without a compile) and jax runs it without vmap (``apply_rows``);
        False: every evaluation goes through jax, vmapped.
    """

    name: str
    description: str
    inputs: tuple[InputField, ...]
    outputs: tuple[OutputField, ...]
    inputs_type: type[NamedTuple]
    outputs_type: type[NamedTuple]
    apply: Callable[[Any], Any]
    verdict: Callable[[Mapping[str, float], Mapping[str, Any]], str]
    terms: tuple[Term, ...]
    validity: str = "valid_layout"
    # (not compared: a mapping is unhashable, and a model is a static jit argument)
    steps: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict, compare=False)
    layout_reasons: Callable[[Mapping[str, float], Mapping[str, Any]],
                             list[tuple[str, str]]] | None = None
    layout: LayoutSpace | None = None
    exact_products: tuple[tuple[str, tuple[str, ...]], ...] = ()
    at_least: tuple[tuple[str, str], ...] = ()
    cluster: tuple[str, ...] = ()
    memory_capacity: str | None = None
    retired: Mapping[str, str] = field(default_factory=dict, compare=False)
    fit_ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict,
                                                          compare=False)
    unused: Callable[[Mapping[str, float]], tuple[str, ...]] | None = field(
        default=None, compare=False)
    hardware: tuple[str, ...] = ()
    physics: tuple[str, ...] = ()
    on_host: bool = False

    def __post_init__(self) -> None:
        """Check the declarations against each other (a model is built once, at import).

        Raises:
          ValueError: naming the model and the declaration that disagrees.
        """
        def fail(what: str) -> None:
            raise ValueError(f"model {self.name!r}: {what}")

        # Inputs are built positionally, inputs_type(*values): the orders must agree.
        if tuple(self.inputs_type._fields) != self.input_names:
            fail(f"inputs_type fields {self.inputs_type._fields} differ from the inputs "
                 f"{self.input_names}")
        if tuple(self.outputs_type._fields) != self.output_names:
            fail(f"outputs_type fields {self.outputs_type._fields} differ from the outputs "
                 f"{self.output_names}")
        kinds = {f.name: f.kind for f in self.outputs}
        if kinds.get(self.validity) != "bool":
            fail(f"validity {self.validity!r} is not a bool output")
        if not self.terms:
            fail("no step-time terms")
        for term in self.terms:
            if kinds.get(term.output) != "float":
                fail(f"term {term.name!r}: {term.output!r} is not a float output")
            if term.kind not in ("compute", "bubble", "communication"):
                fail(f"term {term.name!r}: kind {term.kind!r}")
        if len({t.name for t in self.terms}) != len(self.terms):
            fail("two terms share a name")
        if "bottleneck" in kinds:
            # The device codes the argmax over the terms into these categories.
            if self.output_field("bottleneck").categories != bottleneck_categories(self.terms):
                fail("the bottleneck output's categories are not "
                     "bottleneck_categories(terms)")
        for name in self.steps:
            if name not in self.input_names:
                fail(f"stepped input {name!r} is not an input")
        for name, (low, high) in self.fit_ranges.items():
            f = self.input_field(name) if name in self.input_names else None
            if f is None or not (f.low <= low < high <= (f.high if f.high is not None
                                                        else float("inf"))):
                fail(f"fit range of {name!r} is not an input's range inside its domain")
        for name in (*self.cluster, *self.hardware,
                     *(n for _, names in self.exact_products for n in names),
                     *((self.memory_capacity,) if self.memory_capacity else ())):
            if name not in self.input_names:
                fail(f"{name!r} is not an input")
        if self.layout is not None:
            self.layout.check(self)

    def used(self, names: Sequence[str], values: Mapping[str, float]) -> tuple[str, ...]:
        """``names`` less the inputs that the configuration ``values`` does not use."""
        unused = set(self.unused(values)) if self.unused else set()
        return tuple(n for n in names if n not in unused)

    def used_terms(self, values: Mapping[str, float]) -> tuple[Term, ...]:
        """The step-time terms that the configuration ``values`` uses."""
        unused = set(self.unused(values)) if self.unused else set()
        return tuple(t for t in self.terms if t.output not in unused)

    @property
    def continuous(self) -> tuple[str, ...]:
        """Inputs differentiated by autodiff: every input that is not stepped."""
        return tuple(n for n in self.input_names if n not in self.steps)

    def apply_rows(self, x: Any, rows: int, fun: Callable[[Any], Any] | None = None) -> Any:
        """``fun`` (default ``apply``) over a batch of ``rows`` configurations, traced by jax.

        ``x`` is an ``inputs_type`` whose fields are columns of ``rows`` values or
        scalars (an input every row shares, as a sweep's fixed inputs are).  A model
        that declares ``on_host`` is elementwise over a batch (the host path runs it
        on whole columns), so ``fun`` runs once on ``x`` as it is, and each result is
        broadcast to ``rows``: the direct call skips vmap's batching of every
        operation, and what depends on scalars alone stays a scalar, computed once
        (as vmap does).  Measured on the refined model (bench/README.md): trace 0.9
        -> 0.46 s for 64 rows of columns; the engine's DeepSeek-V3 ``best`` cold
        15.0 -> 11.7 s, its sweep rate over the default axes 0.95x.  Any other model
        is ``jax.vmap``-ed.  Same numbers either way (rows never meet).  ``fun``
        returns a pytree of per-configuration values (the outputs, or a sensitivity
        kernel's columns).
        """
        from jaxmodel.deferred import jax, jnp

        fun = self.apply if fun is None else fun
        if self.on_host:
            return jax.tree_util.tree_map(lambda v: jnp.broadcast_to(v, (rows,)), fun(x))
        axes = type(x)(*(0 if jnp.ndim(v) else None for v in x))
        return jax.vmap(fun, in_axes=(axes,), axis_size=rows)(x)

    def term(self, name: str) -> Term:
        """The term called ``name``."""
        for t in self.terms:
            if t.name == name:
                return t
        raise KeyError(name)

    def check_products(self, values: Mapping[str, Any], where: str = "") -> None:
        """Refuse inputs (scalars or broadcastable arrays; a spec passes each
        input's largest value) whose ``exact_products`` exceed the int64 range.

        Raises:
          InputError: naming the inputs, the product and the limit.
        """
        import numpy as np

        for output, names in self.exact_products:
            product = np.ones(())
            for name in names:
                product = product * np.asarray(values[name], dtype=np.float64)
            if np.any(product > MAX_EXACT_PRODUCT):
                worst = int(np.max(product))
                raise InputError(where + " x ".join(names), worst,
                                 f"a product of at most 2**62 ({float(MAX_EXACT_PRODUCT):.3g})"
                                 f", so that {output} is an exact int64")

    def check_at_least(self, values: Mapping[str, Any], where: str = "",
                       pairs: tuple[tuple[str, str], ...] | None = None) -> None:
        """Refuse inputs (scalars or broadcastable arrays) in which an
        ``at_least`` pair (or one of ``pairs``) is out of order.

        Raises:
          InputError: naming both inputs and the values that break the order.
        """
        import numpy as np

        for name, lower in self.at_least if pairs is None else pairs:
            a = np.asarray(values[name], dtype=np.float64)
            b = np.asarray(values[lower], dtype=np.float64)
            bad = np.broadcast_to((a < b) & (a != 0), np.broadcast_shapes(a.shape, b.shape))
            if bad.any():
                i = np.argmax(bad.reshape(-1))
                got = float(np.broadcast_to(a, bad.shape).reshape(-1)[i])
                low = float(np.broadcast_to(b, bad.shape).reshape(-1)[i])
                raise InputError(where + name, f"{got:g}",
                                 f"0 (absent) or at least {lower} ({low:g}) in every "
                                 "configuration")

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.outputs)

    @property
    def defaults(self) -> dict[str, float]:
        return {f.name: f.default for f in self.inputs}

    def input_hint(self, name: str) -> str:
        """What to say after an unknown input ``name``: what replaced it, where
        it was retired, else the closest input name (``errors.closest``)."""
        if name in self.retired:
            return f" (retired: {self.retired[name]})"
        return closest(name, self.input_names)

    def input_field(self, name: str) -> InputField:
        for f in self.inputs:
            if f.name == name:
                return f
        raise KeyError(name)

    def output_field(self, name: str) -> OutputField:
        for f in self.outputs:
            if f.name == name:
                return f
        raise KeyError(name)
