/**
 * An answer's thinking apart from its text: a `<think>…</think>` block at the start of what a
 * reasoning model writes (the node stores the answer as the model wrote it, so nothing is
 * lost), or everything before a `</think>` when the model's template opened the block in the
 * prompt (DeepSeek R1, QwQ). While the block is still open, everything so far is thinking.
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

export function splitThinking(text: string): SplitAnswer {
  const start = text.trimStart();
  const closeOnly = start.startsWith(OPEN) ? -1 : text.indexOf(CLOSE);
  if (closeOnly >= 0 && !text.slice(0, closeOnly).includes(OPEN)) {
    return { thinking: text.slice(0, closeOnly).trim(), answer: text.slice(closeOnly + CLOSE.length).trimStart(), open: false };
  }
  if (!start.startsWith(OPEN)) {
    // Part of the opening marker, streaming in: nothing to show yet.
    if (start.length > 0 && OPEN.startsWith(start)) return { thinking: '', answer: '', open: true };
    return { thinking: null, answer: text, open: false };
  }
  const body = start.slice(OPEN.length);
  const end = body.indexOf(CLOSE);
  if (end < 0) return { thinking: body.trim(), answer: '', open: true };
  return { thinking: body.slice(0, end).trim(), answer: body.slice(end + CLOSE.length).trimStart(), open: false };
}
