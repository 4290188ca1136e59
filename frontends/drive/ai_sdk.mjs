// Drives durafact's UI message stream with the AI SDK's own chat client: AbstractChat
// (what useChat wraps) over DefaultChatTransport, which parses every chunk with the
// SDK's chunk schema and fails on one that breaks it. Prints one JSON value per line:
// {chunk} for every chunk received, then {messages, status} at the end.
//
//   node drive/ai_sdk.mjs BASE TOKEN API ID SCENARIO TEXT [BODY_JSON]
//
// API is "chats" or "runs"; SCENARIO one of:
//   send     send TEXT, read the reply to its end
//   drop     send TEXT, drop the connection after the third text delta, resume
//   twice    POST the same message (same id) twice, each stream read to its end
//   approve  send TEXT, approve every tool approval request, read what follows
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
} from "ai";

const [base, token, api, id, scenario, text, bodyJson] = process.argv.slice(2);
const print = (value) => process.stdout.write(`${JSON.stringify(value)}\n`);

class State {
  status = "ready";
  error = undefined;
  messages = [];
  pushMessage = (m) => { this.messages = [...this.messages, m]; };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (i, m) => { this.messages = this.messages.map((x, j) => (j === i ? m : x)); };
  snapshot = (thing) => structuredClone(thing);
}

class NodeChat extends AbstractChat {
  constructor(init) {
    super({ ...init, state: new State() });
  }
}

// Each chunk the transport reads, printed as it arrives; with `dropAfter`, the body
// fails as a dropped network connection does after that many text deltas.
let dropAfter = scenario === "drop" ? 3 : Infinity;
const printing = async (url, init) => {
  const response = await fetch(url, init);
  print({ request: `${init.method} ${new URL(url).pathname}`, status: response.status });
  if (!response.body) return response;
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  let deltas = 0;
  const body = new ReadableStream({
    async pull(controller) {
      const { done, value } = await reader.read();
      if (done) return controller.close();
      buffered += decoder.decode(value, { stream: true });
      const events = buffered.split("\n\n");
      buffered = events.pop();
      let dropped = false;
      let passed = "";
      for (const event of events) {
        const data = event.replace(/^data: /, "");
        if (data !== "[DONE]") {
          const chunk = JSON.parse(data);
          print({ chunk });
          if (chunk.type === "text-delta" && ++deltas >= dropAfter) dropped = true;
        }
        passed += `${event}\n\n`;
        if (dropped) break;
      }
      controller.enqueue(new TextEncoder().encode(passed));
      if (dropped) {
        dropAfter = Infinity;
        await reader.cancel();
        print({ dropped: true });
        controller.error(new TypeError("network error"));
      }
    },
    cancel: () => reader.cancel(),
  });
  return new Response(body, { status: response.status, headers: response.headers });
};

const transport = new DefaultChatTransport({
  api: `${base}/api/ai-sdk/${api}`,
  headers: { Authorization: `Bearer ${token}` },
  body: bodyJson ? JSON.parse(bodyJson) : {},
  fetch: printing,
});

const chat = new NodeChat({
  id,
  transport,
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  onError: (error) => print({ error: error.name, message: String(error.message).slice(0, 200) }),
});

async function approveAll() {
  for (;;) {
    await chat["~resumeStreamIfDisconnected"]?.({ shouldResume: () => false });
    const waiting = chat.messages
      .flatMap((m) => m.parts)
      .filter((p) => p.state === "approval-requested");
    if (!waiting.length) return;
    for (const part of waiting) {
      await chat.addToolApprovalResponse({ id: part.approval.id, approved: true, reason: "fine" });
    }
    // The automatic request runs after the response is added; wait for it to settle.
    while (chat.status === "submitted" || chat.status === "streaming") {
      await new Promise((r) => setTimeout(r, 50));
    }
    await new Promise((r) => setTimeout(r, 50));
    while (chat.status === "submitted" || chat.status === "streaming") {
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

if (scenario === "twice") {
  const message = { id: `${id}-m1`, role: "user", parts: [{ type: "text", text }] };
  for (const round of [1, 2]) {
    const stream = await transport.sendMessages({
      chatId: id,
      messages: [message],
      trigger: "submit-message",
      messageId: undefined,
      abortSignal: undefined,
    });
    const reader = stream.getReader();
    for (;;) {
      const { done } = await reader.read();
      if (done) break;
    }
    print({ round });
  }
} else {
  await chat.sendMessage({ text, messageId: undefined });
  if (scenario === "drop") {
    print({ statusAfterDrop: chat.status });
    await chat.resumeStream();
  }
  if (scenario === "approve") await approveAll();
}
print({ messages: chat.messages, status: chat.status });
if (chat.status === "error") process.exit(1);
