"""FileSystemSource and CSVSource on real files; SourceRef ids; the package's import cost."""

from __future__ import annotations

import asyncio
import json
import os
import tracemalloc
from decimal import Decimal
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from durafact._activities.csv_source import (
    DEFAULT_KEEP_BYTES,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    CSVSource,
)
from durafact._activities.files_source import FileSystemSource
from durafact._activities.sources import (
    InvalidSourceSpec,
    SourceActivities,
    build_source,
    load_corpus,
)
from durafact._core.arithmetic import column_values, parse_number
from durafact._core.sources import (
    ContentTooLarge,
    DocumentNotFound,
    RefusedLocation,
    SearchRequest,
    Source,
    SourceError,
    SourceRef,
    SourceSpec,
)

# -- SourceRef -------------------------------------------------------------------------


def test_stable_id_depends_on_source_and_locator_only() -> None:
    first = SourceRef(source_id="docs", uid="a/b.md", payload="x", score=0.9, query="q1")
    again = SourceRef(source_id="docs", uid="a/b.md", payload="y", score=0.1, query="q2")
    other_source = SourceRef(source_id="web", uid="a/b.md")
    other_uid = SourceRef(source_id="docs", uid="a/c.md")
    assert first.stable_id() == again.stable_id()
    assert len({first.stable_id(), other_source.stable_id(), other_uid.stable_id()}) == 3
    assert len(first.stable_id()) == 16


def test_stable_id_does_not_confuse_separators_inside_ids() -> None:
    assert (
        SourceRef(source_id="a:b", uid="c").stable_id()
        != SourceRef(source_id="a", uid="b:c").stable_id()
    )


# -- FileSystemSource --------------------------------------------------------------------


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "guides").mkdir(parents=True)
    (root / "auth.md").write_text(
        "# Authentication\n\n"
        "Tokens are issued by the admin console.\n\n"
        "To set up authentication, create an API token and store the token in the vault.\n",
        encoding="utf-8",
    )
    (root / "install.md").write_text(
        "# Installing the worker\n\n"
        "Run pip install in a fresh virtual environment.\n\n"
        "The worker reads its token from the environment.\n",
        encoding="utf-8",
    )
    (root / "guides" / "vault.txt").write_text(
        "Vault basics\n\nThe vault keeps secrets, each behind a token.\n\n"
        "Authentication to the vault is required.\n",
        encoding="utf-8",
    )
    (root / "guides" / "cooking.md").write_text(
        "# Bread\n\nKnead the dough for ten minutes.\n", encoding="utf-8"
    )
    (root / "picture.png").write_bytes(b"\x89PNG token authentication")
    (root / ".private").mkdir()
    (root / ".private" / "notes.md").write_text("authentication token secret\n")
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "secret.md"
    secret.write_text("# Secret\n\nauthentication token of the production database\n")
    return secret


async def test_files_rank_the_file_with_every_query_word_in_one_passage_first(
    docs: Path,
) -> None:
    refs = await FileSystemSource(docs).search("authentication token", limit=10)
    assert [ref.uid for ref in refs] == ["auth.md", "guides/vault.txt", "install.md"]
    # both words in one paragraph; both words in two paragraphs; one word only
    assert [ref.score for ref in refs] == [1.0, 0.75, 0.5]
    assert all(ref.source_id == "docs" and ref.query == "authentication token" for ref in refs)


async def test_files_search_returns_at_most_limit_refs(docs: Path) -> None:
    refs = await FileSystemSource(docs).search("authentication token", limit=2)
    assert [ref.uid for ref in refs] == ["auth.md", "guides/vault.txt"]


async def test_files_without_a_query_word_are_not_found(docs: Path) -> None:
    refs = await FileSystemSource(docs).search("dough", limit=10)
    assert [ref.uid for ref in refs] == ["guides/cooking.md"]
    assert await FileSystemSource(docs).search("submarine", limit=10) == []


