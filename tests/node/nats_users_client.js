// The npm nats client (nats.js), unmodified, through a NATS gateway with --users (tests/nats_users_support.py's
// users). Usage: node nats_users_client.js PORT BOB_TOKEN [CA_FILE]; with CA_FILE the gateway serves TLS after
// INFO and the client verifies it with that CA. Checks a login with user/password and with a token, a wrong
// password refused, and a permissions violation seen in the status iterator with the connection staying open;
// prints "ok" and exits 0, or throws.
const assert = require('assert');
const {connect, ErrorCode, Events} = require('nats');

(async () => {
  const [port, token, ca] = process.argv.slice(2);
  const base = {servers: `127.0.0.1:${port}`, reconnect: false};
  if (ca) base.tls = {caFile: ca};

  const alice = await connect({...base, user: 'alice', pass: 'secret'});
  const bob = await connect({...base, token});
  const orders = bob.subscribe('orders.js');
  const received = orders[Symbol.asyncIterator]();
  await bob.flush();
  alice.publish('orders.js', new TextEncoder().encode('from alice'));
  const {value} = await received.next();
  assert.strictEqual(new TextDecoder().decode(value.data), 'from alice');

  await assert.rejects(connect({...base, user: 'alice', pass: 'wrong'}),
    (err) => err.code === ErrorCode.AuthorizationViolation);

  const statuses = alice.status()[Symbol.asyncIterator]();
  alice.publish('not.alices', new Uint8Array([1]));
  let violation;
  while (!violation) {
    const {value: status} = await statuses.next();
    if (status.type === Events.Error && status.data === ErrorCode.PermissionsViolation) violation = status;
  }
  assert.deepStrictEqual(violation.permissionContext, {operation: 'publish', subject: 'not.alices', queue: undefined});
  await alice.flush();  // the connection stayed open
  assert.strictEqual(alice.isClosed(), false);

  await alice.close();
  await bob.close();
  console.log('ok');
})().catch((err) => { console.error(err); process.exit(1); });
