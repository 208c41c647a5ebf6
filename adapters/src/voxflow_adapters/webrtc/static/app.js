// voxflow call page: one RTCPeerConnection, the "voxflow" data channel (protocol v1,
// documented in the README), no build step and no external service.
"use strict";

const PROTOCOL = 1;
const RESUME_VERSION = 1;
const CONNECT_TIMEOUT_MS = 15000;
// Resume: nothing received (RTP: the server sends a frame every 20 ms, silence included)
// for this long means the connection is gone (a dead server, a dropped network); the
// page then offers again with the session id and resume token of its hello, retrying
// with these delays (the last one repeated) for up to RESUME_WITHIN_MS. A "handover"
// (the call worker is shutting down) does the same at once. 2 s is 100 frames in a row
// missing: a dead worker's call answers again within 3 s; a network blip that long
// resumes the call too (the reply playing is cut at what was heard).
const PEER_TIMEOUT_MS = 2000;
const RESUME_BACKOFF_MS = [250, 500, 1000, 2000, 4000];
const RESUME_WITHIN_MS = 60000;
const $ = (id) => document.getElementById(id);
const state = {
  pc: null, channel: null, mic: null, muted: false,
  playing: null,        // the audio element's state, reported to the server
  replies: new Map(),   // delivery_id -> <li>
  lastUser: null,       // the <li> of the latest user turn
  messages: [],         // every server message (for debugging and tests)
  latency: [],          // per turn: the server's marks and the figure at the user's ear
  buffer: null,         // the last getStats() totals of the received audio (deltas)
  resume: null,         // {session_id, token} from the hello (memory only, never logged)
  reconnects: 0,        // calls resumed after a drop or a handover (tests read it)
  moved: 0,             // of them, handovers: the server moved the call (tests read it)
  resuming: false,      // a reconnection is under way
  watch: null,          // the interval that watches the received packets
};
window.voxflow = state;

function token() {
  return new URLSearchParams(window.location.search).get("token") || "";
}

function notice(text) {
  const el = $("notice");
  el.textContent = text || "";
  el.hidden = !text;
}

function setConnection(text) {
  const el = $("connection");
  el.textContent = text;
  el.dataset.state = text;
}

function send(message) {
  if (state.channel && state.channel.readyState === "open") {
    state.channel.send(JSON.stringify({ v: PROTOCOL, ...message }));
  }
}

function addLine(role, text) {
  const li = document.createElement("li");
  li.className = role;
  const span = document.createElement("span");
  span.className = "text";
  span.textContent = text;
  li.appendChild(span);
  $("transcript").appendChild(li);
  li.scrollIntoView({ block: "end" });
  return li;
}

function addMeta(li, text) {
  if (!li) return;
  let meta = li.querySelector(".meta");
  if (!meta) {
    meta = document.createElement("span");
    meta.className = "meta";
    li.appendChild(meta);
  }
  meta.textContent = text;
}

const handlers = {
  hello: (m) => {
    if (m.resume_token) state.resume = { session_id: m.session_id, token: m.resume_token };
    if (m.resumed) notice("");
  },
  state: (m) => { $("call-state").textContent = m.state.replace("_", " "); },
  transcript: (m) => { state.lastUser = addLine("user", m.text); },
  reply_text: (m) => {
    let li = state.replies.get(m.delivery_id);
    if (!li) {
      li = addLine("assistant", "");
      li.dataset.deliveryId = m.delivery_id;
      state.replies.set(m.delivery_id, li);
    }
    const text = li.querySelector(".text");
    text.textContent = (text.textContent + " " + m.text).trim();
  },
  reply_done: () => {},
  interrupted: (m) => {
    const li = state.replies.get(m.delivery_id);
    if (li) li.classList.add("interrupted");
  },
  latency: (m) => {
    const li = state.lastUser;
    atTheEar(m).then((ear) => {
      state.latency.push(ear);
      const parts = [`transcript ${Math.round(m.transcript_ms)} ms`];
      if (ear.ear_ms !== null) {
        parts.push(`voice-to-voice ${Math.round(ear.ear_ms)} ms at your ear ` +
                   `(${Math.round(ear.buffer_ms)} ms of it in this browser's buffers)`);
      }
      addMeta(li, parts.join(" · "));
    });
  },
  mute: (m) => { showMuted(m.muted); },
  error: (m) => { console.warn("voxflow rejected a message:", m.reason); },
  bye: (m) => { notice(`The call ended: ${m.reason}.`); hangUp(false); },
  handover: () => { if (state.pc) lost(state.pc, "moved"); },
};

