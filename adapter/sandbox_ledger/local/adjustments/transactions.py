"""Transactions roll back only what they touch.

moto's ``transact_write_items`` deep-copies every table a transaction names (items and stream
records) before running it, so each transaction costs time and memory proportional to
everything ever written to the table (1.0 GB of process memory after 300 appends, 8.2 GB
after 900). This adjustment runs the same algorithm (moto's own checks, writes and error
shapes: a copy of moto 5.2.5's code, Apache-2.0) with a rollback that snapshots only the items
the transaction names and the length of their tables' streams, and restores those on
cancellation. That is only sound because nothing else runs while a transaction does, which
the embedded server's one request at a time guarantees.

It also fixes behaviour: stock moto keeps the writes of the actions before one that holds two
operations (``TransactWriteSingleOpException``), where DynamoDB refuses the request whole.
"""

from __future__ import annotations

import copy
from typing import Any

from . import Adjustment, active

NAME = "transactions"
KNOWN_SOURCES = {
    "DynamoDBBackend.transact_write_items": frozenset({"e56fbd349807d1f8"}),
    # The items' layout that the rollback restores (table.items[hash][range]).
    "Table.get_item": frozenset({"0bd3c78611e13d14"}),
}


def _sources() -> dict[str, Any]:
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    return {
        "DynamoDBBackend.transact_write_items": DynamoDBBackend.transact_write_items,
        "Table.get_item": Table.get_item,
    }


def _install(stock: dict[str, Any]) -> None:
    from moto.dynamodb.models import DynamoDBBackend

    stock_transact = stock["DynamoDBBackend.transact_write_items"]

    def hook(self: Any, transact_items: list[dict[str, Any]]) -> None:
        if active(NAME) is None:
            return stock_transact(self, transact_items)  # type: ignore[no-any-return]
        return transact_write_items(self, transact_items)

    DynamoDBBackend.transact_write_items = hook  # type: ignore[method-assign]


ADJUSTMENT = Adjustment(
    name=NAME,
    gain="a transaction's rollback copies the items it names, not the tables",
    behaviour=(
        "a transaction refused for two operations in one action keeps the writes of the "
        "actions before it; and every transaction deep-copies the tables it names (time and "
        "memory grow with the table)"
    ),
    sources=_sources,
    known=KNOWN_SOURCES,
    install=_install,
)


class _ItemUndo:
    """What a transaction may change, captured before it runs: a copy of every item its
    actions name (or that there was none) and where each touched table's stream ended."""

    def __init__(self, backend: Any, transact_items: list[dict[str, Any]]) -> None:
        from moto.dynamodb.models.dynamo_type import DynamoType

        self._items: list[tuple[Any, Any, Any, bool, Any]] = []
        self._streams: list[tuple[Any, Any, int]] = []
        seen_tables: set[int] = set()
        for action in transact_items:
            for op_type, op in action.items():
                table = backend.tables.get(op.get("TableName")) if isinstance(op, dict) else None
                if table is None:
                    continue  # the action fails before writing anything
                key = op.get("Item") if op_type == "Put" else op.get("Key")
                try:
                    hash_key = DynamoType(key[table.hash_key_attr])
                    range_key = (
                        DynamoType(key[table.range_key_attr])
                        if table.range_key_attr is not None
                        else None
                    )
                except (KeyError, TypeError):
                    continue  # no usable key: moto refuses the action before writing
                partition = table.items.get(hash_key)
                before = partition if range_key is None else (partition or {}).get(range_key)
                self._items.append(
                    (table, hash_key, range_key, partition is not None, copy.deepcopy(before))
                )
                if id(table) not in seen_tables:
                    seen_tables.add(id(table))
                    shard = table.stream_shard
                    if shard is not None:
                        self._streams.append(
                            (table, shard, shard.starting_sequence_number + len(shard.items))
                        )

    def restore(self) -> None:
        """Put every captured item back as it was, newest capture undone first."""
        for table, hash_key, range_key, had_partition, before in reversed(self._items):
            if range_key is None:
                if before is None:
                    table.items.pop(hash_key, None)
                else:
                    table.items[hash_key] = before
                continue
            partition = table.items.get(hash_key)
            if before is not None:
                table.items[hash_key][range_key] = before
            elif partition is not None:
                partition.pop(range_key, None)
                if not partition and not had_partition:
                    del table.items[hash_key]
        for table, shard, next_sequence in self._streams:
            if table.stream_shard is not shard:
                continue
            keep = next_sequence - shard.starting_sequence_number
            if keep >= 0:
                del shard.items[keep:]
            else:  # the bound evicted records older than the transaction: drop its own
                shard.items.clear()
                shard.starting_sequence_number = next_sequence


