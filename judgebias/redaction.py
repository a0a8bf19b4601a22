"""Secrets kept out of what judgebias shows and writes.

A tracking URI may carry a password (``postgresql://user:pass@db/mlflow``, ``https://u:p@mlflow``) or
a token in its query; the console, the run's files, the report card and its links show it without
them. Column and parameter names that look like secrets are left out of params and traces.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

# "token" alone or at a name's end (auth_token, HF_TOKEN, accessToken), not "tokens"/"tokenizer": a
# config's max_new_tokens is a setting, and dropping it hid it from the run's params.
SECRET_HINT = re.compile(r"(api[_-]?key|token(?![a-z])|secret|password|passwd|credential|authorization)",
                         re.I)
REDACTED = "***"


def secret_name(name: object) -> bool:
    """Whether a column or parameter name says it holds a secret (its value is never logged)."""
    return bool(SECRET_HINT.search(str(name)))


def redact_uri(uri: str) -> str:
    """``uri`` with its password and any secret-named query value replaced by ``***`` (the user name
    and everything else kept, so the reader still knows which server); a URI without them unchanged."""
    text = str(uri)
    try:
        parts = urlsplit(text)
    except ValueError:
        return REDACTED
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user, sep, _ = userinfo.partition(":")
        netloc = f"{user}{':' + REDACTED if sep else ''}@{host}"
    query = parts.query
    if query and any(secret_name(k) for k, _ in parse_qsl(query, keep_blank_values=True)):
        query = urlencode([(k, REDACTED if secret_name(k) else v)
                           for k, v in parse_qsl(query, keep_blank_values=True)], safe="*")
    if netloc == parts.netloc and query == parts.query:
        return text
    return urlunsplit(parts._replace(netloc=netloc, query=query))


_URI_WITH_USER = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]*@[^\s'\"<>]*")


def redact_uris(text: str) -> str:
    """``text`` with the password of every URI in it that carries credentials (a model's
    ``base_url`` of ``https://user:pass@host/v1`` inside a logged config) replaced by ``***``."""
    return _URI_WITH_USER.sub(lambda m: redact_uri(m.group(0)), str(text))


def uri_without_credentials(uri: str) -> str:
    """``uri`` with no user information and no query at all: what a link may hold (the browser asks
    for credentials itself)."""
    parts = urlsplit(str(uri))
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1], query=""))
