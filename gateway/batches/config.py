"""The ``batches`` section: files and batches, their bounds, and how lines are run::

batches:
  enabled: true
  max_file_bytes: 104857600     # one uploaded file
  max_lines: 50000              # requests in one file (OpenAI's bound)
  max_line_bytes: 1048576       # one line (also bounded by server.max_body_bytes)
  file_ttl_seconds: 2592000     # 30 days, OpenAI's default for batch files
  concurrency: 4                # lines one replica runs at once
  chunk_lines: 16               # lines claimed under one lease
  lease_seconds: 300            # a claimed line another replica may take back after
  poll_seconds: 0.5             # how often an idle runner looks for work
  band: sheddable               # the flow-control band lines run in (when flow is on)
"""

from __future__ import annotations

from pydantic import Field

from configkit import StrictModel


class BatchesConfig(StrictModel):
    enabled: bool = True
    """Serve ``/v1/files`` and ``/v1/batches`` and run batches on this replica."""
    max_file_bytes: int = Field(100 * 1024 * 1024, ge=1024, le=512 * 1024 * 1024)
    """One uploaded file, in bytes; a larger upload is refused (413) and nothing is kept."""
    max_lines: int = Field(50_000, ge=1, le=1_000_000)
    max_line_bytes: int = Field(1024 * 1024, ge=256)
    """One request line; the pipeline's ``server.max_body_bytes`` bounds its body again."""
    max_files_per_tenant: int = Field(1000, ge=1)
    """Files one tenant keeps at once (uploads past it are refused with a 400)."""
    max_active_batches_per_tenant: int = Field(100, ge=1)
    file_ttl_seconds: float = Field(30 * 86400, ge=3600)
    """How long an uploaded file (and a batch's output file) is kept."""
    completion_window_seconds: float = Field(24 * 3600, gt=0)
    """What ``completion_window: 24h`` gives: past it the batch expires with what it has done."""
    concurrency: int = Field(4, ge=1, le=1024)
    """Lines this replica runs at once, at most (and only while the pools have headroom)."""
    chunk_lines: int = Field(16, ge=1, le=10_000)
    lease_seconds: float = Field(300.0, gt=0)
    """A line claimed and not finished within this is taken back (its replica died)."""
    poll_seconds: float = Field(0.5, gt=0)
    """How often an idle runner (or one waiting for headroom) looks again."""
    band: str = "sheddable"
    """The flow-control band a line asks for: a sheddable one is refused at once where there is
    no room, and the runner puts the line back, so it never waits ahead of an interactive one."""
