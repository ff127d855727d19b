"""Options the model a job runs on does not take are refused at submit (issue 25 point 5).

The kinds' option models (test_submit_options.py) bound what any model might take; the models
themselves take less (Titan Text Embeddings V2: 256, 512 or 1024 dimensions; Luma Ray 2: 5 or 9
seconds at 720p or 540p and no seed; Polly: its voices, engines and formats; OpenAI's models: their
own sizes and counts; the local model: 8 to 1024 dimensions). Through the real API handler on
moto each is a 422 naming the option, the allowed values and the model, with nothing written or
reserved, from the adapter's own table: patch the table and submit and adapter both follow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws
from pydantic import Field

from aijobs import runtime
from aijobs.domain import JobStatus
from aijobs.errors import InvalidOptionError
from aijobs.kinds.base import Inputs, Kind, KindInput, VideoOptions
from aijobs.providers import bedrock, local, polly
from aijobs.providers.base import Call as ProviderCall
from aijobs.providers.base import EmbeddingRequest, SpeechRequest, VideoRequest
from aijobs_cdk.stage_config import parse_stage_config
from aijobs_cli.local.resources import provision
from tests.integration.harness import Clock, Stage, api_caller, nothing_written
from tests.probe_kinds import declared

pytestmark = pytest.mark.integration

Call = Callable[..., tuple[int, Any]]
TEXT = "Queues decouple accepting work from doing it. The producer answers at once."
TEAM = "team-clips"


class ClipOptions(VideoOptions):
    quality: str = Field(default="draft", pattern="^(draft|final)$")


def _clip_build(kind: Kind, value: KindInput, options: Any) -> dict[str, Any]:
    # A team's own build: its `quality` option picks the resolution the request asks for.
    return {
        "prompt": f"A short clip: {value.text}",
        "duration_seconds": options.durationSeconds,
        "resolution": {"draft": "540p", "final": "1080p"}[options.quality],
    }


# A team's own kind on the Bedrock video model, with its own options and its own build.
TEAM_KIND = Kind(
    name=TEAM,
    capability="video",
    description="a clip from a text (a team's kind)",
    models={"bedrock": "luma.ray-v2:0", "local": "local-video-1"},
    options=ClipOptions,
    inputs=Inputs(max_chars=2_000),
    build=_clip_build,
)

BEDROCK = {
    "QUEUE_NAMES": f"embedding;tts-generate;video-generate;embedding-batch;{TEAM}",
    "PROVIDER": "bedrock",
}
OPENAI = {
    "QUEUE_NAMES": "embedding;image-generate",
    "PROVIDER": "bedrock",
    "KIND_PROVIDERS": "embedding=openai;image-generate=openai",
    "KIND_ALLOWED_MODELS": "image-generate=dall-e-3",
    "OPENAI_SECRET_NAME": "aijobs/openai",
}
LOCAL = {"QUEUE_NAMES": "embedding", "PROVIDER": "local"}


@pytest.fixture
def stage_values(request: pytest.FixtureRequest) -> dict[str, str]:
    return dict(getattr(request, "param", BEDROCK))


@pytest.fixture
def stage(stage_values: dict[str, str]) -> Iterator[Stage]:
    with declared(TEAM_KIND), mock_aws():
        runtime.reset_runtime()
        yield Stage(resources=provision(parse_stage_config("dev", stage_values)), clock=Clock())
    runtime.reset_runtime()


@pytest.fixture
def api(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> Iterator[Call]:
    yield from api_caller(stage, monkeypatch, credits=1_000)


def _nothing_written(stage: Stage) -> None:
    nothing_written(stage, credits=1_000)


def _refused(stage: Stage, answer: Any, option: str, *says: str) -> None:
    assert answer["code"] == "invalid_options", answer
    assert [problem["option"] for problem in answer["details"]["options"]] == [option]
    for words in says:
        assert words in answer["message"], answer["message"]
    _nothing_written(stage)


@pytest.mark.parametrize(
    ("kind", "options", "option", "says"),
    [
        ("embedding", {"dimensions": 128}, "dimensions", ("256, 512 or 1024", "Titan Text Embeddings V2")),
        (
            "embedding",
            {"dimensions": 1536},
            "dimensions",
            ("256, 512 or 1024", "amazon.titan-embed-text-v2:0"),
        ),
        ("video-generate", {"durationSeconds": 6}, "durationSeconds", ("5 or 9", "Luma Ray 2")),
        ("video-generate", {"resolution": "1080p"}, "resolution", ("720p or 540p", "luma.ray-v2:0")),
        ("video-generate", {"seed": 7}, "seed", ("Luma Ray 2",)),
        ("tts-generate", {"voice": "Nobody"}, "voice", ("Joanna", "Amazon Polly")),
        ("tts-generate", {"voice": "joanna"}, "voice", ("Joanna",)),
        (
            "tts-generate",
            {"engine": "turbo"},
            "engine",
            ("one of generative, long-form, neural, standard", "Amazon Polly"),
        ),
        ("tts-generate", {"format": "wav"}, "format", ("mp3, ogg_vorbis, pcm", "Amazon Polly")),
        # A workflow's children run on its child kind's model: checked before the parent is written.
        ("embedding-batch", {"dimensions": 300}, "dimensions", ("256, 512 or 1024",)),
        # A team's own kind on the same model gets the same checks, through its own build too.
        (TEAM, {"durationSeconds": 6}, "durationSeconds", ("5 or 9", "Luma Ray 2")),
        (TEAM, {"quality": "final"}, "resolution", ("720p or 540p", "Luma Ray 2")),
    ],
)
def test_an_option_the_model_does_not_take_is_a_422_and_nothing_is_written(
    stage: Stage, api: Call, kind: str, options: dict[str, Any], option: str, says: tuple[str, ...]
) -> None:
    body = {"kind": kind, "input": {"texts": [TEXT, TEXT]} if kind == "embedding-batch" else TEXT}
    status, answer = api("POST", "/jobs", {**body, "options": options})
    assert status == 422, answer
    _refused(stage, answer, option, *says)


@pytest.mark.parametrize(
    ("kind", "options"),
    [
        ("embedding", {"dimensions": 512}),
        ("embedding", {}),
        ("video-generate", {"durationSeconds": 9, "resolution": "540p"}),
        ("tts-generate", {"voice": "Matthew", "engine": "standard", "format": "ogg_vorbis"}),
        (TEAM, {"quality": "draft", "durationSeconds": 5}),
    ],
)
def test_what_the_model_takes_is_accepted(
    stage: Stage, api: Call, kind: str, options: dict[str, Any]
) -> None:
    status, answer = api("POST", "/jobs", {"kind": kind, "input": TEXT, "options": options})
    assert status == 202, answer


def test_an_uploaded_input_gets_the_same_checks(stage: Stage, api: Call) -> None:
    """The input's bytes stay in S3 until the consumer: the request is built around a stand-in."""
    key = "inputs/alice/01JTEST0000000000000000000-clip.txt"
    boto3.client("s3").put_object(
        Bucket=stage.resources.bucket, Key=key, Body=TEXT.encode(), ContentType="text/plain"
    )
    for kind, options, option in (
        ("embedding", {"dimensions": 100}, "dimensions"),
        (TEAM, {"quality": "final"}, "resolution"),
    ):
        status, answer = api("POST", "/jobs", {"kind": kind, "inputRef": key, "options": options})
        assert status == 422, answer
        _refused(stage, answer, option)
    status, answer = api(
        "POST", "/jobs", {"kind": "embedding", "inputRef": key, "options": {"dimensions": 256}}
    )
    assert status == 202, answer


