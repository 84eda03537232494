/**
 * Shepherd child tools for the Pi coding agent (load with `pi -e shepherd_child.ts`; it imports
 * run_command.ts from beside it).
 *
 * Registers the child-only tools, never a parent one:
 *   shepherd_message           send an asynchronous message (to a peer, the parent, or as a reply)
 *   shepherd_done              the explicit terminal signal for this agent's delegated task
 *   shepherd_request_approval  ask the parent's approval, wait for its answer
 * and, only for an agent spawned with `--role watchdog` (its options' `role`), the watchdog
 * agent's read-only tools, each one `shepherd-child watchdog-*` call (the parent answers them
 * only for a watchdog agent, and nothing in them steers, cancels or closes anyone):
 *   watchdog_status            the watchdog's state and the agents it watches
 *   watchdog_read_events       an agent's newest normalised tool events
 *   watchdog_detect_stuck      the stuck-loop detector's verdict on one agent, or on all
 *   watchdog_alert_main        a [Watchdog Alert] to the parent about an agent, in its words
 * and gates tool calls on the parent's approval: the agent's options (SHEPHERD_AGENT_OPTIONS,
 * set by the bridge) may hold `approve` rules, TOOL:GLOB (`spawn --approve 'bash:git push*'`).
 * A tool call whose tool is TOOL and whose subject matches GLOB (the bash command, else the
 * `path` argument, else the arguments as JSON; `*` any text, `?` one character; the subject
 * trimmed) is held in Pi's `tool_call` hook while `shepherd-child approve-request` waits for
 * the parent: approved, it runs; denied (or the request failed), it is blocked and the model
 * gets the reason as the tool's result.
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
 *   shepherd-child approve-request --json [--timeout=S] -- TEXT
 *   shepherd-child watchdog-events --json [--limit=N] -- AGENT   (and the other watchdog-*)
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

/** The longest text of an approval request the extension sends (it must fit one envelope). */
const MAX_APPROVAL_TEXT = 8000;
/** An approval waits as long as the parent lets it (setTimeout's longest delay). */
const APPROVAL_WAIT_MS = 2_147_483_647;

interface Decision {
	approved: boolean;
	answer: string;
}

/** Ask the parent (`shepherd-child approve-request`) and wait: exit 0 approved, 1 denied. */
async function askApproval(
	text: string,
	timeoutS: number | undefined,
	signal: AbortSignal | undefined,
): Promise<Decision> {
	const bin = process.env.SHEPHERD_CHILD_BIN || "shepherd-child";
	const args = ["approve-request", "--json"];
	if (timeoutS !== undefined) args.push(`--timeout=${timeoutS}`);
	const cut = text.length > MAX_APPROVAL_TEXT ? `${text.slice(0, MAX_APPROVAL_TEXT)}… [cut]` : text;
	args.push("--", cut);
	const r = await runCommand(bin, args, { timeoutMs: APPROVAL_WAIT_MS, signal });
	if ((r.code === 0 || r.code === 1) && !r.why) {
		const decision = JSON.parse(r.stdout) as { approved?: boolean; answer?: string | null };
		const approved = r.code === 0 && decision.approved === true;
		return { approved, answer: decision.answer ?? (approved ? "approved" : "denied") };
	}
	throw runFailed(bin, args[0], r);
}

interface ApprovalRule {
	tool: string;
	pattern: RegExp;
	source: string;
}

function globToRegExp(glob: string): RegExp {
	let re = "";
	for (const ch of glob) {
		if (ch === "*") re += "[\\s\\S]*";
		else if (ch === "?") re += "[\\s\\S]";
		else re += ch.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
	}
	return new RegExp(`^${re}$`);
}

/** This agent's options (SHEPHERD_AGENT_OPTIONS, set by the bridge; the parent checked them). */
function agentOptions(): Record<string, unknown> {
	try {
		const options = JSON.parse(process.env.SHEPHERD_AGENT_OPTIONS || "{}");
		return options && typeof options === "object" ? options : {};
	} catch {
		return {};
	}
}

/** The `approve` rules of this agent's options (the parent checked their bounds). */
function approvalRules(): ApprovalRule[] {
	const approve = agentOptions().approve;
	if (!Array.isArray(approve)) return [];
	return approve
		.filter((r): r is string => typeof r === "string" && r.indexOf(":") > 0)
		.map((r) => {
			const at = r.indexOf(":");
			return { tool: r.slice(0, at), pattern: globToRegExp(r.slice(at + 1).trim()), source: r };
		});
}

/** What a rule's glob is matched against: the bash command, else the path, else the JSON. */
function subjectOf(input: unknown): string {
	const args = (input ?? {}) as Record<string, unknown>;
	if (typeof args.command === "string") return args.command.trim();
	if (typeof args.path === "string") return args.path.trim();
	return JSON.stringify(args);
}

function textResult(text: string, terminate = false) {
	return { content: [{ type: "text" as const, text }], details: {}, terminate };
}

