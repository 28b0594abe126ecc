// The npm ioredis client, unmodified, logging in to the Redis gateway with a users file.
// Usage: node ioredis_auth_client.js PORT [CA_FILE]  (with CA_FILE: over TLS, the server checked against it).
// The users: alice/secret may publish news.sports and subscribe news.* and weather.
// Prints "ok" and exits 0, or throws.
const assert = require('assert');
const fs = require('fs');
const Redis = require('ioredis');

const port = Number(process.argv[2]);
const tls = process.argv[3] ? {ca: fs.readFileSync(process.argv[3])} : undefined;

function client(extra) {
  return new Redis({host: '127.0.0.1', port, tls, lazyConnect: true, enableReadyCheck: false,
                    maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false, ...extra});
}

function nextError(redis) {
  return new Promise((resolve) => redis.on('error', resolve));  // the first; later ones (the close) ignored
}

(async () => {
  // username and password: publish and subscribe within the rights, NOPERM outside, for every command
  const sub = client({username: 'alice', password: 'secret'});
  const pub = client({username: 'alice', password: 'secret'});
  await sub.connect();
  await pub.connect();
  assert.strictEqual(await pub.call('ACL', 'WHOAMI'), 'alice');
  assert.strictEqual(await sub.subscribe('news.sports'), 1);
  assert.strictEqual(await sub.psubscribe('news.*'), 2);
  const message = new Promise((resolve) => sub.once('message', (channel, text) => resolve([channel, text])));
  assert.strictEqual(await pub.publish('news.sports', 'goal'), 2);
  assert.deepStrictEqual(await message, ['news.sports', 'goal']);
  const noperm = /^NOPERM this user has no permissions to access one of the channels used as arguments$/;
  await assert.rejects(pub.publish('orders.1', 'x'), (err) => noperm.test(err.message));
  await assert.rejects(sub.subscribe('secret.plans'), (err) => noperm.test(err.message));
  await assert.rejects(sub.psubscribe('news.sp*'), (err) => noperm.test(err.message));
  sub.disconnect();
  pub.disconnect();

  // a wrong password: the error event says WRONGPASS (and ioredis gives up the connection)
  const wrong = client({username: 'alice', password: 'guess'});
  const refused = nextError(wrong);
  await wrong.connect().catch(() => {});
  assert.match((await refused).message, /^WRONGPASS invalid username-password pair or user is disabled\.$/);
  wrong.disconnect();

  // no credentials at all
  const none = client({});
  await none.connect();
  await assert.rejects(none.publish('news.sports', 'x'), /NOAUTH Authentication required\.$/);
  none.disconnect();
  console.log('ok');
})().catch((err) => { console.error(err); process.exit(1); });
