/**
 * Shepherd parent tools and notification bridge for the Pi coding agent
 * (load with `pi -e actors/pi/shepherd_parent.ts`; the session comes from $SHEPHERD_SESSION;
 * it imports run_command.ts from beside it).
 *
 * Tools. At load the extension runs `shepherd tools --json` and registers exactly the parent
 * tools it prints (name, label, description, promptSnippet and the flat JSON-schema parameters,
 * unchanged), so the schemas cannot drift from protocol/ops/tools.py. Each execute() runs
 * `shepherd tool NAME --json [--session=DIR] --args=-` with the call's arguments as JSON on
 * stdin (no shell; the binary is $SHEPHERD_BIN, default "shepherd" on PATH; run in Pi's working
 * directory, so relative `script`/`cwd` paths resolve there). The CLI validates them against
 * the same schema, exactly as the MCP server does, and runs the tool's operation in the session;
 * its stdout, the operation's result JSON, is the tool result. Exit status 2 with
 * `{"error":{code,message}}` on stdout, any other failure, a timeout or an abort throw: Pi
 * hands the model an error result (isError) with that text. No per-tool flag mapping exists
 * here, so a tool added to protocol/ops/tools.py needs no change in this file.
 *
 * Notifications. At load the extension also counts the lines already in the session's
 * notifications file (`shepherd notifications`): those existed before this Pi and are NOT
 * replayed. On session_start it spawns one long-lived child process,
 * `shepherd notifications --follow --format rendered [--session=DIR]`, skips that many lines
 * and, for every further line, sends ONE custom message (customType "shepherd.notification")
 * whose content is the line's "rendered" text — protocol/calls/render.py's call:/return:/details:
 * layout for task completions, readable text for agent messages, notices, stale waits, wait
 * cycles and watchdog alerts — with `pi.sendMessage(msg, {deliverAs: "followUp",
 * triggerTurn: true})`: when Pi is idle it starts a turn at once, while Pi is busy it is
 * queued and delivered after the current answer, in the same run. Nothing is coalesced or
 * dropped; the structured notification rides along in `details`.
 *
 * Stopping. Delivery stops for good on session_shutdown (the follower is killed, late lines are
 * ignored), when the Shepherd session ends (its mailbox directory, named in session.json, is
 * removed by the supervisor's shutdown, or the supervisor process is gone: the follower is
 * killed), and when the follower exits by itself. A follower that dies while the session still
 * answers is restarted after the next successful tool call, skipping every line already
 * consumed, so nothing is delivered twice. Lines written while no Pi instance follows (e.g.
 * between a /reload's shutdown and the new instance's load) are not delivered.
 *
 * The status line (ctx.ui.setStatus "shepherd") says how many notifications were delivered and
 * how many are queued behind a busy turn. Pi keeps a queued follow-up when the run it waits
 * behind is aborted; it is then delivered at the end of the next run (the status line shows it
 * as queued meanwhile).
 */

import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, type FSWatcher, readFileSync, watch } from "node:fs";
import { join } from "node:path";
import type { ExtensionAPI, ExtensionContext } from "@mariozechner/pi-coding-agent";
import { Text } from "@mariozechner/pi-tui";
import type { TSchema } from "typebox";
import { envTimeoutMs, type RunResult, runCommand, runFailed } from "./run_command.ts";

export const CUSTOM_TYPE = "shepherd.notification";
const STATUS_KEY = "shepherd";
const DEFAULT_TIMEOUT_MS = 60_000;
/** Liveness check of the supervisor process (the mailbox watch reacts at once to a shutdown). */
const SESSION_CHECK_MS = 2_000;

interface ToolJson {
	name: string;
	label: string;
	description: string;
	promptSnippet: string;
	parameters: { type: "object"; properties: Record<string, unknown>; required?: string[] };
}

const WATCH_GUIDELINE =
	"Shepherd notifications (task completions of your watches, agents' messages to you, notices) " +
	"arrive by themselves as messages that start your next turn; there is no " +
	"shepherd_notifications tool here. After delegating and watching, end your turn instead of polling.";

// ----------------------------------------------------------------------------- the CLI

function shepherdBin(): string {
	return process.env.SHEPHERD_BIN || "shepherd";
}

function sessionArgs(): string[] {
	const dir = process.env.SHEPHERD_SESSION;
	return dir ? [`--session=${dir}`] : [];
}

/** Run `shepherd ARGS...` (see run_command.ts); never rejects on exit codes. */
function runShepherd(
	args: string[],
	options: { signal?: AbortSignal; cwd?: string; input?: string } = {},
): Promise<RunResult> {
	const timeoutMs = envTimeoutMs("SHEPHERD_TIMEOUT_MS", DEFAULT_TIMEOUT_MS);
	return runCommand(shepherdBin(), args, { ...options, timeoutMs });
}

