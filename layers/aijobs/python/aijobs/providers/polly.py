"""The `polly` provider: Amazon Polly, the speech capability.

Short text (up to 3,000 characters) is spoken by `SynthesizeSpeech` within the attempt and comes
back as an audio artifact. Longer text (up to 100,000 characters) becomes a
`StartSpeechSynthesisTask` that writes the audio straight into the stage bucket under
`results/<jobId>/<step>/`; the consumer re-checks it with `GetSpeechSynthesisTask` until it is done.
The adapter never logs the text.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from aijobs.domain import Artifact
from aijobs.errors import (
    InputTooLargeError,
    InvalidInputError,
    InvalidOptionError,
    ProviderError,
    TransientProviderError,
)
from aijobs.provider_plan import PROVIDER_CAPABILITIES
from aijobs.providers.base import Call, CapabilityRequest, ProviderResult, SpeechRequest
from aijobs.providers.failures import aws_failure, aws_task_failure, request_maybe_accepted
from aijobs.store.results import result_prefix

CAPABILITIES = PROVIDER_CAPABILITIES["polly"]

# SynthesizeSpeech takes at most 3,000 billed characters, so longer text must go the asynchronous
# way; up to that size the synchronous call also finishes well inside one consumer run and needs
# no re-check round trip. StartSpeechSynthesisTask takes up to 100,000 billed characters.
# (SSML tags are not billed, so counting them too only errs on the safe side.)
MAX_SYNC_CHARS = 3_000
MAX_TASK_CHARS = 100_000

DEFAULT_VOICE = "Joanna"
DEFAULT_ENGINE = "neural"
DEFAULT_FORMAT = "mp3"
ENGINES = frozenset({"standard", "neural", "long-form", "generative"})
# Polly also offers json (speech marks), mulaw and alaw; they are not audio a user plays back.
_FORMATS = {"mp3": ("audio/mpeg", "mp3"), "ogg_vorbis": ("audio/ogg", "ogg"), "pcm": ("audio/pcm", "pcm")}
TEXT_TYPES = frozenset({"text", "ssml"})
# A curated allow-list (Polly has more); a voice that lacks the chosen engine answers
# EngineNotSupported, which is the job's input fault.
VOICES = frozenset(
    {
        "Joanna", "Matthew", "Ruth", "Stephen", "Danielle", "Gregory", "Kevin", "Ivy", "Kendra",
        "Kimberly", "Salli", "Joey", "Justin", "Amy", "Emma", "Brian", "Arthur", "Olivia", "Aria",
        "Ayanda", "Kajal", "Niamh", "Lea", "Remi", "Vicki", "Daniel", "Lucia", "Sergio", "Lupe",
        "Pedro", "Mia", "Andres", "Bianca", "Adriano", "Camila", "Vitoria", "Thiago", "Ines",
        "Laura", "Takumi", "Kazuha", "Tomoko", "Seoyeon", "Zhiyu", "Hala", "Zayd", "Ola", "Elin",
        "Ida", "Suvi", "Sofie", "Hannah", "Gabrielle", "Liam",
    }
)  # fmt: skip


class UnconfirmedStartError(ProviderError):
    """Polly may have accepted a synthesis task whose answer was lost: final, not retried.

    StartSpeechSynthesisTask takes no idempotency token, so a retry could start (and bill) a
    second task. Re-run the job if no audio appears under its result prefix.
    """

    error_class = "unconfirmed_start"


def client_config(*, connect_timeout: float = 3, read_timeout: float = 30) -> Config:
    """The boto3 client settings of the adapter.

    One attempt only (`max_attempts` 1): a throttled or failed call goes straight back to the
    consumer and the queue does the back-off, instead of boto's retries sleeping on the Lambda's
    time. 3 s to connect; 30 s to read covers a 3,000-character SynthesizeSpeech with room to spare
    inside the consumer's default 60 s timeout.
    """
    return Config(
        retries={"max_attempts": 1, "mode": "standard"},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
    )


class PollyProvider:
    """Amazon Polly adapter; the speech capability only.

    A request's `voice` (a VoiceId of `VOICES`, default Joanna), `engine` (standard, neural,
    long-form, generative; default neural), `format` (mp3, ogg_vorbis, pcm; default mp3) and
    `text_type` (text or ssml). `bucket` receives the audio of long texts. The client is created on
    first use (never at import); tests inject a stubbed one.
    """

    name: str = "polly"
    capabilities: frozenset[str] = CAPABILITIES

    def __init__(
        self,
        *,
        bucket: str,
        client: Any = None,
        region_name: str | None = None,
        config: Config | None = None,
    ) -> None:
        if not bucket:
            raise ValueError("bucket is required (long texts are synthesized into it)")
        self._bucket = bucket
        self._client = client
        self._region_name = region_name
        self._config = config or client_config()

    def _polly(self) -> Any:
        if self._client is None:
            self._client = boto3.client("polly", region_name=self._region_name, config=self._config)
        return self._client

    def _call(self, operation: str, **params: Any) -> dict[str, Any]:
        try:
            response: dict[str, Any] = getattr(self._polly(), operation)(**params)
        except (ClientError, BotoCoreError) as error:
            raise aws_failure(error, service="Polly") from error
        return response

    def synthesize_speech(self, request: SpeechRequest) -> ProviderResult:
        """Speak the text, or with `call.handle` check its synthesis task."""
        text = _text(request.text)
        speech = speech_params(request)
        if request.call.handle is not None:
            return self._check(request.call.handle)
        if len(text) <= MAX_SYNC_CHARS:
            return self._synthesize(text, speech)
        return self._start(request.call, text, speech)

    def _synthesize(self, text: str, speech: dict[str, str]) -> ProviderResult:
        response = self._call("synthesize_speech", Text=text, **speech)
        try:
            audio = response["AudioStream"].read()
        except (ClientError, BotoCoreError) as error:
            raise aws_failure(error, service="Polly") from error
        if not audio:
            raise TransientProviderError("Polly answered without audio")
        content_type, extension = _FORMATS[speech["OutputFormat"]]
        characters = _int(response.get("RequestCharacters")) or len(text)
        return ProviderResult(
            status="succeeded",
            output={"audio": f"speech.{extension}", "voice": speech["VoiceId"], "engine": speech["Engine"]},
            artifacts=(Artifact(name=f"speech.{extension}", content_type=content_type, data=audio),),
            model=_model(speech),
            usage={"characters": characters},
        )

    def _start(self, call: Call, text: str, speech: dict[str, str]) -> ProviderResult:
        # StartSpeechSynthesisTask has no idempotency token: a retry after a lost answer starts a
        # second task (billed twice; the row keeps the first handle it hears of). So the start is
        # retried only when Polly cannot have accepted it (no connection, or an error answer); a
        # lost answer is final. A Lambda killed between the start and saving the handle still
        # leaves an orphan task: that gap cannot be closed without a token.
        try:
            response = self._polly().start_speech_synthesis_task(
                Text=text,
                OutputS3BucketName=self._bucket,
                OutputS3KeyPrefix=result_prefix(call.job_id, call.step),
                **speech,
            )
        except (ClientError, BotoCoreError) as error:
            if request_maybe_accepted(error):
                raise UnconfirmedStartError(
                    f"Polly may have started the synthesis task ({type(error).__name__}); not retried "
                    "so the job cannot pay twice: re-run it if no audio appears"
                ) from error
            raise aws_failure(error, service="Polly") from error
        task = response.get("SynthesisTask", {})
        if task.get("TaskStatus") == "failed":
            raise aws_task_failure(task.get("TaskStatusReason"), service="Polly")
        task_id = task.get("TaskId")
        if not task_id:
            raise TransientProviderError("Polly started a task without a TaskId")
        return ProviderResult(status="running", handle=str(task_id), model=_model(speech))

    def _check(self, handle: str) -> ProviderResult:
        task = self._call("get_speech_synthesis_task", TaskId=handle).get("SynthesisTask", {})
        status = task.get("TaskStatus")
        model = _model(task) if task.get("Engine") and task.get("VoiceId") else None
        if status in ("scheduled", "inProgress"):
            return ProviderResult(status="running", handle=handle, model=model)
        if status == "failed":
            raise aws_task_failure(task.get("TaskStatusReason"), service="Polly")
        if status != "completed":
            raise TransientProviderError(f"Polly task in an unknown state {str(status)[:40]!r}")
        key = self._output_key(str(task.get("OutputUri") or ""))
        # The audio stays where Polly wrote it (never downloaded); the result points at it.
        return ProviderResult(
            status="succeeded",
            output={"audio": key, "bucket": self._bucket},
            model=model,
            usage={"characters": _int(task.get("RequestCharacters"))},
        )

    def _output_key(self, uri: str) -> str:
        """The object key of a task's `OutputUri` (path-style or virtual-hosted S3 https URL)."""
        parts = urlsplit(uri)
        path = unquote(parts.path).lstrip("/")
        host = parts.hostname or ""
        if path.startswith(self._bucket + "/"):
            key = path[len(self._bucket) + 1 :]
        elif host.startswith(self._bucket + "."):
            key = path
        else:
            raise TransientProviderError("Polly completed a task without a usable OutputUri")
        if not key:
            raise TransientProviderError("Polly completed a task without a usable OutputUri")
        return key


