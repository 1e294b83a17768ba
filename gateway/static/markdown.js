// A small markdown renderer for agent answers: HTML is escaped first, so nothing the model
// writes can become markup except what these rules produce.
(function () {
  "use strict";
  function escapeHtml(text) {
    return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
  }
  function inline(text) {
    const codes = [];
    text = text.replace(/`([^`]+)`/g, (_, code) => { codes.push(code); return "\u0000" + (codes.length - 1) + "\u0000"; });
    text = text
      .replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
      .replace(/(^|[^*])\*([^*\s][^*]*)\*/g, "$1<em>$2</em>")
      .replace(/\[([^\]]+)\]\((https?:\/\/[^\s)]+)\)/g, '<a href="$2" rel="noopener noreferrer" target="_blank">$1</a>');
    return text.replace(/\u0000(\d+)\u0000/g, (_, i) => "<code>" + codes[Number(i)] + "</code>");
  }
  function render(source) {
    const lines = escapeHtml(source).split("\n");
    const out = [];
    let paragraph = [], list = null, code = null;
    const flushParagraph = () => { if (paragraph.length) { out.push("<p>" + inline(paragraph.join(" ")) + "</p>"); paragraph = []; } };
    const flushList = () => { if (list) { out.push("<" + list.tag + ">" + list.items.map((i) => "<li>" + inline(i) + "</li>").join("") + "</" + list.tag + ">"); list = null; } };
    for (const line of lines) {
      if (code !== null) {
        if (/^```/.test(line)) { out.push("<pre><code>" + code.join("\n") + "</code></pre>"); code = null; } else { code.push(line); }
        continue;
      }
      let m;
      if (/^```/.test(line)) { flushParagraph(); flushList(); code = []; }
      else if ((m = /^(#{1,6})\s+(.*)$/.exec(line))) { flushParagraph(); flushList(); out.push("<h" + m[1].length + ">" + inline(m[2]) + "</h" + m[1].length + ">"); }
      else if ((m = /^\s*[-*]\s+(.*)$/.exec(line))) { flushParagraph(); if (!list || list.tag !== "ul") { flushList(); list = { tag: "ul", items: [] }; } list.items.push(m[1]); }
      else if ((m = /^\s*\d+[.)]\s+(.*)$/.exec(line))) { flushParagraph(); if (!list || list.tag !== "ol") { flushList(); list = { tag: "ol", items: [] }; } list.items.push(m[1]); }
      else if (line.trim() === "") { flushParagraph(); flushList(); }
      else { flushList(); paragraph.push(line.trim()); }
    }
    if (code !== null) out.push("<pre><code>" + code.join("\n") + "</code></pre>");
    flushParagraph(); flushList();
    return out.join("\n");
  }
  window.ShuttleMarkdown = { render: render, escapeHtml: escapeHtml };
})();
