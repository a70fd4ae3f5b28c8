// The benchmark's HTTP handler (BenchmarkWorkHandlers): Node.js's http
// module, answering 204 to every event, after DELAY_MS milliseconds when
// set. It prints its port on standard output.
const http = require('node:http');

const delay = Number(process.env.DELAY_MS || 0);
const server = http.createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    if (delay > 0) {
      setTimeout(() => { res.writeHead(204); res.end(); }, delay);
    } else {
      res.writeHead(204);
      res.end();
    }
  });
});
server.keepAliveTimeout = 60000;
server.listen(0, '127.0.0.1', () => console.log(server.address().port));