def check_request(request: CapabilityRequest) -> None:
    """Refuse, without a call, a speech request's `voice`, `engine`, `format` or `textType` outside
    the allow-lists above (`InvalidOptionError` naming the option, the allowed values and Polly).
    The adapter runs it before each call; the API runs it at submit."""
    if isinstance(request, SpeechRequest):
        speech_params(request)


def speech_params(request: SpeechRequest) -> dict[str, str]:
    """Polly's voice, engine, output format and text type of a request, each from its allow-list."""
    voice = _choice("voice", request.voice or DEFAULT_VOICE, VOICES)
    engine = _choice("engine", request.engine or DEFAULT_ENGINE, ENGINES)
    output_format = _choice("format", request.format or DEFAULT_FORMAT, _FORMATS)
    text_type = _choice("textType", request.text_type, TEXT_TYPES)
    return {"VoiceId": voice, "Engine": engine, "OutputFormat": output_format, "TextType": text_type}


def _text(text: str) -> str:
    if not text.strip():
        raise InvalidInputError("speech needs a non-empty text")
    if len(text) > MAX_TASK_CHARS:
        raise InputTooLargeError(f"input has {len(text)} characters; Polly takes at most {MAX_TASK_CHARS}")
    return text


def _choice(key: str, value: str, allowed: Collection[str]) -> str:
    if value not in allowed:
        raise InvalidOptionError(key, f"one of {', '.join(sorted(allowed))}", "Amazon Polly")
    return value


def _model(speech: Mapping[str, Any]) -> str:
    return f"polly-{speech['Engine']}-{speech['VoiceId']}"


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
