"""A script worker process: the boundary between workflow scripts and the server.

The server starts it with a clean interpreter (`python -I`, an empty environment, an empty
temporary working directory; see `instances.engine.script_pool`). It never imports Django and
holds no settings, connection or secret. Before it reads its first request it:
1. imports everything a script may reach (the closed module list), so nothing is loaded later;
2. forbids core dumps and file writes (`RLIMIT_CORE`, `RLIMIT_FSIZE` = 0);
3. when started as root, drops to an unprivileged user (`nobody` by default) with no groups;
4. asks for SIGKILL when its parent dies and becomes non-dumpable (no ptrace, no /proc peeking);
5. caps its address space (`RLIMIT_AS`), open files and processes;
6. loads a seccomp filter (where libseccomp is present) that refuses sockets, `execve`, `fork`
   and `clone`, and any `open` for writing or creating a file, among other calls.

Then it answers requests on stdin/stdout, one at a time: 4-byte big-endian length, then JSON.
"""

from __future__ import annotations

import codecs
import contextlib
import copy
import ctypes
import datetime
import errno
import importlib
import json
import os
import resource
import signal
import socket
import struct
import sys
from collections import OrderedDict
from typing import Any

from instances.engine.sandbox import run_call
from instances.engine.script_wire import (
    decode_argument,
    decode_result,
    follow_up_context,
    patch_of,
    with_patches,
)
from instances.engine.scripts import (
    SCRIPT_MODULES,
    CompiledScript,
    ScriptCompileError,
    ScriptError,
    compile_script,
)

_HEADER = struct.Struct(">I")
_PRELOADED_CODECS = (
    "utf-8", "utf-16", "utf-32", "latin-1", "ascii", "cp1252", "cp1254", "iso8859-9",
    "iso8859-15", "cp437", "cp850", "cp857", "mac-roman", "idna", "punycode",
    "unicode-escape", "raw-unicode-escape",
)  # fmt: skip
_CACHE_SIZE = 512
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4

# Calls the worker never needs once it serves requests. EPERM, so a script that somehow reached
# one gets an error, not a crash.
_DENIED_SYSCALLS = (
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4", "sendto",
    "sendmsg", "sendmmsg", "recvfrom", "recvmsg", "recvmmsg",
    "execve", "execveat", "fork", "vfork", "clone", "ptrace", "process_vm_readv",
    "process_vm_writev", "kill", "creat", "mkdir", "mkdirat", "mknod", "mknodat", "rmdir",
    "unlink", "unlinkat", "rename", "renameat", "renameat2", "link", "linkat", "symlink",
    "symlinkat", "chmod", "fchmod", "fchmodat", "chown", "fchown", "lchown", "fchownat",
    "truncate", "ftruncate", "memfd_create", "mount", "umount2", "pivot_root", "chroot",
    "unshare", "setns", "bpf", "perf_event_open", "keyctl", "add_key", "request_key",
    "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "personality",
    "name_to_handle_at", "open_by_handle_at", "setuid", "setgid", "setreuid", "setregid",
    "setresuid", "setresgid", "setgroups", "reboot", "init_module", "finit_module",
    "delete_module", "kexec_load", "swapon", "swapoff", "acct",
)  # fmt: skip
# Calls whose arguments cannot be inspected: ENOSYS makes the C library fall back to the
# inspectable form (openat, clone).
_UNINSPECTABLE_SYSCALLS = ("openat2", "clone3")
_WRITE_FLAGS = (os.O_WRONLY, os.O_RDWR, os.O_CREAT, os.O_TRUNC, os.O_APPEND)


def main(config_text: str) -> None:
    """Harden this process per `config_text` (JSON from the pool), then serve until stdin ends."""
    config = json.loads(config_text)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _preload()
    protections = harden(config)
    _send({"ready": True, "pid": os.getpid(), "protections": protections})
    Worker(max_payload=int(config["max_payload"])).serve()


def _preload() -> None:
    for name in sorted(SCRIPT_MODULES):
        importlib.import_module(name)
    # Touch what loads lazily on first use: once privileges are dropped the interpreter's files
    # may no longer be readable (a root-only pyenv, say).
    json.loads(json.dumps({"a": [1.5, "b"]}, indent=1))
    datetime.datetime.strptime("2024-01-31 10:20 +0300", "%Y-%m-%d %H:%M %z")
    for codec in _PRELOADED_CODECS:
        codecs.lookup(codec)
    compile_script("def handler(context):\n    return [x for x in range(1)]\n", "preload")
    with contextlib.suppress(ImportError, OSError, AttributeError, TypeError):
        import pyseccomp  # noqa: F401 - loads libseccomp while files may still be read


