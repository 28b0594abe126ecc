// The npm ws client, unmodified, speaking RESP over the HTTP gateway's /resp WebSocket.
// Usage: node ws_resp_client.js PORT. Checks each reply and push byte for byte (one RESP value per
// binary message), a binary payload, and the close after QUIT; prints "ok" and exits 0, or throws.
const assert = require('assert');
const WebSocket = require('ws');

(async () => {
  const ws = new WebSocket(`ws://127.0.0.1:${process.argv[2]}/resp`);
  const queue = [];
  let waiting = null;
  ws.on('message', (data, isBinary) => {
    assert.ok(isBinary, 'every reply is a binary message');
    queue.push(Buffer.from(data));
    if (waiting) { const w = waiting; waiting = null; w(); }
  });
  const closed = new Promise((resolve) => ws.on('close', (code) => resolve(code)));
  const next = async () => {
    while (queue.length === 0) await new Promise((resolve) => { waiting = resolve; });
    return queue.shift();
  };
  await new Promise((resolve, reject) => { ws.on('open', resolve); ws.on('error', reject); });
  const command = (...words) => Buffer.concat([Buffer.from(`*${words.length}\r\n`), ...words.map((w) => {
    const b = Buffer.from(w);
    return Buffer.concat([Buffer.from(`$${b.length}\r\n`), b, Buffer.from('\r\n')]);
  })]);
  ws.send(command('HELLO', '3'));
  assert.ok((await next()).toString().startsWith('%7\r\n'));
  ws.send(Buffer.concat([command('SUBSCRIBE', 'node.ws'), command('PSUBSCRIBE', 'node.*')]));
  assert.deepStrictEqual(await next(), Buffer.from('>3\r\n$9\r\nsubscribe\r\n$7\r\nnode.ws\r\n:1\r\n'));
  assert.deepStrictEqual(await next(), Buffer.from('>3\r\n$10\r\npsubscribe\r\n$6\r\nnode.*\r\n:2\r\n'));
  const binary = Buffer.from([...Array(256).keys()]);
  ws.send(command('PUBLISH', 'node.ws', binary));
  const got = [await next(), await next(), await next()].map((b) => b.toString('latin1')).sort();
  const head = (s) => Buffer.from(s, 'latin1');
  const expected = [
    head(':2\r\n'),
    Buffer.concat([head('>3\r\n$7\r\nmessage\r\n$7\r\nnode.ws\r\n$256\r\n'), binary, head('\r\n')]),
    Buffer.concat([head('>4\r\n$8\r\npmessage\r\n$6\r\nnode.*\r\n$7\r\nnode.ws\r\n$256\r\n'), binary, head('\r\n')]),
  ].map((b) => b.toString('latin1')).sort();
  assert.deepStrictEqual(got, expected);
  ws.send(command('PING'));
  assert.deepStrictEqual(await next(), Buffer.from('+PONG\r\n'));
  ws.send(command('QUIT'));
  assert.deepStrictEqual(await next(), Buffer.from('+OK\r\n'));
  assert.strictEqual(await closed, 1000);
  console.log('ok');
})().catch((err) => { console.error(err); process.exit(1); });