async def test_files_preview_is_the_best_matching_passage_and_title_is_in_metadata(
    docs: Path,
) -> None:
    (ref,) = await FileSystemSource(docs).search("authentication token", limit=1)
    assert ref.payload == (
        "To set up authentication, create an API token and store the token in the vault."
    )
    assert ref.metadata["title"] == "Authentication"


async def test_files_preview_is_short_even_for_a_long_paragraph(docs: Path) -> None:
    (docs / "long.md").write_text("# Long\n\n" + "authentication token " * 200)
    refs = await FileSystemSource(docs).search("authentication token", limit=10)
    long_ref = next(ref for ref in refs if ref.uid == "long.md")
    assert len(long_ref.payload) <= 240 and long_ref.payload.endswith("…")


async def test_files_inflected_words_match_by_stem(tmp_path: Path) -> None:
    (tmp_path / "ru.md").write_text("# Установка аутентификации\n\nКак настроить вход.\n")
    source = FileSystemSource(tmp_path)
    (ref,) = await source.search("аутентификацию", limit=5)
    assert ref.uid == "ru.md"
    assert await FileSystemSource(tmp_path, use_stems=False).search("аутентификацию") == []


async def test_files_repeated_searches_give_the_same_stable_ids(docs: Path) -> None:
    source = FileSystemSource(docs)
    first = {ref.uid: ref.stable_id() for ref in await source.search("authentication")}
    second = {ref.uid: ref.stable_id() for ref in await source.search("vault token")}
    fresh = {ref.uid: ref.stable_id() for ref in await FileSystemSource(docs).search("token")}
    for uid in first.keys() & second.keys():
        assert first[uid] == second[uid] == fresh[uid]
    assert "auth.md" in first.keys() & second.keys()


async def test_files_only_matching_patterns_and_no_hidden_files_are_searched(docs: Path) -> None:
    refs = await FileSystemSource(docs).search("authentication token secret", limit=10)
    assert {ref.uid for ref in refs} == {"auth.md", "guides/vault.txt", "install.md"}
    only_guides = FileSystemSource(docs, patterns=("guides/*.md",))
    assert [ref.uid for ref in await only_guides.search("bread dough")] == ["guides/cooking.md"]


async def test_files_resolve_returns_the_whole_file(docs: Path) -> None:
    source = FileSystemSource(docs)
    (ref,) = await source.search("vault secrets", limit=1)
    assert ref.uid == "guides/vault.txt"
    assert await source.resolve(ref) == (docs / "guides" / "vault.txt").read_text()


async def test_files_a_changed_file_is_searched_with_its_new_text(docs: Path) -> None:
    source = FileSystemSource(docs)
    assert await source.search("sourdough") == []
    path = docs / "guides" / "cooking.md"
    path.write_text("# Bread\n\nFeed the sourdough starter daily.\n")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10_000_000))
    assert [ref.uid for ref in await source.search("sourdough")] == ["guides/cooking.md"]


@pytest.mark.parametrize(
    "uid",
    ["../secret.md", "guides/../../secret.md", "/etc/passwd", "..", "guides\\..\\..\\x.md", ""],
)
async def test_files_resolve_refuses_locators_that_escape_the_root(docs: Path, uid: str) -> None:
    source = FileSystemSource(docs)
    with pytest.raises(RefusedLocation, match="refused locator"):
        await source.resolve(SourceRef(source_id="docs", uid=uid))


async def test_files_resolve_refuses_a_symlink_pointing_outside_the_root(
    docs: Path, outside: Path
) -> None:
    (docs / "leak.md").symlink_to(outside)
    source = FileSystemSource(docs)
    with pytest.raises(RefusedLocation, match="resolves outside the root"):
        await source.resolve(SourceRef(source_id="docs", uid="leak.md"))


async def test_files_search_never_previews_a_file_outside_the_root(
    docs: Path, outside: Path
) -> None:
    (docs / "leak.md").symlink_to(outside)
    (docs / "linked_dir").symlink_to(outside.parent, target_is_directory=True)
    refs = await FileSystemSource(docs).search("production database", limit=10)
    assert refs == []


