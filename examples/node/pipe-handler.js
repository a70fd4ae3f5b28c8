// A pipe handler in Node.js for `partitionq work --pipe`: one process gets
// every event as a JSON line on standard input and answers each with a
// JSON line on standard output, in any order (docs/cli.md, "The --pipe
// process"). Logs go to standard error: standard output is for replies.
//
//   partitionq work --queue files --group indexer --pipe 'node pipe-handler.js'
import readline from 'node:readline';
import { appendFileSync } from 'node:fs';

class Busy extends Error {}

// The work: here, say what would be indexed (on standard error). Throw a
// Busy to be retried in 5 s, any other error to be retried with the
// worker's backoff.
async function index(req, ev, file) {
  if (!file.path) throw new Error('no path in the payload');
  if (file.path.startsWith('/locked/')) throw new Busy(`${file.path} is locked`);
  console.error(`slot ${req.slot}: ${req.key} ${ev.type} ${file.path} (event ${ev.id}, attempt ${ev.attempt})`);
}

// For the tests: RUN_LOG names a file that gets a line at each run's start and end.
const offset = BigInt(Date.now()) * 1000000n - process.hrtime.bigint();
function logRun(what, id) {
  if (process.env.RUN_LOG) appendFileSync(process.env.RUN_LOG, `${what} ${id} ${process.hrtime.bigint() + offset}\n`);
}

const reply = (r) => process.stdout.write(JSON.stringify(r) + '\n');

async function handle(req) {
  const ev = req.events[0]; // one event per request
  logRun('start', ev.id);
  let r = { req: req.req, outcome: 'done' };
  let file;
  try {
    file = JSON.parse(ev.payload);
  } catch {
    r = { req: req.req, outcome: 'dead_letter', error: 'the payload is not JSON' };
  }
  if (file) {
    try {
      await index(req, ev, file);
    } catch (err) {
      r = { req: req.req, outcome: 'failed', error: err.message };
      if (err instanceof Busy) r.retry_after = 5;
    }
  }
  logRun(`end ${r.outcome}`, ev.id);
  reply(r);
}

const lines = readline.createInterface({ input: process.stdin });
lines.on('line', (line) => {
  const msg = JSON.parse(line);
  // A cancel (the event timed out, or the worker lost its slot) of an event
  // this handler finishes at once anyway: nothing to stop.
  if (msg.op === 'handle') handle(msg);
});
lines.on('close', () => process.exit(0)); // the worker stops: end of input
