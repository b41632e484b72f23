// keymem ui: key space on the left, value (memory) space on the right. A memory's keys are
// chips; a chip opens that key's other memories, so a walk is one click per step. Text from
// the store is only ever set as textContent (never parsed as HTML).
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  ns: null,
  keys: [], keysTitle: "Keys", selected: null, keysNext: null, memoriesPage: null,
  trail: [], reload: null,
  view: 0,  // bumped by every navigation: a reply for an older one is not shown
};

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name.startsWith("data-")) node.setAttribute(name, value);
    else node[name] = value;
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

async function api(path, params = {}, post = null) {
  const url = new URL(path, location.origin);
  if (state.ns) url.searchParams.set("ns", state.ns);
  for (const [name, value] of Object.entries(params)) url.searchParams.set(name, value);
  const init = post === null ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(post),
  };
  const response = await fetch(url, init);
  if (response.status === 401) throw new Error(await response.text());
  const body = await response.json();
  if (!response.ok) throw new Error(`${body.error}: ${body.message}`);
  return body;
}

function notify(text, isError = false) {
  const notice = $("notice");
  notice.textContent = text;
  notice.className = isError ? "error" : "";
  notice.hidden = !text;
}

// Run a page action; a failure shows in the notice bar instead of vanishing in the console.
async function guarded(action) {
  try {
    await action();
  } catch (error) {
    notify(error.message, true);
  }
}

function validityOf(memory) {
  if (memory.superseded_by || memory.active === false) return "superseded";
  return memory.validity.status === "fresh" ? "current" : memory.validity.status;
}

function badges(key) {
  return [
    el("span", { class: "count", text: String(key.memory_count), title: "active memories" }),
    key.is_hub ? el("span", { class: "hub", text: "hub", title: "a hub: many memories" }) : null,
  ];
}

// ---- the trail: each step of the walk, clickable to go back ------------------------------

function step(label, load) {
  const at = state.trail.findIndex((s) => s.label === label);
  if (at >= 0) state.trail = state.trail.slice(0, at);
  state.trail.push({ label, load });
  state.reload = load;
  $("trail").replaceChildren(...state.trail.map((s) => el("li", {},
    el("button", { type: "button", text: s.label, onclick: () => guarded(s.load) }))));
}

function restart(label, load) {
  state.trail = [];
  step(label, load);
}

// ---- key space ---------------------------------------------------------------------------

function renderKeys() {
  $("keys-title").textContent = state.keysTitle;
  const items = state.keys.map((key) => el("li", {},
    el("button", {
      type: "button",
      class: key.key_id === state.selected ? "key selected" : "key",
      "data-key-id": key.key_id,
      "data-concept": key.concept,
      title: key.aliases && key.aliases.length ? `aliases: ${key.aliases.join(", ")}` : key.key_type,
      onclick: () => guarded(() => openKey(key)),
    },
    el("span", { class: "concept", text: key.concept }),
    key.match_type ? el("span", { class: "how", text: key.match_type }) : null,
    ...badges(key))));
  $("keys").replaceChildren(...(items.length ? items : [el("li", { class: "empty", text: "no keys" })]));
  $("more-keys").hidden = state.keysNext === null;
}

function showKeys(title, keys, next = null) {
  Object.assign(state, { keysTitle: title, keys, keysNext: next, selected: null });
  renderKeys();
}

// A view's reply, or null when another navigation began while it was on its way.
async function latest(call) {
  const mine = ++state.view;
  const reply = await call;
  return mine === state.view ? reply : null;
}

async function browse() {
  const hubs = $("hubs-only").checked ? "1" : "0";
  const replies = await latest(Promise.all([api("/api/keys", { hubs }), api("/api/memories")]));
  if (!replies) return;
  const [keys, newest] = replies;
  showKeys(`Keys in ${keys.namespace}: ${keys.key_count}`, keys.keys, keys.next_offset);
  showMemories(`Newest memories in ${newest.namespace}: ${newest.total}`, newest.memories, null,
    "No memory in this namespace yet.", nextPage("/api/memories", newest, null));
}

