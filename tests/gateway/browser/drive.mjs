// Drives Debian's Chromium through playwright-core for the gateway tests and prints one JSON
// object on stdout. Usage:
//   node drive.mjs grpc-web GATEWAY_URL API_KEY
//   node drive.mjs console  GATEWAY_URL API_KEY SCREENSHOT_DIR   (console-1280.png, console-390.png)
//   node drive.mjs approvals GATEWAY_URL API_KEY   (a gateway whose calculator needs approval)
//   node drive.mjs hostile GATEWAY_URL API_KEY WORKFLOW_ID   (a log whose fields hold markup)
//   node drive.mjs artifact GATEWAY_URL API_KEY WORKFLOW_ID  (a run whose tool made an HTML artifact)
//   node drive.mjs restart GATEWAY_URL API_KEY WORKFLOW_ID   (a log the test appends to as
//     it goes: each line on stdin is {"answer": TEXT}, answered on stdout once the console
//     shows TEXT as the answer, or after 20 s with what it shows; "end" ends it)
import { build } from "esbuild";
import { chromium } from "playwright-core";
import http from "node:http";
import readline from "node:readline";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const [mode, gateway, apiKey, screenshot] = process.argv.slice(2);
const CHROMIUM_FLAGS = [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
];

async function launch() {
  return chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: CHROMIUM_FLAGS });
}

// The client page is served from another origin than the gateway, as a real web app would
// be, so every call goes through CORS preflight.
async function servePage(script) {
  const html = `<!doctype html><meta charset="utf-8"><title>grpc-web client</title><script>${script}</script>`;
  const server = http.createServer((req, res) => { res.setHeader("content-type", "text/html"); res.end(html); });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return server;
}

async function grpcWeb() {
  const bundle = await build({
    entryPoints: [path.join(here, "grpc_web_client.ts")], bundle: true, write: false,
    format: "iife", target: "es2022", platform: "browser", logLevel: "silent",
  });
  const server = await servePage(bundle.outputFiles[0].text);
  const browser = await launch();
  try {
    const page = await browser.newPage();
    await page.goto(`http://127.0.0.1:${server.address().port}/`);
    return await page.evaluate(([url, key]) => window.shuttleGrpcWeb.run(url, key), [gateway, apiKey]);
  } finally {
    await browser.close();
    server.close();
  }
}

