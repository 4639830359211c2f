import { describe, expect, it } from 'vitest';
import { splitThinking } from './thinking';

describe('splitThinking', () => {
  it('leaves an answer without thinking as it is', () => {
    expect(splitThinking('Hello <think>x</think>')).toEqual({ thinking: null, answer: 'Hello <think>x</think>', open: false });
  });

  it('splits a closed block from the answer', () => {
    expect(splitThinking('\n<think>\nPlan it.\n</think>\n\nHello!')).toEqual({ thinking: 'Plan it.', answer: 'Hello!', open: false });
  });

  it('takes what comes before a lone close as thinking the prompt opened', () => {
    expect(splitThinking('Plan it.\n</think>\n\nHello!')).toEqual({ thinking: 'Plan it.', answer: 'Hello!', open: false });
  });

  it('treats an open block, or part of its marker, as thinking in progress', () => {
    expect(splitThinking('<think>Plan')).toEqual({ thinking: 'Plan', answer: '', open: true });
    expect(splitThinking('<thi')).toEqual({ thinking: '', answer: '', open: true });
  });
});
