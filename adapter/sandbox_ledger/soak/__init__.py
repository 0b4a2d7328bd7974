"""A fleet under faults: worker processes play sandboxes against one store while a
supervisor kills them at any instant and a proxy drops responses the server has acted on;
every operation goes into a history, and a checker holds the history and the final state to
the ledger's promises (docs/reliability.md).

- :mod:`.history`: the history, one JSON line per invocation and per completion, each line
  one ``write`` to a file opened for appending: a killed process loses at most its last.
- :mod:`.proxy`: a loopback TCP proxy that delays, resets, and drops a response after the
  server has processed the request (a lost acknowledgement).
- :mod:`.worker`: one worker process (``python -m sandbox_ledger.soak.worker``).
- :mod:`.importer`, :mod:`.exporter`: the fleet's importer and exporter processes.
- :mod:`.owner` and :mod:`.sweeper` (DynamoDB only): owners of resource records that
  heartbeat and let records die, and the sweeper on its schedule with the TTL stream
  reporter.
- :mod:`.servers`: the stores a run holds, and the faults dealt to them.
- :mod:`.checker`: the promises, checked on a history and a store; :mod:`.transfers`, those
  of imports and exports, and the final round trip of the store's export;
  :mod:`.check_resources`, those of the resource records.
- ``python -m sandbox_ledger.soak``: a run (``make soak``, ``make soak-short``).
"""
