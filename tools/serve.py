#!/usr/bin/env python
r"""Serve the voice pipeline over HTTP: a page, an OpenAI-compatible transcription endpoint, the whole pipeline,
the language model alone, and a WebSocket with live partial transcripts.

Usage:
  python tools/serve.py                                  # tools/pipeline.py's default models on http://127.0.0.1:8000
  python tools/serve.py --host 0.0.0.0 --port 9000 --asr-model my.nemo --slm-model my_gpt2/
  python tools/serve.py --asr-decoding greedy --strategy beam --num-beams 4   # decoding defaults for every request
  python tools/serve.py --turns --turn-silence 0.5 --trim-silence 0.5   # hands-free: answer each time the speaker stops
  python tools/serve.py --host 0.0.0.0 --api-key-file key.txt --allowed-host box.lan   # reachable from the network

The models load once, with the same defaults and options as tools/pipeline.py (the demo's ASR model; its language
model, or the slm_whisper_offline preset's once trained; the ASR decoding from the model's decoding file unless an option says otherwise, printed with where it came from; the
language-model flags are the defaults a request's own options replace). Then, before it listens, the server
transcribes and answers a bundled sample (duet.serving.warm_up; --no-warm-up skips it), so that what the models
build on first use is built before the first request. NeMo's and transformers' log lines while they load go to
--log (experiments/logs/serve.log), or with --verbose to standard error. Endpoints:
  GET  /                          the page: record from the microphone or send a file, hear the answer
  GET  /health                    {"status": "ok", "asr_model", "slm_model", ...}
  POST /v1/audio/transcriptions   multipart file [model] [response_format=json|text|verbose_json|srt|vtt]
  POST /v1/pipeline               multipart file [speak=true] [strategy, max_new_tokens, top_p, ...]
  POST /v1/respond                JSON {"text": ...[, strategy, max_new_tokens, ...]} -> {"response"}
  WS   /v1/stream[?speak=true]    binary messages of 16 kHz mono PCM16 (little-endian), then the text message
                                  {"type": "end"}; the server sends {"type": "partial", "text"} as audio
                                  arrives and {"type": "final", "transcript", "response", "confidence",
                                  "understood", "latency_s", ...};
                                  Silero VAD adds {"type": "speech_start"|"speech_end", "turn", "at_s", ...}
  WS   /v1/stream?turns=true      hands-free: each time the speaker stops (--turn-silence of silence after
                                  speech) a {"type": "final", "turn": n, ...} for that turn, and the socket
                                  listens for the next; {"type": "end"} -> {"type": "done", "turns"}
Uploads: WAV/FLAC/OGG/MP3 up to --max-sample-rate and --max-channels (libsndfile), WebM/MP4/AAC through ffmpeg
allowed audio containers only (no playlists or lists that name other files). Requests over --max-audio-seconds
(or its worth of samples at 48 kHz stereo) or --max-upload-mb (counted as the body arrives, chunked or not),
truncated, corrupt or empty audio and bad options (language-model options within slm.generation's bounds: at most
16 beams and 1024 new tokens, finite temperature and penalty) are answered 4xx with {"error": "..."}; more than
--queue-size requests at once, 503 with Retry-After (/health gives the queue's wait and run times). All inference
runs on one thread. A WebSocket that sends nothing for --stream-idle-seconds gets its final and is closed; one that
goes past --max-audio-seconds gets the final of the audio up to the limit ("ended_by": "limit: ...") and is closed.

Who may use it: requests must name the server by an IP address, localhost or an --allowed-host (a web page whose
name was re-pointed here is refused: DNS rebinding), and a browser's requests must come from the server's own
page or an --allowed-origin. With --api-key(-file) every request but the page, its files and /health needs
"Authorization: Bearer <key>" (a browser's WebSocket offers the subprotocol duet.key.<key in base64url> instead;
the page takes the key from its field, or from http://host:port/#key=<key>, and keeps it in the browser's
localStorage); listening beyond 127.0.0.1 without one prints a warning. No /docs page (it would load Swagger
from a CDN); /openapi.json is served.

/v1/pipeline and the WebSocket's final message carry the transcript's "confidence" (mean word confidence,
duet/asr/confidence.py) and "understood"; below --min-confidence (as in tools/pipeline.py; 0 turns it off) the
answer is "Sorry, I didn't catch that." and the language model is not asked. The page shows both. A cache-aware
--streaming-asr-model gives no word confidences: its transcripts have "confidence": null and are not checked.

Partial transcripts on the WebSocket: with --streaming-asr-model (a cache-aware model, e.g. trained with
configs/fastconformer_small_streaming.yaml or made by tools/convert_to_streaming.py) each chunk is encoded
once as it arrives, carrying the encoder's caches: constant cost per chunk, partials every chunk, and the
final transcript (and the answer) come from that model. Without one, the offline model decodes the whole
buffer again every --stream-interval seconds of new audio (or after as much audio as the last decode took,
when that is longer, so that decoding keeps pace with a live stream): each decode costs more as the
recording grows (quadratic in its length overall; the final message reports the decodes and their median
and last time).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
from pathlib import Path

import uvicorn
import uvicorn.config

from duet.asr.inference import load_asr_model
from duet.asr.streaming import check_streaming_model
from duet.cli.cli_args import (add_decoding_options, add_log_arguments, add_model_arguments, check_model_paths,
                               log_target, pipeline_settings_from_args)
from duet.errors import DuetError
from duet.pipeline import VoicePipeline
from duet.serving.app import create_app
from duet.serving.errors import disk_full_named
from duet.serving.guard import exposure_warning
from duet.serving.settings import ServerSettings
from duet.foundation.errors import cli
from duet.foundation.files import library_output_to


# the ServerSettings fields whose flags carry their value as it is
SETTING_FLAGS = ("host", "port", "max_audio_seconds", "max_upload_mb", "queue_size", "stream_interval",
                 "streaming_asr_model", "turns", "turn_silence", "vad_threshold", "max_sample_rate", "max_channels",
                 "max_text_chars", "stream_idle_seconds", "warm_up")


def add_setting(parser, name: str, text: str) -> None:
    """The flag of ServerSettings' field ``name`` (``--max-upload-mb``), with the field's type and default."""
    default = getattr(ServerSettings, name)
    parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default,
                        help=f"{text} (default: {default:g})")


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    d = ServerSettings
    parser.add_argument("--host", default=d.host, help=f"address to listen on (default: {d.host})")
    parser.add_argument("--port", type=int, default=d.port, help=f"port (default: {d.port})")
    add_model_arguments(parser)
    for name, text in (("max_audio_seconds", "longest recording accepted"), ("max_upload_mb", "largest upload in MiB"),
                       ("queue_size", "requests waiting for or running on the inference thread; more get 503"),
                       ("stream_interval", "WebSocket: decode again after this many seconds of new audio")):
        add_setting(parser, name, text)
    parser.add_argument("--streaming-asr-model", default=None,
                        help="a cache-aware .nemo for the WebSocket's partials and final transcript "
                             "(default: re-decode with the --asr-model)")
    parser.add_argument("--turns", action="store_true",
                        help="WebSockets take turns unless the client asks ?turns=false (default: only with ?turns=true)")
    add_setting(parser, "turn_silence", "seconds of silence after speech that end a turn")
    add_setting(parser, "vad_threshold", "Silero VAD speech probability at which audio counts as speech")
    guard = parser.add_argument_group("who may use the server")
    keys = guard.add_mutually_exclusive_group()
    keys.add_argument("--api-key", default=None,
                      help="every request but the page, its files and /health needs Authorization: Bearer <key> "
                           "(visible in the process list: prefer --api-key-file)")
    keys.add_argument("--api-key-file", type=Path, default=None, help="a file holding the API key (one line)")
    guard.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                       help="a Host name served besides IP addresses and localhost (repeatable; others get 400)")
    guard.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                       help="a web page origin (https://app.example) allowed besides the server's own page "
                            "(repeatable; others get 403)")
    limits = parser.add_argument_group("limits of one request")
    for name, text in (("max_sample_rate", "highest sample rate of an upload in Hz"),
                       ("max_channels", "most channels in an upload"),
                       ("max_text_chars", "longest /v1/respond text in characters"),
                       ("stream_idle_seconds", "a WebSocket sending nothing this long gets its final and is closed")):
        add_setting(limits, name, text)
    parser.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                        help="serve at once, without first transcribing and answering a bundled sample (the first "
                             "requests then pay for what the models build on first use)")
    add_decoding_options(parser)
    add_log_arguments(parser, "serve")
    return parser


def read_api_key(path: Path) -> str:
    """The key in ``path`` (its first line, stripped); a missing, unreadable or empty file is a ``DuetError``."""
    try:
        key = path.read_text().strip().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise DuetError(f"--api-key-file {path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    if not key or not key[0].strip():
        raise DuetError(f"--api-key-file {path}: empty")
    return key[0].strip()


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    given = {name: getattr(args, name) for name in SETTING_FLAGS}
    settings = ServerSettings(**given, api_key=args.api_key if args.api_key_file is None else
                              read_api_key(args.api_key_file), allowed_hosts=tuple(args.allowed_host),
                              allowed_origins=tuple(args.allowed_origin)).validate()
    if warning := exposure_warning(settings):
        print(warning, file=sys.stderr, flush=True)
    check_model_paths(args.asr_model, args.slm_model)
    if args.streaming_asr_model and not Path(args.streaming_asr_model).is_file():
        raise DuetError(f"--streaming-asr-model {args.streaming_asr_model} does not exist")
    pipeline_settings, decoding_line = pipeline_settings_from_args(args)  # every option is checked before loading
    # no forked decoding processes inside a threaded server
    pipeline_settings = dataclasses.replace(pipeline_settings,
                                            batching=dataclasses.replace(pipeline_settings.batching, workers=1))
    print(decoding_line, flush=True)
    # what the models and libraries print, loading and while serving (NeMo's decoding notes on a request), goes to
    # --log (with --verbose: standard error); the console holds the server's own lines and uvicorn's (where it
    # listens, requests, a port already in use)
    with library_output_to(log_target(args)) as (out, err):
        with disk_full_named("loading the models"):
            pipeline, load_s = VoicePipeline.load(pipeline_settings)
            streaming_model = None
            if args.streaming_asr_model:
                streaming_model = load_asr_model(args.streaming_asr_model)
                check_streaming_model(streaming_model)
        print(f"models loaded in {load_s:.1f} s (ASR {pipeline_settings.asr_model}, "
              f"SLM {pipeline_settings.slm_model})", file=out, flush=True)
        app = create_app(pipeline, settings, asr_model=str(pipeline_settings.asr_model),
                         slm_model=str(pipeline_settings.slm_model), streaming_model=streaming_model)
        warmed = app.state.service.warm_up
        print(f"{warmed.line() if warmed else 'no warm-up (--no-warm-up)'}; serving on "
              f"http://{settings.host}:{settings.port}", file=out, flush=True)
        uvicorn.run(app, host=settings.host, port=settings.port, ws="wsproto", log_level="info",
                    log_config=uvicorn_logging_to(out, err))
    return 0


def uvicorn_logging_to(out, err) -> dict:
    """uvicorn's own logging config with its streams (``sys.stderr`` for its messages, ``sys.stdout`` for the request
    lines) replaced by the console's ``out`` and ``err``."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    streams = {"ext://sys.stdout": out, "ext://sys.stderr": err}
    for handler in config["handlers"].values():
        handler["stream"] = streams.get(handler.get("stream"), err)
    return config


if __name__ == "__main__":
    sys.exit(main())
