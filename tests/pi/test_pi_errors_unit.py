"""Which of Pi's events is a model call that failed (:func:`actors.child.pi.events.error_of`):
what the pi-rpc adapter reports as its provider's refusal."""

from __future__ import annotations

from actors.child.pi.events import error_of


def test_pi_s_error_is_an_assistant_message_that_ended_with_one() -> None:
    def end(role: str, reason: str, error: str | None = None) -> dict[str, object]:
        message = {"role": role, "stopReason": reason, "errorMessage": error}
        return {"type": "message_end", "message": message}

    assert error_of(end("assistant", "error", "429 slow down")) == "429 slow down"
    assert error_of(end("assistant", "error")) == "model call failed"
    assert error_of(end("assistant", "stop")) is None
    assert error_of(end("assistant", "aborted", "Request was aborted")) is None
    assert error_of(end("user", "error", "x")) is None
    assert error_of({"type": "agent_end", "messages": []}) is None
