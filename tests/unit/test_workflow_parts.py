"""The workflows' pure parts: report chunking, embedding-batch and image-batch input parsing, the
options and failure policy, the submit-time estimates, the reservation split, and the moto fix
that the workflow splits rely on (its rollback must still roll back)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from moto import mock_aws
from mypy_boto3_dynamodb import DynamoDBClient
from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef, UpdateTypeDef

from aijobs.errors import InvalidInputError
from aijobs.store.job_finish import split_allocation
from aijobs.workflows import embedding_batch, image_batch, report
from aijobs.workflows.base import MAX_FAILED_SHARE, Workflow
from aijobs_cli import moto_patches

FAST = settings(max_examples=100, deadline=None)

# --- report.chunk_text --------------------------------------------------------------------------

# Words never longer than the smallest chunk size drawn below, so nothing is hard-cut; sentence
# ends only at a word's end (followed by a space or the paragraph's end).
WORDS = st.builds(
    lambda letters, length: (letters * length)[:length],
    st.sampled_from(["a", "Bc", "def", "x9y", "Quartz", "seventeen", "42"]),
    st.integers(min_value=1, max_value=10),
)
SENTENCES = st.tuples(
    st.lists(WORDS, min_size=1, max_size=10), st.sampled_from(["", ".", "!", "?", "\u3002", "\uff01"])
).map(lambda sentence: " ".join(sentence[0]) + sentence[1])
PARAGRAPHS = st.lists(SENTENCES, min_size=1, max_size=5).map(" ".join)
BREAKS = st.sampled_from(["\n\n", "\n\n\n", "\n \n", "\n\t\n", " \n\n  "])
SIZES = st.integers(min_value=12, max_value=200)


@st.composite
def documents_of(draw: st.DrawFn, paragraphs: st.SearchStrategy[str] = PARAGRAPHS) -> tuple[str, list[str]]:
    """A text and its paragraphs (as chunk_text should see them: stripped, in order)."""
    found = draw(st.lists(paragraphs, min_size=1, max_size=6))
    text = draw(st.sampled_from(["", "\n", "  \n\n"])) + found[0]
    for paragraph in found[1:]:
        text += draw(BREAKS) + paragraph
    return text + draw(st.sampled_from(["", "\n", "\n\n "])), found


def _segments(chunks: list[str]) -> list[str]:
    return [segment for chunk in chunks for segment in chunk.split("\n\n")]


@FAST
@given(documents_of(), SIZES)
def test_chunks_fit_keep_every_word_and_keep_fitting_paragraphs_whole(
    document: tuple[str, list[str]], size: int
) -> None:
    text, paragraphs = document
    chunks = report.chunk_text(text, size)
    assert chunks
    assert all(0 < len(chunk) <= size for chunk in chunks)
    assert all(chunk == chunk.strip() for chunk in chunks)
    assert " ".join(chunks).split() == text.split()
    segments = _segments(chunks)
    for paragraph in paragraphs:
        if len(paragraph) <= size:
            assert paragraph in segments
    assert report.chunk_text(text, size) == chunks


@FAST
@given(documents_of(), st.integers(min_value=0, max_value=150))
def test_short_paragraphs_are_packed_whole_and_greedily(document: tuple[str, list[str]], slack: int) -> None:
    text, paragraphs = document
    size = max(len(paragraph) for paragraph in paragraphs) + slack  # every paragraph fits
    chunks = report.chunk_text(text, size)
    # Every chunk starts at a paragraph start and holds whole paragraphs, in order.
    assert _segments(chunks) == paragraphs
    assert all(len(chunk) <= size for chunk in chunks)
    # A chunk ends only when the next paragraph would not fit in it.
    for chunk, following in itertools.pairwise(chunks):
        assert len(chunk) + 2 + len(following.split("\n\n")[0]) > size


def test_chunks_are_cut_between_paragraphs_first() -> None:
    text = "First one here.\n\nSecond one here.\n\n\nThird one here."
    assert report.chunk_text(text, 40) == ["First one here.\n\nSecond one here.", "Third one here."]
    assert report.chunk_text(text, 1000) == ["First one here.\n\nSecond one here.\n\nThird one here."]


def test_a_paragraph_longer_than_the_size_is_cut_between_sentences() -> None:
    # Cutting at the last space would give "Alpha beta. Gamma delta epsilon" (31 characters).
    assert report.chunk_text("Alpha beta. Gamma delta epsilon zeta.", 31) == [
        "Alpha beta.",
        "Gamma delta epsilon zeta.",
    ]
    assert report.chunk_text("One two. Three four! Five six? Seven eight.", 20) == [
        "One two. Three four!",
        "Five six?",
        "Seven eight.",
    ]


def test_a_long_paragraph_joins_the_previous_chunk_when_its_first_sentence_fits() -> None:
    text = "Intro.\n\nAlpha beta gamma. Delta epsilon zeta. Eta theta iota."
    assert report.chunk_text(text, 30) == [
        "Intro.\n\nAlpha beta gamma.",
        "Delta epsilon zeta.",
        "Eta theta iota.",
    ]


def test_a_sentence_longer_than_the_size_is_cut_at_its_last_space() -> None:
    assert report.chunk_text("aaaa bbbb cccc dddd", 10) == ["aaaa bbbb", "cccc dddd"]


def test_a_word_longer_than_the_size_is_hard_cut() -> None:
    assert report.chunk_text("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]
    assert report.chunk_text("ab " + "y" * 12 + " cd", 5) == ["ab", "yyyyy", "yyyyy", "yy cd"]


def test_cjk_full_stops_end_sentences() -> None:
    # Without the ideographic full stop as a sentence end this would be hard-cut at 8 characters.
    assert report.chunk_text("一二三四五。六七八九十。", 8) == ["一二三四五。", "六七八九十。"]
    assert report.chunk_text("一二三四五\uff01六七八九十\uff1f", 8) == [
        "一二三四五\uff01",
        "六七八九十\uff1f",
    ]


def test_a_dot_inside_a_token_is_not_a_sentence_end() -> None:
    text = "Pi is 3.14 and more words here to make it long enough."
    assert " ".join(report.chunk_text(text, 30)).split() == text.split()


def test_words_separated_by_a_single_newline_are_not_cut() -> None:
    text = "aaaaaaaaa\nbbbbbbbbbbbb"
    assert " ".join(report.chunk_text(text, 20)).split() == text.split()


def test_report_input_must_be_non_empty_text() -> None:
    options = report.WORKFLOW.option_values({})
    assert [part.input for part in report.split({"text": "Some text."}, options)] == ["Some text."]
    for bad in ("", "  \n ", {"text": ""}, {"other": "x"}, 42, None):
        with pytest.raises(InvalidInputError, match="non-empty text"):
            report.split(bad, options)


# --- embedding_batch.documents / split ----------------------------------------------------------


def test_documents_from_jsonl_json_strings_and_plain_lines() -> None:
    upload = (
        '{"id": "a", "text": "first"}\n"second"\n\n  plain third  \n{"text": "fourth"}\n'
        '{"id": 7, "text": "x"}'
    )
    assert embedding_batch.documents(upload) == [
        ("a", "first"),
        ("1", "second"),
        ("2", "plain third"),
        ("3", "fourth"),
        ("7", "x"),
    ]


def test_documents_inline_texts_and_documents() -> None:
    assert embedding_batch.documents({"texts": ["a", "b", "c"]}) == [("0", "a"), ("1", "b"), ("2", "c")]
    inline = {"documents": [{"id": "x", "text": "a"}, {"text": "b"}, {"id": 0, "text": "c"}]}
    assert embedding_batch.documents(inline) == [("x", "a"), ("1", "b"), ("0", "c")]


def test_a_bad_json_line_is_named_by_its_line_number() -> None:
    with pytest.raises(InvalidInputError, match="line 3 is not valid JSON"):
        embedding_batch.documents('one\n\n{"text": \ntwo')
    # A line that only starts like a JSON string is a plain-text document (a quotation).
    assert embedding_batch.documents('"Quoted," she said.') == [("0", '"Quoted," she said.')]
    assert embedding_batch.documents('{"id": null, "text": "x"}') == [("0", "x")]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"texts": ["a", "  "]}, "document 1 has no text"),
        ({"texts": ["a", 3]}, "document 1 has no text"),
        ({"documents": [{"id": "x"}]}, "document 0 has no text"),
        ({"documents": [{"id": "x", "text": ""}]}, "document 0 has no text"),
        ('{"id": "a", "text": "ok"}\n{"text": ""}', "document 1 has no text"),
        ('"ok"\n""', "document 1 has no text"),
        ('{"id": "x", "text": 5}', "document 0 has no text"),
        ({"texts": []}, "no documents"),
        ("", "no documents"),
        ("\n  \n", "no documents"),
        ({"input": ["a"]}, "needs `texts`, `documents`"),
        (["a"], "needs `texts`, `documents`"),
        (None, "needs `texts`, `documents`"),
    ],
)
def test_documents_refusals(value: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        embedding_batch.documents(value)


@FAST
@given(
    st.lists(st.text(alphabet="abc xyz", min_size=1).filter(str.strip), min_size=1, max_size=40),
    st.integers(1, 12),
)
def test_split_pages_keep_the_order(texts: list[str], page_size: int) -> None:
    options = embedding_batch.WORKFLOW.option_values({"pageSize": page_size})
    parts = embedding_batch.split({"texts": texts}, options)
    pages = [part.input["texts"] for part in parts if isinstance(part.input, dict)]
    assert len(pages) == len(parts) == math.ceil(len(texts) / page_size)
    assert [text for page in pages for text in page] == texts
    assert all(len(page) == page_size for page in pages[:-1])
    assert 0 < len(pages[-1]) <= page_size


def test_split_pages_example() -> None:
    options = embedding_batch.WORKFLOW.option_values({"pageSize": 3})
    parts = embedding_batch.split("\n".join("abcdefg"), options)
    assert [part.input for part in parts] == [
        {"texts": ["a", "b", "c"]},
        {"texts": ["d", "e", "f"]},
        {"texts": ["g"]},
    ]


# --- image_batch.prompts ------------------------------------------------------------------------


def test_prompts_inline_json_upload_and_lines() -> None:
    assert image_batch.prompts({"prompts": ["a cat", "a dog"]}) == ["a cat", "a dog"]
    assert image_batch.prompts('  {"prompts": ["a cat",\n "a dog"]}\n') == ["a cat", "a dog"]
    assert image_batch.prompts("a cat\n\n  a dog  \r\na bird") == ["a cat", "a dog", "a bird"]
    options = image_batch.WORKFLOW.option_values({})
    assert [part.input for part in image_batch.split("one\ntwo", options)] == ["one", "two"]


def test_a_bad_json_upload_names_its_line_counting_leading_blank_lines() -> None:
    with pytest.raises(InvalidInputError, match=r"line 3\)"):
        image_batch.prompts('\n\n{"prompts": [')


def test_a_prompt_of_the_maximum_length_is_accepted() -> None:
    longest = "p" * image_batch.PROMPT_MAX_CHARS
    assert image_batch.prompts({"prompts": [longest]}) == [longest]
    assert image_batch.prompts(longest) == [longest]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"prompts": []}, "non-empty list"),
        ({"prompts": "a cat"}, "non-empty list"),
        ({"other": ["a cat"]}, "non-empty list"),
        (["a cat"], "non-empty list"),
        ("", "non-empty list"),
        ("  \n \n", "non-empty list"),
        ('{"prompts": []}', "non-empty list"),
        ({"prompts": ["ok", 3]}, r"prompts\[1\] must be a non-empty string"),
        ({"prompts": ["ok", "  "]}, r"prompts\[1\]"),
        ({"prompts": ["p" * (image_batch.PROMPT_MAX_CHARS + 1)]}, r"prompts\[0\].* at most 4000"),
        ("ok\n" + "p" * (image_batch.PROMPT_MAX_CHARS + 1), r"prompts\[1\]"),
        ('{"prompts": [\n"a",\n]x}', r"not valid JSON \(line 3\)"),
    ],
)
def test_prompts_refusals(value: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        image_batch.prompts(value)


# --- options and the failure policy -------------------------------------------------------------


def test_option_defaults_and_types() -> None:
    values = report.WORKFLOW.option_values({})
    assert values == {"chunkChars": 6000, MAX_FAILED_SHARE: 0.0}
    assert type(values["chunkChars"]) is int
    assert type(values[MAX_FAILED_SHARE]) is float
    values = report.WORKFLOW.option_values({"chunkChars": 1000.0, MAX_FAILED_SHARE: 1})
    assert values == {"chunkChars": 1000, MAX_FAILED_SHARE: 1.0}
    assert type(values["chunkChars"]) is int
    assert type(values[MAX_FAILED_SHARE]) is float
    assert embedding_batch.WORKFLOW.option_values({}) == {"pageSize": 50, MAX_FAILED_SHARE: 0.0}
    assert image_batch.WORKFLOW.option_values({}) == {MAX_FAILED_SHARE: 0.0}


@pytest.mark.parametrize(
    ("name", "value"), [("chunkChars", 500), ("chunkChars", 50_000), (MAX_FAILED_SHARE, 0.25)]
)
def test_option_bounds_are_inclusive(name: str, value: float) -> None:
    assert report.WORKFLOW.option_values({name: value})[name] == value


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("chunkChars", 499, "options.chunkChars must be a whole number from 500 to 50000"),
        ("chunkChars", 50_001, "options.chunkChars must be a whole number"),
        ("chunkChars", 1000.5, "options.chunkChars must be a whole number"),
        ("chunkChars", True, "options.chunkChars"),
        ("chunkChars", "1000", "options.chunkChars"),
        ("chunkChars", None, "options.chunkChars"),
        (MAX_FAILED_SHARE, 1.5, "options.maxFailedShare must be a number from 0 to 1"),
        (MAX_FAILED_SHARE, -0.1, "options.maxFailedShare"),
        (MAX_FAILED_SHARE, True, "options.maxFailedShare"),  # True == 1 is in range: still refused
        (MAX_FAILED_SHARE, False, "options.maxFailedShare"),
        (MAX_FAILED_SHARE, float("nan"), "options.maxFailedShare"),
        (MAX_FAILED_SHARE, "0.5", "options.maxFailedShare"),
    ],
)
def test_option_refusals_name_the_option(name: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        report.WORKFLOW.option_values({name: value})


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_a_non_finite_whole_number_option_is_refused_by_name(value: float) -> None:
    with pytest.raises(ValueError, match=r"options\.chunkChars"):
        report.WORKFLOW.option_values({"chunkChars": value})


def test_child_options_drop_the_workflows_own() -> None:
    options = {"chunkChars": 1000, MAX_FAILED_SHARE: 0.5, "language": "en", "maxWords": 100}
    assert report.WORKFLOW.child_options(options) == {"language": "en", "maxWords": 100}
    assert options == {"chunkChars": 1000, MAX_FAILED_SHARE: 0.5, "language": "en", "maxWords": 100}
    # Another workflow's option names are not its own: they pass through.
    assert embedding_batch.WORKFLOW.child_options(options) == {
        "chunkChars": 1000,
        "language": "en",
        "maxWords": 100,
    }
    assert embedding_batch.WORKFLOW.child_options({"pageSize": 5, "dimensions": 256}) == {"dimensions": 256}
    assert image_batch.WORKFLOW.child_options({MAX_FAILED_SHARE: 0.1, "size": "1024x1024"}) == {
        "size": "1024x1024"
    }
    assert report.WORKFLOW.child_options({}) == {}


@pytest.mark.parametrize(
    ("share", "total", "allowed"),
    [
        (0.2, 5, 1),
        (0.5, 3, 1),
        (0, 10, 0),
        (0.0, 1, 0),
        (1, 7, 7),
        (0.1, 3, 0),
        (0.7, 10, 7),  # 0.7 * 10 == 7.000000000000001
        (0.29, 100, 29),  # 0.29 * 100 == 28.999999999999996
        (0.999, 1000, 999),
    ],
)
def test_failures_allowed_floors_the_share(share: float, total: int, allowed: int) -> None:
    assert report.WORKFLOW.failures_allowed({MAX_FAILED_SHARE: share}, total) == allowed


def test_failures_allowed_defaults_to_the_workflows_policy() -> None:
    assert report.WORKFLOW.failures_allowed({}, 100) == 0
    lenient = Workflow(
        kind="k", child_kind="c", split=report.split, merge=report.merge, estimate=report.estimate,
        max_failed_share=0.25,
    )  # fmt: skip
    assert lenient.failures_allowed({}, 10) == 2
    assert lenient.failures_allowed({MAX_FAILED_SHARE: 0}, 10) == 0


# --- estimates ----------------------------------------------------------------------------------


def test_report_estimate() -> None:
    options = report.WORKFLOW.option_values({"chunkChars": 500})
    text = "\n\n".join(f"Paragraph {n}. " + "word " * 40 for n in range(12))
    parts = len(report.split(text, options))
    assert parts > 1
    assert report.estimate(text, None, options) == parts
    assert report.estimate({"text": text}, 10**9, options) == parts  # inline wins over a size
    assert report.estimate(None, 1001, options) == 3
    assert report.estimate(None, 1000, options) == 2
    assert report.estimate(None, 1, options) == 1
    assert report.estimate(None, 0, options) == 1
    assert report.estimate(None, None, options) == 1
    with pytest.raises(InvalidInputError):
        report.estimate("  ", None, options)


def test_embedding_batch_estimate() -> None:
    options = embedding_batch.WORKFLOW.option_values({"pageSize": 4})
    assert embedding_batch.estimate({"texts": list("abcdefghij")}, None, options) == 3
    assert embedding_batch.estimate("a\nb\nc\nd", None, options) == 1
    assert embedding_batch.estimate(None, 800, options) == 1  # 200 bytes a document, 4 a page
    assert embedding_batch.estimate(None, 801, options) == 2
    assert embedding_batch.estimate(None, 0, options) == 1
    assert embedding_batch.estimate(None, None, options) == 1
    with pytest.raises(InvalidInputError):
        embedding_batch.estimate({"texts": []}, None, options)


def test_image_batch_estimate() -> None:
    options = image_batch.WORKFLOW.option_values({})
    assert image_batch.estimate({"prompts": ["a", "b", "c"]}, None, options) == 3
    assert image_batch.estimate("a\nb", None, options) == len(image_batch.split("a\nb", options)) == 2
    assert image_batch.estimate(None, 64, options) == 1
    assert image_batch.estimate(None, 65, options) == 2
    assert image_batch.estimate(None, 0, options) == 1
    assert image_batch.estimate(None, None, options) == 1
    with pytest.raises(InvalidInputError):
        image_batch.estimate({"prompts": []}, None, options)


# --- split_allocation ---------------------------------------------------------------------------


def test_split_allocation_takes_grants_in_id_order() -> None:
    assert split_allocation({"g2": 5, "g1": 3}, 4) == ({"g1": 3, "g2": 1}, {"g2": 4})
    assert split_allocation({"g2": 5, "g1": 3}, 0) == ({}, {"g1": 3, "g2": 5})
    assert split_allocation({"g2": 5, "g1": 3}, 8) == ({"g1": 3, "g2": 5}, {})
    assert split_allocation({"g2": 5, "g1": 3}, 100) == ({"g1": 3, "g2": 5}, {})
    assert split_allocation({}, 3) == ({}, {})


@FAST
@given(
    st.dictionaries(st.text(alphabet="abcg0123", min_size=1, max_size=5), st.integers(0, 50), max_size=6),
    st.integers(0, 400),
)
def test_split_allocation_property(allocation: dict[str, int], keep: int) -> None:
    before = dict(allocation)
    kept, back = split_allocation(allocation, keep)
    assert allocation == before
    assert set(kept) <= set(allocation)
    assert set(back) <= set(allocation)
    for grant_id, amount in allocation.items():
        assert kept.get(grant_id, 0) + back.get(grant_id, 0) == amount
    assert sum(kept.values()) == min(keep, sum(allocation.values()))
    assert all(amount > 0 for amount in [*kept.values(), *back.values()])
    # Grants are kept in id order: at most one is split, and no kept grant sorts after a returned one.
    assert len(set(kept) & set(back)) <= 1
    if kept and back:
        assert max(kept) <= min(back)


# --- moto_patches: moto's transaction rollback still works --------------------------------------

TABLE = "workflow-parts"
OTHER = "workflow-parts-other"


@pytest.fixture
def dynamodb() -> Iterator[DynamoDBClient]:
    moto_patches.apply()  # the suite's conftest applies it too; idempotent
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        for name in (TABLE, OTHER):
            client.create_table(
                TableName=name,
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
        for pk in ("a", "b"):
            client.put_item(TableName=TABLE, Item={"pk": {"S": pk}, "n": {"N": "1"}})
        client.put_item(TableName=OTHER, Item={"pk": {"S": "o"}, "n": {"N": "1"}})
        yield client


def _contents(client: DynamoDBClient) -> dict[str, list[dict[str, Any]]]:
    return {
        name: sorted(client.scan(TableName=name)["Items"], key=lambda item: str(item["pk"]))
        for name in (TABLE, OTHER)
    }


def _increment(table: str, pk: str, *, unless_five: bool = False) -> TransactWriteItemTypeDef:
    update: UpdateTypeDef = {
        "TableName": table,
        "Key": {"pk": {"S": pk}},
        "UpdateExpression": "SET n = n + :one",
        "ExpressionAttributeValues": {":one": {"N": "1"}},
    }
    if unless_five:  # a condition that fails: every item's n is 1 or 2
        update["ConditionExpression"] = "n = :five"
        update["ExpressionAttributeValues"] = {":one": {"N": "1"}, ":five": {"N": "5"}}
    return {"Update": update}


def _put(table: str, pk: str) -> TransactWriteItemTypeDef:
    return {"Put": {"TableName": table, "Item": {"pk": {"S": pk}, "n": {"N": "9"}}}}


def _failing(client: DynamoDBClient) -> None:
    """Changes b (and another table, and adds an item), then fails its condition on a."""
    with pytest.raises(client.exceptions.TransactionCanceledException) as caught:
        client.transact_write_items(
            TransactItems=[
                _increment(TABLE, "b"),
                _increment(TABLE, "a", unless_five=True),
                _put(TABLE, "c"),
                _increment(OTHER, "o"),
            ]
        )
    reasons = [reason.get("Code", "None") for reason in caught.value.response.get("CancellationReasons", [])]
    assert reasons == ["None", "ConditionalCheckFailed", "None", "None"]


def test_a_cancelled_transaction_leaves_every_table_as_it_was(dynamodb: DynamoDBClient) -> None:
    before = _contents(dynamodb)
    _failing(dynamodb)
    assert _contents(dynamodb) == before


def test_a_transaction_applies_all_its_items(dynamodb: DynamoDBClient) -> None:
    dynamodb.transact_write_items(
        TransactItems=[
            _increment(TABLE, "a"),
            {"Delete": {"TableName": TABLE, "Key": {"pk": {"S": "b"}}}},
            _put(TABLE, "c"),
            _increment(OTHER, "o"),
        ]
    )
    after = _contents(dynamodb)
    assert after == {
        TABLE: [{"pk": {"S": "a"}, "n": {"N": "2"}}, {"pk": {"S": "c"}, "n": {"N": "9"}}],
        OTHER: [{"pk": {"S": "o"}, "n": {"N": "2"}}],
    }
    # The next transaction backs up the tables afresh: its rollback keeps the first one's writes.
    dynamodb.put_item(TableName=TABLE, Item={"pk": {"S": "b"}, "n": {"N": "1"}})
    before = _contents(dynamodb)
    _failing(dynamodb)
    assert _contents(dynamodb) == before