def harden(config: dict[str, Any]) -> dict[str, Any]:
    """Apply every protection this platform offers; return which ones are in force."""
    applied: dict[str, Any] = {}
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    applied["core_files"] = applied["file_size"] = 0
    if os.geteuid() == 0 and config.get("uid") is not None:
        os.setgroups([])
        os.setresgid(config["gid"], config["gid"], config["gid"])
        os.setresuid(config["uid"], config["uid"], config["uid"])
    applied["uid"], applied["gid"] = os.getuid(), os.getgid()
    applied["parent_death_signal"] = _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != config.get("parent_pid", os.getppid()):
        sys.exit(0)  # the server died while this worker started
    applied["dumpable"] = not _prctl(_PR_SET_DUMPABLE, 0)
    memory = int(config["memory_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    applied["address_space_bytes"] = memory
    files = int(config.get("open_files", 16))
    resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))
    applied["open_files"] = files
    if os.getuid() != 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
        applied["processes"] = 0
    applied["seccomp"] = _load_seccomp()
    applied["environment_variables"] = len(os.environ)
    applied["cwd"] = os.getcwd()
    return applied


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _load_seccomp() -> str | bool:
    try:
        import pyseccomp as seccomp
    except (ImportError, OSError, AttributeError, TypeError) as exc:
        return f"unavailable: {type(exc).__name__}"
    denied = seccomp.ERRNO(errno.EPERM)
    syscall_filter = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in _DENIED_SYSCALLS:
        try:
            syscall_filter.add_rule(denied, name)
        except (OSError, ValueError, RuntimeError):
            continue  # not a call of this architecture
    for name in _UNINSPECTABLE_SYSCALLS:
        try:
            syscall_filter.add_rule(seccomp.ERRNO(errno.ENOSYS), name)
        except (OSError, ValueError, RuntimeError):
            continue
    for flag in _WRITE_FLAGS:
        syscall_filter.add_rule(denied, "open", seccomp.Arg(1, seccomp.MASKED_EQ, flag, flag))
        syscall_filter.add_rule(denied, "openat", seccomp.Arg(2, seccomp.MASKED_EQ, flag, flag))
    syscall_filter.load()
    return True


def _send(message: dict[str, Any]) -> None:
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode(
        "utf-8", "surrogatepass"
    )
    _write_all(_HEADER.pack(len(body)) + body)


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(1, view)
        view = view[written:]


