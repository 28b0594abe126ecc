// The npm ioredis client, unmodified, through the Redis gateway.
// Usage: node ioredis_client.js PORT. Checks SUBSCRIBE/PSUBSCRIBE, binary payloads, PUBLISH counts,
// and an unsupported command's error; prints "ok" and exits 0, or throws.
const assert = require('assert');
const Redis = require('ioredis');

function nextMessage(client, event) {
  return new Promise((resolve) => client.once(event, (...args) => resolve(args)));
}

(async () => {
  const options = {host: '127.0.0.1', port: Number(process.argv[2]), lazyConnect: true, enableReadyCheck: false};
  const sub = new Redis(options);
  const pub = new Redis(options);
  await sub.connect();
  await pub.connect();
  assert.strictEqual(await sub.subscribe('io.chan'), 1);
  assert.strictEqual(await sub.psubscribe('io.*'), 2);
  const binary = Buffer.from([...Array(256).keys()]);
  const exact = nextMessage(sub, 'messageBuffer');
  const pattern = nextMessage(sub, 'pmessageBuffer');
  assert.strictEqual(await pub.publish('io.chan', binary), 2);  // the channel and the pattern subscription
  const [channel, message] = await exact;
  assert.strictEqual(channel.toString(), 'io.chan');
  assert.deepStrictEqual(message, binary);
  const [matched, patternChannel, patternMessage] = await pattern;
  assert.strictEqual(matched.toString(), 'io.*');
  assert.strictEqual(patternChannel.toString(), 'io.chan');
  assert.deepStrictEqual(patternMessage, binary);
  assert.strictEqual(await pub.publish('elsewhere', 'x'), 0);
  await assert.rejects(pub.set('k', 'v'), /unknown command/);
  assert.strictEqual(await pub.ping(), 'PONG');
  sub.disconnect();
  pub.disconnect();
  console.log('ok');
})().catch((err) => { console.error(err); process.exit(1); });
