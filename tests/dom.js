"use strict";
// A small DOM for rendering a page's script under node (no browser needed), for the tests of what
// the study report and the episode viewer draw: node tests/dom.js INPUT.json runs the scripts
// named in INPUT ({"scripts": [paths], "data_id": id, "data": {...}}) against a document whose
// element `data_id` holds the data as JSON, and prints every element reached from the
// document's elements (by id) as a JSON tree: tag, id, class, attributes, text, children. INPUT's
// optional "actions" ([{id, value, event}]) are done first, as a reader would: the element's value
// set, then its listener of that event called (the viewer's step box: "change").
const fs = require("fs");
const vm = require("vm");

class Node {
  constructor(tag) {
    this.tagName = tag; this.attrs = {}; this.childNodes = []; this.parentElement = null;
    this.className = ""; this.hidden = false; this.value = ""; this.listeners = {}; this.dataset = {};
    const self = this;
    this.classList = {
      toggle(name, on) { const s = new Set(self.className.split(" ").filter(Boolean)); (on ? s.add(name) : s.delete(name)); self.className = [...s].join(" "); },
    };
  }
  setAttribute(k, v) { if (k === "class") this.className = String(v); else this.attrs[k] = String(v); }
  getAttribute(k) { return this.attrs[k]; }
  addEventListener(type, fn) { this.listeners[type] = fn; }
  append(...children) {
    for (const c of children) {
      if (c === null || c === undefined) continue;
      if (c instanceof Node) { c.parentElement = this; this.childNodes.push(c); } else this.childNodes.push(String(c));
    }
  }
  replaceChildren(...children) { this.childNodes = []; this.append(...children); }
  get childElementCount() { return this.childNodes.filter((c) => c instanceof Node).length; }
  set textContent(v) { this.childNodes = v === "" ? [] : [String(v)]; }
  get textContent() { return this.childNodes.map((c) => (c instanceof Node ? c.textContent : c)).join(""); }
  toJSON() {
    return { tag: this.tagName, id: this.attrs.id || null, class: this.className, attrs: this.attrs,
             hidden: this.hidden, text: this.textContent,
             children: this.childNodes.filter((c) => c instanceof Node).map((c) => c.toJSON()) };
  }
}

const input = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const byId = new Map();
const holder = new Node("body");
const document = {
  createElement: (tag) => new Node(tag),
  createElementNS: (ns, tag) => new Node(tag),
  getElementById(id) {
    if (!byId.has(id)) { const n = new Node("div"); n.attrs.id = id; holder.append(n); byId.set(id, n); }
    return byId.get(id);
  },
  querySelectorAll: () => [],
  body: holder,
};
document.getElementById(input.data_id).textContent = JSON.stringify(input.data);
const context = { document, Node, window: {}, performance: { now: () => 0 }, console, JSON, Math, Object, Set, Map,
                  Array, String, Number, parseInt, parseFloat, isNaN, Infinity, NaN };
vm.createContext(context);
vm.runInContext(input.scripts.map((p) => fs.readFileSync(p, "utf8")).join("\n;\n"), context);
for (const action of input.actions || []) {
  const node = document.getElementById(action.id);
  node.value = action.value;
  node.listeners[action.event]({ target: node });
}
process.stdout.write(JSON.stringify(holder.toJSON()));
