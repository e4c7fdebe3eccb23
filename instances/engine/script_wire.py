"""What crosses the boundary between the server and a script worker: plain JSON values only.

Arguments go out as JSON with the context objects marked (`{"o": {...}}` for an attribute object,
`{"l": [...]}` for a list holding such objects, `{"v": value}` for a plain value). A result comes
back as one tagged JSON value: a plain value, a `ScriptResponse`'s fields, a duration, an aware
datetime or a cron schedule (what timer scripts return). Nothing a script returns reaches the
server as an object: the worker converts it to exact JSON types using the base types' own methods
(never a method the script could have overridden), refusing anything deeper than `MAX_DEPTH`, NUL
characters and lone surrogates (PostgreSQL refuses both), non-finite floats and integers too long
to print.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import uuid
from typing import Any

from instances.engine.merging import deep_merge
from instances.engine.scripts import CronSchedule, ScriptResponse

MAX_DEPTH = 64
_INT_DIGITS_LIMIT = 4000


class WireError(ValueError):
    """A value cannot cross the boundary (not JSON, too deep, a string PostgreSQL refuses)."""


class ScriptObject:
    """An attribute bag scripts read (`context.instance.state`) and may write to."""

    _guarded_writes = True

    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:
        # Only reached for missing attributes: keep Python's error, give type checkers `Any`.
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        self.__dict__[name] = value

    def get(self, name: str, default: Any = None) -> Any:
        """`context.get("body")`: attribute access for scripts written dict-style."""
        return self.__dict__.get(name, default)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"{type(self).__name__}({fields})"


# --- server side -----------------------------------------------------------------------------


def json_default(value: Any) -> Any:
    """What `json.dumps` writes for the few non-JSON values a store may add (dates, decimals,
    UUIDs, durations)."""
    # Instance data comes from jsonb and is plain already; this covers values a store adds.
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def encode_argument(value: Any) -> Any:
    """One handler argument as it travels to the worker."""
    if isinstance(value, ScriptObject):
        return {"o": {name: encode_argument(item) for name, item in vars(value).items()}}
    if isinstance(value, list | tuple) and any(isinstance(item, ScriptObject) for item in value):
        # A list of context objects (a fan-out result's items) stays a list of objects.
        return {"l": [encode_argument(item) for item in value]}
    return {"v": value}


def decode_result(tagged: Any) -> Any:
    """What the handler returned, from the worker's tagged value."""
    if not isinstance(tagged, dict):
        raise WireError("the worker sent a malformed result")
    tag = tagged.get("t")
    if tag == "v":
        return tagged.get("v")
    if tag == "response":
        fields = tagged.get("v") or {}
        return ScriptResponse(
            data=fields.get("data"),
            key=fields.get("key"),
            tags=fields.get("tags"),
            headers=fields.get("headers"),
            status_code=fields.get("status_code"),
        )
    if tag == "timedelta":
        try:
            return dt.timedelta(seconds=float(tagged["v"]))
        except OverflowError:
            raise WireError("the returned duration is out of range") from None
    if tag == "datetime":
        return dt.datetime.fromisoformat(str(tagged["v"]))
    if tag == "cron":
        fields = tagged.get("v") or {}
        if not isinstance(fields, dict):
            raise WireError("the worker sent a cron schedule that is not an object")
        return CronSchedule(str(fields.get("cron", "")), str(fields.get("timeZone", "")))
    raise WireError(f"the worker sent a result of unknown kind {tag!r}")


# --- worker side -----------------------------------------------------------------------------


def follow_up_context(
    encoded_context: Any, first_result: Any, body: dict[str, Any], *, condition: bool
) -> ScriptObject:
    """The context a follow-up handler gets (see `FollowUp` in `script_pool`): a fresh copy
    of the first call's context, whatever that call did to its own, with `body` set to the
    task's standard response, whose `data` is what the first handler returned (the data part
    of a `ScriptResponse`), or `{"result": bool(...)}` of it for a condition task."""
    if not isinstance(first_result, dict):
        raise WireError("malformed first result")
    value = first_result.get("v")
    if first_result.get("t") == "response":
        value = (value or {}).get("data")
    context = decode_argument(encoded_context)
    if not isinstance(context, ScriptObject):
        raise WireError("the follow-up's context is not a context object")
    context.body = {**body, "data": {"result": bool(value)} if condition else value}
    return context


def with_patches(encoded_context: Any, patches: list[dict[str, Any]]) -> Any:
    """An encoded context whose `instance.data` has `patches` merged into it, in order."""
    try:
        data_slot = encoded_context["o"]["instance"]["o"]["data"]
        data = data_slot["v"]
    except (KeyError, TypeError):
        raise WireError("the chained argument is not a context with instance data") from None
    for patch in patches:
        data = deep_merge(data, patch)
    data_slot["v"] = data
    return encoded_context


def patch_of(reply: dict[str, Any], source: str) -> dict[str, Any] | None:
    """The data patch a worker reply makes (see `ScriptCall.patch`): the data part of the
    follow-up's (`then`) or the handler's (`result`) value, when an object; else None."""
    if not reply.get("ok"):
        return None
    part = reply.get("then") if source == "then" else reply
    if not isinstance(part, dict) or not part.get("ok", True):
        return None
    tagged = part.get("result")
    if not isinstance(tagged, dict):
        return None
    value = tagged.get("v")
    if tagged.get("t") == "response":
        value = (value or {}).get("data")
    return value if isinstance(value, dict) and value else None


