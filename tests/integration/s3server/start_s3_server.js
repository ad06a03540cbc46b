#!/usr/bin/env node
// An S3-compatible server on loopback for the --sync tests (s3_server.py
// starts it): the npm package @20minutes/s3rver, which verifies SigV4
// signatures, so a client that signs wrongly fails here as it would on AWS.
// The package has no command line of its own; this is it.
//
//   node --openssl-legacy-provider start_s3_server.js --port N --directory DIR
//        --bucket NAME --access-key ID --secret-key SECRET
//        [--module DIR] [--request-log FILE] [--exit-on-stdin-close]
//
// --port 0 picks a free port. When ready it prints one line,
// "s3 server listening on 127.0.0.1:PORT". SIGTERM and SIGINT close it and
// exit 0; with --exit-on-stdin-close it also exits when its stdin reaches
// end of file, so it cannot outlive a test process that dies. --request-log
// appends "METHOD URL STATUS" for each answered request, so a test can see
// how a client talked to the server (a multipart upload's parts).
// (--openssl-legacy-provider: the package encrypts ListObjectsV2
// continuation tokens with DES, which OpenSSL 3 offers only in that provider.)
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');

function parseArgs(argv) {
  const flags = new Set(['--exit-on-stdin-close']);
  const out = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (flags.has(a)) {
      out[a.slice(2)] = true;
    } else if (a.startsWith('--') && i + 1 < argv.length) {
      out[a.slice(2)] = argv[++i];
    } else {
      fail(`unexpected argument ${a}`);
    }
  }
  for (const required of ['port', 'directory', 'bucket', 'access-key', 'secret-key']) {
    if (out[required] === undefined) fail(`--${required} is required`);
  }
  return out;
}

function fail(message) {
  process.stderr.write(`start_s3_server.js: ${message}\n`);
  process.exit(2);
}

function defaultModule() {
  const cache = process.env.DDPLAUNCH_TEST_CACHE || path.join(os.homedir(), '.cache', 'ddplaunch');
  return path.join(cache, 's3server', 'node_modules', '@20minutes', 's3rver');
}

const args = parseArgs(process.argv.slice(2));
const modulePath = args.module || defaultModule();
let S3rver;
let account;
try {
  S3rver = require(modulePath);
  // The package's accounts: a registry of key pairs, with S3RVER/S3RVER built in.
  account = require(path.join(modulePath, 'lib', 'models', 'account.js'));
} catch (err) {
  fail(`cannot load ${modulePath} (run deploy/install-deps.sh): ${err.message}`);
}
account.DUMMY_ACCOUNT.createKeyPair(args['access-key'], args['secret-key']);

const server = new S3rver({
  port: Number(args.port),
  address: '127.0.0.1',
  silent: true,
  directory: args.directory,
  configureBuckets: [{ name: args.bucket }],
});

// A failure to listen (a port in use) is emitted, not passed to run()'s promise.
let ready = false;
process.on('uncaughtException', (err) => fail(ready ? err.stack : `cannot start: ${err.message}`));

let closing = false;
function shutdown() {
  if (closing) return;
  closing = true;
  const http = server.httpServer;
  if (!http) process.exit(0);
  // Idle keep-alive connections would hold close() open.
  http.closeAllConnections();
  http.close(() => process.exit(0));
  setTimeout(() => process.exit(0), 2000).unref();
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
if (args['exit-on-stdin-close']) {
  process.stdin.on('end', shutdown);
  process.stdin.on('close', shutdown);
  process.stdin.resume();
}

server.run().then(
  (address) => {
    if (args['request-log']) {
      const log = args['request-log'];
      server.httpServer.on('request', (req, res) => {
        res.on('finish', () => fs.appendFileSync(log, `${req.method} ${req.url} ${res.statusCode}\n`));
      });
    }
    ready = true;
    process.stdout.write(`s3 server listening on ${address.address}:${address.port}\n`);
  },
  (err) => fail(`cannot start: ${err.message}`),
);
