// Model output as safe HTML: marked (GFM) renders, DOMPurify removes anything that could run or load (scripts,
// event handlers, javascript: URLs, forms, styles). The page's Content-Security-Policy is the second wall.
import { marked } from '../vendor/marked.esm.js';
import DOMPurify from '../vendor/purify.es.mjs';
import { h } from './util.js';

marked.setOptions({ gfm: true, breaks: false, async: false });

DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A') {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});

const PURIFY = {
  USE_PROFILES: { html: true },
  FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'iframe', 'object', 'embed'],
  FORBID_ATTR: ['style'],
};

export function renderMarkdown(el, text) {
  el.innerHTML = DOMPurify.sanitize(marked.parse(text), PURIFY);
  for (const pre of el.querySelectorAll('pre')) {
    const code = pre.querySelector('code') || pre;
    const button = h('button', { type: 'button', class: 'copy', title: 'copy the code' }, 'Copy');
    button.addEventListener('click', async () => {
      try {
        await navigator.clipboard.writeText(code.textContent);
        button.textContent = 'Copied';
      } catch {
        button.textContent = 'Copy failed';
      }
      setTimeout(() => { button.textContent = 'Copy'; }, 1500);
    });
    pre.classList.add('code');
    pre.prepend(button);
  }
}