async function consoleScenario() {
  const browser = await launch();
  const out = {};
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on("pageerror", (err) => { out.pageErrors = [...(out.pageErrors || []), String(err)]; });
    await page.goto(gateway + "/");
    out.cdnScripts = await page.$$eval("script[src],link[href]", (els) =>
      els.map((e) => e.getAttribute("src") || e.getAttribute("href")).filter((u) => /^(https?:)?\/\//.test(u)));
    await page.waitForSelector("#key-form:not([hidden])");
    await page.fill("#api-key", apiKey);
    await page.click("#key-form button");
    await page.fill("#query", "What is 12*7?");
    await page.click("#submit");
    await page.waitForSelector("#run-status.completed", { timeout: 60000 });
    await page.waitForSelector("#usage:not([hidden])");
    const tool = page.locator("#timeline li.tool").first();
    out.toolSummary = await tool.locator("summary").innerText();
    out.toolOpenBefore = await tool.locator("details").evaluate((d) => d.open);
    await tool.locator("summary").click();
    out.toolOpenAfter = await tool.locator("details").evaluate((d) => d.open);
    out.toolArgs = await tool.locator("pre.args").innerText();
    out.toolObservation = await tool.locator("pre.observation").innerText();
    out.answerHtml = await page.locator("#answer").innerHTML();
    out.usage = await page.locator("#usage").innerText();
    out.workflowId = await page.locator("#run-id").innerText();
    out.hash = await page.evaluate(() => location.hash);
    out.toolDone = await tool.evaluate((li) => li.classList.contains("done"));
    out.toolTook = await tool.locator(".took").innerText();
    out.steps = await page.locator("#timeline li.step").allInnerTexts();
    out.counters = await page.locator("#counters").innerText();
    // A finished run: no control applies.
    out.disabled = await page.evaluate(() => [...document.querySelectorAll(".controls button, #interrupt, #interrupt-send")]
      .map((b) => [b.dataset.action || b.id, b.disabled]));
    out.tasksListed = await page.locator("#tasks li").count();
    for (const status of ["completed", "running"]) {
      await page.selectOption("#task-filter", status);
      out["filtered_" + status] = await page.locator("#tasks li .status").allInnerTexts();
    }
    await page.selectOption("#task-filter", "");
    await page.screenshot({ path: path.join(screenshot, "console-1280.png"), fullPage: true });
    await page.setViewportSize({ width: 390, height: 844 });
    out.narrowOverflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    await page.screenshot({ path: path.join(screenshot, "console-390.png"), fullPage: true });
    await page.setViewportSize({ width: 1280, height: 900 });
    await page.reload();
    await page.waitForSelector("#run-status.completed", { timeout: 60000 });
    await page.waitForSelector("#answer:not([hidden])");
    out.answerAfterReload = await page.locator("#answer").innerText();
    out.toolsAfterReload = await page.locator("#timeline li.tool").count();
    // Continue a conversation from the list: the follow-up joins the listed session.
    await page.waitForSelector("#sessions li a");
    const listed = page.locator("#sessions li a").first();
    out.sessionId = await listed.getAttribute("data-session");
    await listed.click();
    await page.waitForSelector("#session-note:not([hidden])");
    await page.fill("#query", "What is 2*3?");
    await page.press("#query", process.platform === "darwin" ? "Meta+Enter" : "Control+Enter");
    await page.waitForFunction((id) => location.hash !== "#" + id, out.workflowId);
    await page.waitForSelector("#run-status.completed", { timeout: 60000 });
    out.sessionTurns = await page.evaluate(async ([id, key]) => {
      const r = await fetch("/api/v1/sessions/" + id, { headers: { Authorization: "Bearer " + key } });
      return (await r.json()).turns.map((t) => t.user_message);
    }, [out.sessionId, apiKey]);
    return out;
  } finally {
    await browser.close();
  }
}

// Approve one task's tool call and deny another's with the console's own buttons.
async function approvalScenario() {
  const browser = await launch();
  const out = {};
  try {
    const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
    page.on("pageerror", (err) => { out.pageErrors = [...(out.pageErrors || []), String(err)]; });
    await page.goto(gateway + "/");
    await page.waitForSelector("#key-form:not([hidden])");
    await page.fill("#api-key", apiKey);
    await page.click("#key-form button");
    for (const [query, decision] of [["What is 5*5?", "approved"], ["What is 4*4?", "denied"]]) {
      const previous = await page.evaluate(() => location.hash);
      await page.fill("#query", query);
      await page.click("#submit");
      await page.waitForFunction((h) => location.hash && location.hash !== h, previous);
      const button = page.locator(`#timeline li.approval button[data-decision=${decision}]`);
      await button.waitFor({ timeout: 60000 });
      await button.click();
      await page.waitForSelector("#run-status.completed", { timeout: 60000 });
      await page.waitForSelector("#answer:not([hidden])");
      out[decision] = {
        buttonsDisabled: await page.locator("#timeline li.approval button").evaluateAll(
          (bs) => bs.every((b) => b.disabled)),
        notices: await page.locator("#timeline li.notice").allInnerTexts(),
        // textContent: the tool card is collapsed, so its text is not rendered.
        observation: await page.locator("#timeline li.tool pre.observation").first()
          .evaluate((e) => e.textContent),
        answer: await page.locator("#answer").innerText(),
      };
    }
    // Pause while a call waits for approval: the run stops at its next checkpoint, then
    // resumes and finishes. Cancel the same way and the run ends cancelled.
    for (const [query, action] of [["What is 3*3?", "pause"], ["What is 6*6?", "cancel"]]) {
      const previous = await page.evaluate(() => location.hash);
      await page.fill("#query", query);
      await page.click("#submit");
      await page.waitForFunction((h) => location.hash && location.hash !== h, previous);
      const approve = page.locator("#timeline li.approval button[data-decision=approved]");
      await approve.waitFor({ timeout: 60000 });
      await page.click(`.controls button[data-action=${action}]`);
      await approve.click();
      if (action === "pause") {
        await page.waitForSelector("#run-status.paused", { timeout: 60000 });
        await page.click(".controls button[data-action=resume]");
        await page.waitForSelector("#run-status.completed", { timeout: 60000 });
        await page.waitForSelector("#answer:not([hidden])");
        out.resumedAnswer = await page.locator("#answer").innerText();
      } else {
        await page.waitForSelector("#run-status.cancelled", { timeout: 60000 });
        out.cancelledStatus = await page.locator("#run-status").innerText();
      }
    }
    return out;
  } finally {
    await browser.close();
  }
}

// Preview a run's HTML artifact from its tool card: report the frame it is shown in and
// whether the artifact's own script ran (it must not: the frame is sandboxed).
async function artifactScenario(workflowId) {
  const browser = await launch();
  const out = { dialogs: [] };
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on("pageerror", (err) => { out.pageErrors = [...(out.pageErrors || []), String(err)]; });
    page.on("dialog", async (dialog) => { out.dialogs.push(dialog.message()); await dialog.dismiss(); });
    await page.goto(gateway + "/");
    await page.waitForSelector("#key-form:not([hidden])");
    await page.fill("#api-key", apiKey);
    await page.click("#key-form button");
    await page.evaluate((wf) => { location.hash = wf; }, workflowId);
    await page.waitForSelector("#run-status.completed", { timeout: 60000 });
    const tool = page.locator("#timeline li.tool").first();
    await tool.locator("summary").click();
    const button = tool.locator("button.artifact");
    out.button = await button.innerText();
    await button.click();
    const frame = page.locator("iframe.preview");
    await frame.waitFor({ timeout: 20000 });
    out.sandbox = await frame.getAttribute("sandbox");
    out.srcdocHasMarker = (await frame.getAttribute("srcdoc")).includes("artifact-marker");
    await page.waitForTimeout(500);
    out.heading = await page.frameLocator("iframe.preview").locator("h1").innerText();
    out.ran = await page.evaluate(() => window.__artifactRan || 0);
    return out;
  } finally {
    await browser.close();
  }
}