// The browser's receive side from getStats(): the jitter buffer's mean delay per sample
// emitted since the last call (its recent size), the audio device's playout delay where
// reported ("media-playout"), and the round trip (each direction's network share).
async function receiveSide() {
  const out = { jitter_ms: 0, playout_ms: 0, rtt_ms: 0 };
  if (!state.pc) return out;
  const stats = await state.pc.getStats();
  let delay = 0, emitted = 0, playout = 0, played = 0;
  stats.forEach((s) => {
    if (s.type === "inbound-rtp" && s.kind === "audio") {
      delay += s.jitterBufferDelay || 0; emitted += s.jitterBufferEmittedCount || 0;
    } else if (s.type === "media-playout") {
      playout += s.totalPlayoutDelay || 0; played += s.totalSamplesCount || 0;
    } else if (s.type === "candidate-pair" && s.nominated && s.currentRoundTripTime !== undefined) {
      out.rtt_ms = s.currentRoundTripTime * 1000;
    }
  });
  const last = state.buffer || { delay: 0, emitted: 0, playout: 0, played: 0 };
  if (emitted > last.emitted) out.jitter_ms = 1000 * (delay - last.delay) / (emitted - last.emitted);
  else if (emitted > 0) out.jitter_ms = 1000 * delay / emitted;
  if (played > last.played) out.playout_ms = 1000 * (playout - last.playout) / (played - last.played);
  state.buffer = { delay, emitted, playout, played };
  return out;
}

// One turn's voice-to-voice at the user's ear: the server's figure runs from its VAD's
// speech end to the first reply frame sent; the user's last word left the browser
// receive_ms + half a round trip before that VAD saw it, and the reply's first frame
// reaches the ear half a round trip, the jitter buffer and the playout delay after it
// was sent.
async function atTheEar(m) {
  const side = await receiveSide().catch(() => ({ jitter_ms: 0, playout_ms: 0, rtt_ms: 0 }));
  const buffer = side.jitter_ms + side.playout_ms;
  const ear = m.first_audio_ms === null ? null
    : m.first_audio_ms + (m.receive_ms || 0) + side.rtt_ms + buffer;
  return { turn_id: m.turn_id, server_ms: m.first_audio_ms, receive_ms: m.receive_ms || 0,
           rtt_ms: side.rtt_ms, jitter_ms: side.jitter_ms, playout_ms: side.playout_ms,
           buffer_ms: buffer, ear_ms: ear };
}

function onMessage(event) {
  if (event.target !== state.channel) return; // a connection given up for a new one
  let message;
  try { message = JSON.parse(event.data); } catch { return; }
  if (!message || message.v !== PROTOCOL || !(message.type in handlers)) {
    console.warn("ignored a message of an unknown shape");
    return;
  }
  // (the resume token is kept in state.resume only: not in the message log)
  state.messages.push(message.type === "hello" ? { ...message, resume_token: undefined } : message);
  handlers[message.type](message);
}

function showMuted(muted) {
  state.muted = muted;
  const button = $("mute");
  button.textContent = muted ? "Unmute" : "Mute";
  button.setAttribute("aria-pressed", String(muted));
}

function micError(err) {
  if (!window.isSecureContext || !navigator.mediaDevices) {
    return "The browser only allows the microphone on secure pages: open the http://127.0.0.1 " +
           "or http://localhost address the server printed, or serve it over https.";
  }
  switch (err && err.name) {
    case "NotAllowedError":
    case "SecurityError":
      return "Microphone access was denied. Allow the microphone for this page (the icon " +
             "in the address bar), then press Connect again.";
    case "NotFoundError":
    case "OverconstrainedError":
      return "No microphone was found. Plug one in, then press Connect again.";
    case "NotReadableError":
      return "The microphone is in use by another application or could not be opened.";
    default:
      return `The microphone could not be opened (${err && err.name ? err.name : err}).`;
  }
}

function gatheringComplete(pc) {
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    const check = () => {
      if (pc.iceGatheringState === "complete") {
        pc.removeEventListener("icegatheringstatechange", check);
        resolve();
      }
    };
    pc.addEventListener("icegatheringstatechange", check);
    setTimeout(resolve, 5000); // answer with what we have rather than hang
  });
}

async function connect() {
  notice("");
  const button = $("connect");
  button.disabled = true;
  if (!window.isSecureContext || !navigator.mediaDevices) {
    notice(micError(null));
    button.disabled = false;
    return;
  }
  try {
    state.mic = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true },
      video: false,
    });
  } catch (err) {
    notice(micError(err));
    button.disabled = false;
    return;
  }
  try {
    await startPeer(null);
  } catch (err) {
    notice(`Could not start the call: ${err.message || err}`);
    hangUp(false);
    return;
  }
  button.textContent = "Hang up";
  button.disabled = false;
  $("mute").disabled = false;
}

