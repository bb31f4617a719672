// pgkb's web interface: the few things that need a script. Every page works without it
// (the graph's pan and zoom and a streamed answer are what it adds). No inline script runs:
// the Content-Security-Policy allows this file only.
"use strict";

(function () {
  function onReady(fn) {
    if (document.readyState !== "loading") fn();
    else document.addEventListener("DOMContentLoaded", fn);
  }

  // --- the documents list: a changed menu applies at once -----------------------------------
  function autoSubmit() {
    var form = document.getElementById("list-filters");
    if (!form) return;
    form.querySelectorAll("select").forEach(function (select) {
      select.addEventListener("change", function () { form.submit(); });
    });
  }

  // --- the graph: pan (drag) and zoom (wheel, buttons) --------------------------------------
  function panZoom() {
    var svg = document.getElementById("graph");
    if (!svg) return;
    var view = svg.querySelector("g.viewport");
    var tools = document.querySelector(".graph-tools");
    if (tools) tools.hidden = false;
    var state = { x: 0, y: 0, k: 1 };
    var drag = null;
    var moved = false;

    function apply() {
      view.setAttribute("transform",
        "translate(" + state.x.toFixed(1) + " " + state.y.toFixed(1) + ") scale(" + state.k.toFixed(3) + ")");
      svg.classList.toggle("zoomed", state.k >= 1.8);
    }
    function point(evt) {
      var p = svg.createSVGPoint();
      p.x = evt.clientX; p.y = evt.clientY;
      return p.matrixTransform(svg.getScreenCTM().inverse());
    }
    function zoomAt(cx, cy, factor) {
      var k = Math.min(12, Math.max(0.4, state.k * factor));
      factor = k / state.k;
      state.x = cx - (cx - state.x) * factor;
      state.y = cy - (cy - state.y) * factor;
      state.k = k;
      apply();
    }
    svg.addEventListener("wheel", function (evt) {
      evt.preventDefault();
      var p = point(evt);
      zoomAt(p.x, p.y, evt.deltaY < 0 ? 1.15 : 1 / 1.15);
    }, { passive: false });
    svg.addEventListener("pointerdown", function (evt) {
      if (evt.button !== 0) return;
      var p = point(evt);
      drag = { x: p.x, y: p.y, sx: state.x, sy: state.y, id: evt.pointerId };
      moved = false;
    });
    svg.addEventListener("pointermove", function (evt) {
      if (!drag) return;
      var p = point(evt);
      var dx = p.x - drag.x, dy = p.y - drag.y;
      if (!moved && Math.abs(dx) + Math.abs(dy) < 4) return;
      if (!moved) { moved = true; svg.classList.add("dragging"); svg.setPointerCapture(drag.id); }
      state.x = drag.sx + dx; state.y = drag.sy + dy;
      apply();
    });
    function end() {
      drag = null;
      svg.classList.remove("dragging");
    }
    svg.addEventListener("pointerup", end);
    svg.addEventListener("pointercancel", end);
    // a drag that ends on a document does not open it
    svg.addEventListener("click", function (evt) {
      if (moved) { evt.preventDefault(); moved = false; }
    }, true);
    document.querySelectorAll("[data-zoom]").forEach(function (button) {
      button.addEventListener("click", function () {
        var w = Number(svg.dataset.width), h = Number(svg.dataset.height);
        var how = button.dataset.zoom;
        if (how === "reset") { state = { x: 0, y: 0, k: 1 }; apply(); }
        else zoomAt(w / 2, h / 2, how === "in" ? 1.4 : 1 / 1.4);
      });
    });
  }

  // --- ask: the answer streams in as the chat model writes it -------------------------------
  function streamedAsk() {
    var form = document.getElementById("ask-form");
    var target = document.getElementById("answer");
    if (!form || !target || form.dataset.streams !== "yes" || !window.EventSource) return;
    form.addEventListener("submit", function (evt) {
      var params = new URLSearchParams(new FormData(form));
      if (!(params.get("q") || "").trim()) return;
      evt.preventDefault();
      var query = params.toString();
      history.replaceState(null, "", "/ask?" + query);
      target.textContent = "";
      var section = document.createElement("section");
      section.className = "answer streaming";
      var heading = document.createElement("h2");
      heading.textContent = "Answer";
      var text = document.createElement("div");
      text.className = "answer-text";
      section.appendChild(heading);
      section.appendChild(text);
      target.appendChild(section);
      var received = false;
      var source = new EventSource("/ask/stream?" + query);
      source.addEventListener("text", function (e) {
        received = true;
        text.textContent += JSON.parse(e.data);
      });
      source.addEventListener("done", function (e) {
        received = true;
        source.close();
        // the checked answer, rendered (and escaped) by the server's template
        target.innerHTML = JSON.parse(e.data);
      });
      source.addEventListener("failed", function (e) {
        received = true;
        source.close();
        section.classList.remove("streaming");
        var p = document.createElement("p");
        p.className = "error";
        p.textContent = JSON.parse(e.data);
        section.appendChild(p);
      });
      source.onerror = function () {
        source.close();
        if (!received) window.location.assign("/ask?" + query);  // the page without streaming
      };
    });
  }

  onReady(function () {
    autoSubmit();
    panZoom();
    streamedAsk();
  });
})();
