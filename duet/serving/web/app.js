// The page of tools/serve.py: microphone -> /v1/stream (16 kHz mono PCM16 over a WebSocket) with live partial
// transcripts, or a file -> /v1/pipeline; then the transcript, the answer, per-stage latency, the spoken answer.
// Hands-free: the socket takes turns (?turns=true): the server's voice activity detection ends each turn when the
// speaker pauses and answers it; the microphone stays open for the next turn (and is not sent while the spoken
// answer plays, so the page does not answer itself) until Stop.
// A server started with --api-key wants its key on every request: the page takes it from its address's fragment
// (…/#key=<key>: a fragment never leaves the browser) or from the field, and keeps it in localStorage.
"use strict";

const TARGET_RATE = 16000;
const SEND_SAMPLES = 4000; // send every 0.25 s of 16 kHz audio
const $ = (id) => document.getElementById(id);

let recording = null; // {socket, context, stream, processor, resampler, pending, handsFree}
let answering = false; // a spoken answer is playing: hands-free mode does not send the microphone meanwhile

function setStatus(text) { $("status").textContent = text; }

const KEY_STORE = "duet.api-key";

function apiKey() { return $("api-key").value.trim(); }

function authorization() {
  const key = apiKey();
  return key ? { Authorization: "Bearer " + key } : {};
}

// A browser's WebSocket sends no headers of the page's: the key goes as the subprotocol duet.key.<base64url>, beside
// "duet", the one the server agrees to (duet/serving/guard.py: presented_key).
function streamProtocols() {
  const key = apiKey();
  if (!key) return [];
  const bytes = new TextEncoder().encode(key);
  const encoded = btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  return ["duet", "duet.key." + encoded];
}

function loadKey() {
  // not URLSearchParams: it reads "+" as a space, and keys hold base64's "+" as often as not
  const given = /(?:^|&)key=([^&]*)/.exec(location.hash.slice(1));
  if (given && given[1]) {
    localStorage.setItem(KEY_STORE, decodeURIComponent(given[1]));
    history.replaceState(null, "", location.pathname + location.search); // the key off the address bar
  }
  $("api-key").value = localStorage.getItem(KEY_STORE) || "";
}

function saveKey() {
  if (apiKey()) localStorage.setItem(KEY_STORE, apiKey());
  else localStorage.removeItem(KEY_STORE);
}

function clearResults() {
  for (const id of ["partial", "transcript", "confidence", "response", "tool-calls", "turns"]) $(id).textContent = "";
  $("transcript").classList.remove("unsure");
  $("latency").tBodies[0].innerHTML = "";
  const audio = $("answer-audio");
  audio.hidden = true;
  audio.removeAttribute("src");
}

// The server's judgement of the transcript (duet/asr/confidence.py): its confidence, and whether it was understood;
// a transcript that was not is marked, and its answer is the server's apology, not the language model's.
function describeConfidence(result) {
  if (!result.transcript) return "";
  if (result.confidence === null || result.confidence === undefined) return "confidence: not measured (not checked)";
  const value = "confidence " + result.confidence.toFixed(2);
  return result.understood === false ? value + " — not understood, so the language model was not asked" : value;
}

// The tool calls the language model made (slm/tool_calls.py), each with its input and result: "calc: 50 - 3 = 47";
// a refused call shows why (its answer is then the plain fallback sentence). An answer the model was unsure of is
// shown as withheld beside the decline that replaced it.
function describeToolCalls(result) {
  const calls = result.tool_calls || [];
  const withheld = result.withheld ? "withheld, the model was unsure: " + result.withheld : "";
  if (!calls.length) return withheld;
  return "worked out: " + calls.map((call) => call.tool + (call.input ? ": " + call.input : "") +
    (call.result === null ? " (refused: " + call.error + ")" : " = " + call.result)).join("; ") +
    (withheld ? "; " + withheld : "");
}

