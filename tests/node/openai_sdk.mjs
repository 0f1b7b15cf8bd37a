// coda serve driven by the official openai npm SDK: models, completions, chat, streaming with
// usage, and errors surfacing as the SDK's typed errors.
// Usage: node tests/node/openai_sdk.mjs build/coda
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import OpenAI from "openai";

const coda = process.argv[2];
let failures = 0;
const check = (cond, what) => {
  if (!cond) {
    failures++;
    console.log("FAIL:", what);
  } else {
    console.log("ok:", what);
  }
};

function startServer(args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(coda, ["serve", "--port", "0", "-t", "1", ...args], { stdio: ["ignore", "pipe", "pipe"] });
    const rl = createInterface({ input: proc.stdout });
    rl.once("line", (line) => {
      const m = line.match(/listening on (http:\/\/[^\s]+)/);
      if (!m) reject(new Error("server did not start: " + line));
      else resolve({ proc, url: m[1] });
    });
    proc.once("exit", (code) => reject(new Error("server exited " + code)));
  });
}

async function expectError(promise, cls, status, what) {
  try {
    await promise;
    check(false, what + " (no error)");
  } catch (e) {
    check(e instanceof cls && e.status === status, `${what}: ${e.constructor.name} ${e.status} ${e.message}`);
  }
}

const { proc, url } = await startServer(["--api-key", "test-key"]);
try {
  const client = new OpenAI({ baseURL: url + "/v1", apiKey: "test-key", maxRetries: 0 });
  const models = await client.models.list();
  check(models.data.length === 1 && models.data[0].id === "coda", "models.list");

  const c = await client.completions.create({ model: "coda", prompt: "In the beginning God", max_tokens: 12, temperature: 0 });
  check(c.choices[0].text.startsWith(" of Israel, and the LORD God"), "completions.create: " + JSON.stringify(c.choices[0].text));
  check(c.usage.completion_tokens === 12 && c.choices[0].finish_reason === "length", "completion usage and finish_reason");

  const chat = await client.chat.completions.create({
    model: "coda", messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hello" }],
    max_tokens: 16, temperature: 0.7, seed: 1, logprobs: true, top_logprobs: 2,
  });
  check(typeof chat.choices[0].message.content === "string" && chat.choices[0].message.role === "assistant", "chat.completions.create");
  check(chat.choices[0].logprobs.content.length === chat.usage.completion_tokens, "chat logprobs");

  const stream = await client.chat.completions.create({
    model: "coda", messages: [{ role: "user", content: "Tell me a story" }], max_tokens: 24, temperature: 0.7, seed: 1,
    stream: true, stream_options: { include_usage: true },
  });
  let text = "", usage = null, finish = null;
  for await (const chunk of stream) {
    if (chunk.choices.length) {
      text += chunk.choices[0].delta?.content ?? "";
      finish = chunk.choices[0].finish_reason ?? finish;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  const same = await client.chat.completions.create({
    model: "coda", messages: [{ role: "user", content: "Tell me a story" }], max_tokens: 24, temperature: 0.7, seed: 1,
  });
  check(text === same.choices[0].message.content, "streamed text equals the non-streamed one (same seed)");
  check(usage && usage.completion_tokens > 0 && finish !== null, "stream usage and finish_reason");

  const cstream = await client.completions.create({ model: "coda", prompt: "And Moses", max_tokens: 10, stream: true });
  let n = 0;
  for await (const chunk of cstream) n += chunk.choices.length;
  check(n > 0, "completions streaming");

  await expectError(client.chat.completions.create({ model: "coda", messages: [{ role: "user", content: "x" }], temperature: 9 }),
    OpenAI.BadRequestError, 400, "invalid temperature -> BadRequestError");
  await expectError(client.completions.create({ model: "coda", prompt: "x", max_tokens: 100000 }),
    OpenAI.BadRequestError, 400, "context length -> BadRequestError");
  await expectError(client.completions.create({ model: "gpt-4o", prompt: "x" }), OpenAI.NotFoundError, 404,
    "unknown model -> NotFoundError");
  const wrong = new OpenAI({ baseURL: url + "/v1", apiKey: "wrong", maxRetries: 0 });
  await expectError(wrong.models.list(), OpenAI.AuthenticationError, 401, "wrong key -> AuthenticationError");
} catch (e) {
  check(false, "unexpected: " + e.stack);
} finally {
  proc.kill("SIGTERM");
}
console.log(`${failures} failure(s)`);
process.exit(failures ? 1 : 0);