async function moreKeys() {
  const reply = await api("/api/keys", {
    hubs: $("hubs-only").checked ? "1" : "0", offset: state.keysNext,
  });
  state.keys = state.keys.concat(reply.keys);
  state.keysNext = reply.next_offset;
  renderKeys();
}

async function search(query) {
  const reply = await latest(api("/api/search", { q: query }));
  if (!reply) return;
  showKeys(`Keys for “${query}”`, reply.keys);
  const note = reply.keys.length ? "" :
    `No key matches; nearest: ${reply.nearest_keys.map((k) => k.concept).join(", ") || "none"}`;
  showMemories(`Memories for “${query}”`, reply.memories, null, "No memory matches.");
  notify(note);
}

// ---- value space -------------------------------------------------------------------------

async function openKey(key) {
  const path = `/api/keys/${encodeURIComponent(key.key_id)}`;
  const reply = await latest(api(path));
  if (!reply) return;
  const shown = reply.key;
  if (!state.keys.some((k) => k.key_id === shown.key_id)) state.keys = [shown, ...state.keys];
  state.selected = shown.key_id;
  renderKeys();
  step(shown.concept, () => openKey(shown));
  showMemories(`Memories under “${shown.concept}”: ${reply.total}`, reply.memories, shown,
    "No active memory under this key.", nextPage(path, reply, shown));
  notify("");
}

// The next page of the memory list: where to ask and under which key, or null at the end.
function nextPage(path, reply, viaKey) {
  return reply.next_offset === null ? null : { path, offset: reply.next_offset, viaKey };
}

function showMemories(title, memories, viaKey, emptyText, page = null) {
  $("memories-title").textContent = title;
  drawGraph(memories, viaKey);
  const cards = memories.map((memory) => memoryCard(memory, viaKey));
  $("memories").replaceChildren(...(cards.length ? cards : [el("p", { class: "empty", text: emptyText })]));
  state.memoriesPage = page;
  $("more-memories").hidden = page === null;
}

async function moreMemories() {
  const { path, offset, viaKey } = state.memoriesPage;
  const reply = await api(path, { offset });
  $("memories").append(...reply.memories.map((memory) => memoryCard(memory, viaKey)));
  state.memoriesPage = nextPage(path, reply, viaKey);
  $("more-memories").hidden = state.memoriesPage === null;
}

// What the graph flagged for a look (a write that clashed, sleep's findings); never deleted.
const FLAGS = [["contradicts", "contradicts"], ["near_duplicates", "near-duplicate of"]];

function flags(memory) {
  return FLAGS.filter(([field]) => memory[field] && memory[field].length).map(([field, label]) =>
    el("span", { class: "flag", "data-flag": field, text: `${label} ${memory[field].join(", ")}` }));
}

function memoryCard(memory, viaKey) {
  const validity = validityOf(memory);
  const card = el("article", { class: `memory v-${validity}`, "data-memory-id": memory.id });
  const age = memory.validity.age_days;
  const meta = el("div", { class: "meta" },
    el("span", { class: "validity", text: validity }),
    el("span", { text: `${age < 1 ? "today" : `${Math.round(age)} days old`}` }),
    el("span", { text: `depth ${memory.depth}` }),
    memory.via_link_weight !== undefined ? el("span", { text: `link ${memory.via_link_weight}` }) : null,
    memory.hop !== undefined ? el("span", { text: memory.hop ? `hop ${memory.hop}` : "direct" }) : null,
    el("span", { text: `id ${memory.id}` }),
    ...flags(memory));
  const chips = el("div", { class: "chips" }, ...memory.keys.map((key) => {
    const classes = ["key-chip"];
    if (viaKey && key.key_id === viaKey.key_id) classes.push("here");
    if (key.is_hub) classes.push("is-hub");
    return el("button", {
      type: "button", class: classes.join(" "), "data-key-id": key.key_id,
      "data-concept": key.concept, title: `link weight ${key.link_weight}`,
      onclick: () => guarded(() => openKey(key)),
    }, el("span", { text: key.concept }), ...badges(key));
  }));
  const panel = el("div");
  const actions = el("div", { class: "actions" },
    el("button", { type: "button", text: "Confirm", title: "you checked it: it is current",
      onclick: () => guarded(() => change(memory, "confirm", {}, "confirmed")) }),
    el("button", { type: "button", text: "Correct…", onclick: () => editor(memory, panel) }),
    viaKey ? el("button", {
      type: "button", text: `Dismiss from “${viaKey.concept}”`,
      title: "this key led to an irrelevant memory: weaken that one link",
      onclick: () => guarded(() => change(memory, "dismiss", { key_id: viaKey.key_id }, "dismissed")),
    }) : null,
    el("button", { type: "button", text: "History", onclick: () => guarded(() => history(memory, panel)) }),
    el("button", { type: "button", class: "danger", text: "Forget…", onclick: () => askForget(memory, panel) }));
  card.append(el("p", { class: "content", text: memory.content }), meta, chips, actions, panel);
  return card;
}

