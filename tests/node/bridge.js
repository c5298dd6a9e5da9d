// One SOAP client of node.js -- npm `soap` or `strong-soap` -- driven by the Python tests
// (tests/clients.py, NodeSoapClient) over stdin and stdout, one JSON object a line.
//
//   node bridge.js soap|strong-soap BASE_URL
//   in:  {"service": "XDemo", "operation": "startSimulate", "request": {...}}
//   out: {"answer": {...}, "sent": "<soap:Envelope…"}
//        {"fault": {"type": "UnknownJobFault", "message": "…", "fields": {...}}, "sent": "…"}
//        {"error": "…"}                    (anything else: no SOAP answer at all)
//
// The request object is handed to the client as it is: plain keys, no namespaces, no
// workaround.  Answers come back as the client parsed them, with each value's xsi:type
// (which the clients keep beside the fields) turned into "$type".
'use strict';
const readline = require('readline');
const util = require('util');

const [, , pkg, base] = process.argv;
const clients = {};

async function client(service) {
  if (!clients[service]) {
    const url = `${base}/services/ws/${service}?wsdl`;
    clients[service] = pkg === 'soap'
      ? require('soap').createClientAsync(url)
      : util.promisify(require('strong-soap').soap.createClient)(url, {});
  }
  return clients[service];
}

function call(soapClient, operation, request) {
  if (pkg === 'soap') return soapClient[`${operation}Async`](request).then((answer) => answer[0]);
  return new Promise((resolve, reject) => soapClient[operation](request, (err, answer) => (
    err ? reject(err) : resolve(answer))));
}

// The type name an answer's object carries: npm soap keeps the xsi:type attribute under
// "attributes", strong-soap its resolved type under "$attributes".
function typeOf(value) {
  const soapType = value.attributes && value.attributes['xsi:type'];
  if (soapType) return String(typeof soapType === 'object' ? soapType.type : soapType).split(':').pop();
  const strongType = value.$attributes && value.$attributes.$xsiType;
  return strongType ? strongType.type : undefined;
}

function plain(value) {
  if (Array.isArray(value)) return value.map(plain);
  if (value === null || typeof value !== 'object') return value;
  const out = {};
  const type = typeOf(value);
  if (type) out.$type = type;
  for (const [key, item] of Object.entries(value)) {
    if (key !== 'attributes' && key !== '$attributes') out[key] = plain(item);
  }
  return out;
}

function fault(err) {
  const body = err.root && err.root.Envelope && err.root.Envelope.Body;
  const soapFault = body && body.Fault;
  if (!soapFault) return null;
  const detail = soapFault.detail || {};
  const [type] = Object.keys(detail).filter((key) => key !== 'attributes' && key !== '$attributes');
  return { type, code: soapFault.faultcode, message: soapFault.faultstring,
           fields: type ? plain(detail[type]) : {} };
}

async function handle(line) {
  const { service, operation, request } = JSON.parse(line);
  let soapClient;
  try {
    soapClient = await client(service);
    return { answer: plain(await call(soapClient, operation, request)), sent: soapClient.lastRequest };
  } catch (err) {
    const found = fault(err);
    const sent = soapClient && soapClient.lastRequest;
    return found ? { fault: found, sent } : { error: String(err && err.stack || err), sent };
  }
}

const lines = readline.createInterface({ input: process.stdin });
let queue = Promise.resolve();
lines.on('line', (line) => {
  queue = queue.then(() => handle(line)).then((out) => process.stdout.write(`${JSON.stringify(out)}\n`));
});
