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


def closest(name: str, choices) -> str:
    """`` (did you mean 'x'?)`` for the closest valid name, or ``""``."""
    import difflib

    match = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""
