"""Stream records are bounded, and a stream turned off stops its records.

moto keeps every stream record of a table forever. Here each table's stream keeps the newest
``stream_records`` records of the server's settings (``None`` keeps all, ``0`` none); sequence
numbers keep increasing, ``TRIM_HORIZON`` starts at the oldest record kept, and reading before
it answers ``TrimmedDataAccessException`` as DynamoDB does for records past their 24 hours.

It fixes behaviour: after ``UpdateTable`` turns a table's stream off, stock moto fails every
write to the table with ``KeyError``; here the stream stops taking records. And stock moto
refuses to turn it on again (``Cannot enable stream``: it checks that the table ever had a
stream); here, as on DynamoDB, a table whose stream is off gets a new one (a new label and
ARN, no record), and a table whose stream is on refuses another, one whose stream is off
refuses turning it off (ValidationException both, as DynamoDB answers).
"""

from __future__ import annotations

from typing import Any

from . import Adjustment, active

NAME = "streams"
KNOWN_SOURCES = {
    "StreamShard.add": frozenset({"41a37c014ddf5669"}),
    "StreamShard.get": frozenset({"fafe06aef1305961"}),
    "DynamoDBBackend.update_table_streams": frozenset({"085b3d6d3e28b59a"}),
}


def _sources() -> dict[str, Any]:
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import StreamShard

    return {
        "StreamShard.add": StreamShard.add,
        "StreamShard.get": StreamShard.get,
        "DynamoDBBackend.update_table_streams": DynamoDBBackend.update_table_streams,
    }


def _install(stock: dict[str, Any]) -> None:
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import StreamShard

    stock_add, stock_get = stock["StreamShard.add"], stock["StreamShard.get"]
    stock_update = stock["DynamoDBBackend.update_table_streams"]

    def update_table_streams(self: Any, table: Any, specification: dict[str, Any]) -> None:
        if active(NAME) is None:
            return stock_update(self, table, specification)  # type: ignore[no-any-return]
        from moto.dynamodb.exceptions import MockValidationException

        turning_on = specification.get("StreamEnabled") or specification.get("StreamViewType")
        enabled = (table.stream_specification or {}).get("StreamEnabled")
        # UpdateTable, StreamSpecification: "You receive a ValidationException if you try to
        # enable a stream on a table that already has a stream, or if you try to disable a
        # stream on a table that doesn't have a stream."
        if turning_on and enabled:
            raise MockValidationException(
                f"Table already has an enabled stream: TableName: {table.name}"
            )
        if not turning_on and not enabled:
            raise MockValidationException(
                f"Table has no enabled stream to disable: TableName: {table.name}"
            )
        table.set_stream_specification(specification)
        return None

    def add(self: Any, old: Any, new: Any) -> None:
        settings = active(NAME)
        if settings is None:
            return stock_add(self, old, new)  # type: ignore[no-any-return]
        if not (self.table.stream_specification or {}).get("StreamEnabled"):
            return None  # the stream was turned off after the table was created
        stock_add(self, old, new)
        limit = settings.stream_records
        if limit is not None and len(self.items) > limit:
            dropped = len(self.items) - limit
            del self.items[:dropped]
            # Sequence numbers are the position in the list plus this offset: keep them.
            self.starting_sequence_number += dropped
        return None

    def get(self: Any, start: int, quantity: int) -> list[dict[str, Any]]:
        settings = active(NAME)
        if settings is not None and start < self.starting_sequence_number:
            from moto.core.exceptions import JsonRESTError

            raise JsonRESTError(
                "TrimmedDataAccessException",
                f"sequence number {start} is older than the oldest record kept "
                f"({self.starting_sequence_number}): this local stream keeps "
                f"{settings.stream_records} records",
            )
        return stock_get(self, start, quantity)  # type: ignore[no-any-return]

    StreamShard.add = add  # type: ignore[method-assign]
    StreamShard.get = get  # type: ignore[method-assign]
    DynamoDBBackend.update_table_streams = update_table_streams  # type: ignore[method-assign,assignment]


ADJUSTMENT = Adjustment(
    name=NAME,
    gain="a table's stream keeps its newest records",
    behaviour=(
        "every stream record is kept (memory grows with every write), and once a table's "
        "stream is turned off every write to it fails with KeyError and the stream cannot "
        "be turned on again"
    ),
    sources=_sources,
    known=KNOWN_SOURCES,
    install=_install,
)
