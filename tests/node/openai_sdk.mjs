// coda serve driven by the official openai npm SDK: models, completions, chat, streaming with
// usage, and errors surfacing as the SDK's typed errors.
// Usage: node tests/node/openai_sdk.mjs build/coda
import OpenAI from "openai";
import { check, checkStreamEqualsWhole, expectError, failures, startCoda } from "./sdk_common.mjs";

const coda = process.argv[2];
const { proc, url } = await startCoda(coda, ["serve", "--port", "0", "-t", "1", "--api-key", "test-key"]);
try {
  const client = new OpenAI({ baseURL: url + "/v1", apiKey: "test-key", maxRetries: 0 });
  const models = await client.models.list();
  check(models.data.length === 1 && models.data[0].id === "coda", "models.list");
  const one = await client.models.retrieve("coda");
  check(one.id === "coda" && one.object === "model", "models.retrieve");
  await expectError(client.models.retrieve("gpt-4o"), OpenAI.NotFoundError, 404, "models.retrieve of another model -> NotFoundError");

  const c = await client.completions.create({ model: "coda", prompt: "In the beginning God", max_tokens: 12, temperature: 0 });
  check(c.choices[0].text.startsWith(" of Israel, and the LORD God"), "completions.create: " + JSON.stringify(c.choices[0].text));
  check(c.usage.completion_tokens === 12 && c.choices[0].finish_reason === "length", "completion usage and finish_reason");
  const two = await client.completions.create({ model: "coda", prompt: ["And Moses", "In the beginning"], max_tokens: 3, n: 2, seed: 7, temperature: 1 });
  check(two.choices.length === 4 && two.choices.map((c) => c.index).join() === "0,1,2,3" &&
        two.usage.completion_tokens > 0 && two.usage.completion_tokens <= 12, "completions.create with two prompts and n = 2");
  // Prompt scoring as lm-evaluation-harness asks for it: the prompt echoed with its logprobs.
  const e = await client.completions.create({
    model: "coda", prompt: "In the beginning God", max_tokens: 1, temperature: 0, logprobs: 1, echo: true });
  const lp = e.choices[0].logprobs;
  check(e.choices[0].text.startsWith("In the beginning God") && lp.token_logprobs[0] === null &&
        lp.token_logprobs.length === e.usage.prompt_tokens + 1 &&
        lp.token_logprobs.slice(1).every((x) => typeof x === "number" && x <= 0), "completions.create with echo and logprobs");

  const chat = await client.chat.completions.create({
    model: "coda", messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hello" }],
    max_tokens: 16, temperature: 0.7, seed: 1, logprobs: true, top_logprobs: 2,
  });
  check(typeof chat.choices[0].message.content === "string" && chat.choices[0].message.role === "assistant", "chat.completions.create");
  check(chat.choices[0].logprobs.content.length === chat.usage.completion_tokens, "chat logprobs");

  // Structured output as the SDK sends it (strict json_schema): the content parses and has the shape.
  const shaped = await client.chat.completions.create({
    model: "coda", messages: [{ role: "user", content: "A city as JSON" }], max_tokens: 1000, temperature: 1, seed: 4,
    response_format: { type: "json_schema", json_schema: { name: "city", strict: true, schema: {
      type: "object", additionalProperties: false, required: ["name", "capital", "rank"],
      properties: { name: { type: "string", maxLength: 10 }, capital: { type: "boolean" }, rank: { type: "integer" } } } } },
    coda: { guard: "observe" },
  });
  let city = null;
  try { city = JSON.parse(shaped.choices[0].message.content); } catch { city = null; }
  check(shaped.choices[0].finish_reason === "stop" && city !== null && typeof city.name === "string" &&
        typeof city.capital === "boolean" && Number.isInteger(city.rank) && Object.keys(city).length === 3,
        "chat.completions.create with response_format json_schema: " + shaped.choices[0].message.content);
  await expectError(client.chat.completions.create({ model: "coda", messages: [{ role: "user", content: "x" }],
    response_format: { type: "json_schema", json_schema: { name: "n", schema: { type: "string", pattern: "^a" } } } }),
    OpenAI.BadRequestError, 400, "an unsupported schema keyword -> BadRequestError");

  // A forced tool call as the SDK sends it: tool_calls with JSON arguments of the tool's parameters.
  const tools = [{ type: "function", function: { name: "get_weather", parameters: {
    type: "object", additionalProperties: false, required: ["city"], properties: { city: { type: "string", maxLength: 12 } } } } }];
  const tc = await client.chat.completions.create({
    model: "coda", messages: [{ role: "user", content: "Weather in Rome?" }], max_tokens: 1000, temperature: 1, seed: 2,
    tools, tool_choice: "required", coda: { guard: "observe" },
  });
  const call = tc.choices[0].message.tool_calls?.[0];
  let args = null;
  try { args = JSON.parse(call.function.arguments); } catch { args = null; }
  check(tc.choices[0].finish_reason === "tool_calls" && call?.function.name === "get_weather" && args !== null &&
        typeof args.city === "string" && Object.keys(args).length === 1,
        "chat.completions.create with tool_choice required: " + JSON.stringify(tc.choices[0].message));

  await checkStreamEqualsWhole(client);

  const cstream = await client.completions.create({ model: "coda", prompt: "And Moses", max_tokens: 10, stream: true });
  let n = 0;
  for await (const chunk of cstream) n += chunk.choices.length;
  check(n > 0, "completions streaming");

  // Embeddings: the SDK asks for base64 unless told otherwise and decodes it; both forms carry the
  // same float32 values, one unit vector per input in order.
  const texts = ["In the beginning God", "And Moses said unto the LORD"];
  const eb = await client.embeddings.create({ model: "coda", input: texts });
  const ef = await client.embeddings.create({ model: "coda", input: texts, encoding_format: "float" });
  const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  check(eb.data.length === 2 && eb.data.map((d) => d.index).join() === "0,1" && eb.usage.prompt_tokens > 2 &&
        eb.data.every((d, i) => d.embedding.length === ef.data[i].embedding.length &&
                                d.embedding.every((x, k) => x === ef.data[i].embedding[k])) &&
        Math.abs(norm(ef.data[0].embedding) - 1) < 1e-5 &&
        ef.data[0].embedding.some((x, k) => x !== ef.data[1].embedding[k]),
        "embeddings.create: base64 (the SDK's default) and float give the same unit vectors");
  await expectError(client.embeddings.create({ model: "coda", input: "" }), OpenAI.BadRequestError, 400,
    "an empty embedding input -> BadRequestError");
  // The Responses API, as the SDK's responses.create speaks it: the same greedy text as chat, the
  // SDK's output_text, and the stream's typed events ending in the whole response.
  const rq = { model: "coda", instructions: "Answer briefly.", input: "Who was Moses?", max_output_tokens: 10, temperature: 0 };
  const asChat = await client.chat.completions.create({ model: "coda", max_tokens: 10, temperature: 0,
    messages: [{ role: "system", content: rq.instructions }, { role: "user", content: rq.input }] });
  const resp = await client.responses.create(rq);
  check(resp.object === "response" && resp.output_text === asChat.choices[0].message.content &&
        resp.usage.output_tokens === asChat.usage.completion_tokens && resp.usage.input_tokens === asChat.usage.prompt_tokens &&
        (resp.status === "completed" || resp.incomplete_details?.reason === "max_output_tokens"),
        "responses.create: chat's greedy text as output_text: " + JSON.stringify(resp.output_text));
  const rstream = await client.responses.create({ ...rq, stream: true });
  const types = [];
  let deltas = "", last = null;
  for await (const ev of rstream) {
    types.push(ev.type);
    if (ev.type === "response.output_text.delta") deltas += ev.delta;
    if (ev.type === "response.completed" || ev.type === "response.incomplete") last = ev.response;
  }
  check(types[0] === "response.created" && types.includes("response.output_text.done") && last !== null &&
        deltas === resp.output_text && last.output[0].content[0].text === resp.output_text,
        "responses.create with stream: typed events whose deltas make the text: " + types.slice(0, 5).join(","));
  // A second turn that names the first by previous_response_id, as the Agents SDK chains them.
  const turn2 = await client.responses.create({ model: "coda", previous_response_id: resp.id, input: "And then?",
    max_output_tokens: 4, temperature: 0 });
  const asChat2 = await client.chat.completions.create({ model: "coda", max_tokens: 4, temperature: 0,
    messages: [{ role: "user", content: rq.input }, { role: "assistant", content: resp.output_text },
               { role: "user", content: "And then?" }] });
  check(turn2.previous_response_id === resp.id && turn2.usage.input_tokens === asChat2.usage.prompt_tokens &&
        turn2.output_text === asChat2.choices[0].message.content,
        "responses.create with previous_response_id: the conversation continues: " + JSON.stringify(turn2.output_text));
  await expectError(client.responses.create({ model: "coda", input: "x", previous_response_id: "resp_1" }),
    OpenAI.BadRequestError, 400, "an unknown previous_response_id -> BadRequestError");
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

// Tool calls in the model's own words (tool_choice auto, Qwen2.5's <tool_call> format): the reply
// is fixed with guided_choice, and the SDK's stream helper assembles the streamed tool_calls deltas
// as OpenAI's client does.
const qwen = new URL("../data/templates/Qwen-Qwen2.5-7B-Instruct.jinja", import.meta.url).pathname;
const second = await startCoda(coda, ["serve", "--port", "0", "-t", "1", "--chat-template", qwen]);
try {
  const client = new OpenAI({ baseURL: second.url + "/v1", apiKey: "none", maxRetries: 0 });
  const reply = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
  const body = {
    model: "coda", messages: [{ role: "user", content: "Weather in Paris?" }], max_tokens: 200,
    tools: [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }],
    guided_choice: [reply], coda: { guard: "observe" },
  };
  const isCall = (m) => m.tool_calls?.length === 1 && m.tool_calls[0].function.name === "get_weather" &&
    JSON.parse(m.tool_calls[0].function.arguments).city === "Paris";
  const whole = await client.chat.completions.create(body);
  check(whole.choices[0].finish_reason === "tool_calls" && whole.choices[0].message.content === "Let me check." &&
        isCall(whole.choices[0].message), "tool_choice auto: " + JSON.stringify(whole.choices[0].message));
  const final = await client.beta.chat.completions.stream(body).finalChatCompletion();
  check(final.choices[0].finish_reason === "tool_calls" && final.choices[0].message.content.trim() === "Let me check." &&
        isCall(final.choices[0].message), "tool_choice auto, streamed: " + JSON.stringify(final.choices[0].message));
  // The same reply through responses.create: the SDK reads the call as a function_call item, and
  // the next turn sends the call and its output back as items.
  const rbody = { model: "coda", input: "Weather in Paris?", max_output_tokens: 200, guided_choice: [reply],
    tools: [{ type: "function", name: "get_weather", parameters: body.tools[0].function.parameters }],
    coda: { guard: "observe" } };
  const r = await client.responses.create(rbody);
  const fc = r.output.find((o) => o.type === "function_call");
  check(r.status === "completed" && r.output_text === "Let me check." && fc?.name === "get_weather" &&
        JSON.parse(fc.arguments).city === "Paris", "responses.create with tools: " + JSON.stringify(r.output));
  let streamedCall = null;
  for await (const ev of await client.responses.create({ ...rbody, stream: true }))
    if (ev.type === "response.output_item.done" && ev.item.type === "function_call") streamedCall = ev.item;
  check(streamedCall?.call_id === undefined ? false : JSON.parse(streamedCall.arguments).city === "Paris",
        "responses.create with tools, streamed: " + JSON.stringify(streamedCall));
  const next = await client.responses.create({ model: "coda", max_output_tokens: 4, tools: rbody.tools,
    input: [{ role: "user", content: "Weather in Paris?" }, fc,
            { type: "function_call_output", call_id: fc.call_id, output: "sunny" }] });
  check(next.status === "completed" || next.status === "incomplete",
        "responses.create with the call and its output as items: " + next.status);
} catch (e) {
  check(false, "unexpected: " + e.stack);
} finally {
  second.proc.kill("SIGTERM");
}
console.log(`${failures} failure(s)`);
process.exit(failures ? 1 : 0);