async def test_files_a_symlink_to_a_file_inside_the_root_is_served(docs: Path) -> None:
    (docs / "alias.md").symlink_to(docs / "auth.md")
    source = FileSystemSource(docs)
    content = await source.resolve(SourceRef(source_id="docs", uid="alias.md"))
    assert content.startswith("# Authentication")


async def test_files_resolve_refuses_files_the_source_does_not_list(docs: Path) -> None:
    source = FileSystemSource(docs)
    for uid in ("picture.png", ".private/notes.md"):
        with pytest.raises(RefusedLocation):
            await source.resolve(SourceRef(source_id="docs", uid=uid))
    with pytest.raises(DocumentNotFound):
        await source.resolve(SourceRef(source_id="docs", uid="absent.md"))


async def test_files_over_the_size_cap_are_not_searched_and_not_read(docs: Path) -> None:
    (docs / "huge.md").write_text("authentication token\n" + "x" * 5000)
    source = FileSystemSource(docs, max_bytes=1000)
    refs = await source.search("authentication token", limit=10)
    assert "huge.md" not in {ref.uid for ref in refs}
    with pytest.raises(ContentTooLarge):
        await source.resolve(SourceRef(source_id="docs", uid="huge.md"))


async def test_files_refuse_a_ref_of_another_source_and_a_bad_limit(docs: Path) -> None:
    source = FileSystemSource(docs)
    with pytest.raises(SourceError, match="belongs to source 'web'"):
        await source.resolve(SourceRef(source_id="web", uid="auth.md"))
    with pytest.raises(SourceError, match="limit"):
        await source.search("token", limit=0)


def test_files_root_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="not a directory"):
        FileSystemSource(tmp_path / "nowhere")


# -- CSVSource -----------------------------------------------------------------------------

PRICES = (
    "sku,name,unit,price\n"
    "P-1,Штукатурка гипсовая,мешок,450.50\n"
    'P-2,Штукатурка цементная,мешок,"1,200.00"\n'
    "P-3,Грунтовка глубокого проникновения,литр,120\n"
    "P-4,Gypsum plaster,bag,9.99\n"
)


@pytest.fixture
def prices(tmp_path: Path) -> Path:
    path = tmp_path / "price.csv"
    path.write_text(PRICES, encoding="utf-8")
    return path


async def test_csv_search_returns_exact_rows_as_strings(prices: Path) -> None:
    source = CSVSource(prices, key="sku", columns=["name"])
    refs = await source.search("штукатурки", limit=10)
    assert [ref.uid for ref in refs] == ["P-1", "P-2"]
    assert refs[0].metadata["row"] == {
        "sku": "P-1",
        "name": "Штукатурка гипсовая",
        "unit": "мешок",
        "price": "450.50",
    }
    assert refs[1].metadata["row"]["price"] == "1,200.00"
    assert refs[0].source_id == "prices" and refs[0].metadata["line"] == 2
    assert "price: 450.50" in refs[0].payload


async def test_csv_search_looks_only_at_the_chosen_columns(prices: Path) -> None:
    by_name = CSVSource(prices, key="sku", columns=["name"])
    every_column = CSVSource(prices, key="sku")
    assert await by_name.search("мешок") == []
    assert [ref.uid for ref in await every_column.search("мешок")] == ["P-1", "P-2"]


async def test_csv_search_ranks_rows_and_respects_the_limit(prices: Path) -> None:
    source = CSVSource(prices, key="sku", columns=["name"])
    refs = await source.search("штукатурка гипсовая", limit=1)
    assert [(ref.uid, ref.score) for ref in refs] == [("P-1", 1.0)]


