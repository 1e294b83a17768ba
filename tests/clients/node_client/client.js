// A Shuttle client in Node.js over gRPC, loading the contracts straight from proto/.
//
//   node client.js start  --executor HOST:PORT --events HOST:PORT --query TEXT
//                         [--tenant NAME] [--drop-after N]
//   node client.js follow --events HOST:PORT --workflow ID [--tenant NAME] [--from-seq N]
//
// `start` starts a run (ExecutorService.StartRun) and follows its log (EventService.Stream)
// to STREAM_END; with --drop-after it cancels the stream after N events and resumes from the
// next seq, as a client whose connection dropped would. `follow` reads a run's log from a
// seq. Each event is printed as one JSON line. The credential is SHUTTLE_TOKEN (the
// deployment's SHUTTLE_INTERNAL_TOKEN), sent as `authorization: Bearer <token>`; a service
// caller names the tenant it acts for (`default` unless --tenant says otherwise).
"use strict";
const path = require("path");
const grpc = require("@grpc/grpc-js");
const loader = require("@grpc/proto-loader");

const protoRoot = path.resolve(__dirname, "../../../proto");
const definition = loader.loadSync(["shuttle/v1/executor.proto", "shuttle/v1/events.proto"], {
  includeDirs: [protoRoot],
  keepCase: true,
  longs: Number, // seqs and token counts fit a double's 53 bits
  enums: String,
  defaults: true,
});
const shuttle = grpc.loadPackageDefinition(definition).shuttle.v1;

function parseArgs(argv) {
  const [command, ...rest] = argv;
  const options = { command };
  for (let i = 0; i < rest.length; i += 2) {
    if (!rest[i].startsWith("--") || rest[i + 1] === undefined) {
      throw new Error(`expected --name value pairs, got ${rest.slice(i).join(" ")}`);
    }
    options[rest[i].slice(2)] = rest[i + 1];
  }
  return options;
}

function credentials() {
  const metadata = new grpc.Metadata();
  const token = process.env.SHUTTLE_TOKEN || "";
  if (token) metadata.set("authorization", `Bearer ${token}`);
  return metadata;
}

function print(line) {
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

function startRun(executor, tenantId, query) {
  return new Promise((resolve, reject) => {
    executor.StartRun({ query, tenant_id: tenantId }, credentials(), (error, reply) =>
      error ? reject(error) : resolve(reply.workflow_id),
    );
  });
}

// Reads the log from `fromSeq`; resolves with the last seq read and whether STREAM_END came.
// With `dropAfter`, cancels the call after that many events, as a dropped connection would.
function follow(events, tenantId, workflowId, fromSeq, dropAfter) {
  return new Promise((resolve, reject) => {
    const request = { workflow_id: workflowId, tenant_id: tenantId, from_seq: fromSeq };
    const call = events.Stream(request, credentials());
    let lastSeq = fromSeq - 1;
    let read = 0;
    let settled = false;
    const settle = (ended) => {
      if (!settled) {
        settled = true;
        resolve({ lastSeq, ended });
      }
    };
    call.on("data", (event) => {
      if (settled) return;
      lastSeq = event.seq;
      read += 1;
      const payload = event.payload_json ? JSON.parse(event.payload_json) : {};
      print({ seq: event.seq, type: event.type, agent_id: event.agent_id, payload });
      if (event.type === "EVENT_TYPE_STREAM_END") {
        settle(true);
      } else if (dropAfter && read >= dropAfter) {
        settle(false);
        call.cancel();
      }
    });
    call.on("error", (error) => {
      if (error.code === grpc.status.CANCELLED && settled) return;
      settled = true;
      reject(error);
    });
    call.on("end", () => settle(false));
  });
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  const insecure = grpc.credentials.createInsecure();
  const events = new shuttle.EventService(options.events, insecure);
  const tenantId = options.tenant || "default";
  let workflowId = options.workflow;
  let fromSeq = Number(options["from-seq"] || 1);
  if (options.command === "start") {
    const executor = new shuttle.ExecutorService(options.executor, insecure);
    workflowId = await startRun(executor, tenantId, options.query);
    print({ workflow_id: workflowId });
  } else if (options.command !== "follow") {
    throw new Error(`unknown command ${options.command}: use start or follow`);
  }
  let dropAfter = Number(options["drop-after"] || 0);
  for (;;) {
    const { lastSeq, ended } = await follow(events, tenantId, workflowId, fromSeq, dropAfter);
    if (ended) break;
    print({ resumed_from: lastSeq + 1 });
    fromSeq = lastSeq + 1;
    dropAfter = 0;
  }
  events.close();
}

main().catch((error) => {
  process.stderr.write(`${error.message}\n`);
  process.exit(1);
});