def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
    """moto's ``DynamoDBBackend.transact_write_items`` (moto 5.2.5, Apache-2.0) with its
    whole-table deep copy replaced by :class:`_ItemUndo`; checks, writes and errors unchanged."""
    from moto.dynamodb.comparisons import get_filter_expression
    from moto.dynamodb.exceptions import (
        ConditionalCheckFailed,
        MockValidationException,
        MultipleTransactionsException,
        TooManyTransactionsException,
        TransactionCanceledException,
        TransactWriteSingleOpException,
    )

    if len(transact_items) > 100:
        raise TooManyTransactionsException()
    undo = _ItemUndo(self, transact_items)
    target_items: set[tuple[str, str]] = set()

    def check_unicity(table_name: str, key: dict[str, Any]) -> None:
        item = (str(table_name), str(dict(sorted(key.items()))))
        if item in target_items:
            raise MultipleTransactionsException()
        target_items.add(item)

    errors: list[tuple[str, str, dict[str, Any] | None] | tuple[None, None, None]] = []
    try:
        for item in transact_items:
            original_item: dict[str, Any] | None = None
            if len(list(item.keys())) > 1:
                raise TransactWriteSingleOpException
            try:
                op_type, op = next(iter(item.items()))
                if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
                    raise ValueError("Unsupported transaction operation")
                table_name = op["TableName"]
                condition_expression = op.get("ConditionExpression")
                expression_attribute_names = op.get("ExpressionAttributeNames")
                expression_attribute_values = op.get("ExpressionAttributeValues")
                return_values_on_condition_check_failure = op.get(
                    "ReturnValuesOnConditionCheckFailure"
                )
                if op_type == "Put":
                    attrs = op["Item"]
                    table = self.get_table(table_name)
                    key = {table.hash_key_attr: attrs[table.hash_key_attr]}
                    if table.range_key_attr is not None:
                        key[table.range_key_attr] = attrs[table.range_key_attr]
                else:
                    key = op["Key"]
                check_unicity(table_name, key)
                current = self.get_item(table_name, key)
                if condition_expression is not None:
                    condition_op = get_filter_expression(
                        condition_expression,
                        expression_attribute_names,
                        expression_attribute_values,
                    )
                    if not condition_op.expr(current):
                        if return_values_on_condition_check_failure == "ALL_OLD" and current:
                            original_item = current.to_json()["Attributes"]
                        raise ConditionalCheckFailed(item=original_item)
                if op_type == "Put":
                    self.put_item(
                        table_name,
                        op["Item"],
                        condition_expression=condition_expression,
                        expression_attribute_names=expression_attribute_names,
                        expression_attribute_values=expression_attribute_values,
                    )
                elif op_type == "Delete":
                    self.delete_item(
                        table_name,
                        key,
                        condition_expression=condition_expression,
                        expression_attribute_names=expression_attribute_names,
                        expression_attribute_values=expression_attribute_values,
                    )
                elif op_type == "Update":
                    self.update_item(
                        table_name,
                        key,
                        update_expression=op["UpdateExpression"],
                        condition_expression=condition_expression,
                        expression_attribute_names=expression_attribute_names,
                        expression_attribute_values=expression_attribute_values,
                    )
                errors.append((None, None, None))
            except (MultipleTransactionsException, MockValidationException):
                raise
            except ConditionalCheckFailed as e:
                errors.append(("ConditionalCheckFailed", str(e.message), original_item))
            except Exception as e:
                errors.append((type(e).__name__, str(e), original_item))
        if any(code is not None for code, _, _ in errors):
            raise TransactionCanceledException(errors)
    except BaseException:
        # Unlike stock moto, this also undoes the actions before a second operation in one
        # action (TransactWriteSingleOpException): DynamoDB refuses such a request whole.
        undo.restore()
        raise