export default function shepherdChild(pi: ExtensionAPI) {
	const rules = approvalRules();
	if (rules.length > 0) {
		pi.on("tool_call", async (event, ctx) => {
			const subject = subjectOf(event.input);
			const rule = rules.find((r) => r.tool === event.toolName && r.pattern.test(subject));
			if (!rule) return undefined;
			const text = `${event.toolName}: ${subject} (tool call held by the approval rule ${rule.source})`;
			try {
				const decision = await askApproval(text, undefined, ctx.signal);
				if (decision.approved) return undefined;
				return { block: true, reason: `Denied by the parent: ${decision.answer}` };
			} catch (err) {
				const why = err instanceof Error ? err.message : String(err);
				return { block: true, reason: `Not run: the approval request failed: ${why}` };
			}
		});
	}

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

	pi.registerTool({
		name: "shepherd_request_approval",
		label: "Shepherd request approval",
		description:
			"Ask the parent for permission before doing something that needs it (a destructive " +
			"command, a push, a write outside your tree): say what and why. It blocks until the " +
			"parent answers and tells you whether it was approved, with the parent's note or " +
			"reason. Do not do the thing if it was denied.",
		promptSnippet: "Ask the parent for approval and wait for its answer",
		parameters: Type.Object({
			message: Type.String({ minLength: 1, description: "What you want to do, and why" }),
			timeout_s: Type.Optional(
				Type.Number({
					exclusiveMinimum: 0,
					maximum: 604800,
					description:
						"Seconds to wait for the answer (at most 604800, 7 days); past it the request is denied with reason timeout",
				}),
			),
		}),
		async execute(_toolCallId, params, signal) {
			const decision = await askApproval(params.message, params.timeout_s, signal);
			return textResult(`${decision.approved ? "approved" : "denied"}: ${decision.answer}`);
		},
	});

	if (agentOptions().role === "watchdog") registerWatchdogTools(pi);
}

/** The longest alert the parent takes (MAX_WATCHDOG_ALERT_CHARS) and the most events. */
const MAX_ALERT_TEXT = 4000;
const MAX_EVENTS = 200;

/** A watchdog agent's tools: each runs `shepherd-child watchdog-* --json`; its answer is the result. */
function registerWatchdogTools(pi: ExtensionAPI) {
	const agent = Type.String({ minLength: 1, maxLength: 200, description: "The agent's name or id" });
	pi.registerTool({
		name: "watchdog_status",
		label: "Watchdog status",
		description:
			"The watchdog's state (enabled, paused, alert mode, alerts sent) and the agents it watches, " +
			"the most recently active first (at most 100): id, name, kind (task or watchdog), process " +
			"status, tool-call count, created and last-active times.",
		promptSnippet: "List the agents the watchdog observes, with the watchdog's state",
		parameters: Type.Object({}),
		async execute(_toolCallId, _params, signal) {
			return textResult(await runChild(["watchdog-status", "--json"], signal));
		},
	});
	pi.registerTool({
		name: "watchdog_read_events",
		label: "Watchdog events",
		description:
			"Read an agent's most recent tool events as the watchdog keeps them: normalised command, " +
			"output hash and a short preview (never whole outputs), exit code, time.",
		promptSnippet: "Read an agent's recent normalised tool events",
		parameters: Type.Object({
			agent,
			limit: Type.Optional(
				Type.Integer({
					minimum: 1,
					maximum: MAX_EVENTS,
					description: `How many of the newest events (1-${MAX_EVENTS}, default 20)`,
				}),
			),
		}),
		async execute(_toolCallId, params, signal) {
			const args = ["watchdog-events", "--json"];
			if (params.limit !== undefined) args.push(`--limit=${params.limit}`);
			args.push("--", params.agent);
			return textResult(await runChild(args, signal));
		},
	});
	pi.registerTool({
		name: "watchdog_detect_stuck",
		label: "Watchdog detect",
		description:
			"Run the deterministic stuck-loop rules on one agent's events since its last instruction " +
			"(likely_stuck, confidence none/low/medium/high, reasons and evidence), or, without an " +
			"agent, on every agent: the ones above confidence none are listed. Changes nothing.",
		promptSnippet: "Check whether an agent (or any agent) looks stuck in a loop",
		parameters: Type.Object({
			agent: Type.Optional(
				Type.String({
					minLength: 1,
					maxLength: 200,
					description: "The agent's name or id (default: every agent)",
				}),
			),
		}),
		async execute(_toolCallId, params, signal) {
			const args = ["watchdog-stuck", "--json"];
			if (params.agent) args.push("--", params.agent);
			return textResult(await runChild(args, signal));
		},
	});
	pi.registerTool({
		name: "watchdog_alert_main",
		label: "Watchdog alert",
		description:
			"Send the parent a [Watchdog Alert] about an agent that looks stuck, in your words (who, " +
			"on what, what you suggest); the parent also gets the detector's verdict. Nothing is " +
			"killed or steered: the parent decides.",
		promptSnippet: "Alert the parent that an agent looks stuck, with your reasoning",
		parameters: Type.Object({
			agent,
			text: Type.String({
				minLength: 1,
				maxLength: MAX_ALERT_TEXT,
				description: `The alert (1-${MAX_ALERT_TEXT} characters)`,
			}),
		}),
		async execute(_toolCallId, params, signal) {
			const args = ["watchdog-alert", "--json", "--", params.agent, params.text];
			return textResult(await runChild(args, signal));
		},
	});
}
