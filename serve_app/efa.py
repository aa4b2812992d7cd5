"""Is libfabric's ``efa`` provider present and usable here? ``pd-serve doctor --efa`` answers.

NIXL's LIBFABRIC backend rides on libfabric, and ``FI_PROVIDER=efa`` (set by the serving config for
LIBFABRIC) makes it fail outright when the image's libfabric has no ``efa`` provider or the pod has
no EFA device. Run inside a Ray worker pod, this checks the image actually running instead of
trusting its label::

    kubectl exec -n ray <worker pod> -- pd-serve doctor --efa       # custom image (serve_app in it)
    kubectl exec -n ray <worker pod> -- fi_info -p efa              # any image, the same probe

The probe is libfabric's own ``fi_info -p efa``: it lists one entry per EFA device and endpoint
type when the provider loads and finds a device, and fails (``fi_getinfo: -61``) when not.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# The EFA installer puts libfabric's tools here; images do not always add it to PATH.
EFA_INSTALLER_BIN = Path("/opt/amazon/efa/bin")
_ENTRY_FIELD = re.compile(r"^\s*(provider|fabric|domain|version|type|protocol):\s*(\S.*?)\s*$")

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


@dataclass
class EfaReport:
    """What the probe found; ``usable`` only when an ``efa`` entry came back."""

    fi_info: str | None
    usable: bool
    entries: list[dict[str, str]] = field(default_factory=list)
    detail: str = ""

    def render(self) -> str:
        if self.fi_info is None:
            return (
                "libfabric efa provider: NOT PRESENT (no fi_info in PATH or "
                f"{EFA_INSTALLER_BIN}: this image has no libfabric tools; NIXL's LIBFABRIC "
                "backend with FI_PROVIDER=efa will fail here)"
            )
        if not self.usable:
            return f"libfabric efa provider: NOT USABLE ({self.fi_info} -p efa: {self.detail})"
        domains = sorted({e.get("domain", "?") for e in self.entries})
        version = self.entries[0].get("version", "?")
        return (
            f"libfabric efa provider: USABLE (version {version}, {len(domains)} device(s): "
            f"{', '.join(domains)}; {len(self.entries)} endpoint type(s))"
        )


def parse_fi_info(text: str) -> list[dict[str, str]]:
    """``fi_info``'s default output: one block per entry, each starting with ``provider:``."""
    entries: list[dict[str, str]] = []
    for line in text.splitlines():
        match = _ENTRY_FIELD.match(line)
        if match is None:
            continue
        key, value = match.groups()
        if key == "provider":
            entries.append({})
        if entries:
            entries[-1][key] = value
    return entries


def find_fi_info() -> str | None:
    return shutil.which("fi_info") or shutil.which("fi_info", path=str(EFA_INSTALLER_BIN))


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - fi_info found on PATH, fixed arguments
        list(argv), capture_output=True, text=True, timeout=30, check=False
    )


def probe_efa(fi_info: str | None = None, run: Runner = _run) -> EfaReport:
    """Run ``fi_info -p efa`` (found on PATH unless given) and say what it showed."""
    fi_info = fi_info or find_fi_info()
    if fi_info is None:
        return EfaReport(fi_info=None, usable=False)
    try:
        done = run([fi_info, "-p", "efa"])
    except (OSError, subprocess.TimeoutExpired) as err:
        return EfaReport(fi_info=fi_info, usable=False, detail=str(err))
    entries = [e for e in parse_fi_info(done.stdout) if e.get("provider", "").startswith("efa")]
    if done.returncode != 0 or not entries:
        said = (done.stderr or done.stdout).strip().splitlines()
        detail = f"exit {done.returncode}" + (f", {said[-1]}" if said else ", no efa entry")
        return EfaReport(fi_info=fi_info, usable=False, detail=detail)
    return EfaReport(fi_info=fi_info, usable=True, entries=entries)
