// The npm lumberjack-protocol client, unmodified, over TLS: given events, and the error it reports.
// Usage: node lumberjack_v1_events.js PORT CA_FILE MODE EVENTS_FILE
//   EVENTS_FILE holds a JSON list of events (objects of strings); the client sends them as "1D" frames.
//   MODE "send": sends every event, prints "acked N" once the last one is acknowledged, exits 0.
//   MODE "refused": sends every event but the last, waits for their acks, then sends the last one (which
//     the gateway refuses); prints "acked N disconnected REASON" when the client reports the closed
//     connection through its 'disconnect' event (REASON: the error's code, or "end"), and exits 0.
// The client takes strings and writes them as UTF-8: it cannot send other bytes.
const fs = require('fs');
const lumberjack = require('lumberjack-protocol');

const [port, caFile, mode, eventsFile] = [Number(process.argv[2]), process.argv[3], process.argv[4],
  process.argv[5]];
const events = JSON.parse(fs.readFileSync(eventsFile, 'utf-8'));
const client = lumberjack.client(
  {host: '127.0.0.1', port, ca: [fs.readFileSync(caFile, 'utf-8')], servername: '127.0.0.1'},
  {windowSize: events.length, reconnect: 60000});
const timer = setTimeout(() => { console.log('timeout'); process.exit(2); }, 30000);
let acked = 0;
let done = false;

function finish(line) {
  done = true;
  console.log(line);
  clearTimeout(timer);
  client.close();
  process.exit(0);
}

client.on('disconnect', (err) => {
  if (done) {
    return;  // our own close()
  }
  if (mode === 'refused' && acked === events.length - 1) {
    finish(`acked ${acked} disconnected ${err ? err.code || err.message : 'end'}`);
    return;
  }
  console.log(`unexpected disconnect after ${acked} acks: ${err}`);
  process.exit(1);
});
client.on('connect', () => {
  const good = mode === 'refused' ? events.slice(0, -1) : events;
  client._socket.on('ack', (seq) => {
    acked = seq;
    if (seq > good.length) {
      console.log(`the refused event was acked (${seq})`);
      process.exit(1);
    }
    if (seq === good.length) {
      if (mode === 'send') {
        finish(`acked ${seq}`);
      } else {
        client.writeDataFrame(events[events.length - 1]);
      }
    }
  });
  good.forEach((event) => client.writeDataFrame(event));
});
