/**
 * Model output -> safe HTML. Owns the Markdown dialect (GFM, single newlines kept as breaks),
 * code highlighting and sanitizing.
 *
 * Model text is untrusted. Three layers keep it inert:
 * 1. raw HTML in the Markdown is not passed through: it is escaped and shown as text, so the
 *    user sees exactly what the model wrote;
 * 2. images become plain links (an image URL would be fetched without a click, which a prompt
 *    injection could use to send conversation text away);
 * 3. the HTML that marked produces is sanitized by DOMPurify (no scripts, no event handlers,
 *    no `javascript:` or other non-web URLs); links open in a new window without an opener.
 */
import DOMPurify from 'dompurify';
import { Marked, type Tokens } from 'marked';
import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import cpp from 'highlight.js/lib/languages/cpp';
import css from 'highlight.js/lib/languages/css';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import python from 'highlight.js/lib/languages/python';
import rust from 'highlight.js/lib/languages/rust';
import typescript from 'highlight.js/lib/languages/typescript';
import xml from 'highlight.js/lib/languages/xml';

const LANGUAGES = { bash, cpp, css, javascript, json, python, rust, typescript, xml };
for (const [name, language] of Object.entries(LANGUAGES)) hljs.registerLanguage(name, language);
hljs.registerAliases(['sh', 'shell', 'zsh'], { languageName: 'bash' });
hljs.registerAliases(['c', 'h', 'hpp', 'cc'], { languageName: 'cpp' });
hljs.registerAliases(['js', 'jsx', 'mjs'], { languageName: 'javascript' });
hljs.registerAliases(['ts', 'tsx'], { languageName: 'typescript' });
hljs.registerAliases(['py'], { languageName: 'python' });
hljs.registerAliases(['rs'], { languageName: 'rust' });
hljs.registerAliases(['html', 'svg'], { languageName: 'xml' });

export function escapeHtml(text: string): string {
  return text
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

const marked = new Marked({
  gfm: true,
  breaks: true,
  renderer: {
    html({ text }: Tokens.HTML | Tokens.Tag): string {
      return escapeHtml(text);
    },
    image({ href, text }: Tokens.Image): string {
      return `<a href="${escapeHtml(href)}">${escapeHtml(text || href)}</a>`;
    },
    code({ text, lang }: Tokens.Code): string {
      const name = (lang ?? '').trim().split(/\s+/)[0]?.toLowerCase() ?? '';
      const known = name !== '' && hljs.getLanguage(name) !== undefined;
      const body = known ? hljs.highlight(text, { language: name, ignoreIllegals: true }).value : escapeHtml(text);
      const label = name ? `<span class="code-lang">${escapeHtml(name)}</span>` : '<span class="code-lang">text</span>';
      const cls = known ? `hljs language-${escapeHtml(name)}` : 'hljs';
      return `<div class="code-block"><div class="code-head">${label}</div><pre><code class="${cls}">${body}</code></pre></div>`;
    },
  },
});

const purifier = DOMPurify();
purifier.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A') {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer nofollow');
  }
});

const PURIFY_CONFIG = {
  FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'iframe', 'object', 'embed', 'img', 'svg', 'math'],
  FORBID_ATTR: ['style'],
  ALLOW_DATA_ATTR: false,
};

/** Markdown -> sanitized HTML, safe to assign to `innerHTML`. */
export function renderMarkdown(markdown: string): string {
  const html = marked.parse(markdown, { async: false });
  return purifier.sanitize(html, PURIFY_CONFIG);
}
