/**
 * An answer's thinking apart from its text: a `<think>…</think>` block at the start of what a
 * reasoning model writes (the node stores the answer as the model wrote it, and opens the
 * block itself when the model's template did, so nothing is lost). While the block is still
 * open, everything so far is thinking.
 */

const OPEN = '<think>';
const CLOSE = '</think>';

export interface SplitAnswer {
  /** The thinking, or null when the answer has none. */
  thinking: string | null;
  /** The answer after the thinking. */
  answer: string;
  /** The model is still thinking (the block has not closed yet). */
  open: boolean;
}

/** `streaming`: more text may come, so a partial `<think>` marker is held back. */
export function splitThinking(text: string, streaming = false): SplitAnswer {
  const start = text.trimStart();
  if (!start.startsWith(OPEN)) {
    if (streaming && start.length > 0 && OPEN.startsWith(start)) return { thinking: '', answer: '', open: true };
    return { thinking: null, answer: text, open: false };
  }
  const body = start.slice(OPEN.length);
  const end = body.indexOf(CLOSE);
  if (end < 0) return { thinking: body.trim(), answer: '', open: true };
  return { thinking: body.slice(0, end).trim(), answer: body.slice(end + CLOSE.length).trimStart(), open: false };
}