class OfferRefused extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// One peer connection over the microphone already open; `resume`: {session_id, token}
// to go on with that session, null for a new call. Throws OfferRefused (or a network
// error) when the server does not answer the offer.
async function startPeer(resume) {
  setConnection(resume ? "reconnecting" : "connecting");
  const iceServers = await fetchIceServers();
  const pc = new RTCPeerConnection({ iceServers });
  state.pc = pc;
  state.channel = pc.createDataChannel("voxflow");
  state.channel.onmessage = onMessage;
  state.channel.onopen = () => {
    // What happened before the channel opened (the audio element starts on ontrack).
    if (state.muted) send({ type: "mute", muted: true });
    if (state.playing !== null) send({ type: "playback", playing: state.playing });
  };
  for (const track of state.mic.getAudioTracks()) pc.addTrack(track, state.mic);
  pc.ontrack = (event) => {
    const audio = $("remote");
    audio.srcObject = event.streams[0] || new MediaStream([event.track]);
    audio.play().catch(() => notice("Press anywhere on the page to hear the assistant."));
  };
  pc.oniceconnectionstatechange = () => { showIce(pc); };
  pc.onconnectionstatechange = () => {
    if (state.pc !== pc) return;
    setConnection(pc.connectionState);
    if (pc.connectionState === "connected") showIce(pc);
    if (pc.connectionState === "failed") {
      if (state.resume && pc.voxflowConnected) lost(pc);
      else failed(pc, "failed");
    }
  };
  try {
    await pc.setLocalDescription(await pc.createOffer());
    await gatheringComplete(pc);
    const offer = { type: "offer", sdp: pc.localDescription.sdp };
    if (resume) offer.resume = { v: RESUME_VERSION, session_id: resume.session_id, token: resume.token };
    const response = await fetch("/offer", {
      method: "POST",
      headers: { "Content-Type": "application/json", "Authorization": `Bearer ${token()}` },
      body: JSON.stringify(offer),
    });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) {
      const hint = response.status === 401 ? " (open the exact URL the server printed, with its token)" : "";
      throw new OfferRefused(response.status, `${body.error || response.statusText}${hint}`);
    }
    await pc.setRemoteDescription({ type: "answer", sdp: body.sdp });
  } catch (err) {
    pc.close();
    if (state.pc === pc) { state.pc = null; state.channel = null; }
    throw err;
  }
  // The server gives up after 15 s too; ICE can sit in "checking" for much longer.
  setTimeout(() => {
    if (state.pc === pc && pc.connectionState !== "connected") failed(pc, "did not connect within 15 s");
  }, CONNECT_TIMEOUT_MS);
  watchPackets(pc);
}

// Watch the packets received: none for PEER_TIMEOUT_MS on a connected call is a drop.
function watchPackets(pc) {
  if (state.watch) clearInterval(state.watch);
  let received = -1;
  let heard = performance.now();
  state.watch = setInterval(async () => {
    if (state.pc !== pc) return;
    const stats = await pc.getStats().catch(() => null);
    if (!stats || state.pc !== pc) return;
    let packets = 0;
    stats.forEach((s) => { if (s.type === "inbound-rtp" && s.kind === "audio") packets += s.packetsReceived || 0; });
    const now = performance.now();
    if (packets !== received) {
      if (packets > 0) pc.voxflowConnected = true;
      received = packets;
      heard = now;
    } else if (pc.voxflowConnected && now - heard >= PEER_TIMEOUT_MS) {
      lost(pc);
    }
  }, 250);
}

// The connection is gone (or the server moves the call: why === "moved"): offer again
// with the session's resume token, at once, then with backoff.
async function lost(pc, why = "dropped") {
  if (state.pc !== pc || state.resuming) return;
  if (!state.resume) { failed(pc, "was lost"); return; }
  state.resuming = true;
  pc.close();
  state.pc = null;
  state.channel = null;
  state.buffer = null;
  notice(why === "moved" ? "The call is moving to another server…"
                         : "The connection dropped: reconnecting…");
  const started = performance.now();
  for (let attempt = 0; state.mic; attempt++) {
    try {
      await startPeer(state.resume);
      state.reconnects += 1;
      if (why === "moved") state.moved += 1;
      notice("");
      break;
    } catch (err) {
      const retry = !(err instanceof OfferRefused) || [409, 502, 503, 504].includes(err.status);
      if (!retry || performance.now() - started > RESUME_WITHIN_MS) {
        notice(`The call could not be resumed: ${err.message || err}`);
        hangUp(false);
        break;
      }
    }
    await new Promise((r) => setTimeout(r, RESUME_BACKOFF_MS[Math.min(attempt, RESUME_BACKOFF_MS.length - 1)]));
  }
  state.resuming = false;
}

