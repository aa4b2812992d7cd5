"""The device sweep's KV transfer count (loadtests/device/kv_transfers.py), on the H200's lines."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).parents[3]
# Lines of the push sweep's run (2026-12-02): the engine's Ray worker writes its own log, and Ray
# forwards the same line into the engine actor's log under a prefix of its own.
OWN = (
    "(Worker pid=2661) INFO 12-02 14:53:21 [kv_transfer_log.py:57] pd-serve kv_transfer "
    "bytes=270532608 xfer_ms={ms} post_ms=0.549 descriptors=32"
)
FORWARDED = "(EngineCore pid=2471) \x1b[36m(RayWorkerProc pid=2661)\x1b[0m " + OWN


def kv_transfers() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "kv_transfers", ROOT / "loadtests" / "device" / "kv_transfers.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_transfer_forwarded_into_a_second_log_is_counted_once(tmp_path: Path) -> None:
    module = kv_transfers()
    worker, actor = tmp_path / "worker-a-2661.out", tmp_path / "worker-b-1927.out"
    worker.write_text("before the mark\n")
    actor.write_text("")
    mark = tmp_path / ".mark"
    module.mark(tmp_path, mark)
    with worker.open("a") as log:
        log.write(OWN.format(ms="18.996") + "\n" + OWN.format(ms="6.228") + "\n")
    actor.write_text(FORWARDED.format(ms="18.996") + "\n" + FORWARDED.format(ms="6.228") + "\n")
    transfers = module.read_since(tmp_path, mark)
    assert [t.xfer_ms for t in transfers] == [18.996, 6.228]
    assert module.summarize(transfers)["transfers"] == 2
