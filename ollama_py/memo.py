"""A pure function's answers, remembered up to a bound (past it the memo starts again): for lookups every request
makes with the same few keys (a model's name, a template's call tag). Made by the memo's own function (calling
it), or by the caller where the answer needs more than the key (`known`, then `keep`)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Memo(Generic[K, V]):
    def __init__(self, make: Callable[[K], V], limit: int) -> None:
        self._make, self.limit = make, limit
        self._answers: dict[K, V] = {}

    def __call__(self, key: K) -> V:
        """make(key), made once. Exceptions are not remembered."""
        value = self._answers.get(key)
        if value is None:
            value = self.keep(key, self._make(key))
        return value

    def keep(self, key: K, value: V) -> V:
        """Remember value as key's answer (a full memo starts again); gives it back."""
        if len(self._answers) >= self.limit:
            self._answers.clear()
        self._answers[key] = value
        return value

    def known(self, key: K) -> V | None:
        """The answer if it has been made (a lookup), else None."""
        return self._answers.get(key)

    def __len__(self) -> int:
        return len(self._answers)
