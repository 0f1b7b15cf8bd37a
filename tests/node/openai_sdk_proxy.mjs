// The official openai npm SDK through `coda proxy` in front of `coda serve`: models, completions,
// chat, streaming with usage, a loop stopped by the guard, and errors as the SDK's typed errors,
// the upstream's (400, 404) passed through and the proxy's own (401, 502).
// Usage: node tests/node/openai_sdk_proxy.mjs build/coda
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import OpenAI from "openai";
import { check, checkStreamEqualsWhole, expectError, failures, startCoda } from "./sdk_common.mjs";

const coda = process.argv[2];
// A port nothing listens on, held for the whole test: a socket bound and never listening, so a
// connect is refused and no test running beside this one can be given the port. Node cannot bind
// without listening, so Python holds it until its stdin closes. (A port bound and then closed can
// be handed to another test's server at once; stop 56 found that race in tests/proxy.)
const holder = spawn("/usr/bin/python3", ["-c",
  "import socket, sys\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\nprint(s.getsockname()[1], flush=True)\nsys.stdin.read()"],
  { stdio: ["pipe", "pipe", "inherit"] });
const deadPort = await new Promise((resolve, reject) => {
  createInterface({ input: holder.stdout }).once("line", (line) => resolve(Number(line)));
  holder.once("exit", (code) => reject(new Error("the port holder exited " + code)));
});

const upstream = await startCoda(coda, ["serve", "--port", "0", "-t", "1", "--api-key", "upstream-key"]);
const proxy = await startCoda(coda, ["proxy", "--upstream", upstream.url, "--upstream-api-key", "upstream-key", "--port", "0",
  "--api-key", "proxy-key", "--guard", "stop"]);
const dead = await startCoda(coda, ["proxy", "--upstream", `http://127.0.0.1:${deadPort}`, "--port", "0"]);
try {
  const client = new OpenAI({ baseURL: proxy.url + "/v1", apiKey: "proxy-key", maxRetries: 0 });
  const models = await client.models.list();
  check(models.data.length === 1 && models.data[0].id === "coda", "models.list from the upstream");
  const one = await client.models.retrieve("coda");
  check(one.id === "coda" && one.object === "model", "models.retrieve from the upstream's list");

  const c = await client.completions.create({ model: "coda", prompt: "The king said", max_tokens: 12, temperature: 0 });
  check(typeof c.choices[0].text === "string" && c.choices[0].finish_reason === "length", "completions.create");
  check(c.usage.completion_tokens === 12, "completion usage");

  const chat = await client.chat.completions.create({
    model: "coda", messages: [{ role: "user", content: "Hello" }], max_tokens: 16, temperature: 0.7, seed: 1,
    logprobs: true, top_logprobs: 2,
  });
  check(typeof chat.choices[0].message.content === "string" && chat.choices[0].message.role === "assistant",
    "chat.completions.create");
  check(chat.choices[0].logprobs.content.every((t) => t.top_logprobs.length === 2), "chat logprobs through the proxy");
  // The Responses API through the proxy: the SDK's output_text, and its stream's events.
  const resp = await client.responses.create({ model: "coda", input: "Hello", max_output_tokens: 8, temperature: 0 });
  let streamed = "", lastType = "";
  for await (const ev of await client.responses.create({ model: "coda", input: "Hello", max_output_tokens: 8,
                                                         temperature: 0, stream: true })) {
    if (ev.type === "response.output_text.delta") streamed += ev.delta;
    lastType = ev.type;
  }
  check(resp.object === "response" && typeof resp.output_text === "string" && resp.output_text.length > 0 &&
        streamed === resp.output_text && (lastType === "response.completed" || lastType === "response.incomplete"),
        "responses.create through the proxy, whole and streamed: " + JSON.stringify(resp.output_text));

  await checkStreamEqualsWhole(client);

  const loop = await client.completions.create({ model: "coda", prompt: "In the beginning God", max_tokens: 500,
    temperature: 0, stream: true });
  let loopFinish = null;
  for await (const chunk of loop) loopFinish = chunk.choices[0]?.finish_reason ?? loopFinish;
  check(loopFinish === "repetition", "a loop ends with finish_reason repetition: " + loopFinish);

  await expectError(client.chat.completions.create({ model: "coda", messages: [{ role: "user", content: "x" }], temperature: 9 }),
    OpenAI.BadRequestError, 400, "the upstream's 400 -> BadRequestError");
  await expectError(client.completions.create({ model: "gpt-4o", prompt: "x" }), OpenAI.NotFoundError, 404,
    "the upstream's 404 -> NotFoundError");
  const wrong = new OpenAI({ baseURL: proxy.url + "/v1", apiKey: "wrong", maxRetries: 0 });
  await expectError(wrong.models.list(), OpenAI.AuthenticationError, 401, "the proxy's key -> AuthenticationError");
  const nowhere = new OpenAI({ baseURL: dead.url + "/v1", apiKey: "x", maxRetries: 0 });
  await expectError(nowhere.completions.create({ model: "coda", prompt: "x" }), OpenAI.InternalServerError, 502,
    "an unreachable upstream -> 502");
  await expectError(nowhere.chat.completions.create({ model: "coda", messages: [{ role: "user", content: "x" }], stream: true }),
    OpenAI.InternalServerError, 502, "an unreachable upstream, streaming -> 502");
} catch (e) {
  check(false, "unexpected: " + e.stack);
} finally {
  for (const p of [dead, proxy, upstream]) p.proc.kill("SIGTERM");
  holder.stdin.end();
}
console.log(`${failures} failure(s)`);
process.exit(failures ? 1 : 0);
