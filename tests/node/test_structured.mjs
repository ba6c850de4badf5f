// test_structured.mjs - structured outputs of kvant serve through the unmodified
// `openai` npm package, each reply checked by an independent validator (ajv).
// usage: node test_structured.mjs KVANT_BINARY MODEL.gguf
// For every schema below: 5 requests of n 10 at temperature 1 (50 samples),
// client.chat.completions.create({response_format: {type: 'json_schema',
// json_schema: {name, schema}}}).  A sample that ends by the grammar
// (finish_reason "stop") must parse and validate; one cut by max_tokens
// ("length": its JSON is incomplete, as OpenAI's would be) is counted apart,
// neither valid nor invalid.  Prints the table: schema, samples, finished,
// valid, length.  Then a schema kvant cannot compile: a BadRequestError 400
// naming the keyword, param response_format.
import assert from 'node:assert/strict';
import { startServe, stopServe, tally } from './serve.mjs';

let OpenAI, Ajv2020;
try {
  ({ default: OpenAI } = await import('openai'));
  ({ default: Ajv2020 } = await import('ajv/dist/2020.js'));
} catch (e) {
  console.error('test_structured: the openai / ajv packages are missing: run `npm ci` in tests/node');
  process.exit(1);
}

const [kvant, model] = process.argv.slice(2);
if (!kvant || !model) {
  console.error('usage: node test_structured.mjs KVANT_BINARY MODEL.gguf');
  process.exit(2);
}
const KEY = 'node-structured-key';
const main = startServe(kvant, ['-m', model, '--port', '0', '-t', '1', '--api-key', KEY, '-q']);
const port = await main.ready;
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: KEY, maxRetries: 0 });
const id = model.split('/').pop().replace(/\.[^.]*$/, '');

const int = (minimum, maximum) => ({ type: 'integer', minimum, maximum });
const str = (maxLength, minLength) => ({ type: 'string', maxLength, ...(minLength !== undefined && { minLength }) });
const point = { type: 'object', properties: { x: int(-99, 99), y: int(-99, 99) }, required: ['x', 'y'] };
const SCHEMAS = {
  required_props: { type: 'object', properties: { name: str(12), age: int(0, 120) }, required: ['name', 'age'] },
  optional_props: { type: 'object', properties: { a: { type: 'boolean' }, b: { type: 'null' }, c: str(6),
                                                  d: int(0, 9) }, required: ['a'] },
  nested_objects: { type: 'object', properties: {
    user: { type: 'object', properties: { id: int(1, 999), profile: { type: 'object', properties: {
      nick: str(8), admin: { type: 'boolean' } }, required: ['nick'] } }, required: ['id', 'profile'] } },
  required: ['user'] },
  array_min_max: { type: 'array', items: int(0, 9), minItems: 2, maxItems: 4 },
  array_of_objects: { type: 'object', properties: { lines: { type: 'array', minItems: 1, maxItems: 3, items: {
    type: 'object', properties: { sku: { type: 'string', pattern: '^[A-Z]{3}$' }, qty: int(1, 99) },
    required: ['sku', 'qty'] } } }, required: ['lines'] },
  enum_strings: { type: 'string', enum: ['red', 'green', 'blue'] },
  enum_mixed: { enum: ['a', 1, null, true, { k: [1, 2] }] },
  const_values: { type: 'object', properties: { version: { const: 2 }, kind: { const: 'event' }, at: int(0, 59) },
                  required: ['version', 'kind', 'at'] },
  scalar_types: { type: 'object', properties: { s: str(8), n: { type: 'number' }, i: { type: 'integer' },
                                                b: { type: 'boolean' }, z: { type: 'null' } },
                  required: ['s', 'n', 'i', 'b', 'z'] },
  number: { type: 'number' },
  any_of: { anyOf: [int(0, 100), str(6), { type: 'object', properties: { x: { type: 'boolean' } },
                                            required: ['x'] }] },
  one_of_shapes: { oneOf: [
    { type: 'object', properties: { shape: { const: 'circle' }, r: int(1, 10) }, required: ['shape', 'r'] },
    { type: 'object', properties: { shape: { const: 'square' }, side: int(1, 10) }, required: ['shape', 'side'] }] },
  ref_defs: { $defs: { point }, type: 'object', properties: { from: { $ref: '#/$defs/point' },
                                                             to: { $ref: '#/$defs/point' } }, required: ['from', 'to'] },
  ref_recursive: { $defs: { node: { type: 'object', properties: { v: int(0, 9), kids: { type: 'array', maxItems: 2,
                                                                                          items: { $ref: '#/$defs/node' } } },
                                    required: ['v'] } }, $ref: '#/$defs/node' },
  pattern_lower: { type: 'string', pattern: '^[a-z]+$' },
  pattern_phone: { type: 'object', properties: { phone: { type: 'string', pattern: '^\\d{3}-\\d{4}$' } },
                   required: ['phone'] },
  min_max_length: { type: 'object', properties: { code: str(4, 2), note: str(12, 0), tag: str(3, 3) },
                    required: ['code', 'note', 'tag'] },
  integer_bounds: { type: 'object', properties: { lo: int(-50, 50), pos: { type: 'integer', exclusiveMinimum: 0,
                                                                           exclusiveMaximum: 10 },
                                                  big: int(1000, 1000000) }, required: ['lo', 'pos', 'big'] },
  type_list: { type: 'object', properties: { v: { type: ['string', 'null'], maxLength: 5 },
                                             w: { type: ['integer', 'boolean'], minimum: 0, maximum: 3 } },
               required: ['v', 'w'] },
  tuple: { type: 'array', prefixItems: [str(4), int(0, 9), { type: 'boolean' }], items: false, minItems: 3 },
  // a string without bounds: a reply that writes on to max_tokens would count as "length"
  free_string: { type: 'object', properties: { story: { type: 'string' } }, required: ['story'] },
};

