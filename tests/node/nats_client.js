// The npm nats client (nats.js), unmodified, through the NATS gateway.
// Usage: node nats_client.js PORT. Checks wildcards, binary payloads, headers, request/reply,
// no-responders and a payload over max_payload (refused by nats.js itself, and by the gateway
// when a raw socket sends it anyway); prints "ok" and exits 0, or throws.
const assert = require('assert');
const net = require('net');
const {connect, headers, ErrorCode} = require('nats');

// CONNECT, then PUB with a payload of `size` bytes and PING on a raw socket: every byte the server
// sends after its INFO line, until PONG or the server ends the connection.
function rawPublish(port, size) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    let data = Buffer.alloc(0);
    let sent = false;
    sock.setTimeout(10000, () => { sock.destroy(); reject(new Error(`no end of the exchange: ${data}`)); });
    sock.on('data', (chunk) => {
      data = Buffer.concat([data, chunk]);
      if (!sent && data.includes('\r\n')) {
        sent = true;
        data = data.subarray(data.indexOf('\r\n') + 2);
        sock.write(Buffer.concat([Buffer.from(`CONNECT {"verbose":false}\r\nPUB node.big ${size}\r\n`),
          Buffer.alloc(size, 120), Buffer.from('\r\nPING\r\n')]));
      }
      if (sent && data.toString().endsWith('PONG\r\n')) sock.end();
    });
    sock.on('error', (err) => (err.code === 'ECONNRESET' ? resolve(data.toString()) : reject(err)));
    sock.on('close', () => resolve(data.toString()));
  });
}

async function next(iterator) {
  const {value, done} = await iterator.next();
  assert(!done, 'subscription ended early');
  return value;
}

(async () => {
  const url = `127.0.0.1:${process.argv[2]}`;
  const sub = await connect({servers: url});
  const pub = await connect({servers: url});
  const one = sub.subscribe('node.*.data');
  const rest = sub.subscribe('node.>');
  const oneIt = one[Symbol.asyncIterator]();
  const restIt = rest[Symbol.asyncIterator]();
  await sub.flush();
  const binary = new Uint8Array(256).map((_, index) => index);
  const h = headers();
  h.append('Multi', 'one');
  h.append('Multi', 'two');
  h.set('Trace', 'abc');
  pub.publish('node.x.data', binary, {headers: h});
  pub.publish('node.x.data.deep', new Uint8Array([0, 13, 10, 0]));
  const first = await next(oneIt);
  assert.deepStrictEqual(Buffer.from(first.data), Buffer.from(binary));
  assert.deepStrictEqual(first.headers.values('Multi'), ['one', 'two']);
  assert.strictEqual(first.headers.get('Trace'), 'abc');
  const again = await next(restIt);
  assert.strictEqual(again.subject, 'node.x.data');
  const deep = await next(restIt);
  assert.strictEqual(deep.subject, 'node.x.data.deep');
  assert.deepStrictEqual(Buffer.from(deep.data), Buffer.from([0, 13, 10, 0]));

  sub.subscribe('node.service', {callback: (err, msg) => {
    const reply = headers();
    reply.set('Answered', 'yes');
    msg.respond(new Uint8Array([...msg.data, 33]), {headers: reply});
  }});
  await sub.flush();
  const answer = await pub.request('node.service', new Uint8Array([104, 105]), {timeout: 5000});
  assert.strictEqual(Buffer.from(answer.data).toString(), 'hi!');
  assert.strictEqual(answer.headers.get('Answered'), 'yes');

  // a no-responders status, not the request's timeout (which would reject with ErrorCode.Timeout)
  await assert.rejects(pub.request('nobody.here.node', new Uint8Array(), {timeout: 20000}),
    (err) => err.code === ErrorCode.NoResponders || err.code === '503');

  const limit = pub.info.max_payload;
  assert.throws(() => pub.publish('node.big', new Uint8Array(limit + 1)),  // nats.js's own check: nothing sent
    (err) => err.code === ErrorCode.MaxPayloadExceeded);
  const port = Number(process.argv[2]);
  assert.strictEqual(await rawPublish(port, limit + 1), "-ERR 'Maximum Payload Violation'\r\n");  // the gateway's
  assert.strictEqual(await rawPublish(port, limit), 'PONG\r\n');

  await sub.close();
  await pub.close();
  console.log('ok');
})().catch((err) => { console.error(err); process.exit(1); });
