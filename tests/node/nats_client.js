// The npm nats client (nats.js), unmodified, through the NATS gateway.
// Usage: node nats_client.js PORT. Checks wildcards, binary payloads, headers, request/reply,
// no-responders and a payload over max_payload; prints "ok" and exits 0, or throws.
const assert = require('assert');
const {connect, headers, ErrorCode} = require('nats');

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

  const started = Date.now();
  await assert.rejects(pub.request('nobody.here.node', new Uint8Array(), {timeout: 20000}),
    (err) => err.code === ErrorCode.NoResponders || err.code === '503');
  assert(Date.now() - started < 20000, 'no-responders must be immediate');

  assert.throws(() => pub.publish('node.big', new Uint8Array(pub.info.max_payload + 1)),
    (err) => err.code === ErrorCode.MaxPayloadExceeded);

  await sub.close();
  await pub.close();
  console.log('ok');
})().catch((err) => { console.error(err); process.exit(1); });