function failure(args: string[], r: RunResult): Error {
	const what = args[0] === "tool" ? `tool ${args[1]}` : args[0];
	const out = r.stdout.trim();
	if (r.code === 2 && !r.why && out.startsWith("{")) {
		try {
			const parsed = JSON.parse(out) as { error?: unknown };
			if (parsed && typeof parsed === "object" && parsed.error) return new Error(out);
		} catch {
			// not the JSON error: reported below with everything there is
		}
	}
	return runFailed(shepherdBin(), what, r);
}

function loadTools(stdout: string): ToolJson[] {
	const tools = JSON.parse(stdout) as ToolJson[];
	if (!Array.isArray(tools) || tools.some((t) => typeof t?.name !== "string" || t.parameters?.type !== "object")) {
		throw new Error("`shepherd tools --json` did not print a list of tool schemas");
	}
	return tools;
}

async function countLines(): Promise<number | undefined> {
	try {
		const r = await runShepherd(["notifications", ...sessionArgs()]);
		if (r.code !== 0) return undefined;
		let n = 0;
		for (const ch of r.stdout) if (ch === "\n") n++;
		return n;
	} catch {
		return undefined;
	}
}

// ----------------------------------------------------------------------------- session end

/** Calls `onEnd` once when the Shepherd session in $SHEPHERD_SESSION has ended: its mailbox
 * directory (removed by the supervisor's shutdown) is gone, or its supervisor process is. A
 * session over NATS (`mailbox` is a nats:// URL) has no directory: its supervisor's pid says. */
function watchSessionEnd(onEnd: (why: string) => void): () => void {
	const dir = process.env.SHEPHERD_SESSION;
	if (!dir) return () => {};
	let mailbox: string;
	let pid: number;
	try {
		const info = JSON.parse(readFileSync(join(dir, "session.json"), "utf8")) as {
			mailbox: string;
			parent_pid: number;
		};
		mailbox = info.mailbox;
		pid = info.parent_pid;
	} catch {
		return () => {};
	}
	const overNats = mailbox.startsWith("nats://");
	let done = false;
	let watcher: FSWatcher | undefined;
	const stop = () => {
		done = true;
		clearInterval(timer);
		watcher?.close();
	};
	const check = () => {
		if (done) return;
		let why = "";
		if (!overNats && !existsSync(mailbox)) why = "the Shepherd session ended";
		else {
			try {
				process.kill(pid, 0);
			} catch (err) {
				if ((err as NodeJS.ErrnoException).code === "ESRCH") why = "the Shepherd supervisor is gone";
			}
		}
		if (why) {
			stop();
			onEnd(why);
		}
	};
	const timer = setInterval(check, SESSION_CHECK_MS);
	timer.unref();
	try {
		// inotify on the mailbox root: only its own entries change (rarely); removal fires too
		if (!overNats) {
			watcher = watch(mailbox, { persistent: false }, check);
			watcher.on("error", check);
		}
	} catch {
		// no watch (e.g. already gone): the check below and the timer still see it
	}
	check();
	return stop;
}

// ----------------------------------------------------------------------------- the extension

interface Notification {
	kind?: string;
	rendered?: string;
	[key: string]: unknown;
}