def decode_argument(encoded: Any) -> Any:
    """One handler argument as the script sees it (context objects become `ScriptObject`s)."""
    if isinstance(encoded, dict) and "o" in encoded:
        return ScriptObject(**{name: decode_argument(item) for name, item in encoded["o"].items()})
    if isinstance(encoded, dict) and "v" in encoded:
        return encoded["v"]
    if isinstance(encoded, dict) and isinstance(encoded.get("l"), list):
        return [decode_argument(item) for item in encoded["l"]]
    raise WireError("malformed argument")


def encode_result(value: Any) -> dict[str, Any]:
    """A handler's return value as one tagged JSON value (see `decode_result`)."""
    if isinstance(value, ScriptResponse):
        fields = {
            "data": plain(value.data),
            "key": _optional_str(value.key, "ScriptResponse.key"),
            "tags": plain(value.tags),
            "headers": plain(value.headers),
            "status_code": plain(value.status_code),
        }
        return {"t": "response", "v": fields}
    if isinstance(value, dt.timedelta):
        return {"t": "timedelta", "v": dt.timedelta.total_seconds(value)}
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return {"t": "datetime", "v": dt.datetime.isoformat(value)}
    if isinstance(value, CronSchedule):
        return {"t": "cron", "v": _cron_fields(value)}
    return {"t": "v", "v": plain(value)}


def _cron_fields(value: CronSchedule) -> dict[str, str]:
    # Read past any property a script's subclass could define: the dataclass's own slots.
    expression = object.__getattribute__(value, "__dict__").get("expression")
    zone = object.__getattribute__(value, "__dict__").get("time_zone")
    return {
        "cron": _optional_str(expression, "the cron expression") or "",
        "timeZone": _optional_str(zone, "the cron time zone") or "",
    }


def _optional_str(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise WireError(f"{what} must be a string, not {type(value).__name__}")
    return _plain_str(value)


def plain(value: Any, depth: int = 0) -> Any:
    """`value` rebuilt from exact JSON types (dates as ISO text, decimals and UUIDs as text),
    or `WireError` saying what is not JSON."""
    if depth > MAX_DEPTH:
        raise WireError(f"the value is nested deeper than {MAX_DEPTH} levels")
    if value is None or value is True or value is False:
        return value
    if isinstance(value, str):
        return _plain_str(value)
    if isinstance(value, int):
        number = int.__int__(value)
        if number.bit_length() > _INT_DIGITS_LIMIT * 3:
            raise WireError(f"an integer of {number.bit_length():,} bits is too large to return")
        return number
    if isinstance(value, float):
        real = float.__float__(value)
        if not math.isfinite(real):
            raise WireError(f"{real} is not a JSON number")
        return real
    if isinstance(value, dict):
        return {_plain_key(key): plain(item, depth + 1) for key, item in dict.items(value)}
    if isinstance(value, list | tuple):
        return [plain(item, depth + 1) for item in tuple.__iter__(tuple(value))]
    if isinstance(value, ScriptObject):
        return {_plain_key(key): plain(item, depth + 1) for key, item in vars(value).items()}
    if isinstance(value, CronSchedule):
        # Inside a ScriptResponse's data: the payload form a timer reads back (`timers.py`).
        return _cron_fields(value)
    if isinstance(value, dt.datetime):
        text = dt.datetime.isoformat(value)
        if value.microsecond:
            text = text[:23] + text[26:]
        return text[:-6] + "Z" if text.endswith("+00:00") else text
    if isinstance(value, dt.date):
        return dt.date.isoformat(value)
    if isinstance(value, dt.time):
        return dt.time.isoformat(value)
    if isinstance(value, dt.timedelta):
        return _iso_duration(value)
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return _plain_str(str(value))
    raise WireError(f"a {type(value).__name__} is not a JSON value")


def _plain_str(value: str) -> str:
    text = str.__str__(value)
    if "\x00" in text:
        raise WireError("a string contains a NUL character, which cannot be stored")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise WireError("a string contains a lone surrogate, which is not valid text") from None
    return text


def _plain_key(key: Any) -> str:
    if isinstance(key, str):
        return _plain_str(key)
    # Other scalars become keys as json.dumps writes them.
    if key is None:
        return "null"
    if key is True or key is False:
        return "true" if key else "false"
    if isinstance(key, int | float):
        return str(plain(key))
    raise WireError(f"a dictionary key of type {type(key).__name__} is not a JSON key")


def _iso_duration(value: dt.timedelta) -> str:
    # ISO 8601, as Django's encoder writes durations (P1DT02H03M04.000005S).
    days, remainder = divmod(int(value.total_seconds() * 1_000_000), 86_400_000_000)
    seconds, microseconds = divmod(remainder, 1_000_000)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    fraction = f".{microseconds:06d}" if microseconds else ""
    return f"P{days}DT{hours:02d}H{minutes:02d}M{seconds:02d}{fraction}S"
