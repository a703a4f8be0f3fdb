// newsmon moderation console: the queue, one article, the labels page. Plain JavaScript, no dependency; talks
// only to this origin (/console/api/*, /console/events).
"use strict";

(function () {
  const page = document.body.dataset.page;
  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));

  function say(text) {
    const live = $("#live");
    if (live) { live.textContent = ""; setTimeout(() => { live.textContent = text; }, 30); }
  }

  async function api(method, url, body) {
    const opts = { method, credentials: "same-origin", headers: { "X-Newsmon-Console": "1" } };
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    const r = await fetch(url, opts);
    let data = null;
    try { data = await r.json(); } catch (e) { data = null; }
    if (r.status === 401) { location.href = "/console/login?next=" + encodeURIComponent(location.pathname); }
    if (!r.ok) { throw new Error((data && data.detail) || ("HTTP " + r.status)); }
    return data;
  }

  function typing(ev) {
    const t = ev.target;
    return t && (t.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(t.tagName)) &&
      !(t.type === "checkbox" || t.type === "radio");
  }

  function listen(handlers) {
    if (!window.EventSource) { return; }
    const es = new EventSource("/console/events?after=" + encodeURIComponent(document.body.dataset.after || "0"));
    for (const [name, fn] of Object.entries(handlers)) {
      es.addEventListener(name, (e) => fn(JSON.parse(e.data)));
    }
  }

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") { e.className = v; } else if (k.startsWith("data-")) { e.setAttribute(k, v); } else { e[k] = v; }
    }
    for (const c of children) { if (c !== null && c !== undefined) { e.append(c); } }
    return e;
  }

  // -- the queue ------------------------------------------------------------------------------------------
  function queuePage() {
    const list = $("#queue");
    const form = $("#filters");
    const filters = () => ({ lang: $("#f-lang").value, outlet: $("#f-outlet").value,
                             label: $("#f-label").value.trim().toLowerCase() });
    const passes = (it) => {
      const f = filters();
      const names = it.labels.map((x) => x.label).concat(it.candidates);
      return (!f.lang || it.lang === f.lang) && (!f.outlet || it.outlet === f.outlet) &&
        (!f.label || names.some((n) => n.includes(f.label)));
    };
    const stateText = (d) => d ? "Decided by " + d.moderator + (d.applied ? " · applied" : "") : "";

    function row(it) {
      const labels = el("span", { class: "labels" });
      if (it.labels.length === 0) { labels.append(el("span", { class: "none" }, "no label proposed")); }
      for (const x of it.labels) {
        labels.append(el("span", { class: "chip " + x.source }, x.label + " ", el("small", {}, x.score.toFixed(2))), " ");
      }
      const when = el("time", { dateTime: it.produced_at }, it.produced_at.slice(0, 19).replace("T", " "));
      const meta = el("span", { class: "meta" }, (it.outlet || "?") + " · " + (it.lang || "?") + " · ", when,
                      it.duplicate_of ? " · near-copy" : "");
      const a = el("a", { class: "open", href: "/console/articles/" + encodeURIComponent(it.article_id) },
                   el("span", { class: "title" }, it.title || it.article_id), meta, labels,
                   el("span", { class: "state" }, stateText(it.decided)));
      return el("li", { class: "item fresh" + (it.decided ? " decided" : ""), "data-id": it.article_id,
                        "data-lang": it.lang || "", "data-outlet": it.outlet || "" }, a);
    }

    const find = (id) => $$("li.item", list).find((li) => li.dataset.id === id);
    listen({
      proposal: (ev) => {
        const it = ev.item;
        const old = find(it.article_id);
        if (old) { old.remove(); }
        if (!passes(it)) { return; }
        list.prepend(row(it));
        $("#empty").hidden = true;
        $("#count").textContent = $$("li.item", list).length;
        say("New proposal: " + (it.title || it.article_id));
      },
      decided: (ev) => {
        const li = find(ev.article_id);
        if (li) { li.classList.add("decided"); $(".state", li).textContent = "Decided by " + ev.moderator; }
      },
      applied: (ev) => {
        const li = find(ev.article_id);
        if (li) { const s = $(".state", li); if (!s.textContent.includes("applied")) { s.textContent += " · applied"; } }
      },
    });

    for (const sel of ["#f-lang", "#f-outlet"]) { $(sel).addEventListener("change", () => form.submit()); }

    const links = () => $$("li.item a.open", list);
    document.addEventListener("keydown", (ev) => {
      if (ev.ctrlKey || ev.metaKey || ev.altKey) { return; }
      if (typing(ev)) { if (ev.key === "Escape") { ev.target.blur(); } return; }
      const all = links();
      const i = all.indexOf(document.activeElement);
      if (ev.key === "j" || ev.key === "ArrowDown") {
        ev.preventDefault();
        (all[Math.min(i + 1, all.length - 1)] || all[0])?.focus();
      } else if (ev.key === "k" || ev.key === "ArrowUp") {
        ev.preventDefault();
        (all[Math.max(i - 1, 0)])?.focus();
      } else if (ev.key === "Enter" && i < 0 && all.length) {
        ev.preventDefault();
        location.href = all[0].href;
      } else if (ev.key === "n") {
        const open = $$("li.item:not(.decided) a.open", list)[0];
        if (open) { location.href = open.href; }
      } else if (ev.key === "/") {
        ev.preventDefault();
        $("#f-label").focus();
      }
    });
  }

  // -- one article ----------------------------------------------------------------------------------------
  function articlePage() {
    const state = JSON.parse($("#state").textContent);
    const status = $("#status");
    const banner = $("#decided");
    const added = $("#added");
    const search = $("#search");
    const results = $("#search-results");
    const me = { pending: false, t0: 0, decidedAt: null };

    function setStatus(text, st) {
      status.textContent = text;
      status.dataset.state = st;
    }

    function addLabel(name) {
      name = (name || "").trim().toLowerCase();
      if (!name) { return; }
      if (state.labels.includes(name)) {
        const box = $$("#proposed input[type=checkbox]").find((b) => b.dataset.label === name);
        if (box) { box.checked = true; }
        say(name + " kept");
        return;
      }
      if ($$("li", added).some((li) => li.dataset.label === name)) { return; }
      const remove = el("button", { type: "button", class: "remove", ariaLabel: "Remove " + name }, "×");
      const li = el("li", { "data-label": name }, el("span", { class: "chip added" }, "+ " + name), " ", remove);
      remove.addEventListener("click", () => { li.remove(); syncCandidates(); say(name + " not added"); });
      added.append(li);
      syncCandidates();
      say(name + " will be added");
    }

    function toggleAdded(name) {
      const li = $$("li", added).find((x) => x.dataset.label === name);
      if (li) { li.remove(); syncCandidates(); say(name + " not added"); } else { addLabel(name); }
    }

    function syncCandidates() {
      const names = $$("li", added).map((li) => li.dataset.label);
      for (const b of $$(".candidates button.add")) { b.setAttribute("aria-pressed", String(names.includes(b.dataset.label))); }
    }

    function decisions() {
      const out = [];
      for (const b of $$("#proposed input[type=checkbox]")) {
        out.push({ label: b.dataset.label, action: b.checked ? "confirmed" : "rejected" });
      }
      for (const li of $$("li", added)) { out.push({ label: li.dataset.label, action: "added" }); }
      return out;
    }

    async function confirm(t0) {
      const d = decisions();
      if (d.length === 0) {
        setStatus("Nothing to decide: add a label (a), or go to the next article (n).", "idle");
        return;
      }
      me.pending = true;
      me.t0 = t0;
      setStatus("Sending the decision…", "sending");
      try {
        const r = await api("POST", "/console/api/decide", { article_id: state.article_id, decisions: d });
        status.dataset.ackMs = String(Math.round(performance.now() - t0));
        me.decidedAt = r.decided_at;
        if (r.next) { state.next = r.next; }
        if (status.dataset.state === "sending") { setStatus("Decided: waiting for the memory to apply it…", "sent"); }
      } catch (e) {
        me.pending = false;
        setStatus("Not decided: " + e.message, "error");
      }
    }

    function showDecided(ev, applied) {
      banner.hidden = false;
      const when = ev.decided_at ? " at " + ev.decided_at.slice(0, 19).replace("T", " ") + " UTC" : "";
      const what = ev.decisions ? ": " + ev.decisions.map((x) => x.action + " " + x.label).join(", ") : "";
      if (!applied) { banner.textContent = "Decided by " + ev.moderator + when + what; }
      else if (!banner.textContent.includes("applied")) { banner.textContent += " · applied by the memory"; }
    }

    for (const b of $$(".candidates button.add")) { b.addEventListener("click", () => toggleAdded(b.dataset.label)); }
    $("#confirm").addEventListener("click", () => confirm(performance.now()));
    $("#next").addEventListener("click", () => goNext());

    function goNext() { location.href = state.next ? "/console/articles/" + encodeURIComponent(state.next) : "/console"; }

    listen({
      decided: (ev) => { if (ev.article_id === state.article_id) { showDecided(ev, false); } },
      applied: (ev) => {
        if (ev.article_id !== state.article_id) { return; }
        showDecided(ev, true);
        if (me.pending) {
          me.pending = false;
          const ms = Math.round(performance.now() - me.t0);
          status.dataset.ms = String(ms);
          status.dataset.memoryMs = String(Math.round(1000 * (ev.seconds || 0)));
          setStatus("Applied by the memory " + (ms / 1000).toFixed(2) + " s after the key press. n: next article.",
                    "applied");
        }
      },
      not_applied: (ev) => {
        if (ev.article_id === state.article_id && me.pending) { me.pending = false; setStatus(ev.reason, "error"); }
      },
      proposal: (ev) => {
        if (ev.item.article_id === state.article_id) { say("A newer proposal for this article arrived: reload to see it."); }
      },
    });

    // label search (a combobox)
    let options = [], active = -1, timer = null;
    function render() {
      results.replaceChildren(...options.map((name, i) => {
        const li = el("li", { role: "option", id: "opt-" + i, "data-label": name }, name);
        li.setAttribute("aria-selected", String(i === active));
        li.addEventListener("mousedown", (e) => { e.preventDefault(); addLabel(name); search.value = ""; options = []; render(); });
        return li;
      }));
      search.setAttribute("aria-expanded", String(options.length > 0));
      if (active >= 0) { search.setAttribute("aria-activedescendant", "opt-" + active); } else { search.removeAttribute("aria-activedescendant"); }
    }
    search.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(async () => {
        const q = search.value.trim();
        if (!q) { options = []; active = -1; render(); return; }
        try { options = (await api("GET", "/console/api/labels?q=" + encodeURIComponent(q))).labels; } catch (e) { options = []; }
        active = options.length ? 0 : -1;
        render();
      }, 120);
    });
    search.addEventListener("keydown", (ev) => {
      if (ev.key === "ArrowDown") { ev.preventDefault(); active = Math.min(active + 1, options.length - 1); render(); }
      else if (ev.key === "ArrowUp") { ev.preventDefault(); active = Math.max(active - 1, 0); render(); }
      else if (ev.key === "Enter") {
        ev.preventDefault();
        addLabel(active >= 0 ? options[active] : search.value);
        search.value = ""; options = []; active = -1; render();
      } else if (ev.key === "Escape") { search.value = ""; options = []; render(); search.blur(); }
    });

    document.addEventListener("keydown", (ev) => {
      if (ev.ctrlKey || ev.metaKey || ev.altKey || typing(ev)) { return; }
      const t = ev.target;
      if (ev.code && ev.code.startsWith("Digit") && ev.code !== "Digit0") {
        const n = Number(ev.code.slice(5)) - 1;
        ev.preventDefault();
        if (ev.shiftKey) {
          const b = $$(".candidates button.add")[n];
          if (b) { toggleAdded(b.dataset.label); }
        } else {
          const box = $$("#proposed input[type=checkbox]")[n];
          if (box) { box.checked = !box.checked; say(box.dataset.label + (box.checked ? " kept" : " will be rejected")); }
        }
      } else if (ev.key === "c" || (ev.key === "Enter" && !(t && ["BUTTON", "A"].includes(t.tagName)))) {
        ev.preventDefault();
        confirm(performance.now());
      } else if (ev.key === "a" || ev.key === "/") {
        ev.preventDefault();
        search.focus();
      } else if (ev.key === "n") {
        goNext();
      } else if (ev.key === "Escape") {
        location.href = "/console";
      }
    });
  }

  // -- labels ---------------------------------------------------------------------------------------------
  function labelsPage() {
    const form = $("#label-form");
    const name = $("#l-name"), kwes = $("#l-kwes"), desc = $("#l-desc"), newName = $("#l-new");
    const errorBox = $("#l-kwe-error"), summary = $("#l-test-summary"), matches = $("#l-test");
    const status = $("#l-status");
    const n = Number(form.dataset.articles) || 50;
    let timer = null, seq = 0;

    function fill(a) {
      name.value = a.dataset.label;
      kwes.value = a.dataset.kwes;
      desc.value = a.dataset.description;
      test();
    }
    for (const a of $$("a.edit")) {
      a.addEventListener("click", (ev) => { ev.preventDefault(); fill(a); history.replaceState(null, "", a.href); name.focus(); });
      if (a.dataset.label === form.dataset.selected) { fill(a); }
    }

    const lines = () => kwes.value.split("\n").map((text, line) => ({ text, line })).filter((x) => x.text.trim());

    async function test() {
      const mine = ++seq;
      const ls = lines();
      if (!ls.length) { errorBox.replaceChildren(); kwes.removeAttribute("aria-invalid"); summary.textContent = "Type an expression to test it."; matches.replaceChildren(); return; }
      let r;
      try {
        r = await api("POST", "/console/api/labels/test", { label: name.value || "rule-under-test", kwes: ls.map((x) => x.text), articles: n });
      } catch (e) { if (mine === seq) { summary.textContent = "Not tested: " + e.message; } return; }
      if (mine !== seq) { return; }
      if (r.errors.length) {
        kwes.setAttribute("aria-invalid", "true");
        errorBox.replaceChildren(...r.errors.map((e) => {
          const at = ls[e.index];
          const caret = " ".repeat(e.position) + "^";
          return el("div", { class: "kwe-error", "data-position": String(e.position), "data-line": String(at.line + 1) },
                    el("p", {}, "Line " + (at.line + 1) + ", column " + (e.position + 1) + ": " + e.reason),
                    el("pre", {}, e.expression + "\n" + caret));
        }));
        summary.textContent = "Not tested: fix the expression first.";
        matches.replaceChildren();
        return;
      }
      kwes.removeAttribute("aria-invalid");
      errorBox.replaceChildren();
      summary.textContent = "Matches " + r.matched.length + " of the last " + r.tested + " articles" +
        (r.kwe_matched !== r.matched.length ? " (" + r.kwe_matched + " before the filters)" : "") + ".";
      matches.replaceChildren(...r.matched.map((m) => {
        const words = el("span", { class: "words" });
        m.words.forEach((w, i) => { if (i) { words.append(", "); } words.append(el("mark", {}, w)); });
        return el("li", {}, el("span", { class: "title" }, m.title || m.article_id || "(text)"), " ",
                  el("span", { class: "meta" }, m.outlet || ""), " ", words);
      }));
    }
    kwes.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(test, 250); });

    const path = () => "/console/api/labels/" + encodeURIComponent(name.value.trim());
    async function act(what, fn) {
      if (!name.value.trim()) { status.textContent = "Enter the label's name first."; name.focus(); return; }
      try {
        const r = await fn();
        status.textContent = !r.event ? what + ": nothing to change (" + r.note + ")." :
          what + ": " + r.event.action + " " + r.event.label + (r.event.new_label ? " → " + r.event.new_label : "") +
          (r.applied ? " published and applied." : " published; the memory updater applies it within a moment.");
        setTimeout(() => location.reload(), 1500);
      } catch (e) { status.textContent = what + " refused: " + e.message; }
    }
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      act("Saved", () => api("PUT", path(), { kwes: lines().map((x) => x.text), description: desc.value }));
    });
    $("#l-rename").addEventListener("click", () => act("Renamed", () => api("POST", path() + "/rename", { new_label: newName.value })));
    $("#l-retire").addEventListener("click", () => {
      if (window.confirm("Retire " + name.value + "? It is never proposed again.")) { act("Retired", () => api("DELETE", path())); }
    });
  }

  if (page === "queue") { queuePage(); }
  else if (page === "article") { articlePage(); }
  else if (page === "labels") { labelsPage(); }
})();
