// A chat page on durafact with the AI SDK's useChat: the reply streams, survives a
// reload (`resume`), and a tool that asks first shows Approve and Reject.
import { useChat } from "@ai-sdk/react";
import { DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from "ai";
import { useState } from "react";
import { createRoot } from "react-dom/client";

// The chat's id is the page's `?chat=`: reload the page and the reply in flight resumes.
const params = new URLSearchParams(location.search);
if (!params.get("chat")) {
  params.set("chat", `chat-${crypto.randomUUID().slice(0, 8)}`);
  history.replaceState(null, "", `?${params}`);
}

function Chat() {
  const { messages, sendMessage, status, addToolApprovalResponse } = useChat({
    id: params.get("chat"),
    transport: new DefaultChatTransport({ api: "/api/ai-sdk/chats" }),
    resume: true,
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  const [text, setText] = useState("");
  const answer = (id, approved) => addToolApprovalResponse({ id, approved });
  return (
    <main>
      {messages.map((message) => (
        <article key={message.id} className={message.role}>
          {message.parts.map((part, i) => <Part key={i} part={part} answer={answer} />)}
        </article>
      ))}
      <form onSubmit={(e) => { e.preventDefault(); sendMessage({ text }); setText(""); }}>
        <input value={text} onChange={(e) => setText(e.target.value)} placeholder="Message" />
        <button disabled={status !== "ready" || !text}>Send</button>
      </form>
    </main>
  );
}

function Part({ part, answer }) {
  if (part.type === "text") return <p>{part.text}</p>;
  if (part.type !== "dynamic-tool") return null;
  return (
    <div className="tool">
      <code>{part.toolName} {JSON.stringify(part.input)}</code>
      {part.state === "approval-requested" && (
        <>
          <button onClick={() => answer(part.approval.id, true)}>Approve</button>
          <button onClick={() => answer(part.approval.id, false)}>Reject</button>
        </>
      )}
      {part.state === "output-available" && <pre>{part.output}</pre>}
      {part.state === "output-error" && <pre>{part.errorText}</pre>}
    </div>
  );
}

createRoot(document.getElementById("root")).render(<Chat />);
