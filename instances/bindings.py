"""Output-binding adapters the engine's `DaprBinding` task (type 2) sends through: `smtp` with
the standard library's smtplib and email packages. Installed at start-up
(`InstancesConfig.ready`); the `webhook` kind is an HTTP call the engine makes itself.

A binding's settings entry (`VNEXT["BINDINGS"]["mail"]`): `host`, `port` (25), `from`, `to`
(default recipients), `username` / `password` (login when given), `starttls` (STARTTLS before
login), `ssl` (implicit TLS, port 465 style), `timeout` (30 s). The task's `metadata` (as Dapr's
SMTP binding): `emailTo`, `emailCC`, `emailBCC` (comma-separated), `subject`, `emailFrom`,
`priority` (1-5); its `data` the text of the mail (anything but a string as JSON). The one
operation is `create`. The connection is opened to an address the egress policy allows, like
every outgoing call.
"""

from __future__ import annotations

import json
import smtplib
import socket
import ssl
from email.message import EmailMessage
from email.utils import getaddresses, make_msgid
from typing import Any

import httpcore

from instances.engine.egress import EgressRefused, egress_policy, resolve_host
from instances.engine.ports import BindingError


class _VettedSMTP(smtplib.SMTP):
    """smtplib's client, connecting only to an address the egress policy vets for its host."""

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        addresses = egress_policy().vet(host, port, resolve_host)
        failure: OSError | None = None
        for address in addresses:
            try:
                return socket.create_connection((address, port), timeout, self.source_address)
            except OSError as exc:
                failure = exc
        assert failure is not None
        raise failure


class _VettedSMTPSSL(smtplib.SMTP_SSL, _VettedSMTP):
    """Implicit TLS over a vetted connection (SMTP_SSL wraps the socket `_VettedSMTP` opens)."""


def _recipients(*values: Any) -> list[str]:
    return [address for _, address in getaddresses([str(v) for v in values if v]) if address]


class SmtpSender:
    """Sends a task's `create` operation as one mail."""

    def send(
        self, options: dict[str, Any], operation: str, data: Any, metadata: dict[str, str]
    ) -> Any:
        """Send the mail; its message id and recipients, or `BindingError`."""
        if operation != "create":
            raise BindingError("refused", f"smtp bindings have no operation {operation!r}")
        sender = metadata.get("emailFrom") or str(options.get("from") or "")
        to = _recipients(metadata.get("emailTo") or options.get("to"))
        cc = _recipients(metadata.get("emailCC"))
        bcc = _recipients(metadata.get("emailBCC"))
        if not sender or not to:
            raise BindingError("refused", "a mail needs a sender (from) and a recipient (emailTo)")
        message = EmailMessage()
        try:
            message["From"] = sender
            message["To"] = ", ".join(to)
            if cc:
                message["Cc"] = ", ".join(cc)
            message["Subject"] = metadata.get("subject", "")
            if metadata.get("priority"):
                message["X-Priority"] = str(metadata["priority"])
        except ValueError as exc:  # a header value with a line break, from the definition
            raise BindingError("refused", f"a mail header was refused: {exc}") from exc
        message["Message-ID"] = make_msgid()
        message.set_content(data if isinstance(data, str) else json.dumps(data, default=str))
        host, port = str(options["host"]), int(options.get("port") or 25)
        timeout = float(options.get("timeout") or 30)
        client = _VettedSMTPSSL if options.get("ssl") else _VettedSMTP
        try:
            with client(host, port, timeout=timeout) as smtp:
                if options.get("starttls") and not options.get("ssl"):
                    smtp.starttls(context=ssl.create_default_context())
                if options.get("username"):
                    smtp.login(str(options["username"]), str(options.get("password") or ""))
                refused = smtp.send_message(message, sender, [*to, *cc, *bcc])
        except EgressRefused as exc:
            raise BindingError("egress", str(exc)) from exc
        except smtplib.SMTPRecipientsRefused as exc:
            codes = {address: code for address, (code, _) in exc.recipients.items()}
            first = next(iter(exc.recipients.values()), (None, b""))
            reply = first[1].decode(errors="replace") if isinstance(first[1], bytes) else ""
            detail = f"every recipient refused: {codes} {reply}"
            raise BindingError("refused", detail, first[0]) from exc
        except smtplib.SMTPResponseException as exc:
            error = exc.smtp_error
            reply = error.decode(errors="replace") if isinstance(error, bytes) else str(error)
            raise BindingError("refused", f"{exc.smtp_code} {reply}", exc.smtp_code) from exc
        except TimeoutError as exc:
            raise BindingError("timeout", f"no answer from {host}:{port} in {timeout:g} s") from exc
        except (OSError, smtplib.SMTPException, httpcore.ConnectError) as exc:
            raise BindingError("unavailable", f"{host}:{port}: {exc}") from exc
        return {
            "messageId": message["Message-ID"],
            "accepted": [a for a in [*to, *cc, *bcc] if a not in refused],
            "refused": {address: code for address, (code, _) in refused.items()},
        }
