"""The ledger contract on one DynamoDB table: async and sync twins over shared operations."""

from sandbox_ledger.dynamodb.adapter import DynamoDBAdapter, SyncDynamoDBAdapter

__all__ = ["DynamoDBAdapter", "SyncDynamoDBAdapter"]
