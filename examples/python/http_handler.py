"""An HTTP handler in Python (standard library only) for partitionq work
--http: each event is a POST in the CloudEvents binary mode (docs/cli.md,
"The --http endpoint"): the payload is the body, the event's attributes
are ce-* headers. A 2xx reply is done; a payload that is not JSON is a dead
letter at once; a Busy asks for a retry in 5 s; any other error is a
failure that pauses the key (the worker retries it with backoff).

    python3 http_handler.py     # listens on 127.0.0.1:8080 (PORT to change)
    partitionq work --queue files --group indexer --http http://127.0.0.1:8080/
"""
import json
import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote


class Busy(Exception):
    pass


def index(ev, file):
    """The work: here, say what would be indexed. Raise Busy to be retried
    in 5 s, any other exception to be retried with the worker's backoff."""
    if "path" not in file:
        raise ValueError("no path in the payload")
    if file["path"].startswith("/locked/"):
        raise Busy(file["path"] + " is locked")
    print(f"slot {ev['slot']}: {ev['key']} {ev['type']} {file['path']} (event {ev['id']}, attempt {ev['attempt']})", flush=True)


def log_run(what, event_id):
    """For the tests: RUN_LOG names a file that gets a line at each run's start and end."""
    if os.environ.get("RUN_LOG"):
        with open(os.environ["RUN_LOG"], "a") as f:
            f.write(f"{what} {event_id} {time.time_ns()}\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep the worker's connections open between events

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        h = self.headers
        ev = {"id": h["ce-id"], "type": h["ce-type"], "key": unquote(h.get("ce-subject", "")),
              "slot": h["ce-partitionqslot"], "attempt": int(h["ce-partitionqattempt"]), "fence": h["ce-partitionqfence"]}
        log_run("start", ev["id"])
        status, outcome, headers, text = 204, "done", {}, ""
        try:
            index(ev, json.loads(body))
        except json.JSONDecodeError:
            status, outcome, headers, text = 422, "dead_letter", {"Partitionq-Outcome": "dead-letter"}, "the payload is not JSON"
        except Busy as err:
            status, outcome, headers, text = 503, "failed", {"Retry-After": "5"}, str(err)
        except Exception as err:
            status, outcome, text = 500, "failed", str(err)
        log_run("end " + outcome, ev["id"])
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        if status == 204:  # no body, and so no Content-Length
            self.end_headers()
            return
        data = text.encode()
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):  # no access log
        pass


server = ThreadingHTTPServer(("127.0.0.1", int(os.environ.get("PORT", 8080))), Handler)
print(f"listening on http://127.0.0.1:{server.server_address[1]}/", flush=True)
server.serve_forever()