// Open a workflow whose events carry markup in every field the console shows, beside task
// and conversation lists that hold it too: report whether anything ran and what the page
// shows. A payload that ran would set window.__shuttleXss or open a dialog.
async function hostileScenario(workflowId) {
  const browser = await launch();
  const out = { dialogs: [] };
  const TAGS = ["li", "details", "summary", "div", "pre", "b", "a", "span", "p", "code", "strong", "em", "ul", "ol", "button"];
  try {
    const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
    page.on("pageerror", (err) => { out.pageErrors = [...(out.pageErrors || []), String(err)]; });
    page.on("dialog", async (dialog) => { out.dialogs.push(dialog.message()); await dialog.dismiss(); });
    await page.goto(gateway + "/");
    await page.waitForSelector("#key-form:not([hidden])");
    await page.fill("#api-key", apiKey);
    await page.click("#key-form button");
    await page.waitForSelector("#tasks li");
    await page.waitForSelector("#sessions li");
    await page.evaluate((wf) => { location.hash = wf; }, workflowId);
    await page.waitForSelector("#run-status.completed", { timeout: 60000 });
    await page.waitForSelector("#answer:not([hidden])");
    await page.waitForSelector("#usage:not([hidden])");
    out.ran = await page.evaluate(() => window.__shuttleXss || 0);
    out.images = await page.locator("img, svg, script:not([src]), iframe").count();
    // Every element the log and the lists put on the page is one the console makes.
    out.foreign = await page.evaluate((tags) => [...document.querySelectorAll("#timeline *, #answer *, #tasks *, #sessions *")]
      .map((e) => e.tagName.toLowerCase()).filter((t) => !tags.includes(t)), TAGS);
    out.query = await page.locator("#run-query").textContent();
    out.timeline = await page.locator("#timeline li").evaluateAll((lis) => lis.map((li) => li.textContent));
    out.answer = await page.locator("#answer").textContent();
    out.usage = await page.locator("#usage").textContent();
    out.tasks = await page.locator("#tasks li").evaluateAll((lis) => lis.map((li) => li.textContent));
    out.sessions = await page.locator("#sessions li a").evaluateAll((as) => as.map((a) => [a.textContent, a.dataset.title]));
    out.storedKey = await page.evaluate(() => ({
      session: sessionStorage.getItem("shuttle.apiKey"), local: localStorage.getItem("shuttle.apiKey"),
    }));
    return out;
  } finally {
    await browser.close();
  }
}

// Watch a workflow while the test appends to its log, reporting the answer shown at each
// step the test names: a restarted answer must replace, never extend, what was shown.
async function restartScenario(workflowId) {
  const browser = await launch();
  const out = {};
  const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  try {
    const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
    page.on("pageerror", (err) => { out.pageErrors = [...(out.pageErrors || []), String(err)]; });
    await page.goto(gateway + "/");
    await page.waitForSelector("#key-form:not([hidden])");
    await page.fill("#api-key", apiKey);
    await page.click("#key-form button");
    await page.evaluate((wf) => { location.hash = wf; }, workflowId);
    const shown = () => page.evaluate(() => { const a = document.querySelector("#answer"); return a.hidden ? "" : a.innerText; });
    for (let line = await lines.next(); !line.done && line.value !== "end"; line = await lines.next()) {
      const wanted = JSON.parse(line.value).answer;
      const matched = await page.waitForFunction((text) => {
        const a = document.querySelector("#answer");
        return (a.hidden ? "" : a.innerText) === text;
      }, wanted, { timeout: 20000 }).then(() => true, () => false);
      process.stdout.write(JSON.stringify({ matched, answer: await shown() }) + "\n");
    }
    await page.waitForSelector("#run-status.completed", { timeout: 60000 });
    out.notices = await page.locator("#timeline li.notice").allInnerTexts();
    out.answer = await shown();
    return out;
  } finally {
    await browser.close();
  }
}

const result = mode === "grpc-web" ? await grpcWeb()
  : mode === "restart" ? await restartScenario(process.argv[5])
  : mode === "approvals" ? await approvalScenario()
  : mode === "hostile" ? await hostileScenario(process.argv[5])
  : mode === "artifact" ? await artifactScenario(process.argv[5]) : await consoleScenario();
process.stdout.write(JSON.stringify(result) + "\n");
