// What the SDK tests share: a check counter, starting a `coda` process that prints its URL, typed
// error expectations, and the stream-versus-whole comparison.
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";

export let failures = 0;
export const check = (cond, what) => {
  if (!cond) {
    failures++;
    console.log("FAIL:", what);
  } else {
    console.log("ok:", what);
  }
};

// Runs `coda ARGS...` and resolves with the process and the URL from its "listening on URL" line.
export function startCoda(coda, args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(coda, args, { stdio: ["ignore", "pipe", "pipe"] });
    const rl = createInterface({ input: proc.stdout });
    rl.once("line", (line) => {
      const m = line.match(/listening on (http:\/\/[^\s]+)/);
      if (!m) reject(new Error(args[0] + " did not start: " + line));
      else resolve({ proc, url: m[1] });
    });
    proc.once("exit", (code) => reject(new Error(args[0] + " exited " + code)));
  });
}

export async function expectError(promise, cls, status, what) {
  try {
    await promise;
    check(false, what + " (no error)");
  } catch (e) {
    check(e instanceof cls && e.status === status, `${what}: ${e.constructor.name} ${e.status} ${e.message}`);
  }
}

// A seeded chat streamed with usage equals the same request answered whole.
export async function checkStreamEqualsWhole(client) {
  const req = { model: "coda", messages: [{ role: "user", content: "Tell me a story" }], max_tokens: 24,
    temperature: 0.7, seed: 1 };
  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = "", usage = null, finish = null;
  for await (const chunk of stream) {
    if (chunk.choices.length) {
      text += chunk.choices[0].delta?.content ?? "";
      finish = chunk.choices[0].finish_reason ?? finish;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  const same = await client.chat.completions.create(req);
  check(text === same.choices[0].message.content, "streamed text equals the non-streamed one (same seed)");
  check(usage && usage.completion_tokens > 0 && finish !== null, "stream usage and finish_reason");
}
