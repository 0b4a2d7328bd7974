"""DynamoDB machinery shared by the ledger adapter (:mod:`sandbox_ledger.dynamodb`) and the
resource record store (:mod:`sandbox_ledger.resources`).

- :mod:`.steps`: operations as generators of SDK calls, and the sync and async runners;
- :mod:`.client`: one lazily created, reused client per adapter or store;
- :mod:`.tls`: one TLS context per CA bundle, shared by the async clients;
- :mod:`.attributes`: low-level attribute values and item sizes;
- :mod:`.batching`: BatchWriteItem / BatchGetItem that never drop unprocessed requests;
- :mod:`.paging`: queries followed to the end and index partitions merged newest first.
"""
