"""A small least-recently-used map, for the adjustments' caches of moto's pure work."""

from __future__ import annotations

import collections
from typing import Any


class Bounded:
    """A dict of at most ``size`` entries that forgets its least recently used one."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: collections.OrderedDict[Any, Any] = collections.OrderedDict()

    def get(self, key: Any) -> Any:
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: Any, value: Any) -> Any:
        """Keep ``value``; return the entry forgotten to make room for it, or None."""
        self._entries[key] = value
        self._entries.move_to_end(key)
        if len(self._entries) > self._size:
            return self._entries.popitem(last=False)
        return None

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
