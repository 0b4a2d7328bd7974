"""A stream record's size is measured when it is first read, not as it is written.

moto gives every stream record its ``SizeBytes`` by serializing the record's ``dynamodb``
part to JSON as the record is created: a JSON dump of the item's keys and images on every
write of a table with a stream (the ledger's tables have one: the change feed), about a
twelfth of the server's time on an import's transaction of 100 puts, though most records
are never read (a stream keeps its newest ones; ``follow`` reads a few). Here a record is
built as moto builds it (the same id, time, keys and images, taken as it is written) less
that dump, which its first ``to_json()`` makes, over the same dict as moto's, before
returning it: the same ``SizeBytes`` and the same record, measured once.
"""

from __future__ import annotations

from typing import Any

from . import Adjustment, active

NAME = "stream_sizes"
KNOWN_SOURCES = {"StreamRecord": frozenset({"0175f6cb1b360de2"})}


def _sources() -> dict[str, Any]:
    from moto.dynamodb.models.table import StreamRecord

    return {"StreamRecord": StreamRecord}


def _install(stock: dict[str, Any]) -> None:
    from moto.dynamodb.models import table

    module: Any = table  # its names as moto's code finds them (a test's patches included)

    record_class: Any = stock["StreamRecord"]
    stock_init, stock_to_json = record_class.__init__, record_class.to_json

    def __init__(
        self: Any,
        table: Any,
        stream_type: str,
        event_name: str,
        old: Any | None,
        new: Any | None,
        seq: int,
    ) -> None:
        if active(NAME) is None:
            stock_init(self, table, stream_type, event_name, old, new, seq)
            return
        # moto's StreamRecord.__init__, in its order, up to its size.
        old_a = old.to_json()["Attributes"] if old is not None else {}
        new_a = new.to_json()["Attributes"] if new is not None else {}
        rec: Any = old if old is not None else new
        keys = {table.hash_key_attr: rec.hash_key.to_json()}
        if table.range_key_attr is not None and rec is not None:
            keys[table.range_key_attr] = rec.range_key.to_json()
        self.record = {
            "eventID": module.mock_random.uuid4().hex,
            "eventName": event_name,
            "eventSource": "aws:dynamodb",
            "eventVersion": "1.0",
            "awsRegion": "us-east-1",
            "dynamodb": {
                "StreamViewType": stream_type,
                "ApproximateCreationDateTime": module.utcnow(),
                "SequenceNumber": str(seq),
                "SizeBytes": 1,
                "Keys": keys,
            },
        }
        if stream_type in ("NEW_IMAGE", "NEW_AND_OLD_IMAGES") and new is not None:
            self.record["dynamodb"]["NewImage"] = new_a
        if stream_type in ("OLD_IMAGE", "NEW_AND_OLD_IMAGES") and old is not None:
            self.record["dynamodb"]["OldImage"] = old_a
        self._size_unmeasured = True

    def to_json(self: Any) -> dict[str, Any]:
        if self.__dict__.pop("_size_unmeasured", False):
            part = self.record["dynamodb"]
            part["SizeBytes"] = len(module.dynamo_json_dump(part))
        result: dict[str, Any] = stock_to_json(self)
        return result

    record_class.__init__ = __init__
    record_class.to_json = to_json


ADJUSTMENT = Adjustment(
    name=NAME,
    gain="a stream record's size is measured when it is first read, not on every write",
    behaviour=None,
    sources=_sources,
    known=KNOWN_SOURCES,
    install=_install,
)
