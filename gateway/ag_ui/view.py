"""What an AG-UI client holds after the events it received: the messages and what is still
open. A stream that rejoins a run rebuilds it from the log, then hands the client a
MESSAGES_SNAPSHOT and reopens what was open, so the events after its last one fit on."""

from __future__ import annotations

from dataclasses import dataclass, field

from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    EventType,
    FunctionCall,
    Message,
    ReasoningMessage,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    StepStartedEvent,
    TextMessageStartEvent,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)


@dataclass
class _OpenCall:
    name: str
    parent: str
    arguments: str = ""


@dataclass
class ClientView:
    messages: list[Message] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    calls: dict[str, _OpenCall] = field(default_factory=dict)
    reasoning_spans: list[str] = field(default_factory=list)
    reasoning_messages: list[str] = field(default_factory=list)

    def add_user(self, message_id: str, content: str) -> None:
        self.messages.append(UserMessage(id=message_id, content=content))

    def apply(self, event: BaseEvent) -> None:
        data = event.model_dump()
        kind = event.type
        if kind == EventType.STEP_STARTED:
            self.steps.append(data["step_name"])
        elif kind == EventType.STEP_FINISHED and data["step_name"] in self.steps:
            self.steps.remove(data["step_name"])
        elif kind == EventType.TEXT_MESSAGE_START:
            self.texts.append(data["message_id"])
            self._message(data["message_id"], "assistant")
        elif kind == EventType.TEXT_MESSAGE_CONTENT:
            self._append(data["message_id"], data["delta"])
        elif kind == EventType.TEXT_MESSAGE_END and data["message_id"] in self.texts:
            self.texts.remove(data["message_id"])
        elif kind == EventType.REASONING_START:
            self.reasoning_spans.append(data["message_id"])
        elif kind == EventType.REASONING_END and data["message_id"] in self.reasoning_spans:
            self.reasoning_spans.remove(data["message_id"])
        elif kind == EventType.REASONING_MESSAGE_START:
            self.reasoning_messages.append(data["message_id"])
            self._message(data["message_id"], "reasoning")
        elif kind == EventType.REASONING_MESSAGE_CONTENT:
            self._append(data["message_id"], data["delta"])
        elif kind == EventType.REASONING_MESSAGE_END:
            if data["message_id"] in self.reasoning_messages:
                self.reasoning_messages.remove(data["message_id"])
        elif kind == EventType.TOOL_CALL_START:
            parent = data.get("parent_message_id") or data["tool_call_id"]
            self.calls[data["tool_call_id"]] = _OpenCall(data["tool_call_name"], parent)
        elif kind == EventType.TOOL_CALL_ARGS and data["tool_call_id"] in self.calls:
            self.calls[data["tool_call_id"]].arguments += data["delta"]
        elif kind == EventType.TOOL_CALL_END and data["tool_call_id"] in self.calls:
            self._attach(data["tool_call_id"], self.calls.pop(data["tool_call_id"]))
        elif kind == EventType.TOOL_CALL_RESULT:
            self.messages.append(
                ToolMessage(
                    id=data["message_id"],
                    tool_call_id=data["tool_call_id"],
                    content=data["content"],
                )
            )

    def reopen(self) -> list[BaseEvent]:
        """The events that open again, on a new stream, what the client had open."""
        events: list[BaseEvent] = [StepStartedEvent(step_name=name) for name in self.steps]
        events += [ReasoningStartEvent(message_id=m) for m in self.reasoning_spans]
        events += [
            ReasoningMessageStartEvent(message_id=m, role="reasoning")
            for m in self.reasoning_messages
        ]
        events += [TextMessageStartEvent(message_id=m, role="assistant") for m in self.texts]
        for call_id, call in self.calls.items():
            events.append(
                ToolCallStartEvent(
                    tool_call_id=call_id, tool_call_name=call.name, parent_message_id=call.parent
                )
            )
            if call.arguments:
                events.append(ToolCallArgsEvent(tool_call_id=call_id, delta=call.arguments))
        return events

    def _find(self, message_id: str) -> Message | None:
        return next((m for m in self.messages if m.id == message_id), None)

    def _message(self, message_id: str, role: str) -> None:
        if self._find(message_id) is not None:
            return
        if role == "reasoning":
            self.messages.append(ReasoningMessage(id=message_id, content=""))
        else:
            self.messages.append(AssistantMessage(id=message_id, content=""))

    def _append(self, message_id: str, delta: str) -> None:
        message = self._find(message_id)
        if isinstance(message, AssistantMessage | ReasoningMessage):
            message.content = f"{message.content or ''}{delta}"

    def _attach(self, call_id: str, call: _OpenCall) -> None:
        parent = self._find(call.parent)
        if not isinstance(parent, AssistantMessage):
            parent = AssistantMessage(id=call.parent)
            self.messages.append(parent)
        made = ToolCall(id=call_id, function=FunctionCall(name=call.name, arguments=call.arguments))
        parent.tool_calls = [*(parent.tool_calls or []), made]
