// A real OpenID provider (npm `oidc-provider`) on loopback for gshare's OIDC sign-in tests
// (tests/it/oidc.rs, hack/bench.sh directory). Started by the test harness:
//
//   node provider.mjs --redirect-uri URI --client-secret S [--cert PEM --key PEM]
//
// It listens on 127.0.0.1 on a port the kernel picks and prints one line `ready <issuer>` once it
// accepts connections (the harness waits on that line, never on a timer). HTTPS when --cert/--key
// are given (a test CA's leaf: the "issuer on the LAN with its own CA" case).
//
// What the tests drive besides the protocol itself:
// - the user who signs in is the authorization request's `login_hint` (one of ACCOUNTS); the
//   login and consent interactions finish without a form (the protocol is what is under test);
// - `POST /__test/rotate` replaces the signing key with a fresh one and stops publishing the old
//   one (a key rotation between a sign-in's start and its end). Codes and sessions live in
//   oidc-provider's module-level memory store, so they survive the swap.
import { createServer as createHttp } from 'node:http';
import { createServer as createHttps } from 'node:https';
import { readFileSync } from 'node:fs';
import { generateKeyPair, exportJWK } from 'jose';
import Provider from 'oidc-provider';

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
for (const k of ['redirect-uri', 'client-secret']) {
  if (!args[k]) {
    console.error(`missing --${k}`);
    process.exit(2);
  }
}

// sub -> claims. `mallory` calls herself alice (a name any user can set at many issuers).
const ACCOUNTS = {
  alice: { preferred_username: 'alice', email: 'alice@lab.example', groups: ['gpu-admins', 'ml-lab'] },
  bob: { preferred_username: 'bob', email: 'bob@lab.example', groups: ['ml-lab'] },
  carol: { preferred_username: 'carol', email: 'carol@lab.example', groups: ['visitors'] },
  dave: { preferred_username: 'dave', email: 'dave@lab.example', groups: ['physics'] },
  mallory: { preferred_username: 'alice', email: 'mallory@lab.example', groups: ['ml-lab'] },
  admin: { preferred_username: 'admin', email: 'admin@lab.example', groups: ['gpu-admins'] },
};
for (let i = 0; i < 1000; i++) {
  ACCOUNTS[`student${i}`] = { preferred_username: `student${i}`, groups: ['ml-lab'] };
}

async function signingKey() {
  const { privateKey } = await generateKeyPair('RS256', { extractable: true });
  const jwk = await exportJWK(privateKey);
  return { ...jwk, alg: 'RS256', use: 'sig', kid: `k-${Date.now()}-${Math.random().toString(36).slice(2)}` };
}

const tls = args.cert && args.key ? { cert: readFileSync(args.cert), key: readFileSync(args.key) } : null;
let issuer = '';
let provider;
let keyId = '';

function build(key) {
  keyId = key.kid;
  const p = new Provider(issuer, {
    clients: [
      {
        client_id: 'gshare',
        client_secret: args['client-secret'],
        redirect_uris: [args['redirect-uri']],
        grant_types: ['authorization_code'],
        response_types: ['code'],
        token_endpoint_auth_method: 'client_secret_basic',
        id_token_signed_response_alg: 'RS256',
      },
    ],
    jwks: { keys: [key] },
    cookies: { keys: ['gshare-test-cookie-key'] },
    claims: {
      openid: ['sub'],
      profile: ['preferred_username', 'name'],
      email: ['email'],
      groups: ['groups'],
    },
    // The claims of the requested scopes go into the ID token itself (not only userinfo).
    conformIdTokenClaims: false,
    pkce: { required: () => true },
    features: { devInteractions: { enabled: false } },
    interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
    async findAccount(ctx, id) {
      const claims = ACCOUNTS[id];
      if (!claims) return undefined;
      return { accountId: id, claims: async () => ({ sub: id, ...claims }) };
    },
    // Consent is not what is under test: every requested scope is granted.
    async loadExistingGrant(ctx) {
      const grant = new ctx.oidc.provider.Grant({
        clientId: ctx.oidc.client.clientId,
        accountId: ctx.oidc.session.accountId,
      });
      grant.addOIDCScope(ctx.oidc.params.scope || 'openid');
      await grant.save();
      return grant;
    },
    ttl: { AuthorizationCode: 60, IdToken: 300, AccessToken: 300, Interaction: 300, Session: 600, Grant: 600 },
  });
  p.on('server_error', (ctx, err) => console.error('server_error', err));
  return p;
}

async function interaction(req, res) {
  try {
    const details = await provider.interactionDetails(req, res);
    const hint = details.params.login_hint;
    if (!hint || !ACCOUNTS[hint]) {
      res.writeHead(400, { 'content-type': 'text/plain' });
      res.end(`no such test account: ${hint}`);
      return;
    }
    await provider.interactionFinished(req, res, { login: { accountId: hint } }, { mergeWithLastSubmission: false });
  } catch (e) {
    res.writeHead(500, { 'content-type': 'text/plain' });
    res.end(String(e));
  }
}

async function handler(req, res) {
  if (req.method === 'GET' && req.url.startsWith('/interaction/')) {
    return interaction(req, res);
  }
  if (req.method === 'POST' && req.url === '/__test/rotate') {
    const old = keyId;
    provider = build(await signingKey());
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ old, new: keyId }));
    return;
  }
  return provider.callback()(req, res);
}

const server = tls ? createHttps(tls, handler) : createHttp(handler);
server.listen(0, '127.0.0.1', async () => {
  const { port } = server.address();
  issuer = `${tls ? 'https' : 'http'}://127.0.0.1:${port}`;
  provider = build(await signingKey());
  console.log(`ready ${issuer}`);
});
// The harness closes stdin (or dies): stop with it.
process.stdin.on('end', () => process.exit(0));
process.stdin.on('close', () => process.exit(0));
process.stdin.resume();
