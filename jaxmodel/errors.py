"""The error users see for malformed input: one line, field, value, what is allowed."""

from __future__ import annotations


class JaxmodelError(Exception):
    """Base class for errors reported to the user as one line (exit code 2)."""


class InputError(JaxmodelError, ValueError):
    """A malformed input value: names the field, the value and what is allowed."""

    def __init__(self, field: str, value: object, allowed: str):
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}: got {_shown(value)}; allowed: {allowed}")


def _shown(value: object) -> str:
    """A value for a one-line message: huge whole numbers in short form."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**16:
        try:
            return f"{value:.3e}"
        except OverflowError:
            return f"about 10**{int(abs(value).bit_length() * 0.30103)}"
    text = repr(value)
    return text if len(text) <= 200 else text[:120] + " ... " + text[-40:]


class SpecError(JaxmodelError, ValueError):
    """A malformed sweep specification or option (one line, no traceback)."""

    @classmethod
    def bad(cls, field: str, value: object, allowed: str) -> SpecError:
        """``field: got value; allowed: ...``: the one style of a spec table's errors
        (as :class:`InputError` words a bad input)."""
        return cls(f"{field}: got {_shown(value)}; allowed: {allowed}")


def closest(name: str, choices) -> str:
    """`` (did you mean 'x'?)`` for the closest valid name, or ``""``.

    A name that begins a valid one (``h100`` -> ``h100-sxm``, ``mfu`` ->
    ``mfu_percent``) is matched by prefix first, the shortest such name
    winning; otherwise by edit similarity (``difflib``).
    """
    import difflib

    choices = [str(c) for c in choices]
    if isinstance(name, str) and name:
        starts = [c for c in choices if c.lower().startswith(name.lower()) and c != name]
        if starts:
            return f" (did you mean {min(starts, key=len)!r}?)"
    match = difflib.get_close_matches(str(name), choices, n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""
