// @ag-ui/client's HttpAgent against Shuttle's /ag-ui, printing one JSON line: the agent's
// messages and the AG-UI event types it received.
//
//   node run_agent.js URL API_KEY THREAD_ID RUN_ID QUERY [CUT_AFTER_TYPE]
//
// With CUT_AFTER_TYPE the first stream is cut right after the first frame of that type (the
// connection drops); the agent then rejoins with GET /ag-ui/runs/RUN_ID and Last-Event-ID set
// to the id of the last frame it read, and goes on from there with the same messages.
"use strict";
const { HttpAgent } = require("@ag-ui/client");

const [url, apiKey, threadId, runId, query, cutAfter] = process.argv.slice(2);
const headers = apiKey ? { Authorization: `Bearer ${apiKey}` } : {};

// A fetch whose response body ends after the first frame of type `cutAfter`, remembering
// the id of the last frame that went through.
function cuttingFetch(state) {
  return async (target, init) => {
    const response = await fetch(target, init);
    if (!cutAfter || !response.ok) return response;
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let pending = "";
    const body = new ReadableStream({
      async pull(controller) {
        const { done, value } = await reader.read();
        if (done) return controller.close();
        pending += decoder.decode(value, { stream: true });
        const frames = pending.split("\n\n");
        pending = frames.pop();
        for (const frame of frames) {
          controller.enqueue(new TextEncoder().encode(`${frame}\n\n`));
          const id = /^id: (.*)$/m.exec(frame);
          if (id) state.lastId = id[1];
          const data = /^data: (.*)$/m.exec(frame);
          if (data && JSON.parse(data[1]).type === cutAfter) {
            state.cut = true;
            await reader.cancel();
            return controller.close();
          }
        }
      },
    });
    return new Response(body, { status: response.status, headers: response.headers });
  };
}

class RejoiningAgent extends HttpAgent {
  constructor(config, lastId) {
    super(config);
    this.lastId = lastId;
  }
  requestInit() {
    return {
      method: "GET",
      headers: { ...this.headers, Accept: "text/event-stream", "Last-Event-ID": this.lastId },
      signal: this.abortController.signal,
    };
  }
}

async function main() {
  const types = [];
  const subscriber = { onEvent: ({ event }) => void types.push(event.type) };
  const state = { lastId: null, cut: false };
  const agent = new HttpAgent({
    url: `${url}/ag-ui`,
    headers,
    threadId,
    initialMessages: [{ id: "user-1", role: "user", content: query }],
    fetch: cuttingFetch(state),
  });
  await agent.runAgent({ runId }, subscriber);
  let messages = agent.messages;
  if (state.cut) {
    types.push("-- rejoin --");
    const rejoining = new RejoiningAgent(
      { url: `${url}/ag-ui/runs/${runId}`, headers, threadId, initialMessages: messages },
      state.lastId,
    );
    await rejoining.runAgent({ runId }, subscriber);
    messages = rejoining.messages;
  }
  process.stdout.write(`${JSON.stringify({ messages, types, cut: state.cut, lastId: state.lastId })}\n`);
}

main().catch((error) => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(1);
});