// ---- the graph: the shown memories (right) and their keys (left), one line per link -----

const SVG = "http://www.w3.org/2000/svg";
const GRAPH = { maxMemories: 12, maxKeys: 16, row: 30, width: 760, keyX: 150, memoryX: 430, labelChars: 44 };

function svg(tag, attributes = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  if (text !== null) node.textContent = text;
  return node;
}

function clip(text, chars) {
  return text.length > chars ? `${text.slice(0, chars - 1)}…` : text;
}

function drawGraph(memories, viaKey) {
  const figure = $("graph");
  const shown = memories.slice(0, GRAPH.maxMemories);
  const keys = new Map();  // key_id -> {key, links}: the keys most of the shown memories share first
  for (const memory of shown) {
    for (const key of memory.keys) {
      const entry = keys.get(key.key_id) ?? { key, links: 0 };
      entry.links += 1;
      keys.set(key.key_id, entry);
    }
  }
  const keyRows = [...keys.values()]
    .sort((a, b) => b.links - a.links || a.key.concept.localeCompare(b.key.concept))
    .slice(0, GRAPH.maxKeys);
  figure.hidden = shown.length === 0;
  figure.replaceChildren();
  if (figure.hidden) return;
  const height = Math.max(keyRows.length, shown.length) * GRAPH.row + GRAPH.row;
  const keyY = new Map(keyRows.map((entry, i) => [entry.key.key_id, GRAPH.row * (i + 1)]));
  const drawing = svg("svg", { viewBox: `0 0 ${GRAPH.width} ${height}`, role: "img",
    "aria-label": "the shown memories and their keys" });
  shown.forEach((memory, i) => {
    const y = GRAPH.row * (i + 1);
    for (const key of memory.keys) {
      if (!keyY.has(key.key_id)) continue;
      drawing.append(svg("line", {
        class: viaKey && key.key_id === viaKey.key_id ? "link here" : "link",
        x1: GRAPH.keyX + 8, y1: keyY.get(key.key_id), x2: GRAPH.memoryX - 8, y2: y,
        "stroke-width": Math.max(1, key.link_weight * 1.5),
      }));
    }
  });
  for (const { key } of keyRows) {
    const y = keyY.get(key.key_id);
    const node = svg("g", { class: `key-node${key.is_hub ? " is-hub" : ""}${viaKey && key.key_id === viaKey.key_id ? " here" : ""}`,
      "data-key-id": key.key_id, "data-concept": key.concept, tabindex: "0", role: "button" });
    node.append(svg("circle", { cx: GRAPH.keyX, cy: y, r: key.is_hub ? 8 : 6 }),
      svg("text", { x: GRAPH.keyX - 14, y: y + 5, "text-anchor": "end" },
        clip(key.concept, 18) + (key.is_hub ? " (hub)" : "")));
    node.addEventListener("click", () => guarded(() => openKey(key)));
    node.addEventListener("keydown", (event) => { if (event.key === "Enter") guarded(() => openKey(key)); });
    drawing.append(node);
  }
  shown.forEach((memory, i) => {
    const y = GRAPH.row * (i + 1);
    const node = svg("g", { class: `memory-node v-${validityOf(memory)}`, "data-memory-id": memory.id });
    node.append(svg("rect", { x: GRAPH.memoryX - 7, y: y - 7, width: 14, height: 14, rx: 3 }),
      svg("text", { x: GRAPH.memoryX + 14, y: y + 5 }, clip(memory.content, GRAPH.labelChars)));
    drawing.append(node);
  });
  figure.replaceChildren(drawing);
}

