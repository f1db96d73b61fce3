// A Node agent in the program runtime's stdio mode: JSON lines in on stdin, JSON lines out on
// stdout. It answers every message in its conversation and greets the peer named in argv once.
import { createInterface } from "node:readline";

const greet = process.argv[2];
let me = "?";

function write(frame) {
  process.stdout.write(JSON.stringify(frame) + "\n");
}

for await (const line of createInterface({ input: process.stdin })) {
  const frame = JSON.parse(line);
  if (frame.type === "hello") {
    me = frame.name;
    if (greet) write({ type: "send", to: [greet], text: `hello ${greet}, ${me} here (node)` });
  } else if (frame.type === "message") {
    write({
      type: "send",
      conversation: frame.conversation,
      text: `${me} (node) heard ${frame.from}: ${frame.text}`,
    });
  } else if (frame.type === "instruction") {
    if (greet) write({ type: "send", to: [greet], text: `${me} was told: ${frame.text}` });
  } else if (frame.type === "error") {
    process.stderr.write(`refused: ${frame.reason}: ${frame.message}\n`);
  } else if (frame.type === "stop") {
    break;
  }
}
process.exit(0);
