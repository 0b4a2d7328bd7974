"""The AWS SDK machinery shared by the ledger's DynamoDB adapter (:mod:`sandbox_ledger.dynamodb`)
and the resource record store (:mod:`sandbox_ledger.resources`): no contract here, only how
SDK calls are made.

- :mod:`.steps`: operations as generators of SDK calls, and the sync and async runners;
- :mod:`.client`: one lazily created, reused client per adapter or store;
- :mod:`.tls`: one TLS context per CA bundle, shared by the async clients;
- :mod:`.attributes`: low-level attribute values and item sizes;
- :mod:`.batching`: BatchWriteItem / BatchGetItem that never drop unprocessed requests;
- :mod:`.paging`: queries followed to the end and index partitions merged newest first.
"""
