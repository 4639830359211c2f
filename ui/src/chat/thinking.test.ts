import { describe, expect, it } from 'vitest';
import { splitThinking } from './thinking';

describe('splitThinking', () => {
  it('leaves an answer without thinking as it is', () => {
    expect(splitThinking('Hello <think>x</think>')).toEqual({ thinking: null, answer: 'Hello <think>x</think>', open: false });
    expect(splitThinking('Tags close with </think>, like that.')).toEqual({
      thinking: null,
      answer: 'Tags close with </think>, like that.',
      open: false,
    });
  });

  it('splits a closed block from the answer', () => {
    expect(splitThinking('\n<think>\nPlan it.\n</think>\n\nHello!')).toEqual({ thinking: 'Plan it.', answer: 'Hello!', open: false });
  });

  it('treats an open block as thinking in progress, and part of its marker only while streaming', () => {
    expect(splitThinking('<think>Plan')).toEqual({ thinking: 'Plan', answer: '', open: true });
    expect(splitThinking('<thi', true)).toEqual({ thinking: '', answer: '', open: true });
    expect(splitThinking('<t')).toEqual({ thinking: null, answer: '<t', open: false });
  });
});