// The STUN/TURN servers the server uses (none unless `voxflow serve --ice-server`), so
// this end gathers server-reflexive and relay candidates too.
async function fetchIceServers() {
  const response = await fetch("/ice-servers", {
    headers: { "Authorization": `Bearer ${token()}` },
  });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const hint = response.status === 401 ? " (open the exact URL the server printed, with its token)" : "";
    throw new Error(`${body.error || response.statusText}${hint}`);
  }
  return body.ice_servers || [];
}

// The ICE candidate pair in use (or the last one tried): its local/remote types.
async function selectedPair(pc) {
  const stats = await pc.getStats();
  let pair = null;
  stats.forEach((s) => {
    if (s.type === "transport" && s.selectedCandidatePairId) pair = stats.get(s.selectedCandidatePairId);
  });
  if (!pair) {
    stats.forEach((s) => {
      if (s.type === "candidate-pair" && (s.nominated || s.state === "succeeded") && !pair) pair = s;
    });
  }
  const local = pair && stats.get(pair.localCandidateId);
  const remote = pair && stats.get(pair.remoteCandidateId);
  const offered = [];
  stats.forEach((s) => { if (s.type === "remote-candidate") offered.push(s.candidateType); });
  return {
    local: local ? local.candidateType : null,
    remote: remote ? remote.candidateType : null,
    offered: [...new Set(offered)],
  };
}

async function showIce(pc) {
  const el = $("ice");
  const state = pc.iceConnectionState;
  let text = state;
  if (state === "connected" || state === "completed") {
    const pair = await selectedPair(pc).catch(() => null);
    if (pair && pair.local) text = `${state} (${pair.local} ↔ ${pair.remote})`;
  }
  el.textContent = text;
  el.dataset.state = state;
}

function failed(pc, what) {
  if (pc.voxflowFailed) return;
  pc.voxflowFailed = true;
  connectionFailed(pc, what).finally(() => { if (state.pc === pc) hangUp(false); });
}

// Why a call did not connect, and the likely fix (shown on the page).
async function connectionFailed(pc, what) {
  const pair = await selectedPair(pc).catch(() => ({ local: null, offered: [] }));
  const ice = pc.iceConnectionState;
  const offered = pair.offered.length ? pair.offered.join(", ") : "none";
  let fix;
  if (!pair.local) {
    fix = "The browser could not reach any address the server offered " +
          `(server candidates: ${offered}). On the same network, start the server with ` +
          "--host set to an address this device can reach (or --ice-host); across networks " +
          "or through a strict firewall, add a TURN server (--ice-server turn:… with " +
          "VOXFLOW_TURN_USERNAME/VOXFLOW_TURN_CREDENTIAL).";
  } else {
    fix = `The ${pair.local} ↔ ${pair.remote} path stopped working (network change ` +
          "or a firewall timeout); press Connect again, or add a TURN server.";
  }
  $("ice").textContent = `${ice} (${pair.local ? `${pair.local} \u2194 ${pair.remote}` : "no candidate pair"})`;
  $("ice").dataset.state = "failed";
  notice(`The connection ${what} (ICE state: ${ice}). ${fix}`);
}

function hangUp(tell = true) {
  if (tell) send({ type: "hangup" });
  if (state.watch) clearInterval(state.watch);
  state.watch = null;
  state.resume = null;
  if (state.pc) state.pc.close();
  if (state.mic) for (const track of state.mic.getTracks()) track.stop();
  state.pc = null;
  state.channel = null;
  state.mic = null;
  state.playing = null;
  state.buffer = null;
  setConnection("closed");
  $("call-state").textContent = "–";
  if ($("ice").dataset.state !== "failed") {
    $("ice").textContent = "–";
    $("ice").dataset.state = "idle";
  }
  const button = $("connect");
  button.textContent = "Connect";
  button.disabled = false;
  $("mute").disabled = true;
  showMuted(false);
}

function toggleMute() {
  const muted = !state.muted;
  if (state.mic) for (const track of state.mic.getAudioTracks()) track.enabled = !muted;
  showMuted(muted);
  send({ type: "mute", muted });
}

window.addEventListener("DOMContentLoaded", () => {
  $("connect").addEventListener("click", () => (state.pc ? hangUp(true) : connect()));
  $("mute").addEventListener("click", toggleMute);
  const audio = $("remote");
  const playback = (playing) => {
    state.playing = playing;
    send({ type: "playback", playing });
  };
  audio.addEventListener("playing", () => playback(true));
  audio.addEventListener("pause", () => playback(false));
  document.addEventListener("click", () => { if (audio.paused && audio.srcObject) audio.play(); });
  if (!token()) notice("This page needs the token: open the full URL the server printed.");
});
window.addEventListener("pagehide", () => { if (state.pc) hangUp(true); });