export default async function shepherdParent(pi: ExtensionAPI) {
	const [toolsRun, baseline] = await Promise.all([runShepherd(["tools", "--json"]), countLines()]);
	if (toolsRun.code !== 0) throw failure(["tools", "--json"], toolsRun);
	const tools = loadTools(toolsRun.stdout);

	// ------------------------------------------------------------------ delivery state
	let ctx: ExtensionContext | undefined;
	let stopped = false; // session_shutdown or session end: never deliver again
	let follower: ChildProcess | undefined;
	let stopSessionWatch: () => void = () => {};
	/** lines of the notifications file consumed so far (skipped or delivered) */
	let consumed = baseline;
	let sent = 0;
	let started = 0;
	let note = "";

	const showStatus = () => {
		if (!ctx) return;
		const queued = sent - started;
		const parts = [`${started} delivered`];
		if (queued > 0) parts.push(`${queued} queued`);
		if (note) parts.push(note);
		ctx.ui.setStatus(STATUS_KEY, `shepherd: ${parts.join(", ")}`);
	};

	const deliver = (line: string) => {
		let parsed: Notification;
		try {
			parsed = JSON.parse(line) as Notification;
		} catch {
			return; // not a notification line (cannot happen with --format rendered)
		}
		const { rendered, ...notification } = parsed;
		const content =
			typeof rendered === "string" && rendered
				? rendered
				: `[Shepherd notification]\n${JSON.stringify(notification)}`;
		sent++;
		pi.sendMessage(
			{
				customType: CUSTOM_TYPE,
				content,
				display: true,
				details: { kind: notification.kind ?? "unknown", notification },
			},
			{ deliverAs: "followUp", triggerTurn: true },
		);
		showStatus();
	};

	const killFollower = () => {
		const child = follower;
		follower = undefined;
		if (child && child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
	};
	const onProcessExit = () => killFollower();

	const stopDelivering = (why: string) => {
		if (stopped) return;
		stopped = true;
		stopSessionWatch();
		killFollower();
		process.off("exit", onProcessExit);
		note = `stopped: ${why}`;
		showStatus();
	};

	let counting: Promise<number | undefined> | undefined;
	const startFollowing = async () => {
		if (stopped || follower) return;
		if (consumed === undefined) {
			// no session at load: count now (once, however many callers ask at the same time)
			counting ??= countLines().finally(() => {
				counting = undefined;
			});
			const counted = await counting;
			consumed ??= counted;
			if (consumed === undefined || stopped || follower) return; // still no session
		}
		let skip = consumed;
		const child = spawn(
			shepherdBin(),
			["notifications", "--follow", "--format", "rendered", ...sessionArgs()],
			{ stdio: ["ignore", "pipe", "pipe"], env: process.env },
		);
		follower = child;
		let buffered = "";
		let stderr = "";
		child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
			buffered += chunk;
			let newline = buffered.indexOf("\n");
			while (newline >= 0) {
				const line = buffered.slice(0, newline);
				buffered = buffered.slice(newline + 1);
				newline = buffered.indexOf("\n");
				if (stopped || follower !== child) return;
				if (!line.trim()) continue;
				consumed = (consumed ?? 0) + 1;
				if (skip > 0) {
					skip--;
					continue;
				}
				deliver(line);
			}
		});
		child.stderr?.setEncoding("utf8").on("data", (d: string) => {
			stderr = (stderr + d).slice(-4096);
		});
		child.on("error", () => {
			/* reported by "close" */
		});
		child.on("close", (code, sig) => {
			if (follower !== child) return; // killed by us
			follower = undefined;
			if (stopped) return;
			const status = sig ? `killed by ${sig}` : `exit code ${code}`;
			note = `not following (${status}${stderr.trim() ? `: ${stderr.trim().split("\n").pop()}` : ""})`;
			showStatus();
		});
		note = "";
		showStatus();
	};

	// ------------------------------------------------------------------ tools
	for (const spec of tools) {
		pi.registerTool({
			name: spec.name,
			label: spec.label,
			description: spec.description,
			promptSnippet: spec.promptSnippet,
			promptGuidelines: spec.name === "shepherd_watch" ? [WATCH_GUIDELINE] : undefined,
			// a plain JSON schema: Pi validates those as well as TypeBox ones
			parameters: spec.parameters as unknown as TSchema,
			async execute(_toolCallId, params, signal, _onUpdate, toolCtx) {
				const argv = ["tool", spec.name, "--json", ...sessionArgs(), "--args=-"];
				const r = await runShepherd(argv, { signal, cwd: toolCtx.cwd, input: JSON.stringify(params ?? {}) });
				if (r.code !== 0 || r.why) throw failure(argv, r);
				const text = r.stdout.trim();
				let details: unknown = {};
				try {
					details = JSON.parse(text);
				} catch {
					// the text is the result either way
				}
				if (!follower && !stopped) void startFollowing(); // the session may have come up late
				return { content: [{ type: "text" as const, text }], details };
			},
		});
	}

	// ------------------------------------------------------------------ rendering
	pi.registerMessageRenderer(CUSTOM_TYPE, (message, { expanded }, theme) => {
		const body = typeof message.content === "string" ? message.content : "";
		let text = `${theme.fg("accent", "[Shepherd]")} ${body}`;
		if (expanded && message.details) text += `\n${theme.fg("dim", JSON.stringify(message.details, null, 2))}`;
		return new Text(text, 0, 0);
	});

	// ------------------------------------------------------------------ lifecycle
	pi.on("message_start", (event) => {
		const m = event.message;
		if (m.role === "custom" && m.customType === CUSTOM_TYPE) {
			started++;
			showStatus();
		}
	});

	pi.on("session_start", async (_event, startCtx) => {
		ctx = startCtx;
		if (stopped) return;
		process.on("exit", onProcessExit);
		stopSessionWatch = watchSessionEnd(stopDelivering);
		await startFollowing();
	});

	pi.on("session_shutdown", () => {
		stopDelivering("Pi session shut down");
		ctx = undefined;
	});
}
