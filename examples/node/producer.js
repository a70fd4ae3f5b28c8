// A producer in Node.js: sends file events for three tenants through
// partitionq's SQL API, partitionq.send (docs/handlers.md), with the `pg`
// driver. The tenant is the partition key; each event has a dedup id, so
// running it twice sends nothing new (the second run prints duplicates).
//
//   DATABASE_URL=postgres://... node producer.js [queue]
import pg from 'pg';

const queue = process.argv[2] ?? 'files';
const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
await client.connect();
try {
  for (const tenant of ['acme', 'globex', 'initech']) {
    for (const [n, type] of ['FileCreated', 'FileOverwritten', 'FileDeleted'].entries()) {
      // One statement, in its own transaction here; inside a transaction of
      // yours, the event commits or rolls back with your other writes.
      const { rows } = await client.query(
        'select * from partitionq.send($1, $2, $3, $4, dedup_id => $5)',
        [queue, tenant, type, JSON.stringify({ path: '/report.pdf', n }), `${tenant}-report-${n}`],
      );
      const { event_id: id, duplicate } = rows[0];
      console.log(`${tenant} ${type}: event ${id}${duplicate ? ' (a duplicate: sent before)' : ''}`);
    }
  }
} finally {
  await client.end();
}
