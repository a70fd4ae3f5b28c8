// Peer runner for cmd/pqbench: drives pg-boss or graphile-worker through
// one measured run and reports back to the Go side.
//
// Usage: node run.mjs CONFIG.json
//
// The Go side writes the config (system, database, workload file, log file,
// concurrency, ...) and talks to this process over its standard streams:
//
//   stdout  one JSON object a line: {"msg":"ready"}, {"msg":"enqueued",...},
//           {"msg":"drained",...}, {"msg":"done"}; {"msg":"error",...} on failure
//   stdin   a line "go" releases each phase (after the Go side has taken its
//           database statistics snapshot)
//
// The handling log (one line per handler call, in the order the calls ended:
// key, seq, ok (1/0), latency in microseconds) goes to the log file, which
// the Go side reads into the shared order checker.
import fs from 'node:fs'
import readline from 'node:readline'
import { performance } from 'node:perf_hooks'

const cfg = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'))

const say = (obj) => process.stdout.write(JSON.stringify(obj) + '\n')
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

const stdinLines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]()
async function waitGo () {
  const { value, done } = await stdinLines.next()
  if (done || value.trim() !== 'go') throw new Error(`expected "go" on stdin, got ${done ? 'EOF' : JSON.stringify(value)}`)
}

// ------------------------------------------------------------- workload

// Each line of the workload file: [key, seq, fail (0/1), payload JSON text].
const events = fs.readFileSync(cfg.workload, 'utf8').split('\n').filter(Boolean).map((line) => {
  const [key, seq, fail, payload] = JSON.parse(line)
  return { key, seq, fail: fail === 1, data: JSON.parse(payload) }
})
const total = events.length
const keyIndex = new Map()
const bySeq = [] // key index -> seq -> event index
events.forEach((e, i) => {
  let k = keyIndex.get(e.key)
  if (k === undefined) {
    k = keyIndex.size
    keyIndex.set(e.key, k)
    bySeq.push([])
  }
  e.k = k
  bySeq[k][e.seq] = i
})

// ------------------------------------------------------------- handler

const logLines = []
const doneFlags = new Uint8Array(total)
const failedOnce = new Uint8Array(total)
const inflight = new Int32Array(keyIndex.size)
const sentAt = new Float64Array(total) // performance.now() at send (latency mode)
let handled = 0
let overlaps = 0
let lastDoneAt = 0
let sleepSum = 0
let sleepCount = 0
let resolveDrained
const drained = new Promise((resolve) => { resolveDrained = resolve })

// handle runs the benchmark's handler for the job carrying data: it waits
// handlerMs, fails the first attempt of the events marked to fail once, and
// logs the call.
async function handle (data) {
  const k = keyIndex.get(data.tenant)
  const i = bySeq[k][data.seq]
  const entered = performance.now()
  if (++inflight[k] > 1) overlaps++
  try {
    if (cfg.handlerMs > 0) {
      const t = performance.now()
      await sleep(cfg.handlerMs)
      sleepSum += performance.now() - t
      sleepCount++
    }
    const latUs = sentAt[i] > 0 ? Math.round((entered - sentAt[i]) * 1000) : 0
    if (events[i].fail && !failedOnce[i]) {
      failedOnce[i] = 1
      logLines.push(`${data.tenant}\t${data.seq}\t0\t${latUs}`)
      throw new Error('bench: fails once')
    }
    logLines.push(`${data.tenant}\t${data.seq}\t1\t${latUs}`)
    if (!doneFlags[i]) {
      doneFlags[i] = 1
      if (++handled === total) {
        lastDoneAt = performance.now()
        resolveDrained()
      }
    }
  } finally {
    inflight[k]--
  }
}

// ------------------------------------------------------------- producers

// sendOneByOne sends every event with its own call, sendConcurrency calls
// in flight, the events of one key always from the same loop in order (so a
// key's events are created in order).
async function sendOneByOne (send, list) {
  const loops = Math.max(1, cfg.sendConcurrency || 1)
  const parts = Array.from({ length: loops }, () => [])
  for (const e of list) parts[e.k % loops].push(e)
  await Promise.all(parts.map(async (part) => {
    for (const e of part) await send(e)
  }))
}

async function sendBulk (sendMany, list) {
  const chunk = cfg.bulkChunk || 1000
  for (let i = 0; i < list.length; i += chunk) await sendMany(list.slice(i, i + chunk))
}

// sendPaced sends the events at cfg.rate a second, in ticks of 10 ms,
// recording each event's send time for the latency measurement. Calls of
// different keys overlap; those of one key are chained, so a key's events
// are created in order.
async function sendPaced (send) {
  const start = performance.now()
  const perTick = cfg.rate / 100
  let sent = 0
  const tails = new Map() // key index -> promise of its last send
  for (let tick = 1; sent < total; tick++) {
    const due = Math.min(total, Math.round(tick * perTick))
    while (sent < due) {
      const e = events[sent]
      const i = sent++
      sentAt[i] = performance.now()
      const prev = tails.get(e.k) || Promise.resolve()
      tails.set(e.k, prev.then(() => send(e)))
    }
    const wait = start + tick * 10 - performance.now()
    if (wait > 0) await sleep(wait)
  }
  await Promise.all(tails.values())
}

// ------------------------------------------------------------- systems

