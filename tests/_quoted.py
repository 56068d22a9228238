"""Issue 37, item 1: every number a reading quotes is in the table it reads."""

import re

_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e-?\d+)?")


def numbers(text: str) -> set[float]:
    """The numbers written in ``text`` (``4.9k`` style suffixes are not used by the readings)."""
    return {float(m) for m in _NUMBER.findall(text.replace(",", ""))}


def unquoted(reading: str, table, allowed=()) -> set[float]:
    """The numbers of ``reading`` that neither the printed ``table`` (title and cells) nor ``allowed``
    (the reading's stated constants: a 90% interval, a tolerance) contain."""
    return {x for x in numbers(reading) if x not in numbers(str(table)) | set(allowed)}
