"""Task type 16 (`SoapTask`): a SOAP envelope POSTed to `url` through the egress policy.

The config is envelope-based (`task-definition.schema.json`): `body` is the raw XML (a whole
`Envelope`, or the content of its `Body`, which is then wrapped in an envelope of
`soapVersion`); the input handler may return the XML text instead, or set `task.body`.
`soapAction` goes in the `SOAPAction` header (1.1, `text/xml`) or in the `action` parameter of
the `application/soap+xml` content type (1.2); `headers`, `timeoutSeconds`, `validateSsl` and
`acceptedStatusCodes` as the HTTP task's.

The answer's `Body` becomes the response's `data`: each element a key by its local name (no
namespace prefix), a leaf its text, repeated elements a list, attributes `@name`, an element's
own text beside children or attributes `#text`. A `Fault` fails the task with `Task:Soap:Fault`
and the fault's code and string (its `data` the fault, for the output handler), unless
`acceptedStatusCodes` accepts the answer's status (faults usually come with a 500). An answer
that is no SOAP envelope fails as the HTTP task would on its status, else with
`Task:Soap:InvalidMessage`. XML with a DOCTYPE is refused both ways (no entities).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from instances.engine.errors import Codes
from instances.engine.task_types.base import StandardResponse, TaskCall, TaskFailure, accepted
from instances.engine.task_types.http import http_answer, http_checked, http_send

SOAP_11 = "http://schemas.xmlsoap.org/soap/envelope/"
SOAP_12 = "http://www.w3.org/2003/05/soap-envelope"
NAMESPACES = {"1.1": SOAP_11, "1.2": SOAP_12}
_DOCTYPE = re.compile(r"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)


def execute_soap(call: TaskCall) -> StandardResponse:
    """Send the task's envelope and turn the answer's body into data."""
    task = call.task
    version = str(task.get("soap_version") or "1.1")
    if version not in NAMESPACES:
        raise TaskFailure(Codes.TASK_SOAP_INVALID, f"SOAP version {version!r} is not 1.1 or 1.2")
    source = call.input_data if call.input_data is not None else task.get("body")
    if not isinstance(source, str) or not source.strip():
        raise TaskFailure(
            Codes.TASK_SOAP_INVALID, "the SOAP task's body (or its input handler's) is no XML text"
        )
    envelope = soap_envelope(source, version)
    action = str(task.get("soap_action") or "")
    headers = {str(k): str(v) for k, v in (task.get("headers") or {}).items()}
    if version == "1.1":
        headers.update({"Content-Type": "text/xml; charset=utf-8", "SOAPAction": f'"{action}"'})
    else:
        content_type = "application/soap+xml; charset=utf-8"
        headers["Content-Type"] = content_type + (f'; action="{action}"' if action else "")
    response = http_send(
        "POST",
        str(task.get("url") or ""),
        headers=headers,
        content=envelope,
        timeout=float(task.get("timeout_seconds") or 30),
        verify=bool(task.get("validate_ssl", True)),
    )
    accepted_codes = list(task.get("accepted") or [])
    try:
        data, fault = soap_body(response.text)
    except ValueError as exc:
        # No envelope: a 503 from a proxy is the HTTP failure it is; a 200 of HTML is not SOAP.
        result = http_checked("POST", http_answer(response), accepted_codes)
        result.is_success = False
        result.error_message = f"SOAP answer unreadable: {exc}"
        raise TaskFailure(Codes.TASK_SOAP_INVALID, result.error_message, result) from exc
    result = http_answer(response, data, parsed=True)
    if fault is not None and not accepted(response.status_code, accepted_codes):
        result.is_success = False
        result.error_message = f"SOAP fault {fault[0]}: {fault[1]}"
        raise TaskFailure(Codes.TASK_SOAP_FAULT, result.error_message, result)
    return http_checked("POST", result, accepted_codes)


def _parse(text: str) -> ET.Element:
    if _DOCTYPE.search(text):
        raise ValueError("XML with a DOCTYPE or an ENTITY is refused")
    try:
        return ET.fromstring(text)
    except ET.ParseError as exc:
        raise ValueError(f"not well-formed XML: {exc}") from exc


def soap_envelope(source: str, version: str) -> bytes:
    """The envelope to send: `source` when it is one (of `version`), else `source` (one or
    more elements) wrapped in an envelope's Body. Raises `TaskFailure` for XML that is not."""
    namespace = NAMESPACES[version]
    try:
        root = _parse(source)
    except ValueError:
        # Several elements (the content of a Body) parse only once wrapped.
        try:
            _parse(f"<wrap>{source}</wrap>")
        except ValueError as exc:
            raise TaskFailure(Codes.TASK_SOAP_INVALID, f"SOAP body: {exc}") from exc
        root = None
    if root is not None and _local(root.tag) == "Envelope":
        if _namespace(root.tag) != namespace:
            raise TaskFailure(
                Codes.TASK_SOAP_INVALID,
                f"the envelope's namespace is not SOAP {version}'s ({namespace})",
            )
        return source.encode()
    text = source.strip()
    if text.startswith("<?xml"):
        text = text[text.index("?>") + 2 :]
    wrapped = (
        f'<soap:Envelope xmlns:soap="{namespace}"><soap:Body>{text}</soap:Body></soap:Envelope>'
    )
    return ('<?xml version="1.0" encoding="utf-8"?>' + wrapped).encode()


def soap_body(text: str) -> tuple[Any, tuple[str, str] | None]:
    """The data of an answer's `Body`, and its fault's (code, string) when it is a fault.
    Raises `ValueError` when `text` is no SOAP envelope."""
    root = _parse(text)
    if _local(root.tag) != "Envelope" or _namespace(root.tag) not in NAMESPACES.values():
        raise ValueError(f"the root element is {root.tag}, not a SOAP Envelope")
    body = next((child for child in root if _local(child.tag) == "Body"), None)
    if body is None:
        raise ValueError("the envelope has no Body")
    data = _children(body)
    fault = next((child for child in body if _local(child.tag) == "Fault"), None)
    return data, (_fault(fault) if fault is not None else None)


def _fault(fault: ET.Element) -> tuple[str, str]:
    # SOAP 1.1: faultcode / faultstring; SOAP 1.2: Code/Value and Reason/Text.
    texts = {_local(e.tag): (e.text or "").strip() for e in fault.iter()}
    code = texts.get("faultcode") or texts.get("Value") or ""
    reason = texts.get("faultstring") or texts.get("Text") or ""
    return code, reason


# Deeper answers are refused (`Task:Soap:InvalidMessage`) before Python's recursion limit.
MAX_XML_DEPTH = 64


def _children(element: ET.Element, depth: int = 0) -> Any:
    if depth > MAX_XML_DEPTH:
        raise ValueError(f"the answer nests deeper than {MAX_XML_DEPTH} elements")
    out: dict[str, Any] = {f"@{_local(k)}": v for k, v in element.attrib.items()}
    repeated: set[str] = set()
    for child in element:
        name, value = _local(child.tag), _value(child, depth + 1)
        if name in repeated:
            out[name].append(value)
        elif name in out:
            out[name] = [out[name], value]
            repeated.add(name)
        else:
            out[name] = value
    return out


def _value(element: ET.Element, depth: int) -> Any:
    text = (element.text or "").strip()
    if len(element) == 0 and not element.attrib:
        return text if text or element.text is not None else None
    out = _children(element, depth)
    if text:
        out["#text"] = text
    return out


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _namespace(tag: str) -> str:
    return tag[1:].split("}", 1)[0] if tag.startswith("{") else ""