async function pgBoss () {
  const { PgBoss } = await import('pg-boss')
  const boss = new PgBoss({
    connectionString: cfg.db,
    max: cfg.poolSize || 10,
    useListenNotify: !!cfg.notify,
    schedule: false
  })
  boss.on('error', (err) => console.error('pg-boss error:', err.message))
  await boss.start()
  const queue = cfg.queue
  await boss.createQueue(queue, {
    policy: 'key_strict_fifo',
    retryLimit: 5,
    retryDelay: cfg.retryDelayS ?? 1,
    notify: !!cfg.notify
  })
  const send = (e) => boss.send(queue, e.data, { singletonKey: e.key, ...(cfg.group ? { group: { id: e.key } } : {}) })
  const sendMany = (list) => boss.insert(queue, list.map((e) => ({ data: e.data, singletonKey: e.key, ...(cfg.group ? { group: { id: e.key } } : {}) })))
  const batchSize = cfg.batchSize || 1
  const workOptions = {
    localConcurrency: cfg.workers || 1,
    batchSize,
    pollingIntervalSeconds: cfg.pollS || 0.5,
    ...(batchSize > 1 ? { burstWhenBatchFull: true, perJobResults: true } : {}),
    ...(cfg.burstWhenReadyExceeds ? { burstWhenReadyExceeds: cfg.burstWhenReadyExceeds } : {}),
    ...(cfg.groupConcurrency ? { groupConcurrency: cfg.groupConcurrency } : {}),
    ...(cfg.notify ? { notifyPollingIntervalSeconds: cfg.notifyPollS || cfg.pollS || 0.5 } : {})
  }
  const handler = batchSize > 1
    ? async (jobs) => Promise.all(jobs.map((job) => handle(job.data).then(
      () => ({ id: job.id, status: 'completed' }),
      (err) => ({ id: job.id, status: 'failed', output: { message: err.message } }))))
    : async ([job]) => handle(job.data)
  return {
    send,
    sendMany,
    start: () => boss.work(queue, workOptions, handler),
    stop: () => boss.stop({ graceful: true, wait: true, timeout: 10000 })
  }
}

async function graphileWorker () {
  const { run, makeWorkerUtils, Logger } = await import('graphile-worker')
  // Only errors: the worker logs every failed attempt, which the bench makes on purpose.
  const logger = new Logger(() => (level, message) => { if (level === 'error') console.error('graphile-worker:', message) })
  const utils = await makeWorkerUtils({ connectionString: cfg.db, logger })
  await utils.migrate()
  const spec = (e) => ({ queueName: e.key, maxAttempts: 5 })
  const send = (e) => utils.addJob('bench', e.data, spec(e))
  const sendMany = (list) => utils.addJobs(list.map((e) => ({ identifier: 'bench', payload: e.data, ...spec(e) })))
  const concurrency = cfg.workers || 1
  let runner
  return {
    send,
    sendMany,
    start: async () => {
      runner = await run({
        connectionString: cfg.db,
        concurrency,
        maxPoolSize: Math.max(10, concurrency + 2),
        noHandleSignals: true,
        logger,
        taskList: { bench: async (payload) => handle(payload) },
        preset: {
          worker: {
            ...(cfg.localQueue ? { localQueue: { size: concurrency + 1 } } : {}),
            ...(cfg.batchDelayMs != null ? { completeJobBatchDelay: cfg.batchDelayMs, failJobBatchDelay: cfg.batchDelayMs } : {})
          }
        }
      })
    },
    stop: async () => {
      if (runner) await runner.stop()
      await utils.release()
    }
  }
}

// ------------------------------------------------------------- main

function cpuUs () {
  const u = process.cpuUsage()
  return u.user + u.system
}

async function main () {
  const sys = cfg.system === 'pgboss' ? await pgBoss() : await graphileWorker()
  say({ msg: 'ready' })

  if (cfg.mode === 'latency') {
    await waitGo()
    const cpu0 = cpuUs()
    await sys.start()
    const t0 = performance.now()
    await sendPaced(sys.send)
    await Promise.race([drained, sleep(cfg.timeoutS * 1000)])
    say({ msg: 'drained', ms: performance.now() - t0, handled, cpu_us: cpuUs() - cpu0, overlaps })
  } else {
    await waitGo()
    let cpu0 = cpuUs()
    let t0 = performance.now()
    if (cfg.produce === 'bulk') {
      await sendBulk(sys.sendMany, events)
    } else {
      await sendOneByOne(sys.send, events)
    }
    say({ msg: 'enqueued', ms: performance.now() - t0, cpu_us: cpuUs() - cpu0 })
    await waitGo()
    cpu0 = cpuUs()
    t0 = performance.now()
    await sys.start()
    await Promise.race([drained, sleep(cfg.timeoutS * 1000)])
    const end = handled === total ? lastDoneAt : performance.now()
    say({
      msg: 'drained',
      ms: end - t0,
      handled,
      cpu_us: cpuUs() - cpu0,
      overlaps,
      sleep_mean_ms: sleepCount ? sleepSum / sleepCount : 0
    })
  }
  fs.writeFileSync(cfg.log, logLines.join('\n') + (logLines.length ? '\n' : ''))
  await sys.stop()
  say({ msg: 'done' })
  process.exit(0)
}

main().catch((err) => {
  say({ msg: 'error', error: String(err && err.stack ? err.stack : err) })
  process.exit(1)
})
