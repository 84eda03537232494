"""The span names, attribute names and values Shepherd's traces use, in one place.

They follow the OpenTelemetry semantic conventions for GenAI agent spans (``gen_ai.*``:
``invoke_workflow``, ``invoke_agent``, ``execute_tool``) and for messaging (``messaging.*``).
They are spelled out here rather than imported from ``opentelemetry-semantic-conventions``:
the Python constants for the GenAI attributes are marked deprecated there while the
conventions are still in development, and this module imports nothing of OpenTelemetry (so
the names can be used where OpenTelemetry is not installed, e.g. in tests of the names).
Shepherd's own attributes are under ``shepherd.*``.
"""

from __future__ import annotations

from typing import Final

# --- GenAI agent spans
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_AGENT_ID: Final = "gen_ai.agent.id"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_TYPE: Final = "gen_ai.tool.type"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
ERROR_TYPE: Final = "error.type"

#: values of gen_ai.operation.name (the span name starts with it)
OP_INVOKE_WORKFLOW: Final = "invoke_workflow"
OP_INVOKE_AGENT: Final = "invoke_agent"
OP_EXECUTE_TOOL: Final = "execute_tool"
#: gen_ai.tool.type of an agent's tools: functions the agent calls (bash, read, ...)
TOOL_TYPE_FUNCTION: Final = "function"
#: gen_ai.provider.name: the agents are processes Shepherd runs, whatever model they use
PROVIDER: Final = "shepherd"

# --- messaging spans (a message or a reply routed by the parent)
MESSAGING_SYSTEM: Final = "messaging.system"
MESSAGING_OPERATION_NAME: Final = "messaging.operation.name"
MESSAGING_OPERATION_TYPE: Final = "messaging.operation.type"
MESSAGING_DESTINATION_NAME: Final = "messaging.destination.name"
MESSAGING_MESSAGE_ID: Final = "messaging.message.id"
MESSAGING_CONVERSATION_ID: Final = "messaging.message.conversation_id"
MESSAGING_SYSTEM_SHEPHERD: Final = "shepherd"
OP_SEND: Final = "send"

# --- Shepherd's own
SHEPHERD_TASK_ID: Final = "shepherd.task.id"
SHEPHERD_TASK_STATUS: Final = "shepherd.task.status"
SHEPHERD_TASK_RETURN_CODE: Final = "shepherd.task.return_code"
SHEPHERD_TASK_RESTORED: Final = "shepherd.task.restored"
#: on a task span's events: the question (request) asked or closed
SHEPHERD_REQUEST_ID: Final = "shepherd.request.id"
SHEPHERD_MESSAGE_KIND: Final = "shepherd.message.kind"  # "message" | "reply"
SHEPHERD_EXPECTS_REPLY: Final = "shepherd.message.expects_reply"
SHEPHERD_REPLY_TO: Final = "shepherd.message.reply_to"
SHEPHERD_SENDER_NAME: Final = "shepherd.message.sender"
SHEPHERD_ADAPTER: Final = "shepherd.agent.adapter"

#: the workflow span's name: one per session
WORKFLOW_SPAN: Final = f"{OP_INVOKE_WORKFLOW} shepherd"


def agent_span(agent_name: str) -> str:
    return f"{OP_INVOKE_AGENT} {agent_name}"


def tool_span(tool: str) -> str:
    return f"{OP_EXECUTE_TOOL} {tool}"


def send_span(destination: str) -> str:
    return f"{OP_SEND} {destination}"
