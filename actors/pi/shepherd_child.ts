/**
 * Shepherd child tools for the Pi coding agent (load with `pi -e shepherd_child.ts`; it imports
 * run_command.ts from beside it).
 *
 * Registers the two child-only tools, never a parent one:
 *   shepherd_message  send an asynchronous message (to a peer, the parent, or as a reply)
 *   shepherd_done     the explicit terminal signal for this agent's delegated task
 *
 * Each execute() runs the child bridge's own command line, `shepherd-child` (path from
 * $SHEPHERD_CHILD_BIN, default "shepherd-child" on PATH), with --json, and returns its stdout
 * (the acceptance receipt) as the tool result. A non-zero exit, a signal, a timeout or a
 * missing binary throws, which Pi reports to the model as an error result (isError: true).
 * The identity, capability and session come from the environment the bridge gave Pi; the
 * tools never see or pass them.
 *
 * Argument shape (options before `--`, then positionals, so a message or target starting
 * with "-" is never read as an option; `--opt=value` for the same reason):
 *   shepherd-child message --json [--expects-reply] [--reply-to=ID] [--thread=ID] [--steer] -- TARGET TEXT
 *   shepherd-child done --json --status=STATUS [--summary=TEXT]
 */

import { StringEnum } from "@mariozechner/pi-ai";
import type { ExtensionAPI } from "@mariozechner/pi-coding-agent";
import { Type } from "typebox";
import { envTimeoutMs, runCommand, runFailed } from "./run_command.ts";

const DEFAULT_TIMEOUT_MS = 30_000;

/**
 * Run `shepherd-child ARGS...` (see run_command.ts); resolve with its stdout on exit code 0,
 * reject with an Error carrying stderr/stdout otherwise.
 */
async function runChild(args: string[], signal: AbortSignal | undefined): Promise<string> {
	const bin = process.env.SHEPHERD_CHILD_BIN || "shepherd-child";
	const timeoutMs = envTimeoutMs("SHEPHERD_CHILD_TIMEOUT_MS", DEFAULT_TIMEOUT_MS);
	const r = await runCommand(bin, args, { timeoutMs, signal });
	if (r.code === 0 && !r.why) return r.stdout.trim();
	throw runFailed(bin, args[0], r);
}

function textResult(text: string, terminate = false) {
	return { content: [{ type: "text" as const, text }], details: {}, terminate };
}

export default function shepherdChild(pi: ExtensionAPI) {
	pi.registerTool({
		name: "shepherd_message",
		label: "Shepherd message",
		description:
			"Send an asynchronous message to another agent, the parent (\"shepherd\"), or as a reply. " +
			"It returns as soon as the message is accepted; it does not wait for an answer. " +
			"Set expects_reply when you need an answer: the answer arrives later as a new message. " +
			"Answer a question by setting reply_to to its message ID.",
		promptSnippet: "Send an asynchronous message to a peer agent or the parent (replies arrive later)",
		parameters: Type.Object({
			target: Type.String({ minLength: 1, description: "Agent name or ID, or \"shepherd\" for the parent" }),
			message: Type.String({ minLength: 1, description: "The message text" }),
			expects_reply: Type.Optional(
				Type.Boolean({ description: "True when you need an answer (default false)" }),
			),
			reply_to: Type.Optional(Type.String({ description: "Message ID this answers" })),
			thread_id: Type.Optional(Type.String({ description: "Conversation thread ID" })),
			steer: Type.Optional(
				Type.Boolean({ description: "Interrupt the recipient instead of queueing (default false)" }),
			),
		}),
		async execute(_toolCallId, params, signal) {
			const args = ["message", "--json"];
			if (params.expects_reply) args.push("--expects-reply");
			if (params.reply_to) args.push(`--reply-to=${params.reply_to}`);
			if (params.thread_id) args.push(`--thread=${params.thread_id}`);
			if (params.steer) args.push("--steer");
			args.push("--", params.target, params.message);
			return textResult(await runChild(args, signal));
		},
	});

	pi.registerTool({
		name: "shepherd_done",
		label: "Shepherd done",
		description:
			"Finish your delegated task: the only way a task ends. Call it once, when the whole task " +
			"is completed, or when you are blocked or have failed. Ending your turn does not finish the task.",
		promptSnippet: "Mark your delegated task completed, blocked or failed (the only way a task ends)",
		parameters: Type.Object({
			status: StringEnum(["completed", "blocked", "failed"] as const, {
				description: "completed, blocked or failed",
			}),
			summary: Type.Optional(Type.String({ description: "What was done, or why not" })),
		}),
		async execute(_toolCallId, params, signal) {
			const args = ["done", "--json", `--status=${params.status}`];
			if (params.summary) args.push(`--summary=${params.summary}`);
			const receipt = await runChild(args, signal);
			// terminate: once done is accepted the task is settled, so another model call would
			// only produce a closing remark nobody reads (and cost a request). Pi skips the
			// follow-up call only when every tool in the batch terminates, so a done batched with
			// other work still lets the model see those results. A rejected done throws above and
			// never terminates: the model sees the error and can correct itself.
			return textResult(receipt, true);
		},
	});
}
