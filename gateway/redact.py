"""Redaction of values that may carry secrets before they are shown (logs, labels, admin views).

redact_url("http://user:pass@ray-head:8000/pd") == "http://***@ray-head:8000/pd"
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def redact_url(url: str) -> str:
    """The URL with any ``user:password@`` replaced by ``***@``; a query string is dropped too
    (it may carry a token)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc and not parts.query:
        return url
    host = parts.netloc.rsplit("@", 1)[-1]
    netloc = f"***@{host}" if "@" in parts.netloc else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