@pytest.mark.parametrize("stage_values", [OPENAI], indirect=True)
def test_openai_models_bounds_follow_the_model_the_job_chose(stage: Stage, api: Call) -> None:
    status, answer = api(
        "POST", "/jobs", {"kind": "embedding", "input": TEXT, "options": {"dimensions": 2000}}
    )
    assert status == 422, answer
    _refused(stage, answer, "dimensions", "1 to 1536", "text-embedding-3-small")
    # DALL-E 3 makes one image per request; the kind's default gpt-image-1 makes several.
    dalle = {"kind": "image-generate", "input": TEXT, "model": "dall-e-3", "options": {"count": 2}}
    status, answer = api("POST", "/jobs", dalle)
    assert status == 422, answer
    _refused(stage, answer, "count", "at most 1", "dall-e-3")
    assert answer["details"]["model"] == "dall-e-3"
    status, answer = api("POST", "/jobs", {**dalle, "model": None})
    assert status == 202, answer


@pytest.mark.parametrize("stage_values", [LOCAL], indirect=True)
def test_the_local_model_refuses_sizes_it_does_not_make(stage: Stage, api: Call) -> None:
    status, answer = api("POST", "/jobs", {"kind": "embedding", "input": TEXT, "options": {"dimensions": 4}})
    assert status == 422, answer
    _refused(stage, answer, "dimensions", "8 to 1024", "local-embedding-1")


