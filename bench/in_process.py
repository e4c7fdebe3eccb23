"""The "before" of the script benchmarks: script calls run in this process with the sandbox's
guards but no process boundary. NOT a security boundary; only benchmarks use it, with scripts
that leave their arguments alone (a context holds the engine's own data: the pool sends copies)."""

from __future__ import annotations

import copy

from instances.engine.sandbox import run_call
from instances.engine.script_pool import ScriptCall, ScriptReply
from instances.engine.script_wire import decode_result, encode_argument, follow_up_context
from instances.engine.scripts import compile_script


class InProcessExecutor:
    """A `ScriptExecutor` that runs each call here (what the engine did before issue 8)."""

    def run(self, call: ScriptCall) -> ScriptReply:
        """Run a `ScriptCall` here and return its `ScriptReply` (or raise its `ScriptError`)."""
        compiled = compile_script(call.source, call.location)
        pristine = (
            encode_argument(copy.deepcopy(call.args[call.then.context_position]))
            if call.then
            else None
        )
        outcome = run_call(
            compiled,
            call.handler,
            copy.deepcopy(list(call.args)),  # the engine's own objects: a script may change them
            allowed_modules=call.allowed_modules,
            timeout_seconds=call.timeout_seconds,
            return_arguments=call.return_arguments,
        )
        if outcome.error is not None:
            raise outcome.error
        reply = ScriptReply(decode_result(outcome.result), outcome.arguments or [])
        if call.then is not None:
            # As the worker does: the follow-up handler on a fresh copy of the context.
            context = follow_up_context(
                pristine,
                outcome.result,
                call.then.body,
                condition=call.then.condition,
            )
            second = run_call(
                compiled,
                call.then.handler,
                [context],
                allowed_modules=call.allowed_modules,
                timeout_seconds=call.timeout_seconds,
            )
            if second.error is not None:
                reply.follow_up_error = second.error
            else:
                reply.follow_up = decode_result(second.result)
        return reply
