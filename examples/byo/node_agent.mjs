// A Node agent in the program runtime's stdio mode: JSON lines in on stdin, JSON lines out on
// stdout (docs/network.md lists every frame). It answers each message that mentions it, in that
// message's conversation; `--ask PEER` makes each answer mention PEER, and an owner instruction
// is said to PEER. It ends on the `stop` line (or the end of its stdin).
import { createInterface } from "node:readline";

const at = process.argv.indexOf("--ask");
const ask = at > 0 ? process.argv[at + 1] : null;
let me = "?";

function write(frame) {
  process.stdout.write(JSON.stringify(frame) + "\n");
}

for await (const line of createInterface({ input: process.stdin })) {
  const frame = JSON.parse(line);
  if (frame.type === "hello") {
    me = frame.name;
  } else if (frame.type === "message" && frame.text.includes(`@${me}`)) {
    const heard = frame.text.replaceAll("@", "");
    const mention = ask ? `@${ask} ` : "";
    write({ type: "send", conversation: frame.conversation, text: `${mention}${me} (node) heard ${frame.from}: ${heard}` });
  } else if (frame.type === "instruction" && ask) {
    write({ type: "send", to: [ask], text: `${me} was told: ${frame.text}` });
  } else if (frame.type === "error") {
    process.stderr.write(`refused: ${frame.reason}: ${frame.message}\n`);
  } else if (frame.type === "stop") {
    break;
  }
}
process.exit(0);