def _read_exactly(size: int, start: bytes = b"") -> bytes | None:
    chunks = [start]
    size -= len(start)
    while size > 0:
        chunk = os.read(0, min(size, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _read_frame(max_payload: int) -> bytes | None:
    """The next request's body; None when stdin ended or the frame is over `max_payload`.
    A request nearly always arrives whole: header and body come from one read."""
    buffer = os.read(0, 1 << 16)
    if not buffer:
        return None
    header = _read_exactly(_HEADER.size, buffer[: _HEADER.size])
    if header is None:
        return None
    (length,) = _HEADER.unpack(header)
    body = buffer[_HEADER.size :]
    # The server sends one request at a time and waits for its answer: nothing follows it.
    if length > max_payload or len(body) > length:
        return None  # the server never sends this; treat it as a broken pipe
    return _read_exactly(length, body)


# What a batch's answer adds around its replies (`{"ok": true, "replies": [...]}`), and room
# for the failure that replaces a reply too large.
_BATCH_ENVELOPE_BYTES = 512


class Worker:
    """The request loop: compiled code cached by content hash, one call at a time."""

    def __init__(self, *, max_payload: int) -> None:
        self.max_payload = max_payload
        self.compiled: OrderedDict[tuple[str, str], CompiledScript] = OrderedDict()

    def serve(self) -> None:
        """Answer requests until the server closes stdin."""
        while True:
            body = _read_frame(self.max_payload)
            if body is None:
                return
            request = json.loads(body)
            reply = self.answer(request)
            encoded = _ENCODER.encode(reply).encode()
            if len(encoded) > self.max_payload:
                too_large = ScriptError(
                    f"the script's answer is larger than {self.max_payload:,} bytes",
                    location=str(request.get("location") or "script"),
                )
                encoded = json.dumps(_failure(too_large)).encode()
            _write_all(_HEADER.pack(len(encoded)) + encoded)
            if reply.get("recycle"):
                return

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        """One request: `call` (run a handler) or `probe` (report what the sandbox refuses).
        A call may list `helpers` ({name, hash, location, source?}): compiled and cached like
        the script, imported by the script under `name`."""
        if request.get("op") == "probe":
            return {"ok": True, "probe": probe()}
        if request.get("op") == "batch":
            return self.answer_batch(request)
        location = str(request["location"])
        try:
            compiled = self._compiled(str(request["hash"]), location, request.get("source"))
            helpers = self._helpers(request.get("helpers"))
        except ScriptCompileError as exc:
            return _failure(exc)
        if compiled is None or None in helpers.values():
            return {"ok": False, "need_source": True}
        usable = {name: helper for name, helper in helpers.items() if helper is not None}
        try:
            args = [decode_argument(item) for item in request.get("args", [])]
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return _failure(ScriptError(f"malformed arguments: {exc}", location=location))
        then = request.get("then")
        # The follow-up's context is the one the server sent, not what the first handler makes
        # of it: decoded arguments share their values with the request.
        pristine = copy.deepcopy(request.get("args")) if isinstance(then, dict) else None
        modules = frozenset(request.get("modules", ()))
        timeout = float(request["timeout"])
        outcome = run_call(
            compiled,
            str(request["handler"]),
            args,
            allowed_modules=modules,
            timeout_seconds=timeout,
            return_arguments=tuple(request.get("return_args", ())),
            helpers=usable,
        )
        if outcome.error is not None:
            reply = _failure(outcome.error)
            reply["recycle"] = outcome.exhausted_memory
            reply["log"] = outcome.log
            return reply
        reply = {"ok": True, "result": outcome.result, "arguments": outcome.arguments}
        log = list(outcome.log or ())
        if isinstance(then, dict) and pristine is not None:
            # The follow-up handler of a script task: same script, same worker, no round trip.
            try:
                context = follow_up_context(
                    pristine[int(then["context"])],
                    outcome.result,
                    dict(then["body"]),
                    condition=bool(then.get("condition")),
                )
            except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
                reply["then"] = _failure(
                    ScriptError(f"malformed follow-up: {exc}", location=location)
                )
            else:
                second = run_call(
                    compiled,
                    str(then["handler"]),
                    [context],
                    allowed_modules=modules,
                    timeout_seconds=timeout,
                    helpers=usable,
                )
                log += second.log or ()
                if second.error is not None:
                    reply["then"] = _failure(second.error)
                    reply["recycle"] = second.exhausted_memory
                else:
                    reply["then"] = {"ok": True, "result": second.result}
        reply["log"] = log
        return reply

    def answer_batch(self, request: dict[str, Any]) -> dict[str, Any]:
        """A batch (see `ScriptPool.run_batch`): each call answered as a call of its own, in
        order, its shared arguments decoded afresh from their JSON text (nothing one call does
        to its context is seen by the next). With `chain`, that argument's instance data takes
        the patches of the calls before. Stops after a call that exhausted memory, and with
        `until: true` after the first call that fails or returns a true value."""
        calls = [part for part in request.get("calls") or () if isinstance(part, dict)]
        # Every script must be at hand before any call runs, so none runs twice.
        for part in calls:
            try:
                compiled = self._compiled(
                    str(part["hash"]), str(part["location"]), part.get("source")
                )
                helpers = self._helpers(part.get("helpers"))
            except ScriptCompileError:
                continue  # reported by the call itself
            if compiled is None or None in helpers.values():
                return {"ok": False, "need_source": True}
        shared = request.get("shared") or []
        chain = request.get("chain")
        patches: list[dict[str, Any]] = []
        replies: list[dict[str, Any]] = []
        # The answer's size so far: the call whose reply would take it past the limit fails
        # as too large and the batch stops there (the ones before keep their answers).
        size = _BATCH_ENVELOPE_BYTES
        for part in calls:
            location = str(part.get("location") or "script")
            try:
                args = [_shared(item, shared) for item in part.get("args") or ()]
                if isinstance(chain, int) and patches:
                    args[chain] = with_patches(args[chain], patches)
            except (ValueError, TypeError, KeyError, IndexError) as exc:
                replies.append(_failure(ScriptError(f"malformed batch: {exc}", location=location)))
                continue
            reply = self.answer({**part, "args": args})
            size += len(_ENCODER.encode(reply).encode()) + 1
            if size > self.max_payload:
                too_large = ScriptError(
                    f"the script's answer is larger than {self.max_payload:,} bytes",
                    location=location,
                )
                replies.append(_failure(too_large))
                break
            replies.append(reply)
            if reply.get("recycle"):
                return {"ok": True, "replies": replies, "recycle": True}
            if request.get("until") == "true" and not _asks_on(reply):
                break
            patch = patch_of(reply, str(part.get("patch") or "")) if part.get("patch") else None
            if patch is not None:
                patches.append(patch)
        return {"ok": True, "replies": replies}

    def _helpers(self, entries: Any) -> dict[str, CompiledScript | None]:
        """The helper libraries declared for the script, by the name it imports them by (None
        for one neither cached nor sent)."""
        return {
            str(entry["name"]): self._compiled(
                str(entry["hash"]), str(entry["location"]), entry.get("source")
            )
            for entry in entries or ()
        }

    def _compiled(self, digest: str, location: str, source: Any) -> CompiledScript | None:
        """The compiled code of `digest` at `location`: cached, else compiled from `source`;
        None when it is not cached and no source came (the server then sends it)."""
        key = (digest, location)
        compiled = self.compiled.get(key)
        if compiled is not None:
            self.compiled.move_to_end(key)
            return compiled
        if source is None:
            return None
        compiled = compile_script(str(source), location)
        self.compiled[key] = compiled
        if len(self.compiled) > _CACHE_SIZE:
            self.compiled.popitem(last=False)
        return compiled


def _asks_on(reply: dict[str, Any]) -> bool:
    # In an `until: true` batch: go on after this reply? Not after a failure, nor after a true
    # value, as the server would read it (a `ScriptResponse`, a datetime: true).
    if not reply.get("ok"):
        return False
    try:
        return not decode_result(reply.get("result"))
    except (ValueError, TypeError, KeyError):
        return False


def _shared(item: Any, shared: list[Any]) -> Any:
    # A batch argument: its own encoding, or `{"s": i}` for the i-th shared one, decoded anew.
    if isinstance(item, dict) and set(item) == {"s"}:
        return json.loads(shared[int(item["s"])])
    return item


def _failure(error: ScriptError) -> dict[str, Any]:
    described: dict[str, Any] = {
        "kind": error.kind,
        "message": error.message,
        "location": error.location,
        "line": error.line,
    }
    if isinstance(error, ScriptCompileError):
        described["problems"] = error.problems
    return {"ok": False, "error": described}


def probe() -> dict[str, str]:
    """Try, from inside the hardened worker, what a script that escaped RestrictedPython would
    try first; report each as `refused (...)` or `allowed`. Platform code, no script input."""
    attempts: dict[str, Any] = {
        "create a file in the working directory": lambda: os.open(
            "probe.txt", os.O_WRONLY | os.O_CREAT, 0o600
        ),
        "create a file in /tmp": lambda: os.open(
            "/tmp/vnext-probe.txt", os.O_WRONLY | os.O_CREAT, 0o600
        ),
        "open a network socket": lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM),
        "open a unix socket": lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM),
        "fork": os.fork,
        "execute a program": lambda: os.execv("/nonexistent/vnext-probe", ["probe"]),
        "read /etc/shadow": lambda: os.open("/etc/shadow", os.O_RDONLY),
        "signal the parent": lambda: os.kill(os.getppid(), 0),
    }
    report: dict[str, str] = {}
    for name, attempt in attempts.items():
        try:
            result = attempt()
        except OSError as exc:
            report[name] = f"refused ({errno.errorcode.get(exc.errno or 0, exc.errno)})"
            continue
        if name == "fork" and result == 0:
            os._exit(0)
        report[name] = "allowed"
    report["environment"] = ", ".join(sorted(os.environ)) or "empty"
    report["django loaded"] = "yes" if "django" in sys.modules else "no"
    return report
