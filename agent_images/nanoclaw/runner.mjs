// The NanoClaw-style agent runner: one Claude Agent SDK session, held open and fed follow-ups.
//
// It keeps NanoClaw v1's container contract (container/agent-runner/src/index.ts at tag v1.2.0 of
// github.com/qwibitai/nanoclaw), written anew here:
//   stdin   the first line is the session's input as JSON ({prompt, assistantName, model, ...});
//           each later line is a follow-up ({"type": "message", "text": ...}) pushed into the same
//           open query(); {"type": "close"} or the end of stdin ends the session (NanoClaw polls
//           files in /workspace/ipc/input/ and a _close file for the same two things).
//   stdout  every output is one JSON object between ---NANOCLAW_OUTPUT_START--- and
//           ---NANOCLAW_OUTPUT_END--- lines: {"status": "success" | "error", "result", "newSessionId",
//           "error"} for each result of the query, and {"status": "success", "result": null,
//           "sendMessage": {"text"}} for each call of the send_message tool (NanoClaw's MCP tool of
//           that name writes a file the host polls).
// Logs go to stderr. The SDK's options are trimmed so that a small local model can hold the
// prompt: a short system prompt, no built-in tools, send_message as the only allowed tool, no
// settings files, no MCP config but this one, bare mode, no persisted session.
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const START = '---NANOCLAW_OUTPUT_START---';
const END = '---NANOCLAW_OUTPUT_END---';
const modules = process.env.SOCIETY_NANOCLAW_MODULES;
if (!modules) {
  console.error('[nanoclaw-runner] SOCIETY_NANOCLAW_MODULES is not set');
  process.exit(2);
}
const sdk = await import(pathToFileURL(join(modules, '@anthropic-ai/claude-agent-sdk/sdk.mjs')).href);
const { z } = await import(pathToFileURL(join(modules, 'zod/index.js')).href);

function writeOutput(output) {
  process.stdout.write(`${START}\n${JSON.stringify(output)}\n${END}\n`);
}

function log(line) {
  process.stderr.write(`[nanoclaw-runner] ${line}\n`);
}

// A push stream: the open query() reads user messages from it until end().
class MessageStream {
  queue = [];
  wake = null;
  done = false;

  push(text) {
    this.queue.push({
      type: 'user',
      message: { role: 'user', content: text },
      parent_tool_use_id: null,
      session_id: '',
    });
    this.wake?.();
  }

  end() {
    this.done = true;
    this.wake?.();
  }

  async *[Symbol.asyncIterator]() {
    for (;;) {
      while (this.queue.length > 0) yield this.queue.shift();
      if (this.done) return;
      await new Promise((resolve) => { this.wake = resolve; });
      this.wake = null;
    }
  }
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity })[Symbol.asyncIterator]();
const first = await lines.next();
let input;
try {
  input = JSON.parse(first.value ?? '');
  if (typeof input.prompt !== 'string' || !input.prompt) throw new Error('no prompt');
} catch (err) {
  writeOutput({ status: 'error', result: null, error: `Failed to parse input: ${err.message}` });
  process.exit(1);
}

const stream = new MessageStream();
stream.push(input.prompt);
(async () => {
  for (let next = await lines.next(); !next.done; next = await lines.next()) {
    let frame;
    try {
      frame = JSON.parse(next.value);
    } catch {
      log('a follow-up line that is not JSON was dropped');
      continue;
    }
    if (frame.type === 'close') break;
    if (frame.type === 'message' && typeof frame.text === 'string' && frame.text) {
      stream.push(frame.text);
    }
  }
  stream.end();
})();

const sendMessage = sdk.tool(
  'send_message',
  'Send a message to the conversation right away, while you are still working.',
  { text: z.string().describe('The message text to send') },
  async (args) => {
    writeOutput({ status: 'success', result: null, sendMessage: { text: args.text } });
    return { content: [{ type: 'text', text: 'Message sent.' }] };
  },
);

let newSessionId;
// The text of the last real assistant message: a reply the output cap cut short ends in an
// error result (the CLI's "response exceeded the output token maximum"), yet the model said it.
let lastText = null;
try {
  for await (const message of sdk.query({
    prompt: stream,
    options: {
      cwd: process.cwd(),
      model: input.model,
      systemPrompt: input.systemPrompt,
      tools: [],
      allowedTools: ['mcp__nanoclaw__send_message'],
      mcpServers: {
        nanoclaw: sdk.createSdkMcpServer({ name: 'nanoclaw', version: '1.0.0', tools: [sendMessage] }),
      },
      strictMcpConfig: true,
      settingSources: [],
      maxTurns: input.maxTurns,
      persistSession: false,
      permissionMode: 'default',
      extraArgs: { bare: null },
      pathToClaudeCodeExecutable: input.claudeCode,
      env: process.env,
      stderr: (data) => process.stderr.write(data),
    },
  })) {
    if (message.type === 'system' && message.subtype === 'init') {
      newSessionId = message.session_id;
      log(`session ${newSessionId} started`);
    } else if (message.type === 'assistant' && !message.error && !message.parent_tool_use_id) {
      const texts = (message.message?.content ?? []).filter((b) => b.type === 'text');
      if (texts.length > 0) lastText = texts.map((b) => b.text).join('');
    } else if (message.type === 'result') {
      const ok = message.subtype === 'success' && !message.is_error;
      const cut = !ok && message.subtype === 'success' && lastText;
      writeOutput({
        status: ok || cut ? 'success' : 'error',
        result: ok ? (message.result || null) : cut ? lastText : null,
        newSessionId,
        ...(ok || cut ? {} : { error: message.result || message.subtype }),
        ...(cut ? { truncated: true } : {}),
        usage: message.usage ?? null,
      });
      lastText = null;
    }
  }
} catch (err) {
  writeOutput({ status: 'error', result: null, newSessionId, error: String(err?.message ?? err) });
  process.exit(1);
}
log('session ended');
