/**
 * Shows model output: sanitized HTML from markdown/render.ts (re-rendered at most every
 * `STREAMING_RENDER_MS` while streaming), plus a copy button on each code block. The buttons are DOM nodes added after render (never part of the model's HTML) and
 * handled by one delegated click listener.
 */
import { useLayoutEffect, useMemo, useRef, type MouseEvent } from 'react';
import { copyText } from '../clipboard';
import { useThrottled } from '../hooks';
import { renderMarkdown } from '../markdown/render';

const COPY_LABEL = 'Copy';
/**
 * While an answer streams, it is parsed, sanitized and highlighted at most this often: at
 * ~100 tokens/s, per-token rendering of a long answer would take CPU from the model.
 */
const STREAMING_RENDER_MS = 50;

export function Markdown({ text, streaming = false }: { text: string; streaming?: boolean }) {
  const shown = useThrottled(text, streaming ? STREAMING_RENDER_MS : 0);
  const html = useMemo(() => renderMarkdown(shown), [shown]);
  const ref = useRef<HTMLDivElement>(null);

  useLayoutEffect(() => {
    const root = ref.current;
    if (!root) return;
    for (const head of root.querySelectorAll<HTMLElement>('.code-block > .code-head')) {
      if (head.querySelector('.copy-code')) continue;
      const button = document.createElement('button');
      button.type = 'button';
      button.className = 'copy-code';
      button.dataset.testid = 'copy-code';
      button.textContent = COPY_LABEL;
      head.appendChild(button);
    }
  }, [html]);

  const onClick = (e: MouseEvent<HTMLDivElement>) => {
    const target = e.target as HTMLElement;
    const button = target.closest<HTMLButtonElement>('button.copy-code');
    if (!button || !ref.current?.contains(button)) return;
    const code = button.closest('.code-block')?.querySelector('code')?.textContent ?? '';
    void copyText(code).then((ok) => {
      button.textContent = ok ? 'Copied' : 'Copy failed';
      setTimeout(() => {
        button.textContent = COPY_LABEL;
      }, 1500);
    });
  };

  return (
    <div
      ref={ref}
      className="markdown"
      data-testid="message-content"
      onClick={onClick}
      dangerouslySetInnerHTML={{ __html: html }}
    />
  );
}
