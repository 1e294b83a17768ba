// A ToolProvider in Node.js: serves two tools on 127.0.0.1, prints its port on stdout.
"use strict";
const path = require("path");
const grpc = require("@grpc/grpc-js");
const loader = require("@grpc/proto-loader");

const protoRoot = path.resolve(__dirname, "../../../proto");
const definition = loader.loadSync("shuttle/v1/tool_provider.proto", {
  includeDirs: [protoRoot],
  keepCase: true,
  longs: String,
  defaults: true,
});
const shuttle = grpc.loadPackageDefinition(definition).shuttle.v1;

const tools = [
  {
    name: "node_reverse",
    description: "Reverses a string (served by Node.js).",
    parameters_json: JSON.stringify({
      type: "object",
      properties: { text: { type: "string" } },
      required: ["text"],
      additionalProperties: false,
    }),
    category: "node",
    flags: { read_only: true, requires_approval: false, cacheable: false, timeout_seconds: 5 },
  },
  {
    name: "node_fail",
    description: "Always fails with a message for the model.",
    parameters_json: JSON.stringify({ type: "object", properties: {} }),
    category: "node",
    flags: { read_only: false, requires_approval: false, cacheable: false, timeout_seconds: 0 },
  },
];

function execute(call, callback) {
  const req = call.request;
  const args = JSON.parse(req.arguments_json || "{}");
  if (req.tool_name === "node_reverse") {
    const reversed = Array.from(args.text).reverse().join("");
    callback(null, { output: `${reversed} (call ${req.call_id} of ${req.tenant_id})` });
  } else if (req.tool_name === "node_fail") {
    callback(null, { error: "node_fail: the upstream API rejected the request" });
  } else {
    callback({ code: grpc.status.NOT_FOUND, details: `no tool ${req.tool_name}` });
  }
}

const server = new grpc.Server();
server.addService(shuttle.ToolProvider.service, {
  ListTools: (_call, callback) => callback(null, { tools }),
  Execute: execute,
});
server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, port) => {
  if (err) {
    console.error(err);
    process.exit(1);
  }
  console.log(`PORT ${port}`);
});
process.on("SIGTERM", () => server.tryShutdown(() => process.exit(0)));
