"""The server's page in headless Chromium: its fake microphone plays a WAV of sample speech, the page records,
streams it over the WebSocket, stops, and shows the transcript and the answer the server sent; in hands-free mode
the WAV holds two utterances apart and the page shows a final for each, the microphone open throughout.

Needs Debian's chromium + chromium-driver (bash tools/setup.sh installs them where apt works) and selenium;
skips, saying which is missing, otherwise. The models are the micro ASR model and the tiny GPT-2 of conftest,
served by uvicorn on a free 127.0.0.1 port in a thread.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile

from duet.asr.batching import PIPELINE_BATCHING
from duet.asr.inference import load_audio
from duet.asr.confidence import NOT_UNDERSTOOD_REPLY
from duet.pipeline import PipelineSettings, VoicePipeline
from duet.serving.app import create_app
from duet.serving.settings import ServerSettings
from slm.generation import GenerationSettings, load_model

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# headless in a container, and nothing reaching out to the network
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=900,900"]
SR = 16000


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def fake_microphone_args(wav: Path, profile: Path) -> list[str]:
    """Chromium's fake capture device playing ``wav`` (looped), granted without a permission prompt."""
    return ["--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-audio-capture={wav}", f"--user-data-dir={profile}"]


def start_chromium(wav: Path, profile: Path):
    """A selenium driver for headless Chromium with the fake microphone; skips when either is missing."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium not installed (pip install -e .[dev])")
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists() and shutil.which(Path(path).name) is None:
            pytest.skip(f"{path} not found: apt-get install chromium chromium-driver (bash tools/setup.sh)")
    try:  # a bare debootstrap root has no /etc/hosts: selenium then fails with "Can not connect to the Service"
        socket.getaddrinfo("localhost", None)
    except socket.gaierror:
        pytest.skip("localhost does not resolve (no /etc/hosts?): selenium reaches chromedriver through it")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    for flag in CHROMIUM_FLAGS + fake_microphone_args(wav, profile):
        options.add_argument(flag)
    service = Service(CHROMEDRIVER if Path(CHROMEDRIVER).exists() else shutil.which("chromedriver"))
    return webdriver.Chrome(options=options, service=service)


def serve_in_thread(app, **config):
    """uvicorn serving ``app`` on a free port in a daemon thread (``config``: more ``uvicorn.Config`` options);
    returns (server, base URL)."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, ws="wsproto", log_level="warning",
                                           **config))
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start within 30 s")
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{port}"


