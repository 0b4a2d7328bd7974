"""How often a follower polls while idle (:class:`PollSettings`; re-exported by
:mod:`sandbox_ledger.follow`).

Apart from the follow loop so that an adapter's ``follow_poll`` default does not load it: a
worker that only appends never follows (benchmarks/worker_cold_start.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from sandbox_ledger.errors import InvalidInputError

__all__ = ["DEFAULT_POLL", "PollSettings"]


@dataclass(frozen=True)
class PollSettings:
    """How often a follower asks its store while nothing is new: ``first`` seconds after the
    first empty poll, doubling up to ``longest``; right away again after a poll that found
    something. ``liveness_every``: a store that checks whether the session was deleted with
    a request of its own (DynamoDB) does so on every n-th empty poll."""

    first: float = 0.05
    longest: float = 0.5
    liveness_every: int = 4

    def __post_init__(self) -> None:
        if not (0 < self.first <= self.longest):
            raise InvalidInputError("poll", "need 0 < first <= longest (seconds)")
        if self.liveness_every < 1:
            raise InvalidInputError("poll", "liveness_every must be at least 1")

    def delay(self, idle: int) -> float:
        """The wait after ``idle`` empty polls in a row (1 for the first)."""
        return float(min(self.longest, self.first * 2 ** min(idle - 1, 30)))


DEFAULT_POLL = PollSettings()
