/**
 * Running a Shepherd command line from a Pi extension: the one runner both extensions use
 * (shepherd_child.ts runs `shepherd-child`, shepherd_parent.ts runs `shepherd`). This file is a
 * module they import, not an extension: never load it with `pi -e`.
 *
 * Rules:
 * - No shell: the binary gets ARGS as they are, so no argument is ever parsed twice.
 * - Node's child_process, not pi.exec(): pi.exec reports a signal-killed process as exit code 0
 *   and a missing binary as a bare code 1, and a receipt must never be faked by either.
 * - A timeout or an abort stops the process (SIGTERM) and says so in `why`; a binary that
 *   cannot run at all rejects. Exit codes never reject: the caller decides what they mean.
 */

import { spawn } from "node:child_process";

export interface RunResult {
	code: number | null;
	signal: NodeJS.Signals | null;
	stdout: string;
	stderr: string;
	/** why the extension stopped it (timeout, abort), or "" */
	why: string;
}

export interface RunOptions {
	timeoutMs: number;
	signal?: AbortSignal;
	cwd?: string;
	/** written to its stdin (stdin is closed at once; without input it is not opened) */
	input?: string;
}

/** A positive number of milliseconds from the environment variable `name`, else `fallback`. */
export function envTimeoutMs(name: string, fallback: number): number {
	const raw = Number(process.env[name]);
	return Number.isFinite(raw) && raw > 0 ? raw : fallback;
}

/** Run `bin ARGS...` and collect its output (rejects only when it cannot run or was aborted
 * before it started). */
export function runCommand(bin: string, args: string[], options: RunOptions): Promise<RunResult> {
	const { timeoutMs, signal, cwd, input } = options;
	return new Promise((resolve, reject) => {
		if (signal?.aborted) {
			reject(new Error(`${bin} ${args[0]}: aborted before it ran`));
			return;
		}
		const child = spawn(bin, args, {
			stdio: [input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
			env: process.env,
			cwd,
		});
		child.stdin?.on("error", () => {
			/* the process died before reading its input: reported by "close" */
		});
		child.stdin?.end(input);
		let stdout = "";
		let stderr = "";
		let why = "";
		child.stdout?.setEncoding("utf8").on("data", (d: string) => (stdout += d));
		child.stderr?.setEncoding("utf8").on("data", (d: string) => (stderr += d));
		const stop = (reason: string) => {
			why = reason;
			child.kill("SIGTERM");
		};
		const timer = setTimeout(() => stop(`timed out after ${timeoutMs} ms`), timeoutMs);
		const onAbort = () => stop("aborted");
		signal?.addEventListener("abort", onAbort, { once: true });
		const finish = () => {
			clearTimeout(timer);
			signal?.removeEventListener("abort", onAbort);
		};
		child.on("error", (err) => {
			finish();
			reject(new Error(`${bin} ${args[0]} could not run: ${err.message}`));
		});
		child.on("close", (code, sig) => {
			finish();
			resolve({ code, signal: sig, stdout, stderr, why });
		});
	});
}

/** `BIN WHAT failed (STATUS)` followed by its stderr and stdout, for a run that did not succeed. */
export function runFailed(bin: string, what: string, r: RunResult): Error {
	const status = r.why || (r.signal ? `killed by ${r.signal}` : `exit code ${r.code}`);
	const detail = [r.stderr.trim(), r.stdout.trim()].filter(Boolean).join("\n");
	return new Error(`${bin} ${what} failed (${status})${detail ? `:\n${detail}` : ""}`);
}