async def test_csv_resolve_returns_the_row_as_json_and_rows_are_looked_up_by_key(
    prices: Path,
) -> None:
    source = CSVSource(prices, key="sku")
    (ref,) = await source.search("gypsum", limit=5)
    assert json.loads(await source.resolve(ref)) == {
        "sku": "P-4",
        "name": "Gypsum plaster",
        "unit": "bag",
        "price": "9.99",
    }
    assert source.row("P-3")["name"] == "Грунтовка глубокого проникновения"
    assert [row["sku"] for row in source.rows(["P-3", "P-1"])] == ["P-3", "P-1"]
    assert len(source.rows()) == 4
    with pytest.raises(DocumentNotFound, match="P-9"):
        await source.resolve(SourceRef(source_id="prices", uid="P-9"))


async def test_csv_numbers_are_computed_exactly_in_code(prices: Path) -> None:
    source = CSVSource(prices, key="sku", columns=["name"])
    refs = await source.search("штукатурка", limit=10)
    assert sum(column_values(refs, "price")) == Decimal("1650.50")
    everything = column_values(source.rows(), "price")
    assert sum(everything) / len(everything) == Decimal("445.1225")


def test_parse_number_refuses_to_guess() -> None:
    assert parse_number("1,200.00") == Decimal("1200.00")
    assert parse_number("1 234,50", decimal_comma=True) == Decimal("1234.50")
    assert parse_number(" -7 ") == Decimal("-7")
    for text in ("12,5", "$5", "n/a", "NaN", "", "1.2.3"):
        with pytest.raises(SourceError, match="not a number"):
            parse_number(text)
    with pytest.raises(SourceError, match="column 'name'"):
        column_values([{"name": "Gypsum"}], "name")
    with pytest.raises(SourceError, match="no column 'weight'"):
        column_values([{"name": "Gypsum"}], "weight")


def test_csv_clear_errors_for_a_missing_file_key_or_column(prices: Path, tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="CSV file not found"):
        CSVSource(tmp_path / "absent.csv", key="sku")
    with pytest.raises(SourceError, match=r"no key column 'id'; columns are \['sku'"):
        CSVSource(prices, key="id")
    with pytest.raises(SourceError, match=r"no column\(s\) \['weight'\]"):
        CSVSource(prices, key="sku", columns=["name", "weight"])


def test_csv_a_key_that_is_not_unique_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "dupes.csv"
    path.write_text("sku,name\nA,one\nB,two\nA,three\n")
    with pytest.raises(SourceError, match="'A' is on lines 2 and 4"):
        CSVSource(path, key="sku")


async def test_csv_an_edited_file_is_read_again(prices: Path) -> None:
    source = CSVSource(prices, key="sku")
    prices.write_text(PRICES + "P-5,Шпаклёвка финишная,мешок,700\n", encoding="utf-8")
    stat = prices.stat()
    os.utime(prices, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10_000_000))
    refs = await source.search("шпаклевка", limit=5)
    assert [ref.uid for ref in refs] == ["P-5"]


async def test_every_source_answers_through_the_protocol_alone(docs: Path, prices: Path) -> None:
    # What the search and resolve activities rely on: any Source finds a ref by a query
    # word, names itself in the ref, and resolves that ref to content holding the word.
    sources: list[Source] = [
        FileSystemSource(docs, source_id="docs"),
        CSVSource(prices, key="sku", source_id="prices"),
    ]
    for source, word in zip(sources, ["vault", "гипсовая"], strict=True):
        refs = await source.search(word, limit=1)
        assert [ref.source_id for ref in refs] == [source.source_id]
        assert word in await source.resolve(refs[0])


# -- CSVSource limits ----------------------------------------------------------------------


def many_rows(path: Path, count: int) -> Path:
    with path.open("w", encoding="utf-8") as handle:
        handle.write("sku,name,price\n")
        for i in range(count):
            handle.write(f"S-{i},Widget number {i} with a fairly long name,{i % 100}.50\n")
    return path