const SAMPLES_PER_REQ = 10, REQS = 5, MAX_TOKENS = 300;
const ajv = new Ajv2020({ allErrors: true, allowUnionTypes: true });
const t = tally(), { check } = t;
const rows = [];
const t0 = Date.now();

async function runSchema(name, schema, k) {
  const validate = ajv.compile(schema);
  const row = { schema: name, samples: 0, finished: 0, valid: 0, length: 0, bad: [] };
  await Promise.all(Array.from({ length: REQS }, async (_, r) => {
    const res = await client.chat.completions.create({
      model: id, messages: [{ role: 'user', content: `Give me a ${name.replace(/_/g, ' ')}.` }],
      response_format: { type: 'json_schema', json_schema: { name, schema, ...(r % 2 && { strict: true }) } },
      n: SAMPLES_PER_REQ, temperature: 1, max_tokens: MAX_TOKENS, seed: 1000 * k + r });
    for (const c of res.choices) {
      row.samples++;
      if (c.finish_reason === 'length') { row.length++; continue; }
      assert.equal(c.finish_reason, 'stop');
      row.finished++;
      let v;
      try { v = JSON.parse(c.message.content); } catch (e) { row.bad.push(`not JSON: ${c.message.content}`); continue; }
      if (validate(v)) { row.valid++; if (!row.example) row.example = JSON.stringify(v); }
      else row.bad.push(`${JSON.stringify(v)}: ${ajv.errorsText(validate.errors)}`);
    }
  }));
  return row;
}

// the schemas four at a time (each 5 requests of n 10: 200 sequences queued, 64 running)
const names = Object.keys(SCHEMAS);
for (let i = 0; i < names.length; i += 4) {
  const part = await Promise.all(names.slice(i, i + 4).map((n, j) => runSchema(n, SCHEMAS[n], i + j)));
  rows.push(...part);
}
const secs = (Date.now() - t0) / 1000;

const pad = (s, n) => String(s).padEnd(n);
const lpad = (s, n) => String(s).padStart(n);
console.log(`| ${pad('schema', 16)} | samples | finished | valid | length | example`);
console.log(`|${'-'.repeat(18)}|---------|----------|-------|--------|--------`);
const tot = { samples: 0, finished: 0, valid: 0, length: 0 };
for (const r of rows) {
  for (const k of Object.keys(tot)) tot[k] += r[k];
  const ex = (r.example ?? '').length > 48 ? r.example.slice(0, 45) + '...' : r.example ?? '';
  console.log(`| ${pad(r.schema, 16)} | ${lpad(r.samples, 7)} | ${lpad(r.finished, 8)} | ${lpad(r.valid, 5)} | ` +
              `${lpad(r.length, 6)} | ${ex}`);
}
console.log(`| ${pad('all', 16)} | ${lpad(tot.samples, 7)} | ${lpad(tot.finished, 8)} | ${lpad(tot.valid, 5)} | ` +
            `${lpad(tot.length, 6)} |`);
console.log(`${names.length} schemas x ${REQS * SAMPLES_PER_REQ} samples (n ${SAMPLES_PER_REQ}, temperature 1, ` +
            `max_tokens ${MAX_TOKENS}) in ${secs.toFixed(1)} s`);
for (const r of rows) {
  if (r.valid !== r.finished) {
    t.fail(`${r.schema}: ${r.finished - r.valid} finished replies invalid:\n  ${r.bad.slice(0, 5).join('\n  ')}`);
  }
  if (r.samples !== REQS * SAMPLES_PER_REQ) t.fail(`${r.schema}: ${r.samples} samples`);
}
// most replies end by the grammar (a regression that never closes the JSON would show as "length")
if (tot.finished < 0.9 * tot.samples) t.fail(`only ${tot.finished} of ${tot.samples} finished`);

await check('a schema kvant cannot compile -> BadRequestError 400 naming the keyword, param response_format', async () => {
  await assert.rejects(client.chat.completions.create({
    model: id, messages: [{ role: 'user', content: 'x' }],
    response_format: { type: 'json_schema', json_schema: { name: 'm', schema: {
      type: 'object', properties: { tags: { type: 'object', patternProperties: { '^x-': { type: 'string' } } } } } } } }),
  (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'response_format' &&
         e.code === 'unsupported_schema' && /'patternProperties'/.test(e.message) && /\/properties\/tags/.test(e.message));
});
await check('json_schema without a name -> BadRequestError naming response_format', async () => {
  await assert.rejects(client.chat.completions.create({
    model: id, messages: [{ role: 'user', content: 'x' }],
    response_format: { type: 'json_schema', json_schema: { schema: { type: 'object' } } } }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === 'response_format' && /name is required/.test(e.message));
});
await check('response_format json_object: a JSON object, streamed through the client', async () => {
  const stream = await client.chat.completions.create({
    model: id, messages: [{ role: 'user', content: 'x' }], response_format: { type: 'json_object' }, stream: true,
    max_tokens: 400, seed: 3, logit_bias: { 436: 8, 313: 8, 128: 8 } }); // stories260K: favour '"' and '}'
  let text = '', finish = null;
  for await (const c of stream) for (const ch of c.choices) {
    text += ch.delta.content ?? '';
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  if (finish === 'stop') {
    const v = JSON.parse(text);
    assert.ok(v && typeof v === 'object' && !Array.isArray(v));
  } else assert.equal(finish, 'length');
});

const bad = await stopServe(main);
if (bad) t.fail(bad);
t.exit();
