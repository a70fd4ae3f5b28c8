"""A pipe handler in Python (standard library only) for partitionq work
--pipe: one process gets every event as a JSON line on standard input and
answers each with a JSON line on standard output (docs/cli.md, "The --pipe
process"). Events run in a pool of threads, several at once (each of
another key), and are answered in the order they finish; a cancel stops
one. Logs go to standard error: standard output is for replies.

    partitionq work --queue files --group indexer --pipe 'python3 pipe_handler.py'
"""
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor


class Busy(Exception):
    pass


def index(req, ev, file, cancelled):
    """The work: here, say what would be indexed (on standard error). Raise
    Busy to be retried in 5 s, any other exception to be retried with the
    worker's backoff. Long work should stop when cancelled is set."""
    if "path" not in file:
        raise ValueError("no path in the payload")
    if file["path"].startswith("/locked/"):
        raise Busy(file["path"] + " is locked")
    print(f"slot {req['slot']}: {req['key']} {ev['type']} {file['path']} (event {ev['id']}, attempt {ev['attempt']})", file=sys.stderr)


def log_run(what, event_id):
    """For the tests: RUN_LOG names a file that gets a line at each run's start and end."""
    if os.environ.get("RUN_LOG"):
        with open(os.environ["RUN_LOG"], "a") as f:
            f.write(f"{what} {event_id} {time.time_ns()}\n")


out = threading.Lock()
cancels = {}  # request number -> threading.Event


def reply(r):
    with out:
        sys.stdout.write(json.dumps(r) + "\n")
        sys.stdout.flush()


def handle(req, cancelled):
    ev = req["events"][0]  # one event per request
    log_run("start", ev["id"])
    r = {"req": req["req"], "outcome": "done"}
    try:
        index(req, ev, json.loads(ev["payload"]), cancelled)
    except json.JSONDecodeError:
        r = {"req": req["req"], "outcome": "dead_letter", "error": "the payload is not JSON"}
    except Busy as err:
        r = {"req": req["req"], "outcome": "failed", "error": str(err), "retry_after": 5}
    except Exception as err:
        r = {"req": req["req"], "outcome": "failed", "error": str(err)}
    log_run("end " + r["outcome"], ev["id"])
    cancels.pop(req["req"], None)
    reply(r)


with ThreadPoolExecutor(max_workers=16) as pool:
    for line in sys.stdin:  # until the worker stops: end of input
        msg = json.loads(line)
        if msg["op"] == "handle":
            cancels[msg["req"]] = threading.Event()
            pool.submit(handle, msg, cancels[msg["req"]])
        elif msg["op"] == "cancel" and msg["req"] in cancels:
            cancels[msg["req"]].set()