@pytest.mark.integration
@pytest.mark.parametrize("min_confidence", [0.0, 1.0])
def test_the_page_records_the_microphone_and_shows_transcript_and_answer(micro_model_and_manifest, tiny_slm_folder,
                                                                        tmp_path, min_confidence):
    """With the confidence check off the page shows the language model's answer; with a threshold no transcript of
    the random micro model reaches (1.0), it marks the transcript as not understood and shows the apology."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    model, _, _, entries = micro_model_and_manifest
    wav = tmp_path / "speech.wav"  # Chromium's fake capture reads 16-bit PCM WAV
    soundfile.write(wav, np.concatenate([load_audio(e["audio_filepath"], SR) for e in entries[:2]]), SR,
                    subtype="PCM_16")
    tokenizer, slm = load_model(tiny_slm_folder)
    pipeline = VoicePipeline(model, slm, tokenizer, PipelineSettings(
        generation=GenerationSettings(max_new_tokens=8), batching=replace(PIPELINE_BATCHING, workers=1),
        min_confidence=min_confidence))
    server, url = serve_in_thread(create_app(pipeline, ServerSettings(stream_interval=0.5), asr_model="micro.nemo"))
    driver = start_chromium(wav, tmp_path / "profile")
    try:
        driver.get(url)
        wait = WebDriverWait(driver, 30)
        wait.until(lambda d: "micro.nemo" in d.find_element(By.ID, "models").text)
        driver.find_element(By.ID, "record").click()
        wait.until(lambda d: d.find_element(By.ID, "status").text.startswith("recording"))
        wait.until(lambda d: d.find_element(By.ID, "partial").text.strip())  # a partial while still recording
        time.sleep(1.0)
        driver.find_element(By.ID, "stop").click()
        wait.until(lambda d: d.find_element(By.ID, "status").text.startswith("done"))
        transcript = driver.find_element(By.ID, "transcript").text
        answer = driver.find_element(By.ID, "response").text
        confidence = driver.find_element(By.ID, "confidence").text
        marked = "unsure" in driver.find_element(By.ID, "transcript").get_attribute("class")
        stages = [row.text for row in driver.find_elements(By.CSS_SELECTOR, "#latency tr")]
        driver.save_screenshot(str(tmp_path / "serve_page.png"))
    finally:
        driver.quit()
        server.should_exit = True
    assert transcript and transcript != "(nothing heard)", "the micro model should hear some tokens"
    assert confidence.startswith("confidence 0.") or confidence == "confidence 1.00", confidence
    if min_confidence == 0.0:
        # the page shows the server's answer to what it heard (selenium collapses whitespace as a browser shows it)
        assert answer == " ".join(pipeline.respond(transcript).split())
        assert any(row.startswith("slm") for row in stages) and not marked and "not understood" not in confidence
    else:
        assert answer == NOT_UNDERSTOOD_REPLY and marked and "not understood" in confidence
        assert not any(row.startswith("slm") for row in stages)
    assert any(row.startswith("asr_final") for row in stages)


@pytest.mark.integration
def test_hands_free_answers_each_utterance_when_the_speaker_pauses(micro_model_and_manifest, tiny_slm_folder,
                                                                  tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from duet.synth.conversation import compose

    model, _, _, entries = micro_model_and_manifest
    # two utterances 1.5 s apart, and 3 s of silence before Chromium plays the file again from the start
    talk = compose([load_audio(e["audio_filepath"], SR) for e in entries[:2]], [0.8, 1.5, 3.0])
    wav = tmp_path / "two_turns.wav"
    soundfile.write(wav, talk.audio, SR, subtype="PCM_16")
    tokenizer, slm = load_model(tiny_slm_folder)
    # every turn goes to the language model: a random model's transcripts are all low-confidence
    pipeline = VoicePipeline(model, slm, tokenizer, PipelineSettings(
        generation=GenerationSettings(max_new_tokens=8), batching=replace(PIPELINE_BATCHING, workers=1),
        min_confidence=0.0))
    server, url = serve_in_thread(create_app(pipeline, ServerSettings(stream_interval=0.5), asr_model="micro.nemo"))
    driver = start_chromium(wav, tmp_path / "profile")
    try:
        driver.get(url)
        wait = WebDriverWait(driver, 40)
        wait.until(lambda d: "micro.nemo" in d.find_element(By.ID, "models").text)
        driver.find_element(By.ID, "speak").click()  # no spoken answers: the microphone is never paused for them
        driver.find_element(By.ID, "hands-free").click()
        driver.find_element(By.ID, "record").click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#turns li")) >= 2)
        status_while_open = driver.find_element(By.ID, "status").text
        turns = [(item.get_attribute("data-turn"), item.find_element(By.CLASS_NAME, "said").text,
                  item.find_element(By.CLASS_NAME, "answer").text)
                 for item in driver.find_elements(By.CSS_SELECTOR, "#turns li")]
        driver.save_screenshot(str(tmp_path / "serve_page_hands_free.png"))
        driver.find_element(By.ID, "stop").click()
        wait.until(lambda d: d.find_element(By.ID, "status").text.startswith("done:"))
        done = driver.find_element(By.ID, "status").text
    finally:
        driver.quit()
        server.should_exit = True
    assert [number for number, _, _ in turns[:2]] == ["1", "2"], turns
    assert "listening" in status_while_open or "hearing" in status_while_open, status_while_open
    for _, said, answer in turns[:2]:
        assert said and said != "(nothing heard)", "the micro model should hear some tokens"
        assert answer == "→ " + " ".join(pipeline.respond(said).split())  # the server's answer to that turn
    assert int(done.split()[1]) >= 2, done


@pytest.mark.integration
def test_the_page_sends_the_api_key_on_fetch_and_the_websocket(micro_model_and_manifest, tiny_slm_folder, tmp_path):
    """The key comes in the address's fragment (#key=...), is kept in localStorage and taken off the address; the
    WebSocket carries it as a subprotocol, the upload as Authorization: Bearer. A recording that runs past the
    server's length limit ends there with its final (the page stops the microphone); a wrong key is said."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    key = "page-key-0123456789+/="  # base64's own characters too: the subprotocol carries it as base64url
    model, _, _, entries = micro_model_and_manifest
    audio = load_audio(entries[0]["audio_filepath"], SR)
    wav = tmp_path / "speech.wav"  # the fake microphone loops it; the upload is it too
    soundfile.write(wav, audio, SR, subtype="PCM_16")
    limit_s = round(len(audio) / SR + 1.0, 1)  # the upload fits, the looped microphone does not
    tokenizer, slm = load_model(tiny_slm_folder)
    pipeline = VoicePipeline(model, slm, tokenizer, PipelineSettings(
        generation=GenerationSettings(max_new_tokens=8), batching=replace(PIPELINE_BATCHING, workers=1)))
    server, url = serve_in_thread(create_app(pipeline, ServerSettings(stream_interval=0.5, api_key=key,
                                                                      max_audio_seconds=limit_s),
                                             asr_model="micro.nemo"))
    driver = start_chromium(wav, tmp_path / "profile")
    status = lambda d: d.find_element(By.ID, "status").text  # noqa: E731
    try:
        driver.get(f"{url}/#key={key}")
        wait = WebDriverWait(driver, 40)
        wait.until(lambda d: "micro.nemo" in d.find_element(By.ID, "models").text)
        address = driver.current_url
        driver.get(url)  # again, without the fragment: the key is kept in this browser
        wait.until(lambda d: "micro.nemo" in d.find_element(By.ID, "models").text)
        field = driver.find_element(By.ID, "api-key")
        shown, kept = field.is_displayed(), field.get_attribute("value")
        driver.find_element(By.ID, "speak").click()  # no spoken answer: nothing here needs espeak-ng
        driver.find_element(By.ID, "record").click()
        wait.until(lambda d: status(d).startswith("done"))  # no Stop: the server ends the stream at its limit
        recorded = (status(driver), driver.find_element(By.ID, "transcript").text,
                    driver.find_element(By.ID, "stop").is_enabled())
        driver.find_element(By.ID, "file").send_keys(str(wav))
        driver.find_element(By.ID, "send-file").click()
        wait.until(lambda d: d.find_element(By.ID, "partial").text == "(a file is answered whole)")
        uploaded = (status(driver), driver.find_element(By.ID, "transcript").text)
        field.clear()
        field.send_keys("wrong-key-0000", Keys.TAB)  # TAB: the change event saves it
        driver.find_element(By.ID, "send-file").click()
        wait.until(lambda d: status(d).startswith("error"))
        refused_upload = status(driver)
        driver.find_element(By.ID, "record").click()
        wait.until(lambda d: "refused" in status(d))
        refused_stream = status(driver)
        driver.find_element(By.ID, "stop").click()
    finally:
        driver.quit()
        server.should_exit = True
    assert "key=" not in address and shown and kept == key
    assert recorded[0].startswith(f"done (limit: the stream is longer than the limit of {limit_s:g} s"), recorded
    assert recorded[1] and recorded[1] != "(nothing heard)" and not recorded[2]
    assert uploaded[0] == "done" and uploaded[1] and uploaded[1] != "(nothing heard)"
    assert refused_upload.startswith("error: authorization: this server needs its API key"), refused_upload
    assert refused_stream == "the server refused the stream (is the API key right?)"
