"""The worker's code cache: a hash from the wire names a file only in its one form, and a
cached file runs only while its bytes still match that hash."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from flux.domain.execution import WorkflowRef
from flux.worker.code_cache import CodeCache, WorkflowCodeError

SOURCE = "def hello(ctx):\n    return 'hello'\n"
HASH = hashlib.sha256(SOURCE.encode()).hexdigest()


def ref(source_hash: str, entrypoint: str = "hello") -> WorkflowRef:
    return WorkflowRef("hello", 1, source_hash, entrypoint)


class Fetcher:
    def __init__(self, source: str = SOURCE) -> None:
        self.source = source
        self.asked: list[str] = []

    async def __call__(self, source_hash: str) -> tuple[str, str]:
        self.asked.append(source_hash)
        return "hello.py", self.source


@pytest.mark.parametrize(
    "source_hash",
    [
        pytest.param("../../evil", id="relative path"),
        pytest.param("../" * 10 + "tmp/evilmod", id="deep relative path"),
        pytest.param("/tmp/evilmod", id="absolute path"),
        pytest.param(HASH.upper(), id="uppercase hex"),
        pytest.param(HASH[:-1], id="63 digits"),
        pytest.param(HASH + "\n", id="trailing newline"),
        pytest.param(HASH[:-2] + "/x", id="slash inside"),
        pytest.param("", id="empty"),
    ],
)
async def test_a_source_hash_not_in_sha256_form_is_refused_before_any_file_is_touched(
    tmp_path: Path, source_hash: str
) -> None:
    # An attacker's module lying where the traversal would land.
    evil = tmp_path / "evil.py"
    evil.write_text("import sys\nsys.modules['__evil_ran__'] = True\ndef hello(ctx):\n    return 'pwned'\n")
    fetch = Fetcher()
    cache = CodeCache(tmp_path / "work" / "code", fetch)
    with pytest.raises(WorkflowCodeError, match="source_hash must be 64 lowercase hex"):
        await cache.function(ref(source_hash))
    assert fetch.asked == []
    assert not (tmp_path / "work").exists()
    assert "__evil_ran__" not in sys.modules


async def test_a_cached_file_changed_on_disk_is_fetched_again_not_imported(tmp_path: Path) -> None:
    directory = tmp_path / "code"
    (directory / HASH).mkdir(parents=True)
    (directory / HASH / "hello.py").write_text("def hello(ctx):\n    return 'tampered'\n")
    fetch = Fetcher()
    fn = await CodeCache(directory, fetch).function(ref(HASH))
    assert fn(None) == "hello"
    assert fetch.asked == [HASH]
    assert (directory / HASH / "hello.py").read_text() == SOURCE


async def test_a_verified_cached_file_is_used_without_fetching(tmp_path: Path) -> None:
    directory = tmp_path / "code"
    (directory / HASH).mkdir(parents=True)
    (directory / HASH / "hello.py").write_text(SOURCE)
    fetch = Fetcher()
    fn = await CodeCache(directory, fetch).function(ref(HASH))
    assert fn(None) == "hello"
    assert fetch.asked == []


async def test_fetched_source_that_does_not_match_its_hash_is_refused(tmp_path: Path) -> None:
    fetch = Fetcher("def hello(ctx):\n    return 'other'\n")
    with pytest.raises(WorkflowCodeError, match="does not match its hash"):
        await CodeCache(tmp_path / "code", fetch).function(ref(HASH))
    assert not (tmp_path / "code" / HASH).exists()
