// An HTTP handler in Node.js for `partitionq work --http`: each event is a
// POST in the CloudEvents binary mode (docs/cli.md, "The --http endpoint"):
// the payload is the body, the event's attributes are ce-* headers. A 2xx
// reply is done; a payload that is not JSON is a dead letter at once; a
// busy index asks for a retry in 5 s; any other error is a failure that
// pauses the key (the worker retries it with backoff).
//
//   node http-handler.js        # listens on 127.0.0.1:8080 (PORT to change)
//   partitionq work --queue files --group indexer --http http://127.0.0.1:8080/
import http from 'node:http';
import { appendFileSync } from 'node:fs';

class Busy extends Error {}

// The work: here, say what would be indexed. Throw a Busy to be retried in
// 5 s, any other error to be retried with the worker's backoff.
function index(ev, file) {
  if (!file.path) throw new Error('no path in the payload');
  if (file.path.startsWith('/locked/')) throw new Busy(`${file.path} is locked`);
  console.log(`slot ${ev.slot}: ${ev.key} ${ev.type} ${file.path} (event ${ev.id}, attempt ${ev.attempt})`);
}

// For the tests: RUN_LOG names a file that gets a line at each run's start and end.
function logRun(what, id) {
  if (process.env.RUN_LOG) appendFileSync(process.env.RUN_LOG, `${what} ${id} ${process.hrtime.bigint() + offset}\n`);
}
const offset = BigInt(Date.now()) * 1000000n - process.hrtime.bigint();

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const h = req.headers;
    const ev = { id: h['ce-id'], type: h['ce-type'], key: decodeURIComponent(h['ce-subject'] ?? ''),
      slot: h['ce-partitionqslot'], attempt: Number(h['ce-partitionqattempt']), fence: h['ce-partitionqfence'] };
    logRun('start', ev.id);
    let status = 204, outcome = 'done', headers = {}, text = '';
    try {
      let file;
      try {
        file = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        [status, outcome, headers, text] = [422, 'dead_letter', { 'Partitionq-Outcome': 'dead-letter' }, 'the payload is not JSON'];
      }
      if (file) index(ev, file);
    } catch (err) {
      [status, outcome, text] = [500, 'failed', err.message];
      if (err instanceof Busy) [status, headers] = [503, { 'Retry-After': '5' }];
    }
    logRun(`end ${outcome}`, ev.id);
    res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8', ...headers });
    res.end(text);
  });
});
server.listen(Number(process.env.PORT ?? 8080), '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${server.address().port}/`);
});