function addTurn(result) {
  const item = document.createElement("li");
  item.dataset.turn = result.turn;
  const said = document.createElement("span");
  said.className = "said";
  said.textContent = result.transcript || "(nothing heard)";
  const answer = document.createElement("span");
  answer.className = "answer";
  answer.textContent = " → " + (result.response || "(no answer)");
  item.append(said, answer);
  $("turns").append(item);
}

function showResult(result) {
  $("transcript").textContent = result.transcript || "(nothing heard)";
  $("transcript").classList.toggle("unsure", result.understood === false && Boolean(result.transcript));
  $("confidence").textContent = describeConfidence(result);
  $("response").textContent = result.response || "(no answer: " + (result.note || "empty transcript") + ")";
  $("tool-calls").textContent = describeToolCalls(result);
  const body = $("latency").tBodies[0];
  body.innerHTML = "";
  for (const [stage, seconds] of Object.entries(result.latency_s || {})) {
    const row = body.insertRow();
    row.insertCell().textContent = stage;
    row.insertCell().textContent = (seconds * 1000).toFixed(0) + " ms";
  }
  if (result.speech && result.speech.base64) {
    const audio = $("answer-audio");
    audio.src = "data:audio/wav;base64," + result.speech.base64;
    audio.hidden = false;
    audio.play().catch(() => {}); // autoplay may be refused; the controls stay
  }
  // ended_by: the stream was ended by the server (idle, or past the length limit: the transcript covers the limit)
  const ended = result.ended_by ? " (" + result.ended_by + ")" : "";
  setStatus(result.error ? "done, with an error: " + result.error + ended : "done" + ended);
}

// Box-filter decimation from the context's rate to 16 kHz, carrying the leftover samples between callbacks.
class Resampler {
  constructor(fromRate) { this.ratio = fromRate / TARGET_RATE; this.rest = new Float32Array(0); }
  push(input) {
    const data = new Float32Array(this.rest.length + input.length);
    data.set(this.rest);
    data.set(input, this.rest.length);
    const n = Math.floor(data.length / this.ratio);
    const out = new Int16Array(n);
    for (let i = 0; i < n; i++) {
      const a = Math.floor(i * this.ratio), b = Math.max(a + 1, Math.floor((i + 1) * this.ratio));
      let sum = 0;
      for (let j = a; j < b; j++) sum += data[j];
      const v = Math.max(-1, Math.min(1, sum / (b - a)));
      out[i] = v < 0 ? v * 32768 : v * 32767;
    }
    this.rest = data.slice(Math.floor(n * this.ratio));
    return out;
  }
}

function sendPending(force) {
  const r = recording;
  const total = r.pending.reduce((n, part) => n + part.length, 0);
  if (total === 0 || (!force && total < SEND_SAMPLES)) return;
  const joined = new Int16Array(total);
  let at = 0;
  for (const part of r.pending) { joined.set(part, at); at += part.length; }
  r.pending = [];
  if (r.socket.readyState === WebSocket.OPEN) r.socket.send(joined.buffer);
}

