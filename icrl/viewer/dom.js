"use strict";
// Shared by the episode viewer and the study report (icrl/viewer/page.py puts it before either
// page's script): el(tag, attributes, ...children) makes an element; an "on..." attribute is a
// listener, a child that is not a node becomes text, null and undefined children are skipped.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}
