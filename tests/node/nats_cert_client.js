// The npm nats client (nats.js), unmodified, logging in to a NATS gateway with --tls-ca and --users by its
// client certificate alone (the certificate's common name, svc, names the user; tests/nats_users_support.py).
// Usage: node nats_cert_client.js PORT CA_FILE CERT_FILE KEY_FILE. Publishes within svc's rights and reads it
// back, sees a publish outside them refused in the status iterator; prints "ok" and exits 0, or throws.
const assert = require('assert');
const {connect, ErrorCode, Events} = require('nats');

(async () => {
  const [port, caFile, certFile, keyFile] = process.argv.slice(2);
  const nc = await connect({servers: `127.0.0.1:${port}`, reconnect: false, tls: {caFile, certFile, keyFile}});
  const sub = nc.subscribe('svc.status');
  const received = sub[Symbol.asyncIterator]();
  await nc.flush();
  nc.publish('svc.status', new TextEncoder().encode('up'));
  const {value} = await received.next();
  assert.strictEqual(new TextDecoder().decode(value.data), 'up');
  const statuses = nc.status()[Symbol.asyncIterator]();
  nc.publish('orders.x', new Uint8Array([1]));
  for (;;) {
    const {value: status} = await statuses.next();
    if (status.type === Events.Error && status.data === ErrorCode.PermissionsViolation) {
      assert.strictEqual(status.permissionContext.subject, 'orders.x');
      break;
    }
  }
  await nc.close();
  console.log('ok');
})().catch((err) => { console.error(err); process.exit(1); });