// ---- the four changes, each behind an explicit click ------------------------------------

async function change(memory, action, body, done) {
  const reply = await api(`/api/memories/${encodeURIComponent(memory.id)}/${action}`, {}, body);
  try {
    await state.reload();
  } catch {  // what was shown is gone (a forgotten memory's last key): back to the key list
    await home();
  }
  const extra = reply.new_id ? `: new version ${reply.new_id}` : "";
  notify(`Memory ${memory.id} ${done}${extra}.`);
}

function editor(memory, panel) {
  const text = el("textarea", { value: memory.content, "aria-label": "corrected content" });
  panel.replaceChildren(el("div", { class: "editor" }, text, el("div", { class: "actions" },
    el("button", { type: "button", text: "Save correction",
      onclick: () => guarded(() => change(memory, "correct", { content: text.value }, "corrected")) }),
    el("button", { type: "button", text: "Cancel", onclick: () => panel.replaceChildren() }))));
  text.focus();
}

function askForget(memory, panel) {
  panel.replaceChildren(el("div", { class: "ask" },
    el("span", { text: "Forget this memory and its older versions for good? " }),
    el("button", { type: "button", class: "danger", text: "Yes, forget it",
      onclick: () => guarded(() => change(memory, "forget", {}, "forgotten")) }),
    el("button", { type: "button", text: "Cancel", onclick: () => panel.replaceChildren() })));
}

async function history(memory, panel) {
  const reply = await api(`/api/memories/${encodeURIComponent(memory.id)}`);
  panel.replaceChildren(el("ol", { class: "versions" }, ...reply.versions.map((version) =>
    el("li", { class: `v-${validityOf(version)}`, "data-memory-id": version.id,
      text: `${version.content} (${validityOf(version)}, ${version.id})` }))));
}

// ---- start -------------------------------------------------------------------------------

async function namespaces() {
  const reply = await api("/api/overview");
  const names = Object.keys(reply.namespaces).sort();
  const wanted = new URLSearchParams(location.search).get("ns");
  const busiest = names.reduce((a, b) =>
    (reply.namespaces[b].memories > (reply.namespaces[a]?.memories ?? -1) ? b : a), names[0]);
  state.ns = names.includes(wanted) ? wanted : names.includes("default") ? "default" : busiest || null;
  $("namespace").replaceChildren(...names.map((name) => el("option", {
    value: name, selected: name === state.ns,
    text: `${name} (${reply.namespaces[name].memories})`,
  })));
}

function home() {
  restart(`browse ${state.ns || "default"}`, browse);
  return browse();
}

document.addEventListener("DOMContentLoaded", () => {
  $("search").addEventListener("submit", (event) => {
    event.preventDefault();
    const query = $("query").value.trim();
    if (query) guarded(() => { restart(`search “${query}”`, () => search(query)); return search(query); });
  });
  $("namespace").addEventListener("change", (event) => {
    state.ns = event.target.value;
    guarded(home);
  });
  $("browse").addEventListener("click", () => guarded(home));
  $("hubs-only").addEventListener("change", () => guarded(home));
  $("more-keys").addEventListener("click", () => guarded(moreKeys));
  $("more-memories").addEventListener("click", () => guarded(moreMemories));
  guarded(async () => {
    await namespaces();
    await home();
  });
});
