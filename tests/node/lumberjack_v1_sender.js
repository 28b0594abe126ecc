// A logstash-forwarder style Lumberjack v1 sender: the npm lumberjack-protocol client, unmodified.
// It announces its window once ("1W") and keeps up to ten windows of "1D" frames in flight.
// Usage: node lumberjack_v1_sender.js PORT CA_FILE COUNT WINDOW; prints "acked N dropped D" and exits 0
// once event COUNT is acknowledged.
const fs = require('fs');
const lumberjack = require('lumberjack-protocol');

const [port, caFile, count, window] = [Number(process.argv[2]), process.argv[3], Number(process.argv[4]),
  Number(process.argv[5])];
const client = lumberjack.client(
  {host: '127.0.0.1', port, ca: [fs.readFileSync(caFile, 'utf-8')], servername: '127.0.0.1'},
  {windowSize: window, maxQueueSize: count, reconnect: 100000});
let sent = 0;
let dropped = 0;
let maxInFlight = 0;
const timer = setTimeout(() => { console.log(`timeout: sent ${sent}`); process.exit(2); }, 60000);
client.on('dropped', (n) => { dropped += n; });
client.on('connect', () => {
  const socket = client._socket;
  const pump = () => {  // as an application logging as fast as the client lets it, without drops
    while (sent < count && socket.getLastSequenceNumber() - socket.lastAck < window * 10) {
      sent += 1;
      client.writeDataFrame({line: `event ${sent}`, n: String(sent)});
      maxInFlight = Math.max(maxInFlight, socket.getLastSequenceNumber() - socket.lastAck);
    }
  };
  socket.on('ack', (seq) => {
    if (seq >= count) {
      console.log(`acked ${seq} dropped ${dropped} max_in_flight ${maxInFlight}`);
      clearTimeout(timer);
      client.close();
      process.exit(0);
    }
    pump();
  });
  pump();
});
