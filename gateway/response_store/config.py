"""The ``responses`` section: whether and for how long the gateway keeps Responses API answers.

responses:
  store: true                 # keep responses whose request has store true or omitted
  ttl_seconds: 2592000        # 30 days, OpenAI's retention; expired ones are removed
  expiry_interval: 60         # seconds between the background sweeps of expired rows
  max_bytes: 4194304          # what one stored response may hold (its conversation + output)
"""

from __future__ import annotations

from pydantic import Field

from configkit import StrictModel


class ResponsesConfig(StrictModel):
    store: bool = True
    """Keep responses (``store`` true or omitted in the request). Off: ``store: true`` and
    ``previous_response_id`` are refused with a 400, as a stateless gateway does."""
    ttl_seconds: float = Field(30 * 86400, gt=0)
    """How long a stored response can be read or continued; then it is gone."""
    expiry_interval: float = Field(60.0, gt=0)
    """Seconds between background sweeps deleting expired rows (reads never see them anyway)."""
    max_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    """The JSON bytes one stored response may hold: the conversation it was made from (earlier
    turns included) and its output. A request whose conversation alone is larger is refused with
    a 400; a response whose output takes it over is answered but not stored (logged, counted)."""
    default_model: str | None = None
    """The model a ``/v1/responses`` request without ``model`` gets (OpenAI's document makes the
    field optional there); routed, limited, billed and echoed as if the client had named it, so
    it must be one of ``models``. None: such a request is a 400 naming ``model``."""
    write_timeout: float = Field(5.0, gt=0)
    """Seconds the end of an answer waits for its row to be written before going out anyway."""