async def test_csv_a_file_over_the_byte_cap_is_refused_for_good_by_the_activity(
    tmp_path: Path,
) -> None:
    path = many_rows(tmp_path / "big.csv", 2000)
    size = path.stat().st_size
    spec = SourceSpec.csv(str(path), key="sku", max_bytes=size - 1)
    with pytest.raises(ApplicationError) as raised:
        await ActivityEnvironment().run(
            SourceActivities().search_source, SearchRequest(spec=spec, query="widget")
        )
    assert (raised.value.type, raised.value.non_retryable) == ("ContentTooLarge", True)
    assert f"{size} bytes; the cap is {size - 1} (max_bytes)" in raised.value.message
    # The default cap: 10 MB.
    assert DEFAULT_MAX_BYTES == 10_000_000
    assert len(CSVSource(path, key="sku").rows()) == 2000


def test_csv_a_file_with_more_rows_than_the_cap_is_refused(tmp_path: Path) -> None:
    path = many_rows(tmp_path / "long.csv", 11)
    with pytest.raises(ContentTooLarge, match=r"more than 10 rows \(max_rows\)"):
        build_source(SourceSpec.csv(str(path), key="sku", max_rows=10))
    assert len(CSVSource(path, key="sku", max_rows=11).rows()) == 11
    assert DEFAULT_MAX_ROWS == 100_000


def test_csv_an_unbalanced_quote_is_an_error_naming_its_line_not_a_giant_cell(
    tmp_path: Path,
) -> None:
    path = tmp_path / "quote.csv"
    path.write_text('sku,name,price\nA,one,1\nB,"two,2\nC,three,3\nD,four,4\n')
    with pytest.raises(SourceError, match=r"line 3: a quoted cell is never closed"):
        CSVSource(path, key="sku")
    # A stray quote inside a cell, and one cell past the csv module's cell cap.
    path.write_text('sku,name,price\nA,one,1\nB,"two"x,2\n')
    with pytest.raises(SourceError, match=r"line 3: a quote inside a cell"):
        CSVSource(path, key="sku")
    path.write_text('sku,name,price\nA,one,1\nB,"' + "x" * 200_000 + '",2\n')
    with pytest.raises(SourceError, match=r"line 3: a cell of more than 131072 characters"):
        CSVSource(path, key="sku")
    # A quoted cell over several lines is still one cell; its row starts where it starts.
    path.write_text('sku,name,price\nA,"one\nline two",1\nB,bravo,2\n')
    source = CSVSource(path, key="sku")
    assert source.row("A")["name"] == "one\nline two"
    [found] = asyncio.run(source.search("bravo", limit=5))
    assert (found.uid, found.metadata["line"]) == ("B", 4)


async def test_csv_a_built_source_keeps_only_small_files_parsed(tmp_path: Path) -> None:
    # The worker keeps up to 32 built sources: one over a large file must not hold it.
    path = many_rows(tmp_path / "large.csv", 25_000)
    assert path.stat().st_size > DEFAULT_KEEP_BYTES
    tracemalloc.start()
    try:
        large = CSVSource(path, key="sku")
        held, _ = tracemalloc.get_traced_memory()
        small = CSVSource(many_rows(tmp_path / "small.csv", 3000), key="sku")
        held_small = tracemalloc.get_traced_memory()[0] - held
    finally:
        tracemalloc.stop()
    assert held < 200_000, held  # parsed, checked, and let go
    assert held_small > 500_000, held_small  # kept: a search needs no new parse
    # The large one still answers, from the file as it is now.
    refs = await large.search("widget number 24999", limit=1)
    assert [ref.uid for ref in refs] == ["S-24999"]
    with path.open("a", encoding="utf-8") as handle:
        handle.write("S-new,Brand new gadget,1.00\n")
    assert [ref.uid for ref in await large.search("gadget", limit=3)] == ["S-new"]
    assert large.rows(["S-new", "S-0"])[0]["name"] == "Brand new gadget"
    assert len(small.rows()) == 3000


def test_a_corpus_file_nested_past_the_parsers_depth_is_a_clear_source_error(
    tmp_path: Path,
) -> None:
    # A RecursionError would escape as a crash the activity retries; bad data is refused.
    corpus = tmp_path / "corpus.json"
    corpus.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InvalidSourceSpec, match="nested too deeply"):
        load_corpus(str(corpus))
