// Runs in the browser page: connect-web clients of the shuttle.v1 services over the gateway's
// grpc-web endpoint, calling what the grpc-web API serves and trying what it refuses. The
// generated messages come from proto/ via protoc-gen-es (gen/).
import { createClient, ConnectError, Code } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-web";
import { EventService } from "./gen/shuttle/v1/events_pb";
import { ExecutorService } from "./gen/shuttle/v1/executor_pb";
import { ToolService } from "./gen/shuttle/v1/tools_pb";
import { PlannerService } from "./gen/shuttle/v1/planner_pb";
import { EventType } from "./gen/shuttle/v1/common_pb";

type Outcome = Record<string, unknown>;

function failure(err: unknown): Outcome {
  const e = ConnectError.from(err);
  return { code: Code[e.code], message: e.rawMessage };
}

async function scenario(baseUrl: string, apiKey: string, binary: boolean): Promise<Outcome> {
  const transport = createGrpcWebTransport({
    baseUrl,
    useBinaryFormat: binary,
    interceptors: [
      (next) => async (req) => {
        req.header.set("Authorization", "Bearer " + apiKey);
        return next(req);
      },
    ],
  });
  const executor = createClient(ExecutorService, transport);
  const events = createClient(EventService, transport);
  const tools = createClient(ToolService, transport);
  const planner = createClient(PlannerService, transport);
  const out: Outcome = {};

  const started = await executor.startRun({ query: "What is 12*7?", tenantId: "someone-else" });
  out.workflowId = started.workflowId;
  const types: string[] = [];
  const seqs: number[] = [];
  let answer = "";
  for await (const event of events.stream({ workflowId: started.workflowId, fromSeq: 1n })) {
    types.push(EventType[event.type]);
    seqs.push(Number(event.seq));
    if (event.type === EventType.THREAD_MESSAGE_COMPLETED) answer = JSON.parse(event.payloadJson).content;
  }
  out.types = types;
  out.seqs = seqs;
  out.answer = answer;
  const wf = await events.getWorkflow({ workflowId: started.workflowId });
  out.tenant = wf.tenantId;
  out.status = wf.status;
  try {
    await events.getWorkflow({ workflowId: "wf-does-not-exist" });
    out.missing = "no error";
  } catch (err) {
    out.missing = failure(err);
  }
  out.tools = (await tools.listTools({})).tools.map((t) => t.name);
  try {
    await executor.startRun({ query: " " });
    out.startError = "no error";
  } catch (err) {
    out.startError = failure(err);
  }
  try {
    await planner.route({ query: "hello" });
    out.route = "no error";
  } catch (err) {
    out.route = failure(err);
  }
  // A forged end of the run: refused, and the workflow keeps its own status and result.
  try {
    await events.append({
      workflowId: started.workflowId,
      events: [{ type: EventType.WORKFLOW_COMPLETED, payloadJson: '{"result": "forged"}' }],
    });
    out.append = "no error";
  } catch (err) {
    out.append = failure(err);
  }
  const after = await events.getWorkflow({ workflowId: started.workflowId });
  out.statusAfterAppend = after.status;
  out.resultAfterAppend = after.result;
  // A server stream that fails after the call started: an unknown workflow on Stream.
  try {
    for await (const _ of events.stream({ workflowId: "wf-nope", fromSeq: 1n })) {
      // nothing expected
    }
    out.streamError = "no error";
  } catch (err) {
    out.streamError = failure(err);
  }
  return out;
}

(window as unknown as { shuttleGrpcWeb: unknown }).shuttleGrpcWeb = {
  async run(baseUrl: string, apiKey: string): Promise<Outcome> {
    return {
      binary: await scenario(baseUrl, apiKey, true),
      json: await scenario(baseUrl, apiKey, false),
    };
  },
};
