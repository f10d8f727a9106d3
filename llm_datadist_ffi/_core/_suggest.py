""""Did you mean": the closest name to a misspelt one, for the messages that refuse it.

The status table (a code's name), the testing tools (a method's name) and the command
line (a command, an action, a page) answer a name they do not know with the closest one
they do; :class:`ArgumentParser` does it for argparse's "invalid choice" errors.
"""
from __future__ import annotations

import argparse
import difflib
import re
from typing import Iterable, NoReturn

__all__ = ["did_you_mean", "ArgumentParser"]


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'X'?)"`` naming the choice closest to ``word`` in any case
    (difflib), or ``""`` when none is close."""
    folded = {choice.upper(): choice for choice in choices}
    close = difflib.get_close_matches(word.upper(), list(folded), n=1, cutoff=0.6)
    return f" (did you mean {folded[close[0]]!r}?)" if close else ""


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose "invalid choice" error also names the closest choice
    (``... invalid choice: 'errros' (choose from ...) (did you mean 'errors'?)``)."""

    def error(self, message: str) -> NoReturn:
        match = re.search(r"invalid choice: '([^']*)'", message)
        if match is not None and "did you mean" not in message and "maybe you meant" not in message:
            choices = [str(choice) for action in self._actions if action.choices for choice in action.choices]
            message += did_you_mean(match.group(1), choices)
        super().error(message)