async function startRecording() {
  clearResults();
  let stream;
  try {
    // hands-free keeps the microphone open while the answer plays: cancel its echo
    const echoCancellation = $("hands-free").checked;
    stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation } });
  } catch (e) {
    setStatus("no microphone: " + e.message);
    return;
  }
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const socket = new WebSocket(
    `${scheme}//${location.host}/v1/stream?speak=${$("speak").checked}&turns=${$("hands-free").checked}`,
    streamProtocols());
  socket.binaryType = "arraybuffer";
  const context = new AudioContext();
  const source = context.createMediaStreamSource(stream);
  // ScriptProcessor: one file, no worklet module to serve; the deprecation does not affect what it delivers
  const processor = context.createScriptProcessor(4096, 1, 1);
  const mute = context.createGain();
  mute.gain.value = 0;
  const handsFree = $("hands-free").checked;
  recording = { socket, context, stream, processor, resampler: new Resampler(context.sampleRate), pending: [],
                handsFree };
  processor.onaudioprocess = (event) => {
    if (!recording || (recording.handsFree && answering)) return;
    recording.pending.push(recording.resampler.push(event.inputBuffer.getChannelData(0)));
    sendPending(recording.handsFree); // hands-free: every buffer at once, so that the end of a turn is heard sooner
  };
  socket.onmessage = (event) => {
    const message = JSON.parse(event.data);
    const turn = message.turn ? `turn ${message.turn}: ` : "";
    if (message.type === "partial") $("partial").textContent = message.text;
    else if (message.type === "speech_start" && handsFree) setStatus(turn + "hearing you…");
    else if (message.type === "speech_end" && handsFree) setStatus(turn + "answering…");
    else if (message.type === "final" && handsFree) {
      addTurn(message);
      showResult(message);
      if (recording) setStatus(turn + "answered; listening…");
    } else if (message.type === "final") {
      if (recording && recording.socket === socket) stopRecording(); // the server ended the stream (idle, limit)
      showResult(message);
      socket.close();
    }
    else if (message.type === "done") { setStatus(`done: ${message.turns} turn(s)`); socket.close(); }
    else if (message.type === "error") setStatus(turn + "error: " + message.error);
  };
  let opened = false;
  socket.onerror = () => setStatus(opened ? "connection error"
    : "the server refused the stream" + (apiKey() ? " (is the API key right?)" : " (does it need an API key?)"));
  socket.onopen = () => {
    opened = true;
    source.connect(processor);
    processor.connect(mute);
    mute.connect(context.destination);
    setStatus(`recording (${context.sampleRate} Hz -> 16 kHz)…`);
  };
  $("record").disabled = true;
  $("record").classList.add("on");
  $("stop").disabled = false;
}

function stopRecording() {
  const r = recording;
  if (!r) return;
  sendPending(true);
  recording = null;
  r.processor.disconnect();
  r.stream.getTracks().forEach((t) => t.stop());
  r.context.close();
  if (r.socket.readyState === WebSocket.OPEN) r.socket.send(JSON.stringify({ type: "end" }));
  setStatus(r.handsFree ? "finishing the last turn…" : "transcribing and answering…");
  $("record").disabled = false;
  $("record").classList.remove("on");
  $("stop").disabled = true;
}

async function sendFile() {
  const file = $("file").files[0];
  if (!file) return;
  clearResults();
  setStatus("sending " + file.name + "…");
  const form = new FormData();
  form.append("file", file);
  form.append("speak", $("speak").checked ? "true" : "false");
  const reply = await fetch("/v1/pipeline", { method: "POST", body: form, headers: authorization() });
  const body = await reply.json();
  if (!reply.ok) { setStatus("error: " + body.error); return; }
  $("partial").textContent = "(a file is answered whole)";
  showResult(body);
}

async function showModels() {
  try {
    const health = await (await fetch("/health")).json();
    const check = health.min_confidence > 0 ? `not understood below confidence ${health.min_confidence}`
                                            : "confidence check off";
    $("models").textContent = `ASR ${health.asr_model} (${health.asr_decoding}), SLM ${health.slm_model}; ${check}`;
    $("key-row").hidden = !health.api_key && !apiKey();
  } catch (e) {
    $("models").textContent = "server not reachable";
  }
}

loadKey();
$("api-key").addEventListener("change", saveKey);
$("answer-audio").addEventListener("play", () => { answering = true; });
for (const name of ["ended", "pause", "error"]) $("answer-audio").addEventListener(name, () => { answering = false; });
$("record").addEventListener("click", startRecording);
$("stop").addEventListener("click", stopRecording);
$("file").addEventListener("change", () => { $("send-file").disabled = !$("file").files.length; });
$("send-file").addEventListener("click", () => sendFile().catch((e) => setStatus("error: " + e.message)));
showModels();
