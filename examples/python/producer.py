"""A producer in Python: sends file events for three tenants through
partitionq's SQL API, partitionq.send (docs/handlers.md), with psycopg 3
(Debian: apt-get install python3-psycopg). The tenant is the partition key;
each event has a dedup id, so running it twice sends nothing new (the
second run prints duplicates).

    DATABASE_URL=postgres://... python3 producer.py [queue]
"""
import json
import os
import sys

import psycopg

queue = sys.argv[1] if len(sys.argv) > 1 else "files"
with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
    for tenant in ("acme", "globex", "initech"):
        for n, type_ in enumerate(("FileCreated", "FileOverwritten", "FileDeleted")):
            # In this connection's transaction, committed when the block
            # ends: the events commit or roll back with the caller's writes.
            event_id, duplicate = conn.execute(
                "select * from partitionq.send(%s, %s, %s, %s, dedup_id => %s)",
                (queue, tenant, type_, json.dumps({"path": "/report.pdf", "n": n}), f"{tenant}-report-{n}"),
            ).fetchone()
            print(f"{tenant} {type_}: event {event_id}" + (" (a duplicate: sent before)" if duplicate else ""))