# --- one definition: the submit check and the adapter read the same table ----------------------


def _adapter_refuses(request: Any, check: Callable[[Any], Any]) -> str | None:
    try:
        check(request)
    except InvalidOptionError as error:
        return error.option
    return None


def _bedrock() -> bedrock.BedrockProvider:
    client = boto3.client("bedrock-runtime", region_name="us-east-1")
    Stubber(client).activate()  # no answers queued: a call that went out would fail the test
    return bedrock.BedrockProvider(bucket="b", client=client)


def _polly() -> polly.PollyProvider:
    client = boto3.client("polly", region_name="us-east-1")
    Stubber(client).activate()
    return polly.PollyProvider(bucket="b", client=client)


@pytest.mark.parametrize(
    ("module", "table", "value", "kind", "options", "adapter_call"),
    [
        (
            bedrock,
            "_EMBED_DIMENSIONS",
            (512,),
            "embedding",
            {"dimensions": 1024},
            lambda: (
                _bedrock().embed,
                EmbeddingRequest(
                    call=ProviderCall(job_id="j", model="amazon.titan-embed-text-v2:0"),
                    texts=(TEXT,),
                    dimensions=1024,
                ),
            ),
        ),
        (
            bedrock,
            "_LUMA_SECONDS",
            (9,),
            "video-generate",
            {"durationSeconds": 5},
            lambda: (
                _bedrock().start_video,
                VideoRequest(
                    call=ProviderCall(job_id="j", model="luma.ray-v2:0"), prompt=TEXT, duration_seconds=5
                ),
            ),
        ),
        (
            polly,
            "VOICES",
            frozenset({"Matthew"}),
            "tts-generate",
            {"voice": "Joanna"},
            lambda: (
                _polly().synthesize_speech,
                SpeechRequest(call=ProviderCall(job_id="j"), text=TEXT, voice="Joanna"),
            ),
        ),
    ],
)
def test_the_submit_check_and_the_adapter_follow_the_same_table(
    stage: Stage,
    api: Call,
    monkeypatch: pytest.MonkeyPatch,
    module: Any,
    table: str,
    value: Any,
    kind: str,
    options: dict[str, Any],
    adapter_call: Callable[[], tuple[Callable[[Any], Any], Any]],
) -> None:
    call, request = adapter_call()
    status, answer = api("POST", "/jobs", {"kind": kind, "input": TEXT, "options": options})
    assert status == 202, answer  # accepted by the table as shipped
    option = next(iter(options))
    monkeypatch.setattr(module, table, value)
    status, answer = api("POST", "/jobs", {"kind": kind, "input": TEXT, "options": options})
    assert status == 422, answer
    assert answer["details"]["options"][0]["option"] == option
    assert _adapter_refuses(request, call) == option


@pytest.mark.parametrize("stage_values", [LOCAL], indirect=True)
def test_the_local_table_is_shared_too(stage: Stage, api: Call, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "EMBED_DIMENSIONS", (8, 16))
    status, answer = api("POST", "/jobs", {"kind": "embedding", "input": TEXT, "options": {"dimensions": 32}})
    assert status == 422, answer
    assert "8 to 16" in answer["message"]
    request = EmbeddingRequest(
        call=ProviderCall(job_id="j", model="local-embedding-1"), texts=(TEXT,), dimensions=32
    )
    assert _adapter_refuses(request, local.LocalProvider().embed) == "dimensions"


# --- the consumer still refuses them --------------------------------------------------------------


def test_a_row_written_past_the_api_fails_in_the_consumer_without_a_model_call(stage: Stage) -> None:
    """A row the API did not write (an old one, a re-run after a table change) meets the same
    check in the adapter: final `invalid_input` naming the option, and no Bedrock call."""
    job = stage.submit("alice", "embedding", TEXT, options={"dimensions": 128})
    stage.consumer("embedding").provider = _bedrock()
    list(stage.drain("embedding"))
    failed = stage.job(job)
    assert failed.status is JobStatus.FAILED_FINAL
    assert failed.last_error_class == "invalid_input"
    assert "'dimensions' must be 256, 512 or 1024" in (failed.last_error_message or "")
